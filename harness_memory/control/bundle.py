"""The bundle — a whole memory as JSON — and export (import: ``bundle_import``; zip: ``bundle_zip``).

Why this shape: a bundle carries every memory file's exact bytes (UTF-8 text; base64 is accepted
on import) with its sha256, the manifest's ``meta`` (snapshot sync record, auto-memory profile)
and the place's state files (``.snapshot-synced.json``, ``.auto-state.json``), so export -> clear
-> import restores byte-identical memories in the same state. Objects that could not be imported
again (not UTF-8, broken frontmatter, over the size limit) are left out and listed in ``skipped``,
so a bundle made by export always imports.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import InvalidName, MemoryFormatError
from ..layout import Place, PlaceKind, is_derived
from ..memdir import Manifest, MemoryDir, is_state_file
from ..memdir.trash import ORIGINS, is_kept
from .places import is_memory_file, place_path

log = logging.getLogger(__name__)

BUNDLE_FORMAT = "harness-memory-bundle"
BUNDLE_VERSION = 1
MAX_STATE_FILE_BYTES = 1024 * 1024


Progress = Callable[[int, int, str], None]
"""``progress(done, total, label)`` — called as files are read or written."""


class BundleFile(BaseModel):
    """One file's exact bytes: UTF-8 ``text`` or ``base64``; ``sha256`` of the bytes."""

    model_config = ConfigDict(extra="forbid")

    file: str = Field(description="File name inside the place, e.g. `user_role.md`.")
    encoding: Literal["text", "base64"] = Field("text", description="How `content` holds the bytes.")
    content: str | None = Field(
        None, description="The bytes (as text or base64); absent only in a zip's index, where the file "
        "is stored beside it.")
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="sha256 of the bytes.")
    created_at: float | None = Field(None, description="When the memory was first saved (unix seconds).")

    def data(self) -> bytes:
        """The file's bytes; raises MemoryFormatError when the content cannot be decoded."""
        if self.content is None:
            raise MemoryFormatError("content is missing")
        if self.encoding == "base64":
            try:
                return base64.b64decode(self.content, validate=True)
            except (binascii.Error, ValueError):
                raise MemoryFormatError("content is not valid base64") from None
        return self.content.encode("utf-8", errors="surrogatepass")


class SkippedFile(BaseModel):
    """An object of the place that is not a valid memory (left out of the bundle, with why)."""

    file: str
    reason: str


class BundlePlace(BaseModel):
    """One memory directory: where it was, its files, and the manifest meta."""

    model_config = ConfigDict(extra="forbid")

    kind: PlaceKind
    user_id: str | None = None
    agent_type: str | None = None
    project: str | None = None
    files: list[BundleFile] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict, description="The manifest's `meta` (free-form state).")
    state: list[BundleFile] = Field(default_factory=list, description="State objects of the place "
                                    "(`.snapshot-synced.json`, `.auto-state.json`): dot-named JSON files.")
    skipped: list[SkippedFile] = Field(default_factory=list, description="Export only: objects that are not "
                                       "valid memories (not UTF-8, bad frontmatter, too large) and were left out.")

    @property
    def path(self) -> str:
        return place_path(self.place())

    def place(self, key_prefix: str = "memory/", user_id: str | None = None) -> Place:
        """The place this entry names (``user_id`` retargets a user place). Raises InvalidName."""
        user = user_id or self.user_id
        match self.kind:
            case PlaceKind.USER_AGENT:
                return Place.user_agent(_need(user, "user_id"), _need(self.agent_type, "agent_type"), key_prefix)
            case PlaceKind.SHARED_AGENT:
                return Place.shared_agent(_need(self.agent_type, "agent_type"), key_prefix)
            case PlaceKind.USER_AUTO:
                return Place.user_auto(_need(user, "user_id"), _need(self.project, "project"), key_prefix)
            case PlaceKind.SHARED_AUTO:
                return Place.shared_auto(_need(self.project, "project"), key_prefix)
        raise InvalidName(f"unknown place kind {self.kind!r}")

    @classmethod
    def of(cls, place: Place) -> BundlePlace:
        return cls(kind=place.kind, user_id=place.user_id, agent_type=place.agent_type, project=place.project)


