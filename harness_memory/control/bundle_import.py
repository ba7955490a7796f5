"""Importing a bundle: validate everything first, then one ``MemoryDir`` transaction per place.

Why validate the whole bundle before writing anything: a user restoring a backup must never end
up with half of it, and a hostile bundle must not get one file in. Names (``..``, absolute, drive
letters, backslashes, names that collide after NFC normalisation), encoding, checksums, sizes,
frontmatter, file counts, the import-wide bounds (``limits.import_max_entries`` /
``import_max_bytes``), state files and where each place may go (``ImportTarget``: a shared place
names each of its files as refused) are all checked, together with the problems the zip reader
found (``problems=``); any problem and nothing is written,
and ``BundleInvalid.problems`` lists every one so a backup is fixed in one pass. Each place is
then written in one ``PlaceTxn`` (place lock, files, manifest of record with the bundle's meta and
original ``created_at``, MEMORY.md, state files): a place is fully imported or unchanged. A file
whose bytes are already stored is left alone (``unchanged``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..config import LimitsConfig
from ..errors import InvalidName, MemoryFormatError
from ..layout import INDEX_FILE, Place, PlaceKind, validate_filename, validate_id
from ..memdir import Manifest, MemoryDir, is_state_file
from ..memdir.trash import keep_removed, keep_version, record_origin
from .bundle import MAX_STATE_FILE_BYTES, Bundle, BundleFile, BundlePlace, Progress
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
    #: An operator's explicit "put it there" (CLI ``--into``): places naming another user are
    #: moved to ``user_id`` / ``place``. Without it (a user's import over HTTP) they are refused.
    retarget: bool = False


def plan_import(bundle: Bundle, target: ImportTarget, dirs: DirFactory, key_prefix: str = "memory/", *,
                problems: Sequence[str] = (), limits: LimitsConfig | None = None) -> list[PlannedPlace]:
    """Validate the whole bundle against ``target``; raise BundleInvalid listing every problem
    (``problems``: ones found earlier, e.g. bad zip entries, listed first). A bundle over the
    import-wide bounds of ``limits`` is refused before any file is looked at."""
    problems = list(problems)
    too_big = _bound_problems(bundle, limits or LimitsConfig())
    if too_big:
        raise BundleInvalid(problems + too_big)
    planned: dict[str, PlannedPlace] = {}
    if target.place is not None and len(bundle.places) > 1:
        problems.append(f"this endpoint imports one memory directory; the bundle holds {len(bundle.places)} "
                        "(import it at the user level instead)")
    seen_by_place: dict[str, dict[str, str]] = {}
    for index, src in enumerate(bundle.places):
        where = f"places[{index}]"
        try:
            place = _target_place(src, target, key_prefix)
        except InvalidName as exc:
            label = _source_label(src, where)
            problems.append(f"{label}: {exc}")
            problems += [f"{label}/{item.file}: not imported ({label} cannot be written here)"
                         for item in src.files + src.state]
            continue
        where = place_path(place)
        plan = planned.setdefault(place.prefix, PlannedPlace(dirs(place)))
        if target.place is None or target.place.kind == src.kind:
            plan.meta = {**(plan.meta or {}), **src.meta}
            problem = _check_meta(plan.meta)
            if problem:
                problems.append(f"{where}: meta {problem}")
        seen = seen_by_place.setdefault(place.prefix, {})
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


def _source_label(src: BundlePlace, fallback: str) -> str:
    """The store path a bundle place names (its own, before retargeting), else ``places[i]``."""
    try:
        return src.path
    except (InvalidName, ValueError):
        return fallback


def _bound_problems(bundle: Bundle, limits: LimitsConfig) -> list[str]:
    """The import-wide bounds (``limits.import_max_entries`` / ``import_max_bytes``)."""
    entries = sum(len(p.files) + len(p.state) for p in bundle.places)
    size = sum(len(item.content or "") for p in bundle.places for item in p.files + p.state)
    out = []
    if entries > limits.import_max_entries:
        out.append(f"the bundle holds {entries} files; the limit is {limits.import_max_entries} "
                   "(limits.import_max_entries)")
    if size > limits.import_max_bytes:
        out.append(f"the bundle holds about {size} bytes; the limit is {limits.import_max_bytes} "
                   "(limits.import_max_bytes)")
    return out


def _target_place(src: BundlePlace, target: ImportTarget, key_prefix: str) -> Place:
    """Where ``src`` goes. A place that names a user other than the one this import writes for is
    refused (not re-aimed at the caller) unless the operator asked for that (``retarget``): a bundle
    is read as what it says, and "users/A/…" in user B's import is a place B may not write."""
    owner = target.place.user_id if target.place is not None else target.user_id
    if not target.retarget and owner is not None and src.user_id is not None and src.user_id != owner:
        raise InvalidName(f"it holds memory of user {src.user_id!r}, and this import writes only user {owner!r}'s "
                          "memory (to copy it, change user_id in the bundle, or import it as that user)")
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


