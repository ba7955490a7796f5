"""Group commit: saves waiting for a place's lock hand their change to the holder, which commits
them with its own in one transaction (one manifest head carrying every text, one MEMORY.md).

Why: a place's commits are serial under its lock, so a busy place (many pods saving at once)
was bounded by one commit per lock hold (~45–65 saves/s). Now a save that finds the lock taken
posts a **proposal** (file, text, expectation) on a Redis list beside the lock (same hash tag)
and keeps its place in the lock queue; the next holder that is itself a save takes up to
``limits.group_commit_max`` proposals, stages the ones it can (a proposal that cannot join —
bad text, a stale expectation, a name already in the batch — is answered "alone" or put back),
commits, and **answers** each proposer on its own list before releasing the lock. A proposer
wakes on its answer (``RedisLocker.hold_or_answer``) and leaves the queue; a save reported done
was committed, and one answered "alone" was not and runs by itself, so the usual guarantees
(failed means unchanged, an unknown outcome said so) hold for every proposer.

A holder that stalls or dies after taking proposals never answers: its proposers reach the head
of the queue, find their proposal gone, and redo the save themselves under the lock, after the
stalled commit was completed from its head's redo record; a file that already holds exactly the proposed
text (the stalled commit did land) is reported done without a write. Redis down: no proposals
(the local lock), saves run one by one as before.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import HarnessMemoryError, MemoryFormatError, OutcomeUnknown
from ..locks import RedisLocker
from .index import ManifestEntry, entry_from_dict

if TYPE_CHECKING:
    from .txn import PlaceTxn, SaveResult

log = logging.getLogger(__name__)

#: How long an answer waits to be read (a proposer reads it within a lock-queue poll).
ANSWER_TTL_MS = 120_000
OK, ALONE, UNKNOWN = "ok", "alone", "unknown"


@dataclass(frozen=True, slots=True)
class Proposal:
    id: str
    file: str
    content: str
    expect: str | None
    #: The proposer's place in the lock queue (the holder takes it out when it answers).
    token: str = ""

    def to_bytes(self) -> bytes:
        return json.dumps({"id": self.id, "file": self.file, "content": self.content, "expect": self.expect,
                           "token": self.token}, ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_bytes(cls, raw: bytes) -> Proposal:
        data = json.loads(raw.decode("utf-8"))
        return cls(str(data["id"]), str(data["file"]), str(data["content"]),
                   None if data.get("expect") is None else str(data["expect"]), str(data.get("token") or ""))


@dataclass(frozen=True, slots=True)
class Answer:
    status: str  # OK / ALONE / UNKNOWN
    created: bool = False
    entry: ManifestEntry | None = None
    message: str = ""
    #: Why the holder's commit did not rewrite MEMORY.md (None: it did): the proposer's tool says
    #: "MEMORY.md updated." only when it was, as if it had saved alone.
    index_warning: str | None = None

    def to_bytes(self) -> bytes:
        data: dict[str, Any] = {"status": self.status, "created": self.created, "message": self.message}
        if self.entry is not None:
            data["entry"] = self.entry.to_dict()
        if self.index_warning is not None:
            data["index_warning"] = self.index_warning
        return json.dumps(data, ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_bytes(cls, raw: bytes) -> Answer:
        data = json.loads(raw.decode("utf-8"))
        entry = entry_from_dict(data["entry"]) if data.get("entry") else None
        warning = data.get("index_warning")
        return cls(str(data["status"]), bool(data.get("created")), entry, str(data.get("message") or ""),
                   None if warning is None else str(warning))


class Handoff:
    """The proposals and answers of one place's lock (``name``) on ``locker``'s Redis."""

    def __init__(self, locker: RedisLocker, name: str, limit: int) -> None:
        self.locker = locker
        self.name = name
        self.limit = limit
        self.list_key, self._answer_prefix = locker.handoff_keys(name)
        _, self._queue_key, self._seen_key, _ = locker.keys(name)
        self._wake_prefix = locker.wake_prefix(name)

    def answer_key(self, proposal_id: str) -> str:
        return self._answer_prefix + proposal_id

    @staticmethod
    def new(file: str, content: str, expect: str | None) -> Proposal:
        return Proposal(secrets.token_hex(10), file, content, expect)

    # -- proposer ---------------------------------------------------------------------------
    def post(self, proposal: Proposal) -> str:
        """Put ``proposal`` on the list; the key its answer will arrive on. Once posted, the
        proposal is identified by its bytes (``withdraw``): post the one you will withdraw."""
        client = self.locker.client
        pipe = client.pipeline(transaction=False)
        pipe.rpush(self.list_key, proposal.to_bytes())
        pipe.pexpire(self.list_key, ANSWER_TTL_MS)
        pipe.execute()
        return self.answer_key(proposal.id)

    def withdraw(self, proposal: Proposal) -> bool:
        """Take ``proposal`` back; False when a holder had taken it already."""
        return bool(self.locker.client.lrem(self.list_key, 1, proposal.to_bytes()))

    def answer_of(self, proposal: Proposal) -> Answer | None:
        raw = self.locker.client.lpop(self.answer_key(proposal.id))
        return Answer.from_bytes(raw) if raw is not None else None

    # -- holder -----------------------------------------------------------------------------
    def take(self) -> list[Proposal]:
        """Up to ``limit`` proposals, oldest first (an unreadable one is dropped and logged)."""
        raw = self.locker.client.lpop(self.list_key, self.limit) or []
        out = []
        for item in raw:
            try:
                out.append(Proposal.from_bytes(item))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("group commit on %s: dropped an unreadable proposal (%s)", self.name, exc)
        return out

    def give_back(self, proposals: list[Proposal]) -> None:
        """Return proposals to the front of the list (for the next holder), in their order."""
        if proposals:
            self.locker.client.lpush(self.list_key, *[p.to_bytes() for p in reversed(proposals)])

    def answer(self, answers: list[tuple[Proposal, Answer]]) -> None:
        if not answers:
            return
        pipe = self.locker.client.pipeline(transaction=False)
        for proposal, answer in answers:
            key = self.answer_key(proposal.id)
            pipe.rpush(key, answer.to_bytes())
            pipe.pexpire(key, ANSWER_TTL_MS)
            if proposal.token:  # answered: no longer waiting for the lock; wake it up
                pipe.zrem(self._queue_key, proposal.token)
                pipe.zrem(self._seen_key, proposal.token)
                wake = self._wake_prefix + proposal.token
                pipe.rpush(wake, b"1")
                pipe.pexpire(wake, 10_000)
        pipe.execute()

    def pending(self) -> int:
        return int(self.locker.client.llen(self.list_key))

    def wait_pending(self, seconds: float) -> bool:
        """Whether a proposal is waiting, looking again every millisecond up to ``seconds`` while
        another writer is queued for the lock (none queued: no save is about to be posted). Polled,
        not a blocking pop: Redis ends a blocked command's timeout only on its ``hz`` tick (100 ms at
        the default 10), far longer than the few milliseconds worth waiting here."""
        client, deadline = self.locker.client, time.monotonic() + seconds
        while True:
            pipe = client.pipeline(transaction=False)
            pipe.llen(self.list_key)
            pipe.zcard(self._queue_key)
            pending, queued = pipe.execute()
            if int(pending) > 0:
                return True
            if int(queued) == 0 or time.monotonic() >= deadline:
                return False
            time.sleep(0.001)

def stage(txn: PlaceTxn, proposals: list[Proposal], handoff: Handoff) -> tuple[list[Proposal], list[Answer]]:
    """Stage the proposals that can join ``txn``'s commit; answer the others "alone" (they run by
    themselves and meet their own error) or give them back (a file already in this batch).
    Returns the staged proposals and the answers sent."""
    from .keep import ASSISTANT, keep_version
    from .txn import ABSENT

    # Only files the manifest lists are read (their text is the undo record and their etag the
    # write condition); a name it does not list is created write-if-absent without a GET — an
    # unlisted object already there makes that write fail, and the batch runs its saves alone.
    listed = txn.manifest.entries
    txn.prefetch([p.file for p in proposals if _valid_name(p.file) and p.file in listed])
    txn.seed_reads({p.file: None for p in proposals if p.file not in listed and not txn.has_read(p.file)
                    and _valid_name(p.file)})
    staged: list[Proposal] = []
    later: list[Proposal] = []
    alone: list[tuple[Proposal, Answer]] = []
    for p in proposals:
        if not _valid_name(p.file):
            alone.append((p, Answer(ALONE)))
            continue
        if txn.has_write(p.file):
            later.append(p)
            continue
        current = txn.read(p.file)
        stale = (p.expect == ABSENT and current is not None) or (
            p.expect not in (None, ABSENT) and (current is None or current.etag != p.expect.strip('"')))
        if stale:
            alone.append((p, Answer(ALONE)))
            continue
        try:
            txn.write(p.file, p.content, expect=p.expect)
        except MemoryFormatError:
            alone.append((p, Answer(ALONE)))
            continue
        keep_version(txn, p.file, ASSISTANT, p.content)  # read above: an overwrite's history, as alone
        staged.append(p)
    handoff.give_back(later)
    handoff.answer(alone)
    return staged, [a for _, a in alone]


def answer_committed(handoff: Handoff, staged: list[Proposal], saved: dict[str, SaveResult]) -> None:
    """Best effort: the commit is done; a proposer that gets no answer redoes its save, which
    finds its text in place and reports it saved."""
    try:
        handoff.answer([(p, Answer(OK, saved[p.file].created, saved[p.file].entry,
                                   index_warning=saved[p.file].index_warning)) for p in staged])
    except Exception as exc:
        log.warning("group commit on %s: could not answer %d proposal(s) (%s)", handoff.name, len(staged), exc)


def answer_failed(handoff: Handoff, staged: list[Proposal], exc: BaseException) -> None:
    """The batch did not commit: "unknown" when its outcome is unknown, else "alone" (nothing of
    theirs changed; they run by themselves). Best effort: a proposer not answered redoes its save."""
    status = UNKNOWN if isinstance(exc, OutcomeUnknown) else ALONE
    try:
        handoff.answer([(p, Answer(status, message=str(exc) if status == UNKNOWN else "")) for p in staged])
    except Exception as err:  # Redis gone too: they find their proposals taken and redo them
        log.warning("group commit on %s: could not answer %d proposal(s) (%s)", handoff.name, len(staged), err)


def _valid_name(file: str) -> bool:
    from ..layout import validate_filename

    try:
        return validate_filename(file) == file
    except HarnessMemoryError:
        return False


__all__ = ["ALONE", "OK", "UNKNOWN", "Answer", "Handoff", "Proposal", "answer_committed", "answer_failed", "stage"]
