"""One memory place as a directory of memory files with its index kept in step.

Why the write path looks like this: the manifest is the index of record and is updated
read-modify-write under the place lock (a renewed, checked lease), with a conditional PUT
(If-Match / create-only) as a second guard where the backend enforces it. Every write — one file
or many, a delete, a snapshot, an auto-memory update, an import — is one ``PlaceTxn``
(``memdir/txn.py``): first the manifest head carrying the commit's redo record (the commit point;
``memdir/redo.py``), then the files, MEMORY.md and the search index side by side. If the head does
not land, nothing was written and the save failed; if a file does not land after it, the next
transaction (or ``reindex``) completes the commit from the redo record, so readers never keep a
half-applied change. MEMORY.md is re-rendered from the manifest after every change; if only that
write fails the next change heals it, and readers use the manifest anyway.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from ..config import LimitsConfig
from ..errors import (
    InvalidName,
    LeaseLost,
    LockTimeout,
    MemoryFormatError,
    ObjectNotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageError,
    StorageUnavailable,
    WriteConflict,
)
from ..layout import INDEX_FILE, INTENT_FILE, MANIFEST_FILE, Place, validate_filename
from ..locks import LOCAL_LEASE, Lease, LocalLocker, Locker, RedisLease, RedisLocker
from ..observe import wrap_context
from ..redis_client import REDIS_ERRORS
from ..storage.base import ObjectStore, StoredObject
from . import group, heads, stored
from . import intent as intents
from . import keep as kept
from . import redo as redos
from .index import (
    MANIFEST_VERSION,
    CappedText,
    Manifest,
    ManifestEntry,
    cap_index,
    capped_index,
    parse_index,
    render_index,
)
from .model import MemoryFile, parse_memory, utf8_size
from .port import CommitListener, announce
from .txn import ABSENT, PlaceTxn, SaveResult, TxnResult, is_state_file

log = logging.getLogger(__name__)
#: Manifest commit attempts at least (more while the lock-wait budget lasts, with back-off).
COMMIT_ATTEMPTS = 6
#: Further commits of handed-over saves a holder makes before it releases the lock (group commit).
DRAIN_ROUNDS = 4
#: How long a holder waits for another handed-over save before it releases the lock: the writers
#: it just answered are typically posting their next save within a few milliseconds.
DRAIN_WAIT = 0.005


@dataclass(frozen=True, slots=True)
class ReadResult:
    file: str
    text: str
    etag: str
    last_modified: float


class MemoryDir:
    """Memory files of one place, bound to a store, a locker and the size limits."""

    def __init__(self, store: ObjectStore, place: Place, *, locker: Locker | None = None,
                 limits: LimitsConfig | None = None, executor: Executor | None = None,
                 listeners: Iterable[CommitListener] = ()) -> None:
        self.store = store
        self.place = place
        self.limits = limits or LimitsConfig()
        #: Runs a transaction's file reads and writes concurrently (the services' ``io`` pool).
        self.executor = executor
        self.locker = locker or LocalLocker(ttl=self.limits.lock_ttl_seconds, wait=self.limits.lock_wait_seconds)
        #: Told about every commit that changed memory files (``port.py``): the search index, the
        #: semantic tier. The composition root gives them; a bare ``MemoryDir`` maintains no index.
        self.listeners: tuple[CommitListener, ...] = tuple(listeners)
        #: Files the last ``reindex`` could not index: (name, reason).
        self.last_skipped: list[tuple[str, str]] = []

    def __repr__(self) -> str:
        return f"MemoryDir({self.place.label})"

    @property
    def manifest_key(self) -> str:
        return self.place.reserved_key(MANIFEST_FILE)

    @property
    def index_key(self) -> str:
        return self.place.reserved_key(INDEX_FILE)

    @property
    def intent_key(self) -> str:
        return self.place.reserved_key(INTENT_FILE)

    # -- reading --------------------------------------------------------------------------
    def load_manifest(self) -> tuple[Manifest, str | None]:
        """The manifest and its head's etag (None when the place has none yet). One GET when this
        pod holds the place's base already (``stored.py``), two when not."""
        return stored.load(self.store, self.place.prefix, self.manifest_key)

    def manifest(self) -> Manifest:
        return self.load_manifest()[0]

    def index_text(self, manifest: Manifest | None = None) -> CappedText:
        """MEMORY.md as the model should see it: rendered from the manifest, capped.

        A place without a manifest falls back to its MEMORY.md object (one more GET).
        """
        if manifest is None:
            manifest = self.manifest()
        if manifest.entries:
            return capped_index(manifest, self.limits.index_max_lines, self.limits.index_max_bytes)
        obj = self.store.get_or_none(self.index_key)
        text = obj.data.decode("utf-8", errors="replace") if obj else ""
        return cap_index(text, self.limits.index_max_lines, self.limits.index_max_bytes)

    def read(self, file: str) -> ReadResult:
        file = validate_filename(file)
        obj = self.store.get(self.place.key(file))
        return ReadResult(file, obj.data.decode("utf-8", errors="replace"), obj.etag, obj.last_modified)

    def list_entries(self) -> list[ManifestEntry]:
        manifest = self.manifest()
        if manifest.entries:
            return manifest.sorted_entries()
        # No manifest: fall back to MEMORY.md lines (e.g. a hand-copied snapshot).
        obj = self.store.get_or_none(self.index_key)
        if obj is None:
            return []
        return [ManifestEntry(file=f, name=n, description=d, type="")
                for n, f, d in parse_index(obj.data.decode("utf-8", errors="replace"))]

    def memory_files(self, manifest: Manifest | None = None) -> set[str]:
        """Every memory file of the place: the index's entries plus any file LIST finds (orphans
        too). LISTs the place: for operator actions (replace, import), never an agent build."""
        files = set((manifest or self.manifest()).entries)
        for info in self.store.list(self.place.prefix):
            name = info.key[len(self.place.prefix):]
            if name != INDEX_FILE and name.endswith(".md") and not any(p.startswith(".") for p in name.split("/")):
                files.add(name)
        return files

    # -- writing --------------------------------------------------------------------------
    def check_content(self, content: str) -> MemoryFile:
        """Validate size and frontmatter before anything is written."""
        if not isinstance(content, str):
            raise MemoryFormatError("content must be text")
        size = self._utf8(content)
        if size > self.limits.max_file_bytes:
            raise MemoryFormatError(
                f"content is {size} bytes; the limit is {self.limits.max_file_bytes} bytes. "
                "Split it into smaller memories or keep only what will matter later."
            )
        if "\x00" in content:
            raise MemoryFormatError("content contains a NUL character")
        return parse_memory(content)

    @staticmethod
    def _utf8(content: str) -> int:
        """Byte size of ``content``; a lone surrogate is refused clearly (``utf8_size``)."""
        return utf8_size(content)

    def transaction(self, prefetch: tuple[str, ...] = ()) -> contextlib.AbstractContextManager[PlaceTxn]:
        """Hold the place lock and yield a ``PlaceTxn`` started from the current manifest; what
        the block stages is committed when it ends without an exception (nothing otherwise).
        ``prefetch``: files the block will read or write, read together with the manifest (one
        round trip less while the lock is held)."""
        return self._transaction(prefetch)

    @contextlib.contextmanager
    def _transaction(self, prefetch: tuple[str, ...] = (), lease: Lease | None = None, *,
                     repair: bool = False, blind: bool = False) -> Iterator[PlaceTxn]:
        """``transaction``; with ``lease``, inside a lock the caller already holds. ``repair``
        (``reindex``): a manifest that cannot be read (damaged, its base gone) starts as empty.
        ``blind``: the block only writes (a save), deciding nothing from the manifest, so this
        pod's copy of the head may stand in for reading it (``heads.py``): the head's If-Match
        catches a stale copy and the commit then starts again from the stored head."""
        if lease is None:
            with self.locker.hold(self.place.lock_name()) as held, \
                    self._transaction(prefetch, held, repair=repair, blind=blind) as txn:
                yield txn
            return
        known: dict[str, str] = {}
        texts: dict[str, bytes] = {}
        marker, copy = self._recall_head(lease) if blind else (None, None)
        try:
            if copy is not None:  # this pod's copy of the current head: no GET
                (manifest, known, texts), files, done = copy, {}, copy[0].txn
                etag = manifest.head_etag
            else:
                manifest, etag, files, done = self._load(prefetch, lease, marker=marker)
                known = self._known_files(manifest, etag)
        except MemoryFormatError as exc:
            if not repair:
                raise
            log.warning("%s: the manifest cannot be read (%s); rebuilding it from the files", self.place.label, exc)
            head = self.store.get_or_none(self.manifest_key)
            manifest, etag, files, done = Manifest(version=1), (head.etag if head else None), {}, None
        completion = self.complete_pending(manifest, lease, done=done)
        undone = self._resolve_legacy(manifest, etag, lease) if manifest.version < 3 or repair else set()
        txn = PlaceTxn(self, manifest, etag, lease)
        txn.known_etags = known
        txn.known_texts = texts
        txn.seed_reads({f: obj for f, obj in files.items() if f not in undone})  # undone: read after the undo
        if completion is not None:
            txn.seed_reads(completion.objects)  # what the completed files hold now
        yield txn
        if txn.staged and not txn.aborted:
            txn.commit()

    def _known_files(self, manifest: Manifest, etag: str | None) -> dict[str, str]:
        """The file etags this pod knows under the head just read (``heads.py``): when that head
        is the very one this pod committed (same etag, same commit id), nobody committed since, so
        the files it wrote or read under it are still at those versions — an overwrite needs no
        GET for its condition. Only where the store enforces conditional writes (a file written
        meanwhile without the lock fails its If-Match and is looked at then)."""
        if not etag or not self.store.supports_conditional_put:
            return {}
        got = heads.recall(self.store, self.place.prefix, etag)
        return got[1] if got is not None and got[0].txn == manifest.txn else {}

    def _recall_head(self, lease: Lease
                     ) -> tuple[tuple[str, str] | None, tuple[Manifest, dict[str, str], dict[str, bytes]] | None]:
        """Where the store enforces conditional writes: the lock's done marker (commit id, head
        etag), and this pod's copy of the head it names with the file etags known under it
        (``heads.py``) when the pod holds it. (None, None) when the lock keeps no marker."""
        last = getattr(lease, "last_done", None)
        if last is None or not self.store.supports_conditional_put:
            return None, None
        marker = last()
        if marker is None:
            return ("", ""), None  # asked: the lock has none (no second look in ``_load``)
        got = heads.recall_with_texts(self.store, self.place.prefix, marker[1]) if marker[1] else None
        if got is None or got[0].txn != marker[0]:
            return marker, None
        return marker, got

    def _load(self, prefetch: tuple[str, ...], lease: Lease, *, marker: tuple[str, str] | None = None
              ) -> tuple[Manifest, str | None, dict[str, StoredObject | None], str | None]:
        """The manifest, the ``prefetch`` files and the lock's done marker (``redo.py``; unless the
        caller read it: ``marker``), read concurrently when an executor is given. Returns the
        marker's commit id."""
        names = [validate_filename(f) for f in prefetch]
        last = None if marker is not None or not lease.fence else getattr(lease, "last_done", None)
        known = marker[0] or None if isinstance(marker, tuple) else None
        if self.executor is not None:
            # wrap_context: the reads belong to the caller's trace (one copied context per task)
            marker_future = self.executor.submit(wrap_context(last)) if last is not None else None
            file_futures = {n: self.executor.submit(wrap_context(self.store.get_or_none), self.place.key(n))
                            for n in names}
            manifest, etag = self.load_manifest()
            if marker_future is not None:
                got = marker_future.result()
                known = got[0] if got else None
            return manifest, etag, {n: f.result() for n, f in file_futures.items()}, known
        manifest, etag = self.load_manifest()
        files = {n: self.store.get_or_none(self.place.key(n)) for n in names}
        if last is not None:
            got = last()
            known = got[0] if got else None
        return manifest, etag, files, known

    def complete_pending(self, manifest: Manifest, lease: Lease, *, done: str | None = None
                         ) -> redos.Completion | None:
        """Complete the redo record of ``manifest``'s head unless it is known done (this pod
        finished it, or the lock's done marker names it); None when there was nothing to do."""
        redo = manifest.redo
        if redo is None or redo.empty:
            return None
        prefix = self.place.prefix
        if done == redo.txid or redos.known_done(self.store, prefix, redo.txid):
            return None
        completion = redos.complete(self.store, prefix, redo, executor=self.executor, check=lease.check,
                                    label=self.place.label, running=not lease.exclusive,
                                    load_head=lambda: self.load_manifest()[0])
        redos.note_done(self.store, prefix, redo.txid)
        return completion

    def _resolve_legacy(self, manifest: Manifest, etag: str | None, lease: Lease) -> set[str]:
        """A head written by an earlier release (version < 3) may have left an undo record
        (``.intent.json``, ``intent.py``): resolve it as that release would have, then remove it.
        Returns the files it put back."""
        pending = intents.load(self)
        if pending is None:
            return set()
        lease.check()
        undone = intents.resolve(self, pending, manifest.txn, etag, exclusive=lease.exclusive, fence=lease.fence,
                                 min_age=2 * self.limits.lock_ttl_seconds + self.limits.lock_wait_seconds)
        if pending.txid == manifest.txn:  # history: that commit happened
            with contextlib.suppress(StorageError):
                self.store.delete(self.intent_key)
        return {w.file for w in pending.writes} if undone else set()

    def save(self, file: str, content: str, *, expect: str | None = None,
             origin: str = kept.ASSISTANT) -> SaveResult:
        """Write a memory file (create or overwrite) and its index entry, atomically as a unit.

        ``expect``: None writes unconditionally; ``ABSENT`` only creates (PreconditionFailed when
        the file exists); an etag only overwrites that version (PreconditionFailed when the file
        changed or is gone) — checked under the place lock, so two editors cannot both win.
        With Redis locks a save that has to wait hands its change to the lock's holder (group
        commit, ``group.py``); the answer is the same as if it had run alone.

        The text an overwrite replaces is kept as an earlier version (``keep.keep_version``) in
        the same commit. ``origin``: who saves — ``assistant`` (the tools), or ``person``, ``api``,
        ``restore``…, recorded as the file's provenance (``keep.record_origin``).
        """
        file = validate_filename(file)
        self.check_content(content)  # refuse bad content before waiting for the lock
        handoff = self._handoff() if origin == kept.ASSISTANT else None  # a hand-over carries no origin
        if handoff is None:
            return self._redo_on_conflict(lambda: self._save_once(file, content, expect, origin=origin))
        return self._save_grouped(handoff, file, content, expect)

    def _handoff(self) -> group.Handoff | None:
        if self.limits.group_commit_max <= 0 or not isinstance(self.locker, RedisLocker):
            return None
        return group.Handoff(self.locker, self.place.lock_name(), self.limits.group_commit_max)

    def _save_grouped(self, handoff: group.Handoff, file: str, content: str, expect: str | None) -> SaveResult:
        proposal = handoff.new(file, content, expect)
        posted: list[group.Proposal] = []  # the proposal as posted (with our queue token), once it is
        try:
            return self._save_handed(handoff, proposal, posted)
        except REDIS_ERRORS as exc:
            # Redis failed mid-way: whether a holder took the proposal (or our commit landed) is unknown. Redo the save
            # under the lock (local while Redis is down); a file already holding exactly this text
            # (the holder committed it) is reported saved without a second write.
            log.info("group commit on %s interrupted (%s); saving alone", self.place.label, exc)
            if posted:
                with contextlib.suppress(*REDIS_ERRORS):
                    handoff.withdraw(posted[-1])
            # redo=True even when nothing was posted: the error may have come after our own commit
            return self._redo_on_conflict(lambda: self._save_once(file, content, expect, redo=True))

    def _await_answer(self, handoff: group.Handoff, proposal: group.Proposal) -> SaveResult:
        """Our wait for the lock ran out, but a holder took our proposal: its answer arrives before
        its lock is released (within a lease); none means that holder stopped — the outcome is
        unknown until the next holder has completed that holder's commit."""
        raw = handoff.locker.client.blpop([handoff.answer_key(proposal.id)], self.limits.lock_ttl_seconds)
        answer = group.Answer.from_bytes(raw[1]) if raw else None
        if answer is not None and answer.status == group.OK and answer.entry is not None:
            return SaveResult(proposal.file, answer.created, answer.entry, answer.index_warning)
        if answer is not None and answer.status == group.ALONE:
            raise LockTimeout(f"{proposal.file} was not saved: the place stayed busy past the lock wait; try again")
        raise OutcomeUnknown((answer.message if answer is not None else "") or
                             "the save was handed to another writer that did not confirm it; it may or may not "
                             "have taken effect — read the file back before relying on it")

    def _save_handed(self, handoff: group.Handoff, proposal: group.Proposal,
                     posted: list[group.Proposal]) -> SaveResult:
        file, content, expect = proposal.file, proposal.content, proposal.expect

        def propose(token: str) -> str:
            nonlocal proposal
            proposal = dataclasses.replace(proposal, token=token)
            posted.append(proposal)  # before the request: a post whose answer is lost may still have landed
            return handoff.post(proposal)

        with contextlib.ExitStack() as stack:
            try:
                lease = stack.enter_context(self.locker.hold_or_answer(  # type: ignore[attr-defined]
                    self.place.lock_name(), propose))
            except LockTimeout as exc:  # our wait ran out: nothing of ours was written ...
                if isinstance(exc, LeaseLost) or not posted or handoff.withdraw(proposal):
                    raise
                return self._await_answer(handoff, proposal)  # ... unless a holder has our save
            answer: group.Answer | None = None
            if lease is None:
                answer = handoff.answer_of(proposal)
            elif posted and not handoff.withdraw(proposal):  # a holder took it: it answers before releasing
                answer = handoff.answer_of(proposal)
                if answer is None:  # ... unless it stopped: its commit is undone or done; redo it here
                    return self._redo_on_conflict(lambda: self._save_once(file, content, expect, lease, redo=True))
            if answer is None or (answer.status == group.ALONE and lease is not None):
                if lease is None:  # answered but the answer is gone (expired): run alone, below
                    answer = group.Answer(group.ALONE)
                else:
                    return self._redo_on_conflict(lambda: self._save_once(file, content, expect, lease,
                                                                          handoff=handoff))
        if answer.status == group.OK and answer.entry is not None:
            return SaveResult(file, answer.created, answer.entry, answer.index_warning)
        if answer.status == group.UNKNOWN:
            raise OutcomeUnknown(answer.message or "the memory store failed in the middle of this change; it may "
                                 "or may not have taken effect")
        return self._redo_on_conflict(lambda: self._save_once(file, content, expect))

    def _save_once(self, file: str, content: str, expect: str | None, lease: Lease | None = None, *,
                   handoff: group.Handoff | None = None, redo: bool = False,
                   origin: str = kept.ASSISTANT) -> SaveResult:
        """One save transaction (in ``lease`` when the caller holds the lock). As a Redis lock's
        holder it takes waiting saves into the same commit (``handoff``). ``redo``: the save's
        proposal was taken by a holder that stopped — a file already holding exactly this text is
        reported saved without a write.

        The file is read beside the head (its version is the write's condition) unless this is
        a plain save of a name the pod's last head of the place did not list: a new memory then
        costs no GET (one request in six on a store without conditional PUT). The commit reads
        the file after all when the head it loads lists it (another pod created it meanwhile)."""
        skip = expect is None and not redo and heads.lists(self.store, self.place.prefix, file) is False
        with self._transaction(() if skip else (file,), lease, blind=not redo) as txn:
            entry = txn.manifest.entries.get(file)
            ours = False
            if redo:
                current = txn.read(file)
                ours = current is not None and current.data == content.encode("utf-8")
                if ours and entry is not None:
                    # created by that commit when its entry was made at that moment (created = updated)
                    return SaveResult(file, entry.created_at == entry.updated_at, entry)
            kept.keep_version(txn, file, origin, content)  # what an overwrite replaces: its history
            txn.write(file, content, expect=expect)
            if origin != kept.ASSISTANT:
                kept.record_origin(txn, origin)
            staged: list[group.Proposal] = []
            if handoff is not None and isinstance(txn.lease, RedisLease):
                try:
                    staged, _ = group.stage(txn, handoff.take(), handoff)
                except REDIS_ERRORS as exc:  # Redis trouble: commit alone; the proposers redo theirs
                    log.info("group commit on %s skipped (%s)", self.place.label, exc)
            if staged and handoff is not None:
                try:
                    out = txn.commit()
                except (MemoryFormatError, PreconditionFailed) as exc:  # maybe caused by a proposal: alone
                    group.answer_failed(handoff, staged, exc)
                    log.info("group commit on %s failed (%s); committing alone", self.place.label, exc)
                    return self._save_once(file, content, expect, txn.lease, origin=origin)
                except BaseException as exc:
                    group.answer_failed(handoff, staged, exc)
                    raise
                group.answer_committed(handoff, staged, {r.file: r for r in out.saved})
        result = _committed(txn).saved[0]
        if handoff is not None and lease is not None and isinstance(txn.lease, RedisLease):
            self._drain(txn.lease, handoff, _committed(txn))
        # our text already there without its entry: the taken proposal's commit is still landing
        # (Redis down, pods not excluding each other) — the file is new as far as this save goes
        return dataclasses.replace(result, created=True) if ours and not result.created else result

    def _drain(self, lease: Lease, handoff: group.Handoff, last: TxnResult) -> None:
        """Still holding the lock after our own commit: commit the saves that were handed over
        meanwhile (or within ``DRAIN_WAIT``), up to ``DRAIN_ROUNDS`` more commits, so a busy place
        is not handed from writer to writer between every batch (each hand-over waits for the next
        writer's poll). Each round starts from the manifest the previous one committed (no GETs:
        this holder wrote it and completed its redo record), and MEMORY.md and the search index are
        brought up to date once, after the last round (a holder that dies between rounds leaves
        them behind until the next commit, which renders them again). Never fails our own,
        committed save; our caller waits for these rounds."""
        manifest, written = last.manifest, {}
        since = manifest.updated_at  # our own commit left the pod's search cache at this version
        try:
            for _ in range(DRAIN_ROUNDS):
                if manifest.head_etag is None or not handoff.wait_pending(DRAIN_WAIT):
                    break
                lease.check()
                txn = PlaceTxn(self, manifest, manifest.head_etag, lease)
                txn.defer_views = True
                staged, _ = group.stage(txn, handoff.take(), handoff)
                if not staged:
                    break
                try:
                    out = txn.commit()
                except BaseException as exc:
                    group.answer_failed(handoff, staged, exc)
                    raise
                group.answer_committed(handoff, staged, {r.file: r for r in out.saved})
                manifest = out.manifest
                written.update(txn.written_memories())
        except Exception as exc:  # the waiters are answered (or redo theirs); ours is done
            log.info("group commit on %s: a further round stopped (%s)", self.place.label, exc)
        if written:
            self.put_index(manifest)
            self.announce(manifest, written, [], False, since)

    def announce(self, manifest: Manifest, written: Mapping[str, MemoryFile], removed: Sequence[str],
                 cleared: bool, since: float | None) -> None:
        """Tell the commit listeners (``port.py``) about a commit of this place; never raises."""
        announce(self, manifest, written, removed, cleared, since)

    def save_memory(self, file: str, memory: MemoryFile) -> SaveResult:
        return self.save(file, memory.render())

    def save_many(self, items: list[tuple[str, str]]) -> list[SaveResult]:
        """Write many memory files with ONE index update (imports, snapshots, seeding).

        Everything is validated before the first write; the index update (the head, carrying the
        redo record) is the commit point, so the place is either fully updated (the files follow,
        completed by the next writer if this one stops) or unchanged.
        """
        checked = [(validate_filename(f), c) for f, c in items]
        for _, content in checked:
            self.check_content(content)
        if len({f for f, _ in checked}) != len(checked):
            raise MemoryFormatError("the same file name appears twice in one batch")
        with self.transaction() as txn:
            for file, content in checked:
                txn.write(file, content)
        return _committed(txn).saved

    def replace_chunk(self, file: str, old: str, new: str, *, replace_all: bool = False,
                      origin: str = kept.ASSISTANT) -> SaveResult:
        """Replace an exact chunk of a memory file (must match once unless ``replace_all``); the
        text it replaces is kept as an earlier version (``origin`` as in ``save``)."""
        file = validate_filename(file)
        if not old:
            raise MemoryFormatError("old_chunk must not be empty; use save_file to rewrite a whole file")
        return self._redo_on_conflict(lambda: self._replace_once(file, old, new, replace_all, origin))

    def _replace_once(self, file: str, old: str, new: str, replace_all: bool, origin: str) -> SaveResult:
        with self.transaction(prefetch=(file,)) as txn:
            current_obj = txn.read(file)
            if current_obj is None:
                raise ObjectNotFound(f"no object at {self.place.key(file)}")
            try:
                current = current_obj.data.decode("utf-8")
            except UnicodeDecodeError as exc:  # a replace would silently turn those bytes into U+FFFD
                raise MemoryFormatError(
                    f"{file} holds bytes that are not valid UTF-8 (at byte {exc.start}), so a chunk replace "
                    "would corrupt them; read_file it and save_file the whole corrected text instead") from None
            count = current.count(old)
            if count == 0:
                raise MemoryFormatError(
                    f"the text to replace was not found in {file}; read_file it and copy the exact text"
                )
            if count > 1 and not replace_all:
                raise MemoryFormatError(
                    f"the text to replace occurs {count} times in {file}; include more surrounding text "
                    "so it matches exactly once"
                )
            text = current.replace(old, new)
            kept.keep_version(txn, file, origin, text)  # read above: the copy costs one PUT
            txn.write(file, text)
            if origin != kept.ASSISTANT:
                kept.record_origin(txn, origin)
        return _committed(txn).saved[0]

    def _redo_on_conflict(self, once: Callable[[], SaveResult]) -> SaveResult:
        """Run ``once`` (one transaction) again on a retryable write conflict — another pod wrote the
        file while Redis was down and the pods could not exclude each other — with jittered
        back-off, within ``lock_wait_seconds``. Redone from a fresh read, so nothing is lost."""
        deadline = time.monotonic() + self.limits.lock_wait_seconds
        pause = 0.01
        while True:
            try:
                return once()
            except WriteConflict as exc:
                if not exc.retryable or time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause * (0.5 + random.random()))
                pause = min(pause * 2, 0.5)

    def delete(self, file: str, *, origin: str = kept.ASSISTANT) -> bool:
        """Remove a memory file and its index entry, keeping it in the trash; False when it did not exist."""
        return self.remove(file, origin=origin) is not None

    def remove(self, file: str, *, origin: str = kept.ASSISTANT) -> TxnResult | None:
        """``delete`` that returns what the commit did (None: the file did not exist), so a caller
        can say whether MEMORY.md was rewritten (``TxnResult.index_warning``). The file goes to the
        place's trash in the same commit (``keep.keep_removed``: restorable for
        ``limits.trash_days``); its text is read beside the head, as its existence was before."""
        file = validate_filename(file)
        with self.transaction(prefetch=(file,)) as txn:
            if txn.read(file) is None and file not in txn.manifest.entries:
                return None
            kept.keep_removed(txn, [file], origin)
            txn.delete(file)
        return _committed(txn)

    def update_meta(self, mutate: Callable[[Manifest], None]) -> Manifest:
        """Change the manifest's ``meta`` (or entries) under the place lock."""
        with self.transaction() as txn:
            txn.mutate(mutate)
        return _committed(txn).manifest

    def clear(self, *, purge: bool = False, origin: str = "person") -> int:
        """Forget everything in this place; returns how many memory files it removed.

        By default restorably: the memory files go into one trash batch (``clear_to_trash``,
        kept for ``limits.trash_days``), the index and the place's state start over, the trash and
        the history stay. ``purge``: delete every object of the place for good — memory files,
        manifest, MEMORY.md, state, trash and history."""
        if not purge:
            return self.clear_to_trash(origin)[1]
        with self.locker.hold(self.place.lock_name()):
            keys = [info.key for info in self.store.list(self.place.prefix)]
            failures = self.store.delete_many(keys)
            if failures:
                raise StorageError(f"{len(failures)} objects could not be deleted, e.g. {failures[0].key}: "
                                   f"{failures[0].message}")
            return sum(1 for k in keys if k.endswith(".md") and not k.endswith("/" + INDEX_FILE))

    def clear_to_trash(self, origin: str = "person") -> tuple[kept.TrashBatch | None, int]:
        """Forget everything in this place, restorably: every memory file (those the manifest lists
        and any other ``.md`` object below the place) goes into ONE trash batch and leaves the place
        in one commit; the manifest's meta and the place's state files (the snapshot record, auto
        memory's watermarks) go too, so the place starts over as a new one. The trash and the
        history stay. Returns the batch and how many memory files were removed."""
        prefix = self.place.prefix
        stray: set[str] = set()
        states: set[str] = set()
        for info in self.store.list(prefix):
            rel = info.key[len(prefix):]
            if kept.is_kept(rel) or rel == INDEX_FILE:
                continue
            if is_state_file(rel):
                states.add(rel)
            elif rel.endswith(".md"):
                try:
                    stray.add(validate_filename(rel))
                except (InvalidName, MemoryFormatError):  # not a name a memory can have: left alone
                    continue
        with self.transaction() as txn:
            names = sorted(stray | set(txn.manifest.entries))
            txn.prefetch(names)
            present = [n for n in names if n in txn.manifest.entries or txn.read(n) is not None]
            batch = kept.keep_removed(txn, present, origin)
            for name in present:
                txn.delete(name)
            if present or txn.manifest.meta:
                txn.clear_entries()
                txn.mutate(lambda m: m.meta.clear())
            for name in states:
                txn.delete_state(name)
        kept.purge_expired(self)
        return batch, len(present)

    def reindex(self) -> Manifest:
        """Rebuild the manifest and MEMORY.md from the files themselves (LIST; on demand only).

        A file that cannot be indexed (bad frontmatter, unreadable) is skipped and reported in
        ``last_skipped``; it never fails the place. An object whose name is not NFC-normalised
        (copied from a Mac) is moved to its NFC name, the only name the tools can address. The
        search index is rebuilt from the same reads (by the listeners), still under the place lock."""
        skipped: list[tuple[str, str]] = []
        with self._transaction(repair=True) as txn:
            old = txn.manifest
            fresh: dict[str, ManifestEntry] = {}
            memories: dict[str, MemoryFile] = {}
            bases: list[str] = []
            leftovers: list[str] = []  # redo texts and undo records of commits long resolved
            for info in self.store.list(self.place.prefix):
                rel = self.place.filename_of(info.key)
                if stored.is_base_name(rel):
                    bases.append(rel)
                    continue
                if redos.is_object_name(rel) or rel == INTENT_FILE:
                    leftovers.append(info.key)
                    continue
                if rel == INDEX_FILE or any(p.startswith(".") for p in rel.split("/")):
                    continue  # the index, the manifest, state files, redo objects, undo records
                try:
                    name = validate_filename(unicodedata.normalize("NFC", rel))
                    obj = self.store.get(info.key)
                    memory = parse_memory(obj.data.decode("utf-8", errors="replace"))
                except ObjectNotFound as exc:  # deleted since the LIST
                    log.info("reindex %s: %s is gone (%s)", self.place.label, rel, exc)
                    continue
                except StorageError:
                    raise  # the store failing: the place keeps its index as it was
                except Exception as exc:  # anything about the file itself: skip and report it
                    skipped.append((rel, str(exc).splitlines()[0]))
                    log.warning("reindex %s: skipping %s (%s)", self.place.label, rel, skipped[-1][1])
                    continue
                if name != rel:
                    if name in fresh or self.store.exists(self.place.key(name)):
                        skipped.append((rel, f"its NFC name {name} exists too"))
                        continue
                    txn.write(name, obj.data.decode("utf-8", errors="replace"))
                    txn.discard_key(info.key)  # removed after the NFC copy is committed
                prior = old.entries.get(name)
                memories[name] = memory
                fresh[name] = ManifestEntry.from_memory(
                    name, memory, len(obj.data), created_at=prior.created_at if prior else info.last_modified,
                    now=info.last_modified)
            txn.mutate(lambda m: (m.entries.clear(), m.entries.update(fresh)))
            txn.compact()
            manifest = txn.commit().manifest
            for listener in self.listeners:  # still under the place lock
                listener.rebuilt(self, manifest, memories)
            keep = {stored.base_name(g) for g in (manifest.base, manifest.prev_base) if g}
            for name in bases:  # left by commits that failed after writing their base
                if name not in keep:
                    self._drop_base(name[len(".manifest."):-len(".json")])
            for failure in self.store.delete_many(leftovers) if leftovers else []:
                log.info("reindex %s: %s not removed (%s)", self.place.label, failure.key, failure.message)
        self.last_skipped = skipped
        return manifest

    # -- internals ------------------------------------------------------------------------
    def commit_manifest(self, mutate: Callable[[Manifest], object],
                        start: tuple[Manifest, str | None] | None = None, lease: Lease = LOCAL_LEASE, *,
                        compact: bool = False, changes: tuple[list[str], list[str]] | None = None,
                        refresh: Callable[[Manifest], None] | None = None, txid: str = "") -> Manifest:
        """Read-modify-write the manifest's head (conditional PUT; ``stored.py``): the commit point.
        Nothing else is written before it but objects nothing reads until the head names them (a
        new base when it compacts, the redo texts of a big batch), so a head that does not land
        leaves the place as it was.

        Only ``PlaceTxn.commit`` calls this (it holds the place lock) and then writes the files and
        views. ``start`` is the manifest (and its etag) read under that lock, saving one GET; on a
        conflict (another pod writing while locks are degraded, Redis down) it is read again,
        ``refresh`` brings the transaction up to date with it (completing that pod's commit first),
        and the PUT is retried with jittered back-off for up to ``lock_wait_seconds``, so an outage
        slows saves instead of failing them. The head carries only the entries changed since the
        place's base — ``changes`` (files written, files removed) when the caller knows them, else
        found by identity (entries are replaced, never changed in place) — so a save PUTs
        O(changed) manifest bytes.

        ``txid``: the commit's id (``mutate`` writes it into the head). An unclear answer to the
        head PUT — a 412 (it may be the retry of a first attempt that landed, its answer lost), or
        a timeout / dropped connection after sending — is resolved by reading the head: a head
        holding ``txid`` (``Manifest.holds_commit``) means this commit landed and is returned as
        done, never redone. After a timeout, where the store enforces conditions, a head still at
        the version we PUT against is PUT again with the same condition: of the lost attempt and
        the new one exactly one can land, so the outcome becomes certain.
        """
        deadline = time.monotonic() + self.limits.lock_wait_seconds
        pause = 0.01
        attempt = 0
        prefix = self.place.prefix
        redo_object: str | None = None  # the redo texts' object, once written (same name on every try)
        again: tuple[Manifest, str | None] | None = None  # the head read back after a refused PUT
        while True:
            attempt += 1
            if start is not None:
                manifest, etag = start
                start = None
            else:
                manifest, etag = again if again is not None else self.load_manifest()
                again = None
                if refresh is not None:
                    refresh(manifest)
            if changes is not None:  # the caller knows what it changes: O(changed)
                written, removed = changes
                gone = [f for f in removed if f in manifest.entries]
                mutate(manifest)
                entries = manifest.entries
                manifest.note_changes({f: entries[f] for f in written if f in entries},
                                      [f for f in gone if f not in entries])
            else:  # opaque changes: found by identity (entries are replaced, never changed in place)
                before = dict(manifest.entries)
                mutate(manifest)
                entries = manifest.entries
                manifest.note_changes({f: e for f, e in entries.items() if before.get(f) is not e},
                                      [f for f in before if f not in entries])
            manifest.updated_at = time.time()
            plan = stored.plan(manifest, compact=compact)
            lease.check()
            self._put_new_objects(plan, redo_object)
            if plan.redo_object is not None:
                redo_object = plan.redo_object[0]
            try:
                landed = self._put_head(plan.head, etag, txid, deadline, lease)
                if isinstance(landed, str):
                    manifest.head_etag = landed
                else:  # our own head, read back after an unclear answer: the commit is done
                    manifest = landed
                break
            except _HeadMoved as exc:  # someone else's head landed between our read and write: again
                again = exc.head
                if plan.base is not None:
                    self._drop_base(plan.base[0])
                if attempt >= COMMIT_ATTEMPTS and time.monotonic() + pause > deadline:
                    if redo_object is not None:
                        redos.drop_object(self.store, prefix, redo_object)
                    raise StorageError(f"the index of {self.place.label} kept changing under us for "
                                       f"{self.limits.lock_wait_seconds:g}s; try again") from None
                time.sleep(pause * (0.5 + random.random()))
                pause = min(pause * 2, 0.5)
            except StorageError as exc:  # a head that surely did not land takes its new objects with it
                if not getattr(exc, "maybe_applied", True):
                    if plan.base is not None:
                        self._drop_base(plan.base[0])
                    if redo_object is not None:
                        redos.drop_object(self.store, prefix, redo_object)
                raise
        manifest.version = MANIFEST_VERSION  # as written (a loaded older head is now this one)
        if plan.base is not None:
            stored.adopt(self.store, prefix, manifest)
        if plan.retired is not None:
            self._drop_base(plan.retired)
        return manifest

    def _put_head(self, data: bytes, etag: str | None, txid: str, deadline: float, lease: Lease
                  ) -> str | Manifest:
        """PUT the head conditional on ``etag`` (create-only when None): its new etag, or — when the
        answer was unclear and the head read back holds ``txid`` — that head. Raises ``_HeadMoved``
        when another commit's head is there instead (nothing of ours landed or ever can: our
        condition names a version that is gone). A timeout where the head is still at ``etag`` is
        retried with the same condition (exactly one of the attempts can land), until ``deadline``;
        then ``OutcomeUnknown``."""
        pause = 0.05
        while True:
            try:
                if etag is None:
                    return self.store.put_if_absent(self.manifest_key, data, content_type=stored.JSON)
                return self.store.put_if_match(self.manifest_key, data, etag, content_type=stored.JSON)
            except PreconditionFailed as exc:  # a 412 may be the retry of our own landed attempt
                again = self._read_back(exc)
                if again[0].holds_commit(txid):
                    log.warning("%s: the index write was refused (%s) because our own earlier attempt had "
                                "landed; the commit is done", self.place.label, exc)
                    return again[0]
                raise _HeadMoved(again) from None
            except StorageUnavailable as exc:
                if not (exc.maybe_applied and txid and self.store.supports_conditional_put):
                    raise
                again = self._read_back(exc)
                if again[0].holds_commit(txid):
                    log.warning("%s: the index write reported %s but had been stored", self.place.label, exc)
                    return again[0]
                if again[1] != etag:
                    raise _HeadMoved(again) from None
                if time.monotonic() + pause > deadline:
                    raise OutcomeUnknown(f"the memory store did not answer the index write of "
                                         f"{self.place.label} ({exc}); it may still take effect") from exc
                log.info("%s: the index write reported %s and the head is unchanged; writing it again",
                         self.place.label, exc)
                time.sleep(pause * (0.5 + random.random()))
                pause = min(pause * 2, 1.0)
                try:
                    lease.check()
                except LeaseLost as lost:  # our first attempt may still land: not "failed"
                    raise OutcomeUnknown(f"the lock of {self.place.label} was lost while its index write was "
                                         f"unanswered ({exc}); the change may or may not have taken effect") from lost

    def _read_back(self, cause: StorageError) -> tuple[Manifest, str | None]:
        """The head after an unclear answer to its PUT; ``OutcomeUnknown`` when it cannot be read
        (our head may be there: neither "done" nor "failed" would be true)."""
        try:
            return self.load_manifest()
        except StorageError as exc:
            raise OutcomeUnknown(f"the memory store failed while writing the index of {self.place.label} "
                                 f"({cause}) and it cannot be read back ({exc}); the change may or may not "
                                 "have taken effect") from exc

    def _put_new_objects(self, plan: stored.Plan, redo_written: str | None) -> None:
        """The objects a head will name, before it: a new base, the redo texts (side by side)."""
        puts: list[tuple[str, bytes]] = []
        if plan.base is not None:
            puts.append((self.place.prefix + stored.base_name(plan.base[0]), plan.base[1]))
        if plan.redo_object is not None and plan.redo_object[0] != redo_written:
            puts.append((self.place.prefix + plan.redo_object[0], plan.redo_object[1]))
        if self.executor is not None and len(puts) > 1:
            for future in [self.executor.submit(wrap_context(self.store.put), k, d, content_type=stored.JSON)
                           for k, d in puts]:
                future.result()
        else:
            for key, data in puts:
                self.store.put(key, data, content_type=stored.JSON)

    def put_index(self, manifest: Manifest) -> str | None:
        """PUT MEMORY.md rendered from ``manifest``. A failure is logged and returned (what to tell
        the caller, who must not say "MEMORY.md updated"): the manifest is the index of record and
        the next commit renders MEMORY.md again."""
        try:
            self.store.put(self.index_key, render_index(manifest).encode("utf-8"),
                           content_type="text/markdown; charset=utf-8")
        except StorageError as exc:
            log.warning("MEMORY.md of %s not refreshed (%s); the manifest is current", self.place.label, exc)
            return f"MEMORY.md could not be rewritten ({exc})"
        return None

    def _drop_base(self, gen: str) -> None:
        """Remove a base no head names (best effort: ``reindex`` removes any left over)."""
        try:
            stored.remove_base(self.store, self.place.prefix, gen)
        except StorageError as exc:
            log.info("old manifest base %s of %s not removed (%s)", gen, self.place.label, exc)


class _HeadMoved(PreconditionFailed):
    """Another commit's head is where ours was to go (read back: ``head``)."""

    def __init__(self, head: tuple[Manifest, str | None]) -> None:
        super().__init__("the index changed since it was read")
        self.head = head


def _committed(txn: PlaceTxn) -> TxnResult:
    assert txn.committed is not None, "the transaction staged nothing"
    return txn.committed


__all__ = ["ABSENT", "COMMIT_ATTEMPTS", "MANIFEST_FILE", "MemoryDir", "PlaceTxn", "ReadResult", "SaveResult",
           "TxnResult"]
