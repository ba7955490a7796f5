"""The memory file: YAML frontmatter (name, description, type, anything else) + markdown body.

Why strict parsing with friendly errors: the model writes these files itself. A file whose
frontmatter cannot be read would vanish from the index, so saving it is refused with a
message that names the field and describes the format in words (``FORMAT_RULE``) — never a whole
example file: a 1.5B model answered the user by echoing the example an error showed (issue 30).
Unknown keys are kept so a human's or another tool's annotations survive a round trip.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import functools
import unicodedata
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import yaml

from ..errors import MemoryFormatError
from ..examples import FRONTMATTER_EXAMPLE  # noqa: F401  (re-exported by memdir; no message here shows it)

# libyaml's loader when present (several times faster; readers parse many files).
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 500
#: Bounds on the frontmatter a file may carry: text size, nesting depth and YAML nodes. With
#: aliases refused these make any frontmatter parse in milliseconds (a "billion laughs" of 460
#: bytes used to take a minute of CPU and a 30 MB manifest).
MAX_FRONTMATTER_BYTES = 16_384
MAX_FRONTMATTER_DEPTH = 8
MAX_FRONTMATTER_NODES = 2_000
#: Joiners that emoji sequences need; every other format character (bidi overrides, zero-width
#: spaces) and every control character is removed from names and descriptions.
_KEEP_FORMAT = {"\u200c", "\u200d"}
#: The file format in words, for error messages: field names and rules, no values to copy.
FORMAT_RULE = ("The file starts with a line '---', then one `key: value` line each for name, description (one "
               "line) and type (user, feedback, project or reference), then a line '---', then the memory text.")


class MemoryType(StrEnum):
    USER = "user"
    FEEDBACK = "feedback"
    PROJECT = "project"
    REFERENCE = "reference"


@dataclass(slots=True)
class MemoryFile:
    """A parsed memory file. ``extra`` holds frontmatter keys we do not interpret."""

    name: str
    description: str
    type: MemoryType
    body: str
    extra: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        """The file text: frontmatter in a stable key order, then the body."""
        return compose_memory(self.name, self.description, self.type.value, self.body, self.extra)


def compose_memory(name: str, description: str, type_: str, body: str, extra: dict[str, Any] | None = None) -> str:
    """A memory file's text from its fields, UNVALIDATED (``parse_memory`` judges it).

    Why it takes plain strings: a form (the ``/ui`` page) may hold a wrong type or an empty
    description; composing first and parsing second gives the person the tools' own messages."""
    front: dict[str, Any] = {"name": name, "description": description, "type": type_}
    front.update({k: v for k, v in (extra or {}).items() if k not in front})
    dumped = yaml.safe_dump(front, allow_unicode=True, sort_keys=False, width=10_000).strip()
    text = body.strip("\n")
    return f"---\n{dumped}\n---\n\n{text}\n" if text else f"---\n{dumped}\n---\n"


def split_frontmatter(text: str) -> tuple[str | None, str]:
    """(frontmatter text or None, body). Frontmatter is a leading ``---`` ... ``---`` block."""
    stripped = text.lstrip("\ufeff")
    if not stripped.startswith("---"):
        return None, text
    lines = stripped.split("\n")
    if lines[0].strip() != "---":
        return None, text
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1 :]).lstrip("\n")
    raise MemoryFormatError("the frontmatter starts with '---' but has no closing '---' line.\n" + FORMAT_RULE)


#: Texts up to this long are remembered parsed (a save parses its text in the tool, in the memdir
#: and again in the lock holder's commit; YAML is the costly part). Bounded: ``_PARSED``.
_CACHE_CHARS = 16_384


def parse_memory(text: str) -> MemoryFile:
    """Parse and validate a memory file; raise MemoryFormatError saying what to fix. A text seen
    lately is not parsed again; the caller gets its own copy (``extra`` may be changed)."""
    if len(text) > _CACHE_CHARS:
        return _parse(text)
    parsed = _parsed(text)
    return dataclasses.replace(parsed, extra=copy.deepcopy(parsed.extra)) if parsed.extra else \
        dataclasses.replace(parsed, extra={})


@functools.lru_cache(maxsize=512)
def _parsed(text: str) -> MemoryFile:
    return _parse(text)


def _parse(text: str) -> MemoryFile:
    utf8_size(text)  # first: every later step (YAML, example checks, the store) needs encodable text
    front_text, body = split_frontmatter(text)
    if front_text is None:
        raise MemoryFormatError(
            "a memory file must start with YAML frontmatter (name, description, type).\n" + FORMAT_RULE)
    try:
        front = load_frontmatter(front_text) if front_text.strip() else {}
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 2})" if where is not None else ""
        raise MemoryFormatError(
            f"the frontmatter is not valid YAML{line}: {getattr(exc, 'problem', exc)}. "
            "Quote values that contain ':' or '#'.\n" + FORMAT_RULE
        ) from None
    if not isinstance(front, dict):
        raise MemoryFormatError("the frontmatter must be a mapping of keys to values.\n" + FORMAT_RULE)
    front = {str(k): _plain(v) for k, v in front.items()}
    missing = [k for k in ("name", "description", "type") if front.get(k) in (None, "")]
    if missing:
        raise MemoryFormatError(f"the frontmatter is missing {', '.join(missing)}.\n" + FORMAT_RULE)
    name = _one_line(front.pop("name"), "name", MAX_NAME_CHARS)
    description = _one_line(front.pop("description"), "description", MAX_DESCRIPTION_CHARS)
    raw_type = str(front.pop("type")).strip().lower()
    try:
        mem_type = MemoryType(raw_type)
    except ValueError:
        allowed = ", ".join(t.value for t in MemoryType)
        raise MemoryFormatError(f"type {raw_type!r} is not one of: {allowed}") from None
    return MemoryFile(name=name, description=description, type=mem_type, body=body, extra=front)


