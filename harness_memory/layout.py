"""The five places of the architecture and the names allowed in them.

Why strict names: a user id, agent type or file name ends up inside an object key. If any
of them could carry ``..``, a slash, a percent-encoded slash or an invisible character, one
user could write into another user's place. Ids are checked against a small alphabet and
rejected (never silently rewritten, so two ids can never map to one place); file names may be
any printable Unicode (Chinese and emoji included) minus the characters that could escape.

Allowed ids (user id, agent type, project, session id): 1-128 characters from
``A-Z a-z 0-9 _ . @ -``, starting with a letter, digit or ``_``, and never ``..``.
``project_slug()`` maps a working-directory path to a valid project name.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum

from .errors import InvalidName

ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._@-]{0,127}$")
INDEX_FILE = "MEMORY.md"
MANIFEST_FILE = ".manifest.json"
SNAPSHOT_SYNC_FILE = ".snapshot-synced.json"
#: The write-ahead record of the place's last file-writing commit (``memdir/intent.py``).
INTENT_FILE = ".intent.json"
#: Terms of every memory of a place (harness_memory/search); written with the manifest.
SEARCH_INDEX_FILE = ".search-index.bin"
#: Embeddings of every memory of a place (recall/semantic.py), when an embeddings endpoint is set.
SEARCH_VECTORS_FILE = ".search-vectors.bin"
#: Search documents changed since ``SEARCH_INDEX_FILE`` was last written whole (harness_memory/search).
SEARCH_DELTA_FILE = ".search-delta.bin"
RESERVED_FILES = frozenset({INDEX_FILE, MANIFEST_FILE, SNAPSHOT_SYNC_FILE, INTENT_FILE, SEARCH_INDEX_FILE,
                            SEARCH_VECTORS_FILE, SEARCH_DELTA_FILE})
#: A manifest base (``memdir/stored.py``): ``.manifest.<generation>.json``.
_MANIFEST_BASE = re.compile(r"^\.manifest\.[0-9a-f]{4,32}\.json$")


def is_derived(name: str) -> bool:
    """An object rebuilt from the memory files (manifest head and bases, search index and
    vectors): never exported, never imported."""
    return name in (MANIFEST_FILE, SEARCH_INDEX_FILE, SEARCH_DELTA_FILE, SEARCH_VECTORS_FILE) \
        or bool(_MANIFEST_BASE.fullmatch(name))
MAX_FILENAME_BYTES = 255
MAX_FILE_DEPTH = 4
_PCT_RE = re.compile(r"%[0-9A-Fa-f]{2}")
_FORBIDDEN_CHARS = set('\\:*?"<>|')


def validate_id(value: object, what: str = "id") -> str:
    """Return ``value`` if it is an allowed id; raise InvalidName with the reason otherwise."""
    if not isinstance(value, str) or not value:
        raise InvalidName(f"{what} must be a non-empty string")
    if not ID_RE.fullmatch(value) or ".." in value:
        raise InvalidName(
            f"{what} {value!r} is not allowed: use 1-128 characters from A-Z a-z 0-9 _ . @ -, "
            "starting with a letter, digit or _, and no '..'"
        )
    return value


def project_slug(path_or_name: str) -> str:
    """Map a project path (``/Users/mac/proj``) or free name to an allowed project id."""
    slug = re.sub(r"[^A-Za-z0-9._@-]+", "-", path_or_name.strip()).strip("-.")
    slug = re.sub(r"\.{2,}", ".", slug)[:128] or "default"
    if not ID_RE.fullmatch(slug):
        slug = "p" + slug[:127]
    return validate_id(slug, "project")


def validate_filename(name: object) -> str:
    """Check a memory file name given by the model or an API caller (see ``_validate_filename``).
    Names are checked again at every layer they pass; valid ones are remembered (a pure function
    of the string), so the repeats cost a dict lookup."""
    if isinstance(name, str):
        return _validate_cached(name)
    return _validate_filename(name)


@functools.lru_cache(maxsize=8192)
def _validate_cached(name: str) -> str:
    return _validate_filename(name)


def _validate_filename(name: object) -> str:
    """Check a memory file name given by the model or an API caller.

    Only relative ``.md`` names inside the place: no ``..``, absolute paths, backslashes,
    NUL/control/invisible characters, percent-encoded bytes, dot-files, or the reserved
    index/manifest files. Returns the NFC-normalised name.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidName("file name must be a non-empty string like 'user_role.md'")
    if name != name.strip():
        raise InvalidName(f"file name {name!r} has leading or trailing spaces")
    for ch in name:
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            raise InvalidName(f"file name {name!r} contains a control or invisible character")
    if _PCT_RE.search(name):
        raise InvalidName(f"file name {name!r} contains percent-encoding; use the plain characters")
    nfc = unicodedata.normalize("NFC", name)
    folded = unicodedata.normalize("NFKC", name)
    for candidate in (nfc, folded):
        if candidate.startswith("/") or candidate.startswith("~"):
            raise InvalidName(f"file name {name!r} must be relative to the memory directory")
        if any(ch in _FORBIDDEN_CHARS for ch in candidate):
            raise InvalidName(f"file name {name!r} contains one of \\ : * ? \" < > |")
        parts = candidate.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise InvalidName(f"file name {name!r} must not contain '..', '.' or empty path parts")
        if any(p.startswith(".") for p in parts):
            raise InvalidName(f"file name {name!r}: names starting with '.' are reserved")
    parts = nfc.split("/")
    if len(parts) > MAX_FILE_DEPTH:
        raise InvalidName(f"file name {name!r} is nested deeper than {MAX_FILE_DEPTH} levels")
    if not nfc.lower().endswith(".md") or len(parts[-1]) <= 3:
        raise InvalidName(f"file name {name!r} must end in '.md' (memories are markdown files)")
    if nfc in RESERVED_FILES or parts[-1].upper() == INDEX_FILE.upper():
        raise InvalidName(f"{INDEX_FILE} is kept for you; save a memory under its own name instead")
    if len(nfc.encode("utf-8")) > MAX_FILENAME_BYTES:
        raise InvalidName(f"file name is longer than {MAX_FILENAME_BYTES} bytes")
    return nfc


