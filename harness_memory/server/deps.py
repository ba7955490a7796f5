"""The request-scoped pieces every route area shares: caller, user, and memory places.

Why a context object with dependency factories (not module globals): ``memory_router`` may be
built several times in one process (tests, an AgentOS app beside a standalone one), each with
its own services; every dependency closes over the context it was built for.

No ``from __future__ import annotations`` here or in ``routes/``: FastAPI reads the endpoint
signatures at runtime, and the ``Annotated`` aliases they use are local to the factory functions.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Header, Path, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from ..config import MemoryConfig, ServerConfig
from ..layout import Place, PlaceKind
from ..memdir import MemoryDir
from ..services import MemoryServices
from .auth import API_KEY_HEADER, WID_HEADER, Caller, authenticate, require_admin, resolve_user

_BEARER = HTTPBearer(auto_error=False, description="`server.api_token` (or the admin token).")
_API_KEY = APIKeyHeader(name=API_KEY_HEADER, auto_error=False,
                        description="The same token, where the host app owns `Authorization`.")

UserIdPath = Annotated[str, Path(description="The user id, or `me` for the caller.", max_length=128)]
AgentTypePath = Annotated[str, Path(description="Agent type, e.g. `default`.", max_length=128)]
ProjectPath = Annotated[str, Path(description="Auto-memory project, e.g. `default`.", max_length=128)]
WidHeader = Annotated[str | None, Header(alias=WID_HEADER, max_length=256,
                                         description="The calling user's id (trusted with `user_source: header`).")]
Bearer = Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)]
ApiKey = Annotated[str | None, Security(_API_KEY)]


@dataclass
class ServerContext:
    """The services a router serves, plus lazily built helpers."""

    services: MemoryServices
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> MemoryConfig:
        return self.services.config

    @property
    def server(self) -> ServerConfig:
        return self.services.config.server

    def agent_model(self) -> Any:
        """The agent's agno model (one per process, from the services): its HTTP clients are reused.

        Raises ModelNotConfigured (-> 503 naming the settings) while no model is configured."""
        return self.services.agent_model(required=True)

    def last_recalled(self, place: Place, files: list[str]) -> dict[str, float]:
        """file -> when recall last put it into a conversation of the place's user (a user's agent
        memory only: shared memories are recalled per user, under ``shared/<file>``). Never raises."""
        if place.kind is not PlaceKind.USER_AGENT or not place.user_id:
            return {}
        try:
            insight = self.services.surfaced_tracker().insight
            return insight.last_recalled(place.user_id, place.agent_type or "default", files)
        except Exception:  # insight only: the listing must not fail for it
            return {}

    # -- dependencies -------------------------------------------------------------------------
    def caller_dep(self) -> Callable[..., Caller]:
        """The authenticated caller (401 without the API token when one is configured)."""
        if "caller" not in self.extras:
            def caller(request: Request, _bearer: Bearer, _key: ApiKey, wid: WidHeader = None) -> Caller:
                return authenticate(request, self.server)

            self.extras["caller"] = caller
        return self.extras["caller"]

    def admin_dep(self, what: str = "shared memory") -> Callable[..., Caller]:
        CallerDep = Annotated[Caller, Depends(self.caller_dep())]

        def admin(caller: CallerDep) -> Caller:
            require_admin(caller, self.server, what)
            return caller

        return admin

    def user_dep(self) -> Callable[..., str]:
        """The path's user, checked against the caller (``me`` = the caller)."""
        CallerDep = Annotated[Caller, Depends(self.caller_dep())]

        def user(user_id: UserIdPath, caller: CallerDep) -> str:
            return resolve_user(caller, self.server, path_user=user_id)

        return user

    def user_agent_dir_dep(self) -> Callable[..., MemoryDir]:
        User = Annotated[str, Depends(self.user_dep())]

        def place(user: User, agent_type: AgentTypePath) -> MemoryDir:
            return self.services.memdir(Place.user_agent(user, agent_type, self.services.key_prefix))

        return place

    def user_auto_dir_dep(self) -> Callable[..., MemoryDir]:
        User = Annotated[str, Depends(self.user_dep())]

        def place(user: User, project: ProjectPath) -> MemoryDir:
            return self.services.memdir(Place.user_auto(user, project, self.services.key_prefix))

        return place

    def shared_agent_dir_dep(self) -> Callable[..., MemoryDir]:
        Admin = Annotated[Caller, Depends(self.admin_dep())]

        def place(_admin: Admin, agent_type: AgentTypePath) -> MemoryDir:
            return self.services.memdir(Place.shared_agent(agent_type, self.services.key_prefix))

        return place

    def shared_auto_dir_dep(self) -> Callable[..., MemoryDir]:
        Admin = Annotated[Caller, Depends(self.admin_dep())]

        def place(_admin: Admin, project: ProjectPath) -> MemoryDir:
            return self.services.memdir(Place.shared_auto(project, self.services.key_prefix))

        return place
