"""Export and import of whole memories as a JSON bundle (the zip form lives in ``bundle_zip``).

Why this shape:
- A bundle carries every memory file's exact bytes (UTF-8 text, or base64 when a stray file is
  not UTF-8) with its sha256, plus the manifest's ``meta`` (snapshot sync state, auto-memory
  profile) and the ``.snapshot-synced.json`` object, so export -> clear -> import restores
  byte-identical memories and the same snapshot state.
- Import validates EVERYTHING first (names, encoding, checksums, sizes, frontmatter, counts,
  where each place may go) and writes nothing when any file is wrong: the answer lists every
  problem, so a user fixes a backup in one pass instead of finding a half-imported memory.
- Writes go through ``MemoryDir.save`` (place lock, manifest of record, MEMORY.md re-render),
  never around it. A file whose bytes are already stored is left alone (``unchanged``).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import InvalidName, MemoryFormatError
from ..layout import MANIFEST_FILE, SNAPSHOT_SYNC_FILE, Place, PlaceKind, validate_filename, validate_id
from ..memdir import Manifest, MemoryDir
from .places import is_memory_file, place_path

log = logging.getLogger(__name__)

BUNDLE_FORMAT = "harness-memory-bundle"
BUNDLE_VERSION = 1
MAX_SYNC_FILE_BYTES = 65536
MAX_PROBLEMS = 50

Progress = Callable[[int, int, str], None]
"""``progress(done, total, label)`` — called as files are read or written."""

DirFactory = Callable[[Place], MemoryDir]


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


class BundlePlace(BaseModel):
    """One memory directory: where it was, its files, and the manifest meta."""

    model_config = ConfigDict(extra="forbid")

    kind: PlaceKind
    user_id: str | None = None
    agent_type: str | None = None
    project: str | None = None
    files: list[BundleFile] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict, description="The manifest's `meta` (free-form state).")
    snapshot_synced: BundleFile | None = Field(None, description="The place's `.snapshot-synced.json`.")

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
    plans: list[tuple[MemoryDir, Manifest, list[str]]] = []
    for mdir in dirs:
        manifest = mdir.manifest()
        names = set(manifest.entries)
        for info in mdir.store.list(mdir.place.prefix):
            name = mdir.place.filename_of(info.key)
            if is_memory_file(name):
                names.add(name)
            elif name not in (MANIFEST_FILE, SNAPSHOT_SYNC_FILE) and not name.endswith("MEMORY.md"):
                log.warning("export %s: skipping %s (not a memory file name)", mdir.place.label, name)
        plans.append((mdir, manifest, sorted(names)))
    total = sum(len(names) for _, _, names in plans)
    done = 0
    bundle = Bundle(scope=scope)
    for mdir, manifest, names in plans:
        entry = BundlePlace.of(mdir.place)
        entry.meta = dict(manifest.meta)
        for name in names:
            obj = mdir.store.get_or_none(mdir.place.key(name))
            done += 1
            if progress is not None:
                progress(done, total, f"{place_path(mdir.place)}/{name}")
            if obj is None:  # in the manifest but gone: nothing to restore
                continue
            prior = manifest.entries.get(name)
            entry.files.append(encode_file(name, obj.data, prior.created_at if prior else None))
        sync = mdir.store.get_or_none(mdir.place.reserved_key(SNAPSHOT_SYNC_FILE))
        if sync is not None:
            entry.snapshot_synced = encode_file(SNAPSHOT_SYNC_FILE, sync.data)
        if entry.files or entry.meta or entry.snapshot_synced is not None:
            bundle.places.append(entry)
    return bundle


# -- import ----------------------------------------------------------------------------------
class BundleInvalid(MemoryFormatError):
    """The bundle cannot be imported; ``problems`` lists every reason (nothing was written)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems[:MAX_PROBLEMS]
        more = f" (and {len(problems) - MAX_PROBLEMS} more)" if len(problems) > MAX_PROBLEMS else ""
        super().__init__(f"the bundle was not imported: {len(problems)} problem(s): "
                         + "; ".join(self.problems[:5]) + more)


@dataclass(slots=True)
class PlannedPlace:
    mdir: MemoryDir
    files: list[tuple[str, str, float | None]] = field(default_factory=list)  # (name, text, created_at)
    meta: dict[str, Any] | None = None
    snapshot_synced: bytes | None = None


@dataclass(frozen=True, slots=True)
class ImportTarget:
    """Where a bundle may go: one place, one user's places, or anywhere it names (operator)."""

    place: Place | None = None
    user_id: str | None = None
    allow_shared: bool = False