class PlaceKind(StrEnum):
    USER_AGENT = "user-agent"  # users/<user_id>/agent-memory/<agent_type>/
    SHARED_AGENT = "shared-agent"  # agent-memory/<agent_type>/
    USER_AUTO = "user-auto"  # users/<user_id>/projects/<project>/memory/
    SHARED_AUTO = "shared-auto"  # projects/<project>/memory/


@dataclass(frozen=True, slots=True)
class Place:
    """One memory directory: a key prefix plus who it belongs to."""

    kind: PlaceKind
    user_id: str | None = None
    agent_type: str | None = None
    project: str | None = None
    key_prefix: str = "memory/"

    @classmethod
    def user_agent(cls, user_id: str, agent_type: str = "default", key_prefix: str = "memory/") -> Place:
        return cls(PlaceKind.USER_AGENT, validate_id(user_id, "user id"),
                   validate_id(agent_type, "agent type"), None, key_prefix)

    @classmethod
    def shared_agent(cls, agent_type: str = "default", key_prefix: str = "memory/") -> Place:
        return cls(PlaceKind.SHARED_AGENT, None, validate_id(agent_type, "agent type"), None, key_prefix)

    @classmethod
    def user_auto(cls, user_id: str, project: str = "default", key_prefix: str = "memory/") -> Place:
        return cls(PlaceKind.USER_AUTO, validate_id(user_id, "user id"), None,
                   validate_id(project, "project"), key_prefix)

    @classmethod
    def shared_auto(cls, project: str = "default", key_prefix: str = "memory/") -> Place:
        return cls(PlaceKind.SHARED_AUTO, None, None, validate_id(project, "project"), key_prefix)

    @property
    def rel_dir(self) -> str:
        """The directory below the ``.harness`` root, ending in ``/``."""
        match self.kind:
            case PlaceKind.USER_AGENT:
                return f"users/{self.user_id}/agent-memory/{self.agent_type}/"
            case PlaceKind.SHARED_AGENT:
                return f"agent-memory/{self.agent_type}/"
            case PlaceKind.USER_AUTO:
                return f"users/{self.user_id}/projects/{self.project}/memory/"
            case PlaceKind.SHARED_AUTO:
                return f"projects/{self.project}/memory/"
        raise AssertionError(self.kind)

    @property
    def prefix(self) -> str:
        """Object-key prefix of the place, ending in ``/``."""
        return self.key_prefix + self.rel_dir

    @property
    def is_shared(self) -> bool:
        return self.kind in (PlaceKind.SHARED_AGENT, PlaceKind.SHARED_AUTO)

    @property
    def label(self) -> str:
        return f"~/.harness/{self.rel_dir}"

    def key(self, filename: str) -> str:
        """Object key of a memory file (validated) in this place."""
        return self.prefix + validate_filename(filename)

    def reserved_key(self, name: str) -> str:
        """Object key of the index, manifest or snapshot-sync file."""
        if name not in RESERVED_FILES:
            raise InvalidName(f"{name!r} is not a reserved file")
        return self.prefix + name

    def lock_name(self) -> str:
        return "place:" + self.rel_dir

    def filename_of(self, key: str) -> str:
        if not key.startswith(self.prefix):
            raise InvalidName(f"{key!r} is not in {self.label}")
        return key[len(self.prefix) :]


def session_summary_key(session_id: str, key_prefix: str = "memory/") -> str:
    """``memory/sessions/session-<id>.md``."""
    return f"{key_prefix}sessions/session-{validate_id(session_id, 'session id')}.md"
