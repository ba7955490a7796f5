"""The ``harness-memory`` CLI, run as a real subprocess (the installed console script) with the
config passed the way operators pass it: ``HARNESS_MEMORY_CONFIG`` (or ``--config``) + env."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import yaml

from harness_memory.config import MemoryConfig
from harness_memory.layout import is_derived
from harness_memory.services import services_for
from tests.helpers import ROOT, child_env, write_config

from .test_server_memory import GOOD, PREFS, keys, stored

MakeConfig = Callable[..., MemoryConfig]
SCRIPT = Path(sys.executable).parent / "harness-memory"


@pytest.fixture
def cfg(make_config: MakeConfig, tmp_path: Path) -> MemoryConfig:
    return make_config(backend="cos", redis=True, agent={"snapshots_dir": str(tmp_path / "snapshots")})


class Cli:
    """Runs the console script with the test's config; ``many`` runs independent commands at once
    (each CLI start costs about a second of imports, so independent calls overlap)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def __call__(self, *args: str, stdin: bytes | None = None, cwd: Path = ROOT, **extra_env: str) -> Done:
        return subprocess.run([str(SCRIPT), *args], cwd=cwd, env={**self.env, **extra_env}, input=stdin,
                              capture_output=True, timeout=60)

    def many(self, *commands: Sequence[str]) -> list[Done]:
        procs = [subprocess.Popen([str(SCRIPT), *args], cwd=ROOT, env=self.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for args in commands]
        done = []
        for args, proc in zip(commands, procs, strict=True):
            out, err = proc.communicate(timeout=60)
            done.append(subprocess.CompletedProcess([str(SCRIPT), *args], proc.returncode, out, err))
        return done


Done = subprocess.CompletedProcess[bytes]


@pytest.fixture
def cli(cfg: MemoryConfig, tmp_path: Path) -> Cli:
    return Cli(child_env(write_config(cfg, tmp_path / "config.yaml")))

#: Objects rebuilt on import (the manifest and the search index carry the import's own times).
def derived(key: str) -> bool:
    """Rebuilt objects (manifest head and bases, search index; import times, generations) and the
    intent record (transaction ids)."""
    name = key.rsplit("/", 1)[-1]
    return is_derived(name) or name == ".intent.json"


def seed(cfg: MemoryConfig) -> None:
    services = services_for(cfg)
    services.user_agent_dir("u1").save("user_role.md", GOOD)
    services.user_agent_dir("u1").save("notes/prefs.md", PREFS)
    services.user_auto_dir("u1").save("fact-1.md", PREFS)
    services.user_agent_dir("u2").save("other.md", GOOD)


def test_ls_cat_rm(cfg: MemoryConfig, cli: Cli) -> None:
    seed(cfg)
    out, as_json, cat, bad, not_a_file = cli.many(
        ["ls"], ["ls", "users/u1/agent-memory/default", "--json"],
        ["cat", "~/.harness/users/u1/agent-memory/default/notes/prefs.md"],
        ["cat", "users/../etc/passwd.md"], ["rm", "users/u1"])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    assert [line.split("\t")[0] for line in lines] == [
        "users/u1/agent-memory/default", "users/u1/projects/default/memory", "users/u2/agent-memory/default"]
    assert "2 files" in lines[0]
    listing = json.loads(as_json.stdout)
    assert [(f["file"], f["type"]) for f in listing] == [("notes/prefs.md", "feedback"), ("user_role.md", "user")]
    assert cat.returncode == 0 and cat.stdout == PREFS.encode()
    assert bad.returncode == 2 and b"harness-memory:" in bad.stderr
    assert not_a_file.returncode == 2 and b"does not name a memory file" in not_a_file.stderr

    rm = cli("rm", "users/u1/agent-memory/default/user_role.md", "users/u1/agent-memory/default/nope.md")
    assert rm.returncode == 3 and b"deleted users/u1" in rm.stderr and b"no memory file" in rm.stderr
    assert stored(cfg, "users/u1/agent-memory/default/user_role.md") is None
    assert b"user_role" not in (stored(cfg, "users/u1/agent-memory/default/MEMORY.md") or b"")
    missing = cli("cat", "users/u1/agent-memory/default/user_role.md")
    assert missing.returncode == 3 and b"no memory file" in missing.stderr


def test_export_clear_import_is_byte_identical(cfg: MemoryConfig,
                                               cli: Cli,
                                               tmp_path: Path) -> None:
    seed(cfg)
    store = services_for(cfg).store
    before = {k: store.get(k).data for k in keys(cfg, "users/u1/") if not derived(k)}
    backup = tmp_path / "u1.zip"
    out, as_json = cli.many(["export", "users/u1", "-o", str(backup)], ["export", "users/u1"])
    assert out.returncode == 0, out.stderr
    assert b"export: 3/3" in out.stderr and b"exported 3 files from 2 places" in out.stderr
    assert json.loads(as_json.stdout)["scope"] == "users/u1"

    cleared, refused = cli.many(["clear", "users/u1", "--purge"], ["clear", "all"])
    assert cleared.returncode == 0 and refused.returncode == 2  # the whole store needs --yes
    assert b"for good" in cleared.stderr
    assert keys(cfg, "users/u1/") == [] and keys(cfg, "users/u2/") != []  # purged: trash and all

    (tmp_path / "u1.json").write_bytes(as_json.stdout)
    out, retarget = cli.many(["import", str(backup)], ["import", str(tmp_path / "u1.json"), "--into", "users/u9"])
    assert out.returncode == 0, out.stderr
    assert b"wrote 3 files into 2 places (merge)" in out.stderr
    after = {k: store.get(k).data for k in keys(cfg, "users/u1/") if not derived(k)}
    assert after == before
    assert retarget.returncode == 0, retarget.stderr
    assert stored(cfg, "users/u9/agent-memory/default/user_role.md") == GOOD.encode()
    piped = cli("import", "-", "--into", "users/u8", "--dry-run", stdin=as_json.stdout)
    assert piped.returncode == 0 and b"would write 3 files" in piped.stderr
    assert keys(cfg, "users/u8/") == []


def test_import_refuses_a_bad_bundle_and_writes_nothing(cfg: MemoryConfig,
                                                        cli: Cli,
                                                        tmp_path: Path) -> None:
    bundle = {"places": [{"kind": "user-agent", "user_id": "u1", "agent_type": "default",
                          "files": [{"file": "ok.md", "content": GOOD}, {"file": "../x.md", "content": GOOD},
                                    {"file": "y.md", "content": "no frontmatter"}]}]}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bundle))
    (tmp_path / "junk.json").write_text("not json")
    out, junk = cli.many(["import", str(path), "--mode", "replace"], ["import", str(tmp_path / "junk.json")])
    assert out.returncode == 1
    err = out.stderr.decode()
    assert "2 problem(s)" in err and "../x.md" in err and "y.md: a memory file must start" in err
    assert junk.returncode == 1 and b"is not a harness-memory bundle" in junk.stderr
    assert keys(cfg) == []


