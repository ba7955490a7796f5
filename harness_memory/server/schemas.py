"""Request and response models of the HTTP API (they are also its OpenAPI schema).

Why strict models (``extra="forbid"``, bounded strings): a typo in a field name (``contnet``)
must be a 422 that names the field, not a silently empty memory; and the property-based test
drives the API from this schema, so every bound here is a bound the server really enforces.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..control.bundle import Bundle

MAX_MESSAGE_CHARS = 200_000
MAX_CONTENT_CHARS = 1_048_576


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(BaseModel):
    """Every error answer: a message for a person and a stable code for programs."""

    detail: str = Field(description="What went wrong and what to do about it.")
    code: str = Field(description="Stable machine-readable code, e.g. `invalid_name`, `not_found`.")
    problems: list[str] | None = Field(None, description="Every problem found (bundle imports).")


def error_responses(*codes: int) -> dict[int | str, dict[str, object]]:
    """OpenAPI ``responses`` entries: each status answers with an ``ErrorBody``."""
    return {code: {"model": ErrorBody} for code in codes}


#: The errors any memory endpoint may answer (documented once, shared by every route module).
ERRORS = error_responses(400, 401, 403, 404, 409, 412, 413, 422, 503)


# -- memory files -------------------------------------------------------------------------
class FileEntry(BaseModel):
    file: str
    name: str
    description: str
    type: str
    size: int
    created_at: float
    updated_at: float
    extra: dict[str, Any] = Field(default_factory=dict, description="Frontmatter extras kept in the index.")
    last_recalled: float | None = Field(None, description="When recall last put this memory into one of the "
                                        "user's conversations (unix seconds; None: not recalled lately, or not "
                                        "a user's agent memory). Kept in Redis or the serving pod, not the store.")


class PlaceInfo(BaseModel):
    path: str = Field(description="The directory below the `.harness` root, e.g. `users/100/agent-memory/default`.")
    kind: str
    user_id: str | None = None
    agent_type: str | None = None
    project: str | None = None


class FileList(BaseModel):
    place: PlaceInfo
    count: int = Field(description="Files in this answer.")
    files: list[FileEntry]
    matched: int | None = Field(None, description="Files matching `type` / `q` before `offset` / `limit` "
                                "(listing only).")
    types: dict[str, int] | None = Field(None, description="Files per type matching `q` (all types; listing only).")
    total: int | None = Field(None, description="Files in the whole place (listing only).")


class IndexText(BaseModel):
    place: PlaceInfo
    text: str = Field(description="MEMORY.md as the model sees it (capped).")
    truncated: bool
    total_lines: int
    max_lines: int | None = Field(None, description="Lines the model reads (`limits.index_max_lines`).")


class FileContent(BaseModel):
    file: str
    content: str
    etag: str
    size: int
    last_modified: float


class CreateFile(_Strict):
    file: str = Field(min_length=1, max_length=255, description="File name ending in `.md`.")
    content: str = Field(max_length=MAX_CONTENT_CHARS, description="Frontmatter + markdown body.")


class ReplaceFile(_Strict):
    content: str = Field(max_length=MAX_CONTENT_CHARS, description="The whole new file.")


class PatchFile(_Strict):
    old: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="Exact text to replace.")
    new: str = Field(max_length=MAX_CONTENT_CHARS, description="Replacement (may be empty).")
    replace_all: bool = Field(False, description="Replace every occurrence (else `old` must occur once).")


class SavedFile(BaseModel):
    file: str
    created: bool
    entry: FileEntry


class Cleared(BaseModel):
    deleted_files: int
    places: list[str]
    in_trash: bool = Field(True, description="The files are in each place's trash, restorable for `keep_days` "
                           "(`GET …/trash`, `POST …/trash/{id}/restore`); false after `?purge=true`.")
    keep_days: float | None = Field(None, description="How long the trash keeps them (`limits.trash_days`); "
                                    "null when purged.")


class UserPlaces(BaseModel):
    user_id: str
    places: list[PlaceSummary]


class PlaceSummary(BaseModel):
    path: str
    kind: str
    files: int
    bytes: int


# -- export / import ----------------------------------------------------------------------
class ImportPlaceResult(BaseModel):
    """Counted by memory file; a dry run reports exactly what the same import would do."""

    path: str
    created: int = Field(description="Named by the bundle and absent from the place.")
    updated: int = Field(description="Present with other bytes (overwritten).")
    unchanged: int = Field(description="Present with the same bytes.")
    removed: int = Field(description="Present, not in the bundle, deleted by a replacing import.")
    cleared: int = Field(description="The older name of `removed` (the same number).")


class ImportResult(BaseModel):
    """What an import did, or (``dry_run``) would do: the totals and each place's counts."""

    mode: Literal["merge", "replace"]
    dry_run: bool
    written: int = Field(description="created + updated (files that are, or would be, written).")
    created: int
    updated: int
    unchanged: int
    removed: int
    places: list[ImportPlaceResult]


