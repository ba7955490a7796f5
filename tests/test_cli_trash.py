"""``harness-memory trash`` (and ``rm`` feeding it), run as the installed console script."""

from __future__ import annotations

import json

from harness_memory.config import MemoryConfig
from harness_memory.services import services_for

from . import test_cli
from .test_cli import Cli
from .test_server_memory import GOOD, PREFS, stored

cfg, cli = test_cli.cfg, test_cli.cli  # the CLI module's fixtures: a COS + Redis config, the console script
PLACE = "users/u1/agent-memory/default"


def test_rm_then_trash_list_restore_and_purge(cfg: MemoryConfig, cli: Cli) -> None:
    services_for(cfg).user_agent_dir("u1").save_many([("a.md", GOOD), ("notes/b.md", PREFS)])
    rm = cli("rm", f"{PLACE}/a.md", f"{PLACE}/notes/b.md")
    assert rm.returncode == 0, rm.stderr
    assert stored(cfg, f"{PLACE}/a.md") is None
    listed = cli("trash", "list", PLACE, "--json")
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)
    assert sorted(f for i in items for f in i["files"]) == ["a.md", "notes/b.md"]
    assert all(i["origin"] == "cli" for i in items)
    a_item = next(i["id"] for i in items if i["files"] == ["a.md"])

    back = cli("trash", "restore", PLACE, a_item)
    assert back.returncode == 0 and b"restored users/u1/agent-memory/default/a.md" in back.stderr
    assert stored(cfg, f"{PLACE}/a.md") == GOOD.encode()  # byte-identical
    assert b"a.md" in (stored(cfg, f"{PLACE}/MEMORY.md") or b"")
    again, missing, no_id, not_a_place, refused = cli.many(
        ["trash", "restore", PLACE, a_item], ["trash", "restore", PLACE, "0000000000001-abcd"],
        ["trash", "restore", PLACE], ["trash", "list", "users/u1"], ["trash", "purge", PLACE])
    assert again.returncode == 3 and b"restored, purged or expired" in again.stderr
    assert missing.returncode == 3
    assert no_id.returncode == 2 and b"needs the trash item id" in no_id.stderr
    assert not_a_place.returncode == 2
    assert refused.returncode == 2 and b"--yes" in refused.stderr

    purged = cli("trash", "purge", PLACE, "--yes")
    assert purged.returncode == 0 and b"purged 1 trash item" in purged.stderr
    assert json.loads(cli("trash", "list", PLACE, "--json").stdout) == []
    assert stored(cfg, f"{PLACE}/notes/b.md") is None  # purged for good


def test_clear_moves_a_users_memory_to_the_trash_and_trash_restore_brings_it_back(cfg: MemoryConfig,
                                                                                  cli: Cli) -> None:
    """``clear`` (forget a user) is restorable unless ``--purge`` is asked for, and says which."""
    services = services_for(cfg)
    services.user_agent_dir("u1").save_many([("a.md", GOOD), ("notes/b.md", PREFS)])
    services.auto_memory().add_fact("u1", "prefers tea", "preference", 1.0)
    facts_place = "users/u1/projects/default/memory"
    cleared = cli("clear", "users/u1")
    assert cleared.returncode == 0, cleared.stderr
    err = cleared.stderr.decode()
    assert "cleared 3 memory files in 2 places" in err and "trash" in err and "--purge" in err
    assert stored(cfg, f"{PLACE}/a.md") is None and services.auto_memory().list_facts("u1") == []
    for place, files in ((PLACE, ["a.md", "notes/b.md"]), (facts_place, None)):
        (item,) = json.loads(cli("trash", "list", place, "--json").stdout)
        assert item["origin"] == "cli" and (files is None or sorted(item["files"]) == files)
        back = cli("trash", "restore", place, item["id"])
        assert back.returncode == 0, back.stderr
    assert stored(cfg, f"{PLACE}/a.md") == GOOD.encode() and stored(cfg, f"{PLACE}/notes/b.md") == PREFS.encode()
    assert b"a.md" in (stored(cfg, f"{PLACE}/MEMORY.md") or b"")
    assert [f.content for f in services.auto_memory().list_facts("u1")] == ["prefers tea"]

    purged = cli("clear", "users/u1", "--purge")
    assert purged.returncode == 0 and b"for good" in purged.stderr
    assert json.loads(cli("trash", "list", PLACE, "--json").stdout) == []
    assert [k for k in test_cli.keys(cfg, "users/u1/")] == []