def _check_meta(meta: dict[str, Any]) -> str | None:
    """The manifest's ``meta`` rides in the head every save rewrites and every build reads: capped
    as a state file is (a 60 MB meta was accepted, and every later save then took seconds)."""
    size = len(json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_STATE_FILE_BYTES:
        return f"is {size} bytes as JSON; at most {MAX_STATE_FILE_BYTES} bytes are kept with a memory directory"
    return None


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


def _check_file(plan: PlannedPlace, item: BundleFile, seen: dict[str, str]) -> str | None:
    """Why ``item`` cannot be imported, or None (then it is planned). ``seen`` maps the
    NFC-normalised names already planned for this place to the names as the bundle wrote them."""
    try:
        name = validate_filename(item.file)
    except InvalidName as exc:
        return str(exc)
    if name in seen:
        if seen[name] == item.file:
            return "appears twice"
        return f"the same name as {seen[name]!r} after Unicode (NFC) normalisation"
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
    seen[name] = item.file
    plan.files.append((name, text, item.created_at))
    return None


@dataclass(slots=True)
class PlaceReport:
    """What an import did (or, dry run, would do) to one place, counted by memory file.

    ``created``: named by the bundle, absent now; ``updated``: present with other bytes;
    ``unchanged``: present with the same bytes; ``removed``: present, not in the bundle, and
    deleted by a replacing import (every file of a place the bundle does not name, for a
    replacing import of a whole user). ``cleared`` is the older name of ``removed``."""

    path: str
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0

    @property
    def cleared(self) -> int:
        return self.removed


@dataclass(slots=True)
class ImportReport:
    mode: str
    dry_run: bool
    places: list[PlaceReport] = field(default_factory=list)

    @property
    def written(self) -> int:
        return sum(p.created + p.updated for p in self.places)

    def total(self, what: Literal["created", "updated", "unchanged", "removed"]) -> int:
        return sum(getattr(p, what) for p in self.places)


def apply_import(plans: Sequence[PlannedPlace], mode: Literal["merge", "replace"], *,
                 clear_also: Sequence[MemoryDir] = (), dry_run: bool = False,
                 progress: Progress | None = None) -> ImportReport:
    """Write the planned files, one place transaction per place (``MemoryDir.transaction``): a
    place is either fully imported or unchanged. ``merge`` keeps files the bundle does not name
    and leaves identical ones alone; ``replace`` makes each target place hold exactly the bundle's
    files (the others are removed in the same commit) and clears ``clear_also``.

    ``dry_run`` reads what is stored (no lock, nothing written) and reports the same counts the
    real run would, so a preview can be trusted: a fresh export of unchanged files is all
    ``unchanged``. Pass ``clear_also`` on a dry run too, or its removals are not counted."""
    report = ImportReport(mode=mode, dry_run=dry_run)
    reports = {p.mdir.place.prefix: PlaceReport(place_path(p.mdir.place)) for p in plans}
    total = sum(len(p.files) for p in plans)
    done = 0
    for plan in plans:
        rep = reports[plan.mdir.place.prefix]
        if dry_run:
            _preview(plan, mode, rep)
            continue
        with plan.mdir.transaction() as txn:
            named = {n for n, _, _ in plan.files}
            if mode == "replace":
                existing = plan.mdir.memory_files()
                keep_removed(txn, sorted(existing), "import")  # what the import removes or overwrites: the trash
                txn.clear_entries()
                stale = sorted(existing - named)
                rep.removed = len(stale)
                for name in stale:
                    txn.delete(name)
                for name in _state_files(plan.mdir) - set(plan.state):
                    txn.delete_state(name)
            txn.prefetch(sorted(named))
            unchanged: dict[str, float] = {}
            for name, text, created_at in plan.files:
                done += 1
                if progress is not None:
                    progress(done, total, f"{rep.path}/{name}")
                current = txn.read(name)
                same = current is not None and current.data == text.encode("utf-8")
                if same and mode == "merge":
                    rep.unchanged += 1
                    if created_at is not None:
                        unchanged[name] = created_at
                    continue
                if mode == "merge" and current is not None and not same:  # what it overwrites: a version
                    keep_version(txn, name, "import", text)
                # replace: the entries were cleared, so an identical file is written again (same bytes)
                txn.write(name, text, created_at=created_at)
                if same:
                    rep.unchanged += 1
                elif current is None:
                    rep.created += 1
                else:
                    rep.updated += 1
            txn.mutate(_restore_state(plan, unchanged, replace=mode == "replace"))
            record_origin(txn, "import")  # after the meta it restores: the page says these were imported
            for name, data in plan.state.items():
                txn.put_state(name, data)
    if mode == "replace":
        for mdir in clear_also:
            rep = reports.setdefault(mdir.place.prefix, PlaceReport(place_path(mdir.place)))
            rep.removed += _memory_file_count(mdir) if dry_run else mdir.clear(origin="import")
    report.places = list(reports.values())
    return report


def _preview(plan: PlannedPlace, mode: str, rep: PlaceReport) -> None:
    """A dry run's counts for one place: what is stored now compared with the bundle (no lock)."""
    existing = plan.mdir.memory_files()
    named = {n for n, _, _ in plan.files}
    for name, text, _created_at in plan.files:
        current = plan.mdir.store.get_or_none(plan.mdir.place.key(name)) if name in existing else None
        if current is None:
            rep.created += 1
        elif current.data == text.encode("utf-8"):
            rep.unchanged += 1
        else:
            rep.updated += 1
    if mode == "replace":
        rep.removed = len(existing - named)


def _memory_file_count(mdir: MemoryDir) -> int:
    """How many memory files ``MemoryDir.clear`` would delete (the same count, without deleting)."""
    return sum(1 for info in mdir.store.list(mdir.place.prefix)
               if info.key.endswith(".md") and not info.key.endswith("/" + INDEX_FILE))


def _state_files(mdir: MemoryDir) -> set[str]:
    return {info.key[len(mdir.place.prefix):] for info in mdir.store.list(mdir.place.prefix)
            if is_state_file(info.key[len(mdir.place.prefix):])}


def _restore_state(plan: PlannedPlace, unchanged: dict[str, float], *, replace: bool
                   ) -> Callable[[Manifest], None]:
    """The manifest change of an import: the bundle's meta (all of it on replace) and the original
    ``created_at`` of files left unchanged (written files carry theirs already)."""

    def mutate(manifest: Manifest) -> None:
        if replace:
            manifest.meta = dict(plan.meta or {})
        elif plan.meta:
            manifest.meta.update(plan.meta)
        for name, at in unchanged.items():
            entry = manifest.entries.get(name)
            if entry is not None:  # replaced, not changed in place: entries are shared (memdir/index.py)
                manifest.entries[name] = dataclasses.replace(entry, created_at=at)

    return mutate
