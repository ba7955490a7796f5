"""Request and response models of the endpoints the ``/ui`` page added to the API.

Why separate from ``schemas``: they serve a form (a memory file as fields), the page's
"who am I" probe and the operator's place list; the core API models stay as they were.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .schemas import MAX_CONTENT_CHARS, PlaceSummary, _Strict


class MemoryForm(BaseModel):
    """A memory file split into its frontmatter fields and body (what the edit form shows)."""

    file: str
    name: str
    description: str
    type: str
    body: str
    extra: dict[str, Any] = Field(default_factory=dict, description="Frontmatter keys kept as they are.")
    etag: str = Field(description="Send it back as `If-Match` so a concurrent change is not overwritten.")
    last_modified: float
    created_at: float | None = Field(None, description="When the memory was first saved (its index entry).")
    origin: str = Field("assistant", description="Who wrote this version: `assistant` (its tools, in a "
                        "conversation), `person` (this page), `api`, `cli`, `import`, `snapshot` or `restore`.")
    last_recalled: float | None = Field(None, description="When recall last put this memory into one of the "
                                        "user's conversations (unix seconds; None: not lately).")


class MemoryFormIn(_Strict):
    """The edited fields; the file is composed from them and validated exactly as the tools' saves."""

    name: str = Field(max_length=1000)
    description: str = Field(max_length=5000)
    type: str = Field(max_length=40)
    body: str = Field(max_length=MAX_CONTENT_CHARS)


class SessionRecalled(BaseModel):
    """Which memory files recall put into one session's context (so it does not repeat them)."""

    session_id: str
    agent_type: str
    files: list[str] = Field(description="Files of the user's agent memory recalled in this session (sorted).")


class RankedCandidate(BaseModel):
    """One memory as recall ranked it (None: that score was not computed for this recall)."""

    file: str
    lexical: float | None = Field(None, description="BM25 score over name, description and body.")
    semantic: float | None = Field(None, description="Best-chunk cosine similarity (semantic tier only).")
    fused: float | None = Field(None, description="The fused score the ranking ordered by (semantic tier only).")


class SessionWhy(BaseModel):
    """Why the last recall of a session put in what it did (kept with the session's TTL)."""

    session_id: str
    agent_type: str
    recorded: bool = Field(description="False: no recall recorded for this session (none yet, or expired).")
    at: float | None = Field(None, description="When that recall ran (unix seconds).")
    query: str = Field("", description="The message recall ranked for (cut at 300 characters).")
    path: str | None = Field(None, description="What chose: `model` (the light model), `fallback` (it was "
                             "asked but failed: the ranking chose), `confident` (the ranking was clear), `slow` "
                             "(the model could not meet the deadline), `lexical` (no model, or few memories), "
                             "`floor` (nothing relevant enough) or `none`.")
    model_asked: bool = False
    model_picked: list[str] | None = Field(None, description="The light model's choice when it answered.")
    chosen: list[str] = Field(default_factory=list, description="What selection returned, best first.")
    recalled: list[str] = Field(default_factory=list, description="What went into the context (fit in the budget).")
    surfaced_before: int = Field(0, description="Memories skipped: already recalled earlier in the session.")
    candidates: list[RankedCandidate] = Field(default_factory=list, description="The ranking, best first (≤ 20).")


class WhoAmI(BaseModel):
    """Who the server takes the caller to be, and the defaults the page opens with."""

    user_id: str | None = Field(description="The caller's user id (None: an operator naming no user).")
    admin: bool = Field(description="Whether the caller presented the admin token.")
    user_source: str
    agent_type: str = Field(description="The agent type the page opens with.")
    project: str = Field(description="The auto-memory project (`agent.project`).")
    token_required: bool = Field(description="Whether `server.api_token` is set.")


class AllPlaces(BaseModel):
    """Every memory directory in the store with its counts and sizes (operator view; LIST)."""

    users: int
    places: list[PlaceRow]


class PlaceRow(PlaceSummary):
    user_id: str | None = None
    agent_type: str | None = None
    project: str | None = None


AllPlaces.model_rebuild()