class Bundle(BaseModel):
    """A whole memory (one place, one user's places, or the whole store)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["harness-memory-bundle"] = BUNDLE_FORMAT
    version: Literal[1] = BUNDLE_VERSION
    exported_at: str = Field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    scope: str = Field("", description="What was exported: `users/<id>`, a place path, or `all`.")
    places: list[BundlePlace] = Field(default_factory=list)

    def file_count(self) -> int:
        return sum(len(p.files) for p in self.places)


def _need(value: str | None, what: str) -> str:
    if not value:
        raise InvalidName(f"the place needs {what}")
    return value


def encode_file(name: str, data: bytes, created_at: float | None = None) -> BundleFile:
    """A BundleFile holding ``data`` as text when it is valid UTF-8, else as base64."""
    digest = hashlib.sha256(data).hexdigest()
    try:
        return BundleFile(file=name, content=data.decode("utf-8"), sha256=digest, created_at=created_at)
    except UnicodeDecodeError:
        return BundleFile(file=name, encoding="base64", content=base64.b64encode(data).decode("ascii"),
                          sha256=digest, created_at=created_at)


# -- export ----------------------------------------------------------------------------------
def export_places(dirs: Sequence[MemoryDir], scope: str, progress: Progress | None = None) -> Bundle:
    """Read every memory file of ``dirs`` (manifest entries plus anything LIST finds)."""
    plans: list[tuple[MemoryDir, Manifest, list[str], list[str]]] = []
    for mdir in dirs:
        states: list[str] = []
        manifest = mdir.manifest()
        names = {name for name in manifest.entries if is_memory_file(name)}
        for info in mdir.store.list(mdir.place.prefix):
            name = mdir.place.filename_of(info.key)
            if is_memory_file(name):
                names.add(name)
            elif is_state_file(name):
                states.append(name)
            elif not is_derived(name) and not is_kept(name) and not name.endswith("MEMORY.md"):
                log.warning("export %s: skipping %s (not a memory file name)", mdir.place.label, name)
        plans.append((mdir, manifest, sorted(names), sorted(states)))
    total = sum(len(names) for _, _, names, _ in plans)
    done = 0
    bundle = Bundle(scope=scope)
    for mdir, manifest, names, states in plans:
        entry = BundlePlace.of(mdir.place)
        entry.meta = {k: v for k, v in manifest.meta.items() if k != ORIGINS}  # this place's commits only
        for name in names:
            obj = mdir.store.get_or_none(mdir.place.key(name))
            done += 1
            if progress is not None:
                progress(done, total, f"{place_path(mdir.place)}/{name}")
            if obj is None:  # in the manifest but gone: nothing to restore
                continue
            problem = _invalid_memory(mdir, obj.data)
            if problem is not None:
                log.warning("export %s: leaving out %s (%s)", mdir.place.label, name, problem)
                entry.skipped.append(SkippedFile(file=name, reason=problem))
                continue
            prior = manifest.entries.get(name)
            entry.files.append(encode_file(name, obj.data, prior.created_at if prior else None))
        for name in states:
            state = mdir.store.get_or_none(mdir.place.prefix + name)
            if state is not None:
                entry.state.append(encode_file(name, state.data))
        if entry.files or entry.meta or entry.state or entry.skipped:
            bundle.places.append(entry)
    return bundle


def _invalid_memory(mdir: MemoryDir, data: bytes) -> str | None:
    """Why ``data`` could not be imported again (so export leaves it out), or None."""
    try:
        mdir.check_content(data.decode("utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except MemoryFormatError as exc:
        return str(exc).split("\n", 1)[0]
    return None