def test_reindex_rebuilds_the_index_from_the_files(cfg: MemoryConfig,
                                                   cli: Cli) -> None:
    store = services_for(cfg).store
    store.put("memory/users/u1/agent-memory/default/copied.md", GOOD.encode())
    store.put("memory/agent-memory/default/team.md", PREFS.encode())
    out = cli("reindex")
    assert out.returncode == 0, out.stderr
    assert b"users/u1/agent-memory/default\t1 files indexed" in out.stdout
    assert b"reindex: 2/2" in out.stderr
    assert b"- [user role](copied.md)" in (stored(cfg, "users/u1/agent-memory/default/MEMORY.md") or b"")
    assert b"- [prefs](team.md)" in (stored(cfg, "agent-memory/default/MEMORY.md") or b"")


def test_snapshot_status_and_sync(cfg: MemoryConfig, cli: Cli) -> None:
    folder = Path(cfg.agent.snapshots_dir) / "default"
    folder.mkdir(parents=True)
    (folder / "snapshot.json").write_text('{"updatedAt": "2026-11-20T00:00:00Z"}')
    (folder / "rules.md").write_text(GOOD)
    services_for(cfg).user_agent_dir("u1").save("own.md", PREFS)
    status, usage = cli.many(["snapshot", "status", "users/u1/agent-memory/default"],
                             ["snapshot", "status", "users/u1"])
    assert usage.returncode == 2
    status_json = json.loads(status.stdout)
    assert status_json["state"] == "prompt-update" and status_json["files"] == ["rules.md"]
    assert status_json["snapshotsDir"] == str(Path(cfg.agent.snapshots_dir).resolve())
    kept = cli("snapshot", "sync", "users/u1/agent-memory/default", "--keep-local")
    assert kept.returncode == 0 and json.loads(kept.stdout)["action"] == "mark-synced"
    assert stored(cfg, "users/u1/agent-memory/default/own.md") == PREFS.encode()
    (folder / "snapshot.json").write_text('{"updatedAt": "2026-11-28T00:00:00Z"}')
    synced = cli("snapshot", "sync", "users/u1/agent-memory/default", "--replace")
    assert synced.returncode == 0 and json.loads(synced.stdout)["state"] == "none"
    assert stored(cfg, "users/u1/agent-memory/default/rules.md") == GOOD.encode()
    assert stored(cfg, "users/u1/agent-memory/default/own.md") is None


