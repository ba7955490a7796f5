"""Exception types shared by the layers.

Why our own types: callers above ``storage`` must not know whether COS or a local
directory answered, so SDK and OS errors are mapped here by meaning (missing, conflict,
unreachable) and every message is written for a person.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the setting."""


class HarnessMemoryError(Exception):
    """Base of every error raised by harness-memory."""


class StorageError(HarnessMemoryError):
    """The object store failed in a way not covered by a narrower type."""


class ObjectNotFound(StorageError):
    """The key does not exist."""


class PreconditionFailed(StorageError):
    """A conditional write lost: the object exists (create-only) or changed (if-match)."""


class StorageUnavailable(StorageError):
    """The store could not be reached or timed out; the operation may be retried later.

    ``maybe_applied``: the request may have reached the store (a timeout or a connection lost
    after sending), so a write may still take effect — as opposed to a refused connection."""

    def __init__(self, message: str = "", *, maybe_applied: bool = False) -> None:
        super().__init__(message)
        self.maybe_applied = maybe_applied


class AccessDenied(StorageError):
    """The store refused the credentials or the operation."""


class InvalidName(HarnessMemoryError, ValueError):
    """A user id, agent type, project or file name is not allowed; the message says why."""


class MemoryFormatError(HarnessMemoryError, ValueError):
    """A memory file's frontmatter or content is malformed; the message says what to fix."""


class LockTimeout(HarnessMemoryError):
    """A place lock could not be taken in time (another writer holds it)."""


class ModelNotConfigured(HarnessMemoryError):
    """No model id / base URL is configured; the message names the settings to set."""


class LeaseLost(LockTimeout):
    """A writer's place lock expired (or was taken over) before its commit point; it stopped
    before writing anything (a lease lost after the commit point is an ``OutcomeUnknown``: the
    next holder completes the commit)."""


class OutcomeUnknown(StorageError):
    """The store failed in the middle of one commit and the outcome could not be checked: the
    change may or may not have taken effect. If its head (the commit point, carrying the redo
    record) landed, the next writer (or ``reindex``) completes it, so readers never keep a
    half-applied change."""


class WriteConflict(PreconditionFailed):
    """A file's conditional write was refused: someone else wrote it after this transaction read
    it. ``retryable`` while the writer still holds its lease (the other write came from a pod
    without the lock, e.g. while Redis is down): the operation is then redone on the new version."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