# -- facts --------------------------------------------------------------------------------
class FactIn(_Strict):
    content: str = Field(min_length=1, max_length=400, description="The fact, e.g. 'business trip next week'.")
    category: str = Field("context", max_length=40, description="preference, knowledge, context, behavior, goal "
                          "or correction.")
    confidence: float = Field(1.0, ge=0, le=1, description="How sure (facts a person enters: 1.0).")
    source_error: str | None = Field(None, max_length=300, description="For a correction: the wrong belief.")
    expires: dt.date | None = Field(None, description="The last day the fact holds (a trip, a deadline); "
                                    "without it, time words such as 'next week' set it.")


class FactPatch(_Strict):
    content: str | None = Field(None, min_length=1, max_length=400)
    category: str | None = Field(None, max_length=40)
    confidence: float | None = Field(None, ge=0, le=1)
    source_error: str | None = Field(None, max_length=300)
    expires: dt.date | None = Field(None, description="The last day the fact holds.")


class FactCorrection(_Strict):
    content: str = Field(min_length=1, max_length=400, description="What is true instead, e.g. 'lives in Shanghai'.")


class FactOut(BaseModel):
    id: str
    content: str
    category: str
    confidence: float
    source: str | None = None
    source_error: str | None = None
    created: str | None = None
    updated: str | None = None
    confirmed: str | None = Field(None, description="When the user last said or confirmed it.")
    confirmations: int = Field(1, description="How often the user said or confirmed it.")
    expires: str | None = Field(None, description="The last day a time-bound fact holds.")


class FactsCleared(BaseModel):
    place: str = Field(description="The auto-memory directory whose facts were deleted (its profile is kept).")
    deleted: int = Field(description="How many facts were deleted.")


class FactList(BaseModel):
    place: str = Field(description="The auto-memory directory the facts live in.")
    count: int
    facts: list[FactOut]
    tokens: int | None = Field(None, description="Tokens all these facts take as the assistant is shown them.")
    max_tokens: int | None = Field(None, description="The budget of that block (`auto.max_injection_tokens`); "
                                   "past it the least important facts are left out.")


class MergeRefusalOut(BaseModel):
    content: str = Field(description="The merged text the model proposed (not stored).")
    ids: list[str] = Field(description="The facts it named; each was kept as it was.")
    reason: str = Field(description="merge_unknown_id, merge_id_reused, merge_too_many, merge_correction, "
                                    "merge_manual_fact, merge_edited_meanwhile, merge_loses_source (the merged "
                                    "text does not hold a source) or merge_text_refused (the merged text "
                                    "itself failed the rules).")


class UpdateRecordOut(BaseModel):
    at: str
    session: str
    added: int
    merged: int
    removed: int
    merges_proposed: int
    refused: dict[str, int] = Field(description="Changes the apply rules refused, by reason.")
    merges_refused: list[MergeRefusalOut]