def test_snapshot_sync_without_a_choice_changes_nothing_and_says_what_to_pass(cfg: MemoryConfig, cli: Cli,
                                                                               tmp_path: Path) -> None:
    """The README once showed ``snapshot sync <place>`` alone, and it replaced the user's memories."""
    folder = Path(cfg.agent.snapshots_dir) / "default"
    folder.mkdir(parents=True)
    (folder / "snapshot.json").write_text('{"updatedAt": "2026-11-20T00:00:00Z"}')
    (folder / "rules.md").write_text(GOOD)
    services_for(cfg).user_agent_dir("u1").save("own.md", PREFS)
    store = services_for(cfg).store
    before = {k: store.get(k).data for k in keys(cfg)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plain, both = cli("snapshot", "sync", "users/u1/agent-memory/default", cwd=elsewhere), cli(
        "snapshot", "sync", "users/u1/agent-memory/default", "--replace", "--keep-local")
    assert plain.returncode == 2 and both.returncode == 2
    err = plain.stderr.decode()
    assert "changed nothing" in err and "--replace" in err and "--keep-local" in err and "own.md" in err
    assert json.loads(plain.stdout)["localFiles"] == ["own.md"]
    assert {k: store.get(k).data for k in keys(cfg)} == before  # not one object written or removed


def test_snapshot_commands_work_from_any_directory(make_config: MakeConfig, tmp_path: Path) -> None:
    """A relative ``agent.snapshots_dir`` in the YAML config is beside that file, not the cwd; a
    sync with no snapshot there is "not found" (3) and changes nothing."""
    project = tmp_path / "project"
    folder = project / "starter" / "default"
    folder.mkdir(parents=True)
    (folder / "snapshot.json").write_text('{"updatedAt": "2026-11-20T00:00:00Z"}')
    (folder / "rules.md").write_text(GOOD)
    cfg = make_config(backend="cos", redis=True)
    config = write_config(cfg, project / "config.yaml")
    data = yaml.safe_load(config.read_text())
    data["agent"]["snapshots_dir"] = "starter"
    config.write_text(yaml.safe_dump(data))
    cli = Cli(child_env(config))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    status = cli("snapshot", "status", "users/u1/agent-memory/default", cwd=elsewhere)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["files"] == ["rules.md"]
    assert json.loads(status.stdout)["snapshotsDir"] == str((project / "starter").resolve())
    synced = cli("snapshot", "sync", "users/u1/agent-memory/default", "--keep-local", cwd=elsewhere)
    assert synced.returncode == 0, synced.stderr
    missing = cli("snapshot", "sync", "users/u1/agent-memory/other", "--replace", cwd=elsewhere)
    assert missing.returncode == 3 and b"no snapshot for agent type 'other'" in missing.stderr
    assert b"nothing changed" in missing.stderr
    assert keys(cfg, "users/u1/agent-memory/other/") == []


def test_a_relative_snapshots_dir_from_the_environment_or_the_default_is_the_same_from_any_directory(
        make_config: MakeConfig, tmp_path: Path) -> None:
    """Set by ``HARNESS_MEMORY_SNAPSHOTS_DIR`` or left at its default, a relative snapshot folder
    is beside the config file; with no config file it is the project checkout's. Two working
    directories, one answer."""
    project = tmp_path / "project"
    for folder in (project / "starter" / "default", project / "snapshots" / "default"):
        folder.mkdir(parents=True)
        (folder / "snapshot.json").write_text('{"updatedAt": "2026-11-20T00:00:00Z"}')
        (folder / "rules.md").write_text(GOOD)
    cfg = make_config(backend="cos", redis=True)
    config = write_config(cfg, project / "config.yaml")
    data = yaml.safe_load(config.read_text())
    del data["agent"]["snapshots_dir"]  # the default: `snapshots`
    config.write_text(yaml.safe_dump(data))
    here, there = tmp_path / "here", tmp_path / "there" / "deeper"
    here.mkdir()
    there.mkdir(parents=True)
    cli = Cli(child_env(config))

    def status(cwd: Path, **env: str) -> dict[str, object]:
        done = cli("snapshot", "status", "users/u1/agent-memory/default", cwd=cwd, **env)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    for env, folder in (({}, project / "snapshots"),
                        ({"HARNESS_MEMORY_SNAPSHOTS_DIR": "starter"}, project / "starter")):
        answers = [status(cwd, **env) for cwd in (here, there)]
        assert answers[0] == answers[1] and answers[0]["snapshotsDir"] == str(folder.resolve())
        assert answers[0]["files"] == ["rules.md"]
    synced = cli("snapshot", "sync", "users/u1/agent-memory/default", "--keep-local", cwd=there,
                 HARNESS_MEMORY_SNAPSHOTS_DIR="starter")
    assert synced.returncode == 0, synced.stderr

    # No config file at all (settings from the environment): the checkout's own snapshots/.
    env = {k: v for k, v in child_env(config).items() if k != "HARNESS_MEMORY_CONFIG"}
    env.update(HARNESS_MEMORY_BACKEND="local", HARNESS_MEMORY_LOCAL_ROOT=str(tmp_path / "harness"))
    bare = Cli(env)
    answers = [bare("snapshot", "status", "users/u1/agent-memory/default", cwd=cwd) for cwd in (here, there)]
    assert all(a.returncode == 0 for a in answers), answers[0].stderr
    said = [json.loads(a.stdout) for a in answers]
    assert said[0] == said[1] and said[0]["snapshotsDir"] == str((ROOT / "snapshots").resolve())
    assert said[0]["files"]  # the shipped starter snapshot


def test_session_show(cfg: MemoryConfig, cli: Cli) -> None:
    from harness_memory.session.binding import bind_session

    session_id, _ = bind_session("u1", "chat-7", cfg.session.bind_to_user)
    services_for(cfg).store.put(f"memory/sessions/session-{session_id}.md", b"## Task\nBook Tokyo.\n")
    bound, raw = cli.many(["session", "show", "chat-7", "--user", "u1"], ["session", "show", session_id])
    shown = json.loads(bound.stdout)
    assert shown["session_id"] == session_id and shown["mode"] == "redis"
    assert "Book Tokyo." in shown["stored_summary"]
    assert json.loads(raw.stdout)["stored_summary"] == shown["stored_summary"]


def test_config_is_masked_and_bad_config_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("store: [not, a, mapping")
    masked = Cli({**cli.env, "HARNESS_MEMORY_SERVER_API_TOKEN": "tok-123", "HARNESS_MEMORY_API_KEY": "sk-999"})
    typo = Cli({**cli.env, "HARNESS_MEMORY_COS_TIMEOUT": "soon"})
    procs = [masked.many(["config"]), cli.many(["--config", str(tmp_path / "broken.yaml"), "ls"]),
             typo.many(["ls"])]
    (out,), (bad,), (typoed,) = procs
    assert out.returncode == 0
    shown = json.loads(out.stdout)
    assert shown["server"]["api_token"] == "***" and b"tok-123" not in out.stdout and b"sk-999" not in out.stdout
    assert shown["store"]["backend"] == "cos"
    assert bad.returncode == 2 and b"not valid YAML" in bad.stderr
    assert typoed.returncode == 2 and b"HARNESS_MEMORY_COS_TIMEOUT" in typoed.stderr


def test_facts_ls_and_clear_keep_the_profile(cfg: MemoryConfig, cli: Cli) -> None:
    from harness_memory.auto import Profile, ProfileKey, auto_memory_for

    auto = auto_memory_for(services_for(cfg))
    auto.add_fact("u1", "Prefers tea", "preference", 0.9)
    auto.add_fact("u1", "Business trip to Tokyo next week", "context", 1.0)
    auto.set_profile("u1", Profile({ProfileKey.WORK: "Frontend engineer"}))
    listed, bad = cli.many(["facts", "ls", "users/u1"], ["facts", "clear", "users/u1/agent-memory/default"])
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert data["place"] == "users/u1/projects/default/memory" and data["count"] == 2
    assert {f["content"] for f in data["facts"]} == {"Prefers tea", "Business trip to Tokyo next week"}
    assert bad.returncode == 2
    cleared = cli("facts", "clear", "users/u1")
    assert cleared.returncode == 0 and b"deleted 2 facts" in cleared.stderr
    assert b"trash for 30 days: `harness-memory trash list users/u1/projects/default/memory`" in cleared.stderr
    assert auto.list_facts("u1") == [] and auto.get_profile("u1").get(ProfileKey.WORK) == "Frontend engineer"
    (item,) = json.loads(cli("trash", "list", "users/u1/projects/default/memory", "--json").stdout)
    assert cli("trash", "restore", "users/u1/projects/default/memory", item["id"]).returncode == 0
    assert {f.content for f in auto.list_facts("u1")} == {"Prefers tea", "Business trip to Tokyo next week"}


def test_dry_runs_report_exactly_what_the_import_then_does(cfg: MemoryConfig, cli: Cli, tmp_path: Path) -> None:
    """A fresh export of unchanged files is all "unchanged" (it once said "would write 3, created 3"),
    and each dry run's counts are the ones the same import then reports."""
    seed(cfg)
    backup = tmp_path / "u1.json"
    assert cli("export", "users/u1", "-o", str(backup)).returncode == 0
    store = services_for(cfg).store
    before = {k: store.get(k).data for k in keys(cfg)}
    merge, replace = cli.many(["import", str(backup), "--dry-run"], ["import", str(backup), "--mode", "replace",
                                                                      "--dry-run"])
    for done in (merge, replace):
        assert done.returncode == 0, done.stderr
        assert b"would write 0 files into 2 places" in done.stderr
        assert b"0 created, 0 updated, 3 unchanged, 0 removed" in done.stderr and b"nothing changed" in done.stderr
    assert b"users/u1/agent-memory/default\tcreated 0\tupdated 0\tunchanged 2\tremoved 0" in merge.stdout
    assert {k: store.get(k).data for k in keys(cfg)} == before

    # one file changed, one added, one new place: the dry runs count each, the imports agree
    mdir = services_for(cfg).user_agent_dir("u1")
    mdir.save("user_role.md", GOOD.replace("frontend", "backend"))
    mdir.save("extra.md", PREFS)
    services_for(cfg).user_agent_dir("u1", "coder").save("code.md", GOOD)
    before = {k: store.get(k).data for k in keys(cfg)}
    merge_dry, replace_dry = cli.many(["import", str(backup), "--into", "users/u1", "--dry-run"],
                                      ["import", str(backup), "--into", "users/u1", "--mode", "replace", "--dry-run"])
    assert {k: store.get(k).data for k in keys(cfg)} == before
    assert b"0 created, 1 updated, 2 unchanged, 0 removed" in merge_dry.stderr, merge_dry.stderr
    assert b"0 created, 1 updated, 2 unchanged, 2 removed" in replace_dry.stderr, replace_dry.stderr
    real = cli("import", str(backup), "--into", "users/u1", "--mode", "replace")
    assert real.returncode == 0, real.stderr
    assert real.stdout == replace_dry.stdout
    assert b"wrote 1 files into 3 places (replace): 0 created, 1 updated, 2 unchanged, 2 removed" in real.stderr
    assert stored(cfg, "users/u1/agent-memory/default/extra.md") is None
    left = keys(cfg, "users/u1/agent-memory/coder/")  # the place the bundle does not name: cleared ...
    assert not [k for k in left if k.endswith(".md") and not k.endswith("/MEMORY.md")]
    assert any("/.trash/" in k for k in left)  # ... into its trash
