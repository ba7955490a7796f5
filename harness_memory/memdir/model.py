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
import json
import re
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
    """``text`` with ``type:`` added from the file name's prefix when its frontmatter lacks one;
    ``(text, None)`` when nothing was filled in. The type-only view of ``fill_missing_fields``."""
    fixed, filled = fill_missing_fields(text, file_name)
    if "type" not in filled:
        return text, None
    if set(filled) != {"type"}:  # only the type: leave the other fields to their own repair
        fixed, _ = _add_fields(text, {"type": filled["type"].value})  # type: ignore[union-attr]
    return fixed, MemoryType(filled["type"])


@dataclass(frozen=True, slots=True)
class Filled:
    """A field ``fill_missing_fields`` filled in: its value and where it came from."""

    value: str
    source: str


def fill_missing_fields(text: str, file_name: str) -> tuple[str, dict[str, Any]]:
    """``text`` with the frontmatter's missing fields filled in from what the model itself wrote,
    and what was filled (``{"type": MemoryType, "name": Filled, "description": Filled}``).

    Why: a small model's save is refused for a missing field more often than for anything else
    (``project_atlas_code_freeze.md`` without ``type:``; ``user_role.md`` with name and type but
    no description), and after one refusal it answers the user instead of retrying (issue 30). Each
    of these fields is already said elsewhere in the model's own words: the type by the file
    name's prefix (``user_``, ``feedback_``, ``project_``, ``reference_``), the name by the file
    name, the description by the first line of the memory text. A memory written as frontmatter
    keys with no text (``role: Data engineer``, ``skills: [Python, Airflow]``, seen from the 1.5B
    model) gets those keys as its text, and its name as the description. Only a MISSING or empty
    field is filled: a wrong type is the model's statement and is refused; a frontmatter that
    cannot be read is refused as before."""
    if not isinstance(text, str) or not _encodable(text):  # parse_memory says what is wrong with it
        return text, {}
    original = text
    try:
        front_text, body = split_frontmatter(text)
        if front_text is None:  # no frontmatter at all: one is made when the file name says the type
            if type_from_name(file_name) is None or not _first_text_line(body):
                return text, {}
            text = "---\n---\n\n" + text.lstrip("\ufeff").lstrip("\n")
        front = load_frontmatter(front_text) if front_text and front_text.strip() else {}
    except (MemoryFormatError, yaml.YAMLError):
        return text, {}
    if not isinstance(front, dict):
        return text, {}

    def missing(key: str) -> bool:
        return front.get(key) is None or not clean_line(str(front.get(key)))

    filled: dict[str, Any] = {}
    adds: dict[str, str] = {}
    facts = _facts_in_front(front) if not _first_text_line(body) else None
    if facts:  # the memory written as frontmatter keys and no text: the keys become the text
        body = "\n".join(f"- {key}: {value}" for key, value in facts.items()) + "\n"
        kept = {k: v for k, v in front.items() if k in ("name", "description", "type")}
        text = "---\n" + (yaml.safe_dump(kept, allow_unicode=True, sort_keys=False, width=10_000) if kept else "") \
            + "---\n\n" + body
        filled["body"] = Filled(", ".join(facts), "the frontmatter keys")
        if missing("description") and not missing("name"):
            filled["description"] = Filled(clean_line(str(front["name"]))[:MAX_DESCRIPTION_CHARS], "its name")
            adds["description"] = filled["description"].value
    if not facts and not body.strip() and not missing("description") and _says_enough(str(front["description"])):
        # name and description and no text (the 1.5B model's "description: Always write Snowflake SQL
        # for me." and nothing after the closing '---'): the description is the memory, said once
        body = clean_line(str(front["description"])) + "\n"
        text = text.rstrip("\n") + "\n\n" + body
        filled["body"] = Filled(body.strip(), "the description")
    if missing("type") and (wanted := type_from_name(file_name)) is not None:
        filled["type"] = wanted
        adds["type"] = wanted.value
    stem = str(file_name).rsplit("/", 1)[-1]
    stem = stem[:-3] if stem.lower().endswith(".md") else stem
    if missing("name"):
        words = stem
        prefix = next((p for p in TYPE_PREFIXES if stem.lower().startswith(p)), "")
        words = " ".join(w for w in stem[len(prefix):].replace("-", "_").split("_") if w) or stem
        if clean_line(words):
            filled["name"] = Filled(clean_line(words)[:MAX_NAME_CHARS], "the file name")
            adds["name"] = filled["name"].value
    if missing("description") and "description" not in filled and (line := _first_text_line(body)):
        filled["description"] = Filled(line, "the first line of the memory")
        adds["description"] = line
    if not adds:
        return (text, filled) if filled else (original, {})
    fixed, ok = _add_fields(text, adds)
    return (fixed, filled) if ok else (original, {})


