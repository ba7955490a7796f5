"""Reading the chosen memory files and rendering them as one block for the agent's context.

Why the caps: a recalled file goes into every request of the run, so each is cut at
``file_max_lines`` lines / ``file_max_bytes`` bytes (at a line boundary, with a note saying how to
read the rest) and all of them together at ``total_max_bytes``. Why the staleness note: a memory
is a claim about the past; one saved days ago may have been overtaken ("the deploy is on
Thursday"), so memories older than ``stale_after_days`` say how old they are and ask to be
verified before they are relied on.

Files are fetched with one GET each, concurrently (in the executor the caller passes: the
services' ``io`` pool), so recall adds about one round trip to the build, not five. A file that
vanished since the manifest was read is skipped, never fatal.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from ..config import RecallConfig
from ..errors import HarnessMemoryError, MemoryFormatError, ObjectNotFound
from ..escape import DATA_NOTE, fence_for, inline
from ..escape import block as escape_block
from ..memdir import ManifestEntry, MemoryDir, ReadResult, split_frontmatter
from ..memdir.model import parse_memory
from .select import format_time

log = logging.getLogger(__name__)

SHARED_PREFIX = "shared/"
BLOCK_TITLE = "# Recalled memories"
BLOCK_INTRO = (
    "These memory files were picked as relevant to the user's current message. They were saved in\n"
    "earlier conversations and may be out of date: if one conflicts with what the user says now, trust\n"
    "the user and update or delete the memory. Use read_file for the parts that were cut.\n" + DATA_NOTE
)
DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class RecalledFile:
    """One file as it was put into the block."""

    file: str
    text: str
    age_days: int
    truncated: bool


def staleness_note(age_seconds: float, stale_after_days: float = 1.0) -> str | None:
    """``This memory is N days old; verify before relying on it`` past the threshold, else None."""
    if age_seconds < max(stale_after_days, 0.0) * DAY or age_seconds < DAY:
        return None
    days = int(age_seconds // DAY)
    unit = "day" if days == 1 else "days"
    return f"This memory is {days} {unit} old; verify before relying on it."


def cap_text(text: str, max_lines: int, max_bytes: int) -> tuple[str, int, bool]:
    """(kept text, kept line count, cut?) — cut at a line boundary within both limits.

    A single line longer than ``max_bytes`` is cut inside the line (on a character boundary).
    """
    lines = text.splitlines()
    kept: list[str] = []
    size = 0
    for line in lines:
        cost = len(line.encode("utf-8")) + 1
        if len(kept) >= max_lines or size + cost > max_bytes:
            if not kept and max_bytes > 1:  # one over-long first line: keep its head
                kept.append(line.encode("utf-8")[: max_bytes - 1].decode("utf-8", "ignore"))
                return kept[0], 1, True
            return "\n".join(kept), len(kept), True
        kept.append(line)
        size += cost
    return "\n".join(kept), len(kept), False


def _read(memdir: MemoryDir, shared: MemoryDir | None, file: str) -> ReadResult | None:
    target, rel = memdir, file
    if file.startswith(SHARED_PREFIX):
        if shared is None:
            return None
        target, rel = shared, file[len(SHARED_PREFIX):]
    try:
        return target.read(rel)
    except ObjectNotFound:
        log.info("recall: %s vanished since the manifest was read; skipped", file)
    except (HarnessMemoryError, ValueError) as exc:
        log.warning("recall: cannot read %s (%s); skipped", file, exc)
    return None


#: A pod's cache of file bodies (``memdir.versions.WarmViews.body``): (place prefix, file, entry
#: ``updated_at``, entry ``size``, the read to make on a miss) -> the read.
Bodies = Callable[[str, str, float, int, Callable[[], "ReadResult | None"]], "ReadResult | None"]


def read_files(memdir: MemoryDir, files: Sequence[str], shared: MemoryDir | None = None,
               executor: Executor | None = None, *, entries: Mapping[str, ManifestEntry] | None = None,
               bodies: Bodies | None = None) -> dict[str, ReadResult]:
    """GET each file (concurrently in ``executor`` when there are several, else one by one);
    missing or unreadable ones are left out. With ``bodies`` and the manifest ``entries`` served,
    a body cached for the same entry is used instead of a GET."""
    def one(file: str) -> ReadResult | None:
        entry = entries.get(file) if entries is not None else None
        if bodies is None or entry is None:
            return _read(memdir, shared, file)
        target, rel = (shared, file[len(SHARED_PREFIX):]) if file.startswith(SHARED_PREFIX) else (memdir, file)
        if target is None:
            return None
        return bodies(target.place.prefix, rel, entry.updated_at, entry.size, lambda: _read(memdir, shared, file))

    serial = len(files) <= 1 or executor is None
    results = [one(f) for f in files] if serial or executor is None else list(executor.map(one, files))
    return {f: r for f, r in zip(files, results, strict=True) if r is not None}


def _heading(file: str, read: ReadResult, entry: ManifestEntry | None) -> tuple[str, str, str]:
    """(title, description line, body). The manifest entry, when known, names the memory (no YAML
    parse: the pure-Python YAML loader would be most of recall's cost); else the frontmatter."""
    modified = format_time(read.last_modified)
    text = read.text
    if entry is not None and entry.name:
        try:
            body = split_frontmatter(text)[1]
        except MemoryFormatError:
            body = text
        kind = f"{inline(entry.type)}, " if entry.type else ""
        return (f"## {file} — {inline(entry.name)} ({kind}modified {modified})", f"_{inline(entry.description)}_",
                body)
    try:
        memory = parse_memory(text)
        return (f"## {file} — {inline(memory.name)} ({memory.type.value}, modified {modified})",
                f"_{inline(memory.description)}_", memory.body)
    except MemoryFormatError:
        try:
            body = split_frontmatter(text)[1]
        except MemoryFormatError:
            body = text
        return f"## {file} (modified {modified})", "", body


def _render_file(file: str, read: ReadResult, config: RecallConfig, now: float, budget: int,
                 entry: ManifestEntry | None = None) -> RecalledFile | None:
    """The section for one file within ``budget`` bytes, or None when not even its header fits."""
    text = read.text
    title, desc, body = _heading(file, read, entry)
    body = body.strip("\n")
    header_lines = len(text.splitlines()) - len(body.splitlines())
    age = max(0.0, now - read.last_modified) if read.last_modified else 0.0
    note = staleness_note(age, config.stale_after_days)
    head = [title] + ([f"> {note}"] if note else []) + ([desc] if desc else []) + [""]
    head_text = "\n".join(head) + "\n"
    cut_note = 90 + 2 * len(file.encode("utf-8"))  # room for the "[… cut at …]" line
    body = escape_block(body)
    fence = fence_for(body)  # the body is data: it cannot close its fence or forge a heading
    cut_note += 2 * len(fence) + len("markdown") + 2
    room = min(config.file_max_bytes, budget) - len(head_text.encode("utf-8")) - cut_note
    if room < 64:
        return None
    kept, kept_lines, cut = cap_text(body, config.file_max_lines, room)
    section = f"{head_text}{fence}markdown\n{kept}\n{fence}"
    if cut:
        total = len(body.splitlines())
        section += (f"\n[… cut at {kept_lines} of {total} lines; read_file(\"{file}\", "
                    f"offset={header_lines + kept_lines}) for the rest]")
    return RecalledFile(file, section, int(age // DAY), cut)


def render_recalled(reads: dict[str, ReadResult], order: Sequence[str], config: RecallConfig,
                    now: float, entries: Mapping[str, ManifestEntry] | None = None
                    ) -> tuple[str, list[RecalledFile]]:
    """The block and the files that made it in (in ``order``), within ``total_max_bytes``."""
    intro = f"{BLOCK_TITLE}\n\n{BLOCK_INTRO}\n"
    # room kept for the "left out for space" line, so the block never exceeds the total cap
    reserve = 80 + sum(len(f.encode("utf-8")) + 2 for f in order)
    budget = config.total_max_bytes - len(intro.encode("utf-8")) - reserve
    sections: list[RecalledFile] = []
    left_out: list[str] = []
    for file in order:
        read = reads.get(file)
        if read is None:
            continue
        entry = entries.get(file) if entries else None
        rendered = _render_file(file, read, config, now, budget, entry) if budget > 0 else None
        if rendered is None:
            left_out.append(file)
            continue
        sections.append(rendered)
        budget -= len(rendered.text.encode("utf-8")) + 2
    if not sections:
        return "", []
    parts = [intro, *(s.text for s in sections)]
    if left_out:
        parts.append("(Also relevant but left out for space: " + ", ".join(left_out) + " — use read_file.)")
    return "\n\n".join(p.rstrip("\n") for p in parts) + "\n", sections


def _now(now: float | dt.datetime | None) -> float:
    if now is None:
        return dt.datetime.now(dt.UTC).timestamp()
    if isinstance(now, dt.datetime):
        return (now if now.tzinfo else now.replace(tzinfo=dt.UTC)).timestamp()
    return float(now)


def load_recalled_context(
    memdir: MemoryDir,
    files: Sequence[str],
    *,
    config: RecallConfig,
    now: float | dt.datetime | None = None,
    shared: MemoryDir | None = None,
    entries: Mapping[str, ManifestEntry] | None = None,
) -> str:
    """Read ``files`` (``shared/<file>`` from ``shared``) and render the recalled-memories block.

    Returns ``""`` when nothing could be read. Each file is capped at ``config.file_max_lines`` /
    ``config.file_max_bytes``, the whole block at ``config.total_max_bytes``; memories older than
    ``config.stale_after_days`` (and at least a day) carry a staleness note. ``entries`` (the
    manifest's, keyed like ``files``) name each memory without parsing its frontmatter.
    """
    text, _ = load_recalled(memdir, files, config=config, now=now, shared=shared, entries=entries)
    return text


def load_recalled(
    memdir: MemoryDir,
    files: Sequence[str],
    *,
    config: RecallConfig,
    now: float | dt.datetime | None = None,
    shared: MemoryDir | None = None,
    entries: Mapping[str, ManifestEntry] | None = None,
    executor: Executor | None = None,
    bodies: Bodies | None = None,
) -> tuple[str, list[RecalledFile]]:
    """Like ``load_recalled_context`` but also says which files made it into the block
    (``executor``: reads the files concurrently; default ``memdir.executor``; ``bodies``: the
    pod's body cache, used with ``entries``)."""
    unique = list(dict.fromkeys(files))
    if not unique:
        return "", []
    reads = read_files(memdir, unique, shared, executor or memdir.executor, entries=entries, bodies=bodies)
    return render_recalled(reads, unique, config, _now(now), entries)


__all__ = ["BLOCK_TITLE", "RecalledFile", "cap_text", "load_recalled", "load_recalled_context", "read_files",
           "render_recalled", "staleness_note"]