class FactHistory(BaseModel):
    place: str = Field(description="The auto-memory directory the history belongs to.")
    updates: list[UpdateRecordOut] = Field(description="The last automatic updates, oldest first.")


class ProfileBody(_Strict):
    """The user profile: one short summary per section (empty or absent = none)."""

    workContext: str | None = Field(None, max_length=800)
    personalContext: str | None = Field(None, max_length=800)
    topOfMind: str | None = Field(None, max_length=800)
    recentMonths: str | None = Field(None, max_length=800)
    earlierContext: str | None = Field(None, max_length=800)
    longTermBackground: str | None = Field(None, max_length=800)


# -- runs -----------------------------------------------------------------------------------
class RunRequest(_Strict):
    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS, description="The user's message.")
    user_id: str | None = Field(None, max_length=128, description="The user (trusted only when "
                                "`server.user_source` is `body`; else it must match the `wid` header).")
    session_id: str | None = Field(None, max_length=128, description="Omit to start a new session.")
    stream: bool = Field(False, description="Answer as server-sent events.")


class RunResponse(BaseModel):
    run_id: str | None
    user_id: str
    agent_type: str
    session_id: str
    session_created: bool
    summary_injected: bool = Field(description="Whether a stored session summary was put before the message.")
    content: str | None
    status: str


# -- sessions -------------------------------------------------------------------------------
class NewSession(BaseModel):
    session_id: str
    user_id: str


class SessionDebug(BaseModel):
    session_id: str
    mode: str = Field(description="`redis` or `local` (in-process buffer).")
    buffer_messages: int = Field(description="Messages in the hot buffer.")
    buffer_tokens: int = Field(description="Tokens of the messages not yet summarised.")
    state: dict[str, Any] = Field(description="The buffer's counters (total, summarized, tokens, epoch…).")
    state_hash: str | None = Field(None, description="Hash of the state: equal on every pod that sees the same.")
    lock_held: bool = Field(description="Whether a worker holds the session's summarisation lock.")
    lock_ttl_ms: int | None = Field(None, description="Milliseconds until that lock expires.")
    lock_holder: str | None = Field(None, description="The pod (`host:pid`) holding that lock.")
    extraction_due: bool = Field(description="Whether the thresholds call for a new summary.")
    cached_summary: str | None = Field(None, description="This pod's cached summary.")
    cached_version: int | None = None
    stored_summary: str | None = Field(None, description="The summary in the object store.")
    stored_version: int | None = None
    messages: list[dict[str, Any]] | None = Field(None, description="The last buffered messages (`?messages=true`).")


# -- snapshots ------------------------------------------------------------------------------
class SnapshotView(BaseModel):
    user_id: str
    state: str = Field(description="`none`, `initialize` or `prompt-update`.")
    updateAvailable: bool
    agentType: str
    reason: str
    snapshotUpdatedAt: str | None = None
    syncedFrom: str | None = None
    syncedAt: str | None = None
    files: list[str] = Field(default_factory=list)
    problems: list[dict[str, str]] = Field(default_factory=list)
    applied: bool = False
    action: str | None = None


# -- health ---------------------------------------------------------------------------------
class Liveness(BaseModel):
    status: Literal["ok"]


class Check(BaseModel):
    ok: bool
    detail: str
    seconds: float


class Readiness(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, Check]


UserPlaces.model_rebuild()

__all__ = [
    "Bundle",
    "Check",
    "Cleared",
    "CreateFile",
    "ErrorBody",
    "FactCorrection",
    "FactIn",
    "FactList",
    "FactOut",
    "FactPatch",
    "FileContent",
    "FileEntry",
    "FileList",
    "ImportPlaceResult",
    "ImportResult",
    "IndexText",
    "Liveness",
    "NewSession",
    "PatchFile",
    "PlaceInfo",
    "PlaceSummary",
    "ProfileBody",
    "Readiness",
    "ReplaceFile",
    "RunRequest",
    "RunResponse",
    "SavedFile",
    "SessionDebug",
    "SnapshotView",
    "UserPlaces",
]