def plan_import(bundle: Bundle, target: ImportTarget, dirs: DirFactory, key_prefix: str = "memory/"
                ) -> list[PlannedPlace]:
    """Validate the whole bundle against ``target``; raise BundleInvalid listing every problem."""
    problems: list[str] = []
    planned: dict[str, PlannedPlace] = {}
    if target.place is not None and len(bundle.places) > 1:
        problems.append(f"this endpoint imports one memory directory; the bundle holds {len(bundle.places)} "
                        "(import it at the user level instead)")
    for index, src in enumerate(bundle.places):
        where = f"places[{index}]"
        try:
            place = _target_place(src, target, key_prefix)
        except InvalidName as exc:
            problems.append(f"{where}: {exc}")
            continue
        where = place_path(place)
        plan = planned.setdefault(place.prefix, PlannedPlace(dirs(place)))
        if target.place is None or target.place.kind == src.kind:
            plan.meta = {**(plan.meta or {}), **src.meta}
        seen = {name for name, _, _ in plan.files}
        for item in src.files:
            problem = _check_file(plan, item, seen)
            if problem:
                problems.append(f"{where}/{item.file}: {problem}")
        if len(plan.files) > plan.mdir.limits.max_files_per_place:
            problems.append(f"{where}: {len(plan.files)} files; a memory directory holds at most "
                            f"{plan.mdir.limits.max_files_per_place}")
        if src.snapshot_synced is not None:
            try:
                raw = src.snapshot_synced.data()
                if len(raw) > MAX_SYNC_FILE_BYTES:
                    raise MemoryFormatError(f"larger than {MAX_SYNC_FILE_BYTES} bytes")
                json.loads(raw.decode("utf-8"))
                plan.snapshot_synced = raw
            except (MemoryFormatError, ValueError) as exc:
                problems.append(f"{where}/{SNAPSHOT_SYNC_FILE}: not valid JSON ({exc})")
    if problems:
        raise BundleInvalid(problems)
    return list(planned.values())


def _target_place(src: BundlePlace, target: ImportTarget, key_prefix: str) -> Place:
    if target.place is not None:
        return target.place
    if src.kind in (PlaceKind.SHARED_AGENT, PlaceKind.SHARED_AUTO):
        if not target.allow_shared:
            raise InvalidName(f"{src.kind.value} memory cannot be imported here; it needs the admin token "
                              "and the shared endpoints")
        return src.place(key_prefix)
    user = target.user_id or src.user_id
    if user is not None:
        validate_id(user, "user id")
    return src.place(key_prefix, user_id=user)


def _check_file(plan: PlannedPlace, item: BundleFile, seen: set[str]) -> str | None:
    try:
        name = validate_filename(item.file)
    except InvalidName as exc:
        return str(exc)
    if name in seen:
        return "appears twice"
    try:
        data = item.data()
    except MemoryFormatError as exc:
        return str(exc)
    if item.sha256 is not None and hashlib.sha256(data).hexdigest() != item.sha256:
        return "sha256 does not match the content (damaged or edited bundle)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text (memory files are markdown)"
    try:
        plan.mdir.check_content(text)
    except MemoryFormatError as exc:
        return str(exc).split("\n", 1)[0]
    seen.add(name)
    plan.files.append((name, text, item.created_at))
    return None


@dataclass(slots=True)
class PlaceReport:
    path: str
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    cleared: int = 0


@dataclass(slots=True)
class ImportReport:
    mode: str
    dry_run: bool
    places: list[PlaceReport] = field(default_factory=list)

    @property
    def written(self) -> int:
        return sum(p.created + p.updated for p in self.places)


def apply_import(plans: Sequence[PlannedPlace], mode: Literal["merge", "replace"], *,
                 clear_also: Sequence[MemoryDir] = (), dry_run: bool = False,
                 progress: Progress | None = None) -> ImportReport:
    """Write the planned files. ``replace`` clears each target place (and ``clear_also``) first."""
    report = ImportReport(mode=mode, dry_run=dry_run)
    reports = {p.mdir.place.prefix: PlaceReport(place_path(p.mdir.place)) for p in plans}
    if dry_run:
        for plan in plans:
            reports[plan.mdir.place.prefix].created = len(plan.files)
        report.places = list(reports.values())
        return report
    if mode == "replace":
        for mdir in [*(p.mdir for p in plans), *clear_also]:
            cleared = mdir.clear()
            rep = reports.setdefault(mdir.place.prefix, PlaceReport(place_path(mdir.place)))
            rep.cleared += cleared
    total = sum(len(p.files) for p in plans)
    done = 0
    for plan in plans:
        mdir, rep = plan.mdir, reports[plan.mdir.place.prefix]
        for name, text, _created in plan.files:
            done += 1
            if progress is not None:
                progress(done, total, f"{rep.path}/{name}")
            current = mdir.store.get_or_none(mdir.place.key(name)) if mode == "merge" else None
            if current is not None and current.data == text.encode("utf-8"):
                rep.unchanged += 1
                continue
            result = mdir.save(name, text)
            if result.created:
                rep.created += 1
            else:
                rep.updated += 1
        _restore_manifest_state(plan)
        if plan.snapshot_synced is not None:
            mdir.store.put(mdir.place.reserved_key(SNAPSHOT_SYNC_FILE), plan.snapshot_synced,
                           content_type="application/json")
    report.places = list(reports.values())
    return report


def _restore_manifest_state(plan: PlannedPlace) -> None:
    """Put back the manifest meta and each file's original ``created_at`` (one manifest write)."""
    created = {name: at for name, _, at in plan.files if at is not None}
    if not plan.meta and not created:
        return

    def mutate(manifest: Manifest) -> None:
        if plan.meta:
            manifest.meta.update(plan.meta)
        for name, at in created.items():
            entry = manifest.entries.get(name)
            if entry is not None:
                entry.created_at = at

    plan.mdir.update_meta(mutate)
