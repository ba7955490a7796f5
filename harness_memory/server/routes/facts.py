"""Auto-memory facts as a list (add / edit / delete) and the user profile.

What the user controls by hand: add "business trip next week", correct or delete a wrong
preference, rewrite the profile, clear every fact but keep the profile. Facts a person adds or
edits are marked ``manual`` by auto memory, so the background updater never trims them away.
The user's facts live in their auto place of the configured project (``agent.project``); the
shared ones need the admin token.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response, status
from fastapi import Path as PathParam

from ...auto.inject import fact_line
from ...auto.model import Profile, ProfileKey
from ...control.integrations import auto_memory, clear_facts, fact_dict
from ...control.places import place_path
from ...errors import HarnessMemoryError
from ...tokens import count_tokens
from ..auth import Caller
from ..deps import ServerContext
from ..errors import ApiError
from ..schemas import (
    ERRORS,
    FactCorrection,
    FactHistory,
    FactIn,
    FactList,
    FactOut,
    FactPatch,
    FactsCleared,
    ProfileBody,
    UpdateRecordOut,
)

FactIdPath = Annotated[str, PathParam(description="The fact id (its file name without `.md`).", max_length=128)]


@contextmanager
def _as_http() -> Iterator[None]:
    """auto memory says FactNotFound (a LookupError) for a missing id and ValueError for bad input.
    The message is its first argument as written (``str`` of a KeyError would add quotes, and
    stripping them also ate the closing quote of ``there is no fact 'x'``)."""
    try:
        yield
    except LookupError as exc:
        message = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
        raise ApiError(404, message, "not_found") from None
    except HarnessMemoryError:
        raise  # InvalidName, storage errors…: mapped by MemoryRoute
    except ValueError as exc:
        raise ApiError(422, str(exc), "invalid_fact") from None


def add_facts_routes(router: APIRouter, ctx: ServerContext) -> None:
    admin = ctx.admin_dep()

    def shared_owner(_caller: Annotated[Caller, Depends(admin)]) -> None:
        return None

    add_fact_routes(router, ctx, "/users/{user_id}", ctx.user_dep(), shared=False)
    add_fact_routes(router, ctx, "/shared", shared_owner, shared=True)


def add_fact_routes(router: APIRouter, ctx: ServerContext, base: str, owner: Callable[..., Any], *,
                    shared: bool) -> None:
    """The fact and profile endpoints below ``base``; ``owner`` yields the user (None = shared)."""
    Owner = Annotated[str | None, Depends(owner)]
    opts: dict[str, Any] = {"tags": ["facts"], "responses": ERRORS}

    def place_label(user: str | None) -> str:
        mdir = ctx.services.shared_auto_dir() if shared else ctx.services.user_auto_dir(user or "")
        return place_path(mdir.place)

    @router.get(f"{base}/facts", **opts, response_model=FactList, summary="The auto-memory facts, most confident first")
    def list_facts(user: Owner) -> FactList:
        facts = auto_memory(ctx.services).list_facts(user, shared=shared)
        tokens = sum(count_tokens(fact_line(f)) + 1 for f in facts)  # one line each, as injected
        return FactList(place=place_label(user), count=len(facts), facts=[FactOut(**fact_dict(f)) for f in facts],
                        tokens=tokens, max_tokens=ctx.config.auto.max_injection_tokens)

    @router.get(f"{base}/facts/history", **opts, response_model=FactHistory,
                summary="The last automatic updates: what each changed and what the rules refused")
    def fact_history(user: Owner) -> FactHistory:
        records = auto_memory(ctx.services).history(user, shared=shared)
        return FactHistory(place=place_label(user), updates=[UpdateRecordOut(**r.to_json()) for r in records])

    @router.post(f"{base}/facts", **opts, response_model=FactOut, status_code=status.HTTP_201_CREATED,
                 summary="Add a fact by hand (a near-duplicate is refreshed instead)")
    def add_fact(user: Owner, body: FactIn) -> FactOut:
        with _as_http():
            fact = auto_memory(ctx.services).add_fact(user, body.content, body.category, body.confidence,
                                                      source_error=body.source_error, expires=body.expires,
                                                      shared=shared)
        return FactOut(**fact_dict(fact))

    @router.patch(f"{base}/facts/{{fact_id}}", **opts, response_model=FactOut, summary="Edit a fact")
    def edit_fact(user: Owner, fact_id: FactIdPath, body: FactPatch) -> FactOut:
        with _as_http():
            fact = auto_memory(ctx.services).update_fact(
                user, fact_id, content=body.content, category=body.category,
                confidence=body.confidence, source_error=body.source_error, expires=body.expires, shared=shared)
        return FactOut(**fact_dict(fact))

    @router.post(f"{base}/facts/{{fact_id}}/correct", **opts, response_model=FactOut,
                 summary="\"This is wrong\": the fact becomes a correction; the old belief is kept as its "
                 "source error (shown to the assistant as \"avoid\")")
    def correct_fact(user: Owner, fact_id: FactIdPath, body: FactCorrection) -> FactOut:
        with _as_http():
            fact = auto_memory(ctx.services).correct_fact(user, fact_id, body.content, shared=shared)
        return FactOut(**fact_dict(fact))

    @router.delete(f"{base}/facts/{{fact_id}}", **opts, status_code=status.HTTP_204_NO_CONTENT,
                   summary="Delete a fact (kept in the auto place's trash: `…/projects/{project}/memory/trash`)")
    def delete_fact(user: Owner, fact_id: FactIdPath) -> Response:
        if not auto_memory(ctx.services).delete_fact(user, fact_id, shared=shared):
            raise ApiError(404, f"there is no fact {fact_id!r}", "not_found")
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    @router.delete(f"{base}/facts", **opts, response_model=FactsCleared,
                   summary="Delete every fact but keep the profile (queued updates of the user are dropped)")
    def clear_all_facts(user: Owner) -> FactsCleared:
        return FactsCleared(**clear_facts(ctx.services, user))

    @router.get(f"{base}/profile", **opts, response_model=ProfileBody, summary="The profile summaries")
    def get_profile(user: Owner) -> ProfileBody:
        return ProfileBody(**auto_memory(ctx.services).get_profile(user, shared=shared).to_json())

    @router.put(f"{base}/profile", **opts, response_model=ProfileBody,
                summary="Replace the profile (absent or empty sections are removed)")
    def put_profile(user: Owner, body: ProfileBody) -> ProfileBody:
        sections = {ProfileKey(k): v for k, v in body.model_dump().items() if isinstance(v, str) and v.strip()}
        with _as_http():
            profile = auto_memory(ctx.services).set_profile(user, Profile(sections), shared=shared)
        return ProfileBody(**profile.to_json())
