"""Importing a bundle: validate everything first, then write through ``MemoryDir``.

Why validate the whole bundle before writing anything: a user restoring a backup must never end
up with half of it. Names, encoding, checksums, sizes, frontmatter, file counts, state files and
where each place may go (``ImportTarget``) are all checked; any problem and nothing is written,
and ``BundleInvalid.problems`` lists every one so a backup is fixed in one pass. Writes then go
through ``MemoryDir.save`` (place lock, manifest of record, MEMORY.md); a file whose bytes are
already stored is left alone (``unchanged``), and the manifest meta and original ``created_at``
come back in one manifest commit per place.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import InvalidName, MemoryFormatError
from ..layout import Place, PlaceKind, validate_filename, validate_id
from ..memdir import Manifest, MemoryDir
from .bundle import MAX_STATE_FILE_BYTES, Bundle, BundleFile, BundlePlace, Progress, is_state_file
from .places import place_path

MAX_PROBLEMS = 50
DirFactory = Callable[[Place], MemoryDir]


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
    state: dict[str, bytes] = field(default_factory=dict)


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
        for item in src.state:
            problem = _check_state(item)
            if problem:
                problems.append(f"{where}/{item.file}: {problem}")
            else:
                plan.state[item.file] = item.data()
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


def _check_state(item: BundleFile) -> str | None:
    if not is_state_file(item.file):
        return "a state file is a dot-named .json file at the top of the place (not the manifest)"
    try:
        raw = item.data()
    except MemoryFormatError as exc:
        return str(exc)
    if len(raw) > MAX_STATE_FILE_BYTES:
        return f"larger than {MAX_STATE_FILE_BYTES} bytes"
    try:
        json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        return f"not valid JSON ({exc})"
    return None


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
        for name, data in plan.state.items():
            mdir.store.put(mdir.place.prefix + name, data, content_type="application/json")
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