def _says_enough(description: str) -> bool:
    """Whether a description can stand as a memory's whole text: three words or more (six CJK
    characters). "role" is a label, not a memory."""
    return len(re.findall(r"[^\W\d_]{2,}", description)) >= 3 or len(re.findall(r"[\u3400-\u9fff]", description)) >= 6


def _facts_in_front(front: dict[str, Any]) -> dict[str, str] | None:
    """The frontmatter's other keys as one-line texts when every one is a short scalar or a list
    of them (``role: Data engineer``, ``skills: [Python, Airflow]``), else None: a nested value is
    somebody's structure, not a memory written in the wrong place."""
    out: dict[str, str] = {}
    for key, value in front.items():
        if key in ("name", "description", "type"):
            continue
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in items):
            return None
        line = clean_line(", ".join(str(v) for v in items))
        if not line or len(line) > 500:
            return None
        out[clean_line(str(key))] = line
    return out or None


def _first_text_line(body: str) -> str:
    """The first line of ``body`` with words in it, without markdown marks, one description long."""
    for raw in body.split("\n"):
        line = clean_line(re.sub(r"^\s*(?:#{1,6}\s+|[-*+>]\s+|\d+[.)]\s+)", "", raw).replace("**", ""))
        if re.search(r"\w", line):
            return line if len(line) <= 200 else line[:199].rstrip() + "…"
    return ""


def _add_fields(text: str, values: dict[str, str]) -> tuple[str, bool]:
    """``text`` with each of ``values`` as a quoted ``key: value`` line in the frontmatter (an empty
    line of that key replaced), and whether the result parses as a mapping."""
    stripped = text.lstrip("\ufeff")
    lines = stripped.split("\n")
    if not lines or lines[0].strip() != "---":
        return text, False
    close = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), None)
    if close is None:
        return text, False
    kept = [line for line in lines[1:close] if line.partition(":")[0] not in values]
    added = [f"{key}: {json.dumps(value, ensure_ascii=False)}" for key, value in values.items()]
    fixed = "\n".join([lines[0], *kept, *added, *lines[close:]])
    try:
        front_text, _ = split_frontmatter(fixed)
        return fixed, isinstance(load_frontmatter(front_text or ""), dict)
    except (MemoryFormatError, yaml.YAMLError):
        return text, False


#: Frontmatter fields that are one line of plain text, so quoting their whole value never changes
#: what it says (``quote_plain_values``).
_TEXT_FIELDS = ("name", "description")
_BLOCK_INDICATOR = re.compile(r"^[|>][+-]?\d*$")


def _encodable(text: str) -> bool:
    """Whether ``text`` is valid UTF-8 text (a lone surrogate is not: ``utf8_size`` refuses it)."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _reads_alone(line: str) -> bool:
    """Whether one ``key: value`` line is valid YAML by itself (then it is not what broke the file)."""
    try:
        yaml.load(line, Loader=_Loader)
        return True
    except yaml.YAMLError:
        return False


def quote_plain_values(text: str) -> tuple[str, tuple[str, ...]]:
    """``text`` with the ``name:``/``description:`` values quoted when the frontmatter is not valid
    YAML and quoting them makes it valid, and the fields quoted; ``(text, ())`` otherwise.

    Why: a 1.5B model wrote ``description: Atlas project: code freeze is on 2027-01-15`` — the
    second ``: `` is YAML's mapping sign, so the save was refused and the model answered the user
    with the file instead of saving it (issue 30). Both fields are one line of text by definition:
    the value as written is what the model meant, and a JSON string is a valid YAML double-quoted
    scalar, so quoting it keeps every character. Only these two fields, only a value that is not
    valid YAML by itself (not already quoted, not a block scalar), and only when the result
    parses; anything else is refused as before."""
    if not isinstance(text, str) or not _encodable(text):
        return text, ()
    try:
        front_text, _ = split_frontmatter(text)
    except MemoryFormatError:
        return text, ()
    if not front_text or not front_text.strip():
        return text, ()
    try:
        load_frontmatter(front_text)
        return text, ()
    except yaml.YAMLError:
        pass
    except MemoryFormatError:
        return text, ()
    lines = text.lstrip("\ufeff").split("\n")
    close = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    quoted: list[str] = []
    for i in range(1, close):
        key, sep, value = lines[i].partition(":")
        value = value.strip()
        if not sep or key not in _TEXT_FIELDS or key in quoted or not value or value[0] in "'\"" \
                or _BLOCK_INDICATOR.match(value) or _reads_alone(f"{key}: {value}"):
            continue
        lines[i] = f"{key}: {json.dumps(value, ensure_ascii=False)}"
        quoted.append(key)
    if not quoted:
        return text, ()
    repaired = "\n".join(lines)
    try:
        front_text, _ = split_frontmatter(repaired)
        load_frontmatter(front_text or "")
    except (MemoryFormatError, yaml.YAMLError):
        return text, ()
    return repaired, tuple(quoted)


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