#: File-name prefixes that say a memory's type (the names the prompt asks for: ``user_role.md``).
TYPE_PREFIXES = {f"{t.value}_": t for t in MemoryType}


def type_from_name(file_name: str) -> MemoryType | None:
    """The type a file name's prefix says (``project_atlas.md`` -> project), or None."""
    base = str(file_name).rsplit("/", 1)[-1].lower()
    return next((t for prefix, t in TYPE_PREFIXES.items() if base.startswith(prefix)), None)


def fill_missing_type(text: str, file_name: str) -> tuple[str, MemoryType | None]:
    """``text`` with ``type:`` added from the file name's prefix when its frontmatter lacks one (or
    leaves it empty), and the type filled in; ``(text, None)`` when nothing is missing, the name
    says no type, or the frontmatter cannot be read (``parse_memory`` then says what is wrong).

    Why: a model named its file ``project_atlas_code_freeze.md`` and forgot ``type:``; the save was
    refused and never retried (issue 30). The name already says the type, so the save is repaired
    and the tool's answer says what it filled in. Only a missing type is repaired: a wrong one is
    the model's statement and is refused."""
    wanted = type_from_name(file_name)
    if wanted is None or not isinstance(text, str):
        return text, None
    try:
        front_text, _ = split_frontmatter(text)
        front = load_frontmatter(front_text) if front_text and front_text.strip() else None
    except (MemoryFormatError, yaml.YAMLError):
        return text, None
    if not isinstance(front, dict) or front.get("type") not in (None, ""):
        return text, None
    lines = text.lstrip("\ufeff").split("\n")
    close = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    kept = [line for line in lines[1:close] if not line.startswith("type:")]
    return "\n".join([lines[0], *kept, f"type: {wanted.value}", *lines[close:]]), wanted


def utf8_size(text: str) -> int:
    """Byte size of ``text``; a lone surrogate (half of an emoji pair) is refused clearly, not
    left to fail as an unexpected error wherever the text is first encoded."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise MemoryFormatError(
            f"content holds an unpaired surrogate ({text[exc.start]!r} at character {exc.start}): "
            "half of a character; remove it or write the whole character") from None


def load_frontmatter(text: str) -> Any:
    """YAML with the dangerous or surprising parts refused before anything is built: anchors,
    aliases and merge keys (expansion bombs), explicit tags (``!!set``, ``!!binary``, ``!python``:
    values the manifest cannot hold), and more than the size, depth and node bounds."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_FRONTMATTER_BYTES:
        raise MemoryFormatError(f"the frontmatter is {size} bytes; keep it under {MAX_FRONTMATTER_BYTES} "
                                "(put long text in the body)")
    depth = nodes = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise MemoryFormatError("the frontmatter uses YAML anchors or aliases (& or *); write the values "
                                    "out in full")
        if getattr(event, "tag", None):
            raise MemoryFormatError(f"the frontmatter uses the YAML tag {event.tag!r}; use plain values "
                                    "(text, numbers, lists)")
        if isinstance(event, yaml.ScalarEvent) and event.value == "<<" and not event.style:
            raise MemoryFormatError("the frontmatter uses a YAML merge key (<<); write the keys out in full")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_FRONTMATTER_DEPTH:
                raise MemoryFormatError(f"the frontmatter is nested deeper than {MAX_FRONTMATTER_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
            if nodes > MAX_FRONTMATTER_NODES:
                raise MemoryFormatError(f"the frontmatter has more than {MAX_FRONTMATTER_NODES} values; keep "
                                        "it to a few keys")
    return yaml.load(text, Loader=_Loader)


def clean_line(text: str) -> str:
    """One line of plain text: control and format characters (ESC, bidi overrides, zero-width
    spaces) removed, whitespace runs folded — what may reach MEMORY.md and the prompt."""
    text = str(text)
    if text.isprintable():  # no Cc/Cf/Cs/Co character (the common case): only fold whitespace
        return " ".join(text.split())
    kept = "".join(ch if ch in _KEEP_FORMAT or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co")
                   else " " if ch.isspace() else "" for ch in text)
    return " ".join(kept.split())


def _one_line(value: Any, key: str, limit: int) -> str:
    text = clean_line(str(value))
    if not text:
        raise MemoryFormatError(f"{key} must not be empty")
    if len(text) > limit:
        raise MemoryFormatError(f"{key} is {len(text)} characters; keep it under {limit}")
    return text


def _plain(value: Any) -> Any:
    """YAML dates become ISO strings so the frontmatter round-trips through JSON (the manifest)."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
