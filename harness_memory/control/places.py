"""Naming places and files by their path in the store tree, and finding them by LIST.

Why paths: operators know the storage layout (``users/100/agent-memory/default/user_role.md``),
so the CLI takes exactly those paths (with or without ``~/.harness/`` or the ``memory/`` key
prefix) and the export bundle and zip use them too. Discovery lists the store, which is slow
and eventually consistent on COS: it serves on-demand operator work (``ls``, export, clear of
a whole user), never an agent build.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import InvalidName
from ..layout import INDEX_FILE, RESERVED_FILES, Place, validate_filename, validate_id
from ..storage.base import ObjectStore


@dataclass(frozen=True, slots=True)
class Scope:
    """What a path names: everything, one user's places, or one place (and maybe one file)."""

    user_id: str | None = None
    place: Place | None = None
    file: str | None = None

    @property
    def is_all(self) -> bool:
        return self.user_id is None and self.place is None

    def rel_prefix(self) -> str:
        """The directory below the ``.harness`` root this scope covers ('' = everything)."""
        if self.place is not None:
            return self.place.rel_dir
        if self.user_id is not None:
            return f"users/{self.user_id}/"
        return ""


def normalize_path(text: str, key_prefix: str = "memory/") -> str:
    """Strip ``~/.harness/``, ``…/.harness/``, the key prefix and surrounding slashes."""
    path = text.strip().replace("\\", "/")
    if "/.harness/" in path:
        path = path.split("/.harness/", 1)[1]
    for lead in ("~/.harness/", ".harness/", key_prefix):
        if path.startswith(lead):
            path = path[len(lead):]
    if path in ("~/.harness", ".harness", key_prefix.rstrip("/")):
        path = ""
    return path.strip("/")


def parse_scope(text: str, key_prefix: str = "memory/", *, allow_file: bool = False) -> Scope:
    """Parse ``users/<id>[/agent-memory/<type>|/projects/<p>/memory][/<file>]`` and the shared forms.

    ``''``, ``all`` and ``.`` mean the whole store. Raises InvalidName saying what is expected.
    """
    path = normalize_path(text, key_prefix)
    if path in ("", "all", "."):
        return Scope()
    parts = path.split("/")
    place: Place | None = None
    rest: list[str] = []
    if parts[0] == "users":
        if len(parts) < 2:
            raise InvalidName("name a user: users/<user_id>")
        user = validate_id(parts[1], "user id")
        if len(parts) == 2:
            return Scope(user_id=user)
        place, rest = _place_after(parts[2:], user, key_prefix)
    elif parts[0] in ("agent-memory", "projects"):
        place, rest = _place_after(parts, None, key_prefix)
    else:
        raise InvalidName(
            f"{text!r} is not a memory path; expected users/<id>, users/<id>/agent-memory/<type>, "
            "users/<id>/projects/<project>/memory, agent-memory/<type> or projects/<project>/memory"
        )
    if not rest:
        return Scope(user_id=place.user_id, place=place)
    if not allow_file:
        raise InvalidName(f"{text!r} names a file; give the memory directory only")
    return Scope(user_id=place.user_id, place=place, file=validate_filename("/".join(rest)))


def _place_after(parts: list[str], user: str | None, key_prefix: str) -> tuple[Place, list[str]]:
    kind = parts[0]
    if kind == "agent-memory" and len(parts) >= 2:
        agent_type = validate_id(parts[1], "agent type")
        if user is None:
            return Place.shared_agent(agent_type, key_prefix), parts[2:]
        return Place.user_agent(user, agent_type, key_prefix), parts[2:]
    if kind == "projects" and len(parts) >= 2:
        project = validate_id(parts[1], "project")
        rest = parts[2:]
        if rest and rest[0] == "memory":
            rest = rest[1:]
        elif rest:
            raise InvalidName("an auto-memory path is projects/<project>/memory/<file>")
        if user is None:
            return Place.shared_auto(project, key_prefix), rest
        return Place.user_auto(user, project, key_prefix), rest
    raise InvalidName("expected agent-memory/<agent_type> or projects/<project>/memory after the user")


def place_of_rel(rel: str, key_prefix: str = "memory/") -> tuple[Place, str] | None:
    """(place, file name inside it) for a path below the root, or None when it is not in a place."""
    parts = rel.split("/")
    try:
        if parts[0] == "users" and len(parts) >= 2:
            user = validate_id(parts[1], "user id")
            if len(parts) >= 5 and parts[2] == "agent-memory":
                return Place.user_agent(user, parts[3], key_prefix), "/".join(parts[4:])
            if len(parts) >= 6 and parts[2] == "projects" and parts[4] == "memory":
                return Place.user_auto(user, parts[3], key_prefix), "/".join(parts[5:])
            return None
        if parts[0] == "agent-memory" and len(parts) >= 3:
            return Place.shared_agent(parts[1], key_prefix), "/".join(parts[2:])
        if parts[0] == "projects" and len(parts) >= 4 and parts[2] == "memory":
            return Place.shared_auto(parts[1], key_prefix), "/".join(parts[3:])
    except InvalidName:
        return None
    return None


def is_memory_file(name: str) -> bool:
    """True for a memory file name (not the index, manifest, sync file or a stray object)."""
    if name in RESERVED_FILES or name.rsplit("/", 1)[-1] == INDEX_FILE:
        return False
    try:
        validate_filename(name)
    except InvalidName:
        return False
    return True


@dataclass(slots=True)
class FoundPlace:
    place: Place
    files: int = 0
    objects: int = 0
    bytes: int = 0


def discover_places(store: ObjectStore, scope: Scope, key_prefix: str = "memory/",
                    on_object: Callable[[], None] | None = None) -> list[FoundPlace]:
    """Every place under ``scope`` that holds at least one object (LIST; on demand only)."""
    if scope.place is not None:
        found = FoundPlace(scope.place)
        for info in store.list(scope.place.prefix):
            _count(found, scope.place.filename_of(info.key), info.size)
        return [found]
    places: dict[str, FoundPlace] = {}
    for info in store.list(key_prefix + scope.rel_prefix()):
        if on_object is not None:
            on_object()
        located = place_of_rel(info.key[len(key_prefix):], key_prefix)
        if located is None:
            continue
        place, name = located
        entry = places.setdefault(place.prefix, FoundPlace(place))
        _count(entry, name, info.size)
    return [places[k] for k in sorted(places)]


def _count(found: FoundPlace, name: str, size: int) -> None:
    found.objects += 1
    found.bytes += size
    if is_memory_file(name):
        found.files += 1


def place_path(place: Place) -> str:
    """The path operators type for a place (its directory below the root, no trailing slash)."""
    return place.rel_dir.rstrip("/")
