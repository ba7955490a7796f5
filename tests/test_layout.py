"""Places, ids and file names: nothing hostile may escape its place."""

from __future__ import annotations

import pytest

from harness_memory.errors import InvalidName
from harness_memory.layout import (
    Place,
    PlaceKind,
    project_slug,
    session_summary_key,
    validate_filename,
    validate_id,
)
from harness_memory.storage.keys import key_from_local_path, local_path_from_key, validate_key

HOSTILE_FILENAMES = [
    "../x.md",
    "../../users/other/agent-memory/default/a.md",
    "a/../../b.md",
    "/etc/passwd.md",
    "/abs.md",
    "~/x.md",
    "a\\b.md",
    "..\\..\\x.md",
    "a\x00.md",
    "a\nb.md",
    "a\rb.md",
    "a\tb.md",
    "a\u202eb.md",  # right-to-left override
    "a\u200bb.md",  # zero-width space
    "%2e%2e/x.md",
    "%2E%2E%2Fx.md",
    "a%2fb.md",
    "..%2fx.md",
    "\uff0e\uff0e/x.md",  # fullwidth dots fold to '..'
    "a/\uff0e\uff0e/x.md",
    "MEMORY.md",
    "memory.md",
    "sub/MEMORY.md",
    ".manifest.json",
    ".snapshot-synced.json",
    ".hidden.md",
    "sub/.hidden.md",
    "a.txt",
    "noext",
    ".md",
    "",
    "   ",
    " lead.md",
    "trail.md ",
    "a//b.md",
    "./a.md",
    "a/./b.md",
    "a:b.md",
    "a*b.md",
    'a"b.md',
    "a<b>.md",
    "a|b.md",
    "a?.md",
    "a/b/c/d/e.md",  # too deep
    "x" * 300 + ".md",
]

HOSTILE_IDS = [
    "",
    "..",
    ".",
    "../other",
    "a/b",
    "a\\b",
    "-leading",
    ".hidden",
    "a..b",
    "a b",
    "a\x00",
    "用户",
    "a%2fb",
    "x" * 129,
    "a\n",
]


@pytest.mark.parametrize("name", HOSTILE_FILENAMES)
def test_hostile_filenames_rejected_with_reason(name: str) -> None:
    with pytest.raises(InvalidName) as info:
        validate_filename(name)
    assert str(info.value)  # a message a person can read
    assert len(str(info.value)) > 15


@pytest.mark.parametrize("value", HOSTILE_IDS)
def test_hostile_ids_rejected(value: str) -> None:
    with pytest.raises(InvalidName, match=r"not allowed|non-empty"):
        Place.user_agent(value, "default")
    with pytest.raises(InvalidName):
        Place.user_auto("u1", value)
    with pytest.raises(InvalidName):
        Place.shared_agent(value)


@pytest.mark.parametrize("name", ["user_role.md", "笔记/偏好.md", "emoji-🚀.md", "a b.md", "sub/dir/x.md",
                                  "Feedback_Testing.MD"])
def test_good_filenames_accepted(name: str) -> None:
    assert validate_filename(name) == name


def test_filename_is_nfc_normalised() -> None:
    decomposed = "cafe\u0301.md"
    assert validate_filename(decomposed) == "caf\u00e9.md"


@pytest.mark.parametrize("value", ["100", "user-a", "alice@example.com", "u_1.2", "A" * 128])
def test_good_ids(value: str) -> None:
    assert validate_id(value) == value


def test_the_five_places() -> None:
    assert Place.user_agent("100", "default").prefix == "memory/users/100/agent-memory/default/"
    assert Place.shared_agent("default").prefix == "memory/agent-memory/default/"
    assert Place.user_auto("100", "proj").prefix == "memory/users/100/projects/proj/memory/"
    assert Place.shared_auto("proj").prefix == "memory/projects/proj/memory/"
    assert session_summary_key("s-1") == "memory/sessions/session-s-1.md"
    assert Place.shared_agent("x").is_shared and not Place.user_agent("u", "x").is_shared
    assert Place.user_agent("u").kind is PlaceKind.USER_AGENT


def test_place_key_stays_inside() -> None:
    place = Place.user_agent("100")
    assert place.key("a/b.md") == "memory/users/100/agent-memory/default/a/b.md"
    for bad in HOSTILE_FILENAMES:
        with pytest.raises(InvalidName):
            place.key(bad)


def test_local_path_key_mapping_cuts_at_harness() -> None:
    local = "/Users/mac/.harness/users/100/agent-memory/default/user_role.md"
    key = key_from_local_path(local)
    assert key == "memory/users/100/agent-memory/default/user_role.md"
    assert local_path_from_key("/Users/mac/.harness", key) == local
    with pytest.raises(InvalidName):
        key_from_local_path("/tmp/elsewhere/x.md")


@pytest.mark.parametrize("key", ["other/x", "memory/../x", "memory//x", "memory/a\\b", "memory/a/", "/memory/x",
                                 "memory/a\x00b", "memory/" + "x" * 900])
def test_validate_key_rejects(key: str) -> None:
    with pytest.raises(InvalidName):
        validate_key(key)


def test_project_slug_maps_paths() -> None:
    assert project_slug("/Users/mac/my proj") == "Users-mac-my-proj"
    assert project_slug("..") == "default"
    validate_id(project_slug("/a/../../b"))
