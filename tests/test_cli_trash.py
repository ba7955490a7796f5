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
