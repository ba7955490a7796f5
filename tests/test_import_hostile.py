"""Hostile imports (issue #13): every bad zip or JSON form is refused with a 422 (or the CLI's exit 1)
that names each bad entry, and the store holds exactly the same bytes afterwards — every object,
manifests included — on the local backend and on SeaweedFS. A legal export -> import round trip
stays byte-identical."""

from __future__ import annotations

import io
import json
import stat
import unicodedata
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from harness_memory.config import MemoryConfig
from harness_memory.services import services_for
from tests.helpers import ROOT, child_env, write_config

from .test_server_memory import GOOD, PREFS, api, error_of

MakeConfig = Callable[..., MemoryConfig]
BASE = "users/u1/agent-memory/default/"
CAFE = "café.md"


def all_objects(cfg: MemoryConfig) -> dict[str, bytes]:
    """Every object of the store (both users, manifests, indexes, state) with its bytes."""
    store = services_for(cfg).store
    return {info.key: store.get(info.key).data for info in store.list("")}


def seed(cfg: MemoryConfig) -> None:
    services = services_for(cfg)
    services.user_agent_dir("u1").save("user_role.md", GOOD)
    services.user_auto_dir("u1").save("fact-1.md", PREFS)
    services.user_agent_dir("u2").save("other.md", GOOD)


def entry(name: str, data: str | bytes, mode: int = stat.S_IFREG | 0o644) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = mode << 16
    return info, data.encode() if isinstance(data, str) else data


def make_zip(entries: list[tuple[zipfile.ZipInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for info, data in entries:
            zf.writestr(info, data)
    return buffer.getvalue()


#: (entry name, content, mode, words the problem must contain)
HOSTILE_ZIP = [
    ("../../x.md", GOOD, None, "'..'"),
    (BASE + "../../../../x.md", GOOD, None, "'..'"),
    ("/tmp/x.md", GOOD, None, "absolute"),
    ("/" + BASE + "abs.md", GOOD, None, "absolute"),
    ("C:/" + BASE + "drive.md", GOOD, None, "drive letter"),
    (BASE.replace("/", "\\") + "back.md", GOOD, None, "backslash"),
    (BASE + "link.md", GOOD, stat.S_IFLNK | 0o777, "symbolic link"),  # its text is valid frontmatter
    (BASE + "fifo.md", GOOD, stat.S_IFIFO | 0o644, "not a regular file"),
    (BASE + unicodedata.normalize("NFD", CAFE), GOOD, None, "NFC"),
    ("notes/stray.md", GOOD, None, "not inside a memory directory"),
    ("agent-memory/default/shared.md", GOOD, None, "cannot be written here"),
    (BASE + "dup.md", GOOD, None, "appears twice"),
    (BASE + "big.md", GOOD + "x" * 70_000, None, "the limit is 65536"),
    (BASE + "broken.md", "no frontmatter at all", None, "frontmatter"),
]


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("backend", ["local", "cos"])
async def test_hostile_zips_and_bundles_change_nothing(make_config: MakeConfig, backend: str) -> None:
    cfg = make_config(backend=backend, limits={"import_max_entries": 40, "import_max_bytes": 400_000})
    seed(cfg)
    before = all_objects(cfg)
    good = entry(BASE + "fine.md", PREFS)
    hostile = [entry(n, d, m) if m is not None else entry(n, d) for n, d, m, _ in HOSTILE_ZIP]
    hostile.insert(9, entry(BASE + unicodedata.normalize("NFC", CAFE), GOOD))  # the other half of the collision
    zipped = make_zip([good, entry(BASE + "dup.md", GOOD), *hostile])
    async with api(cfg, wid="u1") as c:
        r = await c.post("/users/me/memory/import", content=zipped, headers={"content-type": "application/zip"})
        assert r.status_code == 422, r.text
        problems = error_of(r)["problems"]
        for name, _, _, words in HOSTILE_ZIP:
            shown = name.replace(BASE, "").replace("agent-memory/default/", "") if words == "frontmatter" else name
            hits = [p for p in problems if shown in p or name.split("/")[-1] in p]
            assert any(words in p for p in hits), (name, problems)
        assert not any("fine.md" in p for p in problems)
        # the same zip through the one-place endpoint, and bombs: too many entries, too many bytes
        r = await c.post("/users/me/agents/default/memory/import", content=zipped,
                         headers={"content-type": "application/zip"})
        assert r.status_code == 422 and len(error_of(r)["problems"]) >= len(HOSTILE_ZIP)
        many = make_zip([entry(f"{BASE}n{i}.md", GOOD) for i in range(41)])
        r = await c.post("/users/me/memory/import", content=many, headers={"content-type": "application/zip"})
        assert r.status_code == 422 and "41 entries" in error_of(r)["problems"][0]
        bomb = io.BytesIO()
        with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for i in range(8):
                zf.writestr(f"{BASE}b{i}.md", GOOD + " " * 60_000)
        r = await c.post("/users/me/memory/import", content=bomb.getvalue(),
                         headers={"content-type": "application/zip"})
        assert r.status_code == 422 and "limits.import_max_bytes" in error_of(r)["problems"][0]
        # the JSON forms
        files = [{"file": name, "content": GOOD} for name in
                 ("../x.md", "/abs.md", "C:x.md", "a\\b.md", CAFE, unicodedata.normalize("NFD", CAFE))]
        files += [{"file": "broken.md", "content": "no frontmatter"},
                  {"file": "big.md", "content": GOOD + "x" * 70_000}, {"file": "fine.md", "content": PREFS}]
        bundle = {"places": [{"kind": "user-agent", "user_id": "u1", "agent_type": "default", "files": files},
                             {"kind": "shared-agent", "agent_type": "default",
                              "files": [{"file": "shared.md", "content": GOOD}]}]}
        r = await c.post("/users/me/memory/import", json=bundle)
        assert r.status_code == 422, r.text
        problems = error_of(r)["problems"]
        for name in ("../x.md", "/abs.md", "C:x.md", "a\\b.md", "broken.md", "big.md", "shared.md"):
            assert any(f"/{name}:" in p for p in problems), (name, problems)
        assert any("NFC" in p and CAFE in p for p in problems)
        too_many = {"places": [{"kind": "user-agent", "user_id": "u1", "agent_type": "default",
                                "files": [{"file": f"n{i}.md", "content": GOOD} for i in range(41)]}]}
        r = await c.post("/users/me/memory/import", json=too_many)
        assert r.status_code == 422 and any("limits.import_max_entries" in p for p in error_of(r)["problems"])
    assert all_objects(cfg) == before


def test_the_cli_refuses_a_hostile_zip_and_writes_nothing(make_config: MakeConfig, tmp_path: Path) -> None:
    import subprocess

    cfg = make_config(backend="local")
    seed(cfg)
    before = all_objects(cfg)
    path = tmp_path / "hostile.zip"
    path.write_bytes(make_zip([entry(BASE + "fine.md", PREFS), entry("/" + BASE + "abs.md", GOOD),
                               entry(BASE + "link.md", GOOD, stat.S_IFLNK | 0o777), entry("../../x.md", GOOD)]))
    env = child_env(write_config(cfg, tmp_path / "config.yaml"))
    done = subprocess.run([str(ROOT / ".venv/bin/harness-memory"), "import", str(path)], cwd=ROOT, env=env,
                          capture_output=True, timeout=60)
    assert done.returncode == 1, done.stderr
    err = done.stderr.decode()
    assert f"/{BASE}abs.md: an absolute path" in err and f"{BASE}link.md: a symbolic link" in err
    assert "../../x.md: '..' in the path" in err
    assert all_objects(cfg) == before


@pytest.mark.parametrize("backend", ["local", "cos"])
async def test_export_import_round_trip_is_byte_identical(make_config: MakeConfig, backend: str) -> None:
    cfg = make_config(backend=backend)
    seed(cfg)
    before = all_objects(cfg)
    async with api(cfg, wid="u1") as c:
        for fmt, media in (("zip", "application/zip"), ("json", "application/json")):
            exported = await c.get("/users/me/memory/export", params={"format": fmt})
            assert exported.status_code == 200
            r = await c.post("/users/me/memory/import", content=exported.content, headers={"content-type": media})
            assert r.status_code == 200, r.text
            assert r.json()["written"] == 0 and sum(p["unchanged"] for p in r.json()["places"]) == 2
            again = await c.get("/users/me/memory/export", params={"format": "json"})
            assert json.loads(again.content)["places"] == json.loads(
                (await c.get("/users/me/memory/export", params={"format": "json"})).content)["places"]
    after = all_objects(cfg)
    assert after.keys() == before.keys()
    assert {k: v for k, v in after.items() if not k.endswith(".manifest.json")} == {
        k: v for k, v in before.items() if not k.endswith(".manifest.json")}


@pytest.mark.parametrize("endpoint", ["/users/me/memory/import", "/users/me/agents/default/memory/import"])
@pytest.mark.parametrize("form", ["json", "zip"])
async def test_a_bundle_of_another_user_is_refused(make_config: MakeConfig, endpoint: str, form: str) -> None:
    """Issue 28: user u1 importing a bundle that names user u2 (in JSON, or a zip's paths) is refused
    with 422 naming the other user; it used to land in u1's place with 200. Nothing changes."""
    cfg = make_config(backend="local")
    seed(cfg)
    before = all_objects(cfg)
    async with api(cfg, wid="u1") as c:
        if form == "json":
            bundle = {"places": [{"kind": "user-agent", "user_id": "u2", "agent_type": "default",
                                  "files": [{"file": "stolen.md", "content": GOOD}]}]}
            r = await c.post(endpoint, json=bundle)
        else:
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as zf:
                zf.writestr("users/u2/agent-memory/default/stolen.md", GOOD)
            r = await c.post(endpoint, content=buf.getvalue(), headers={"content-type": "application/zip"})
    assert r.status_code == 422, r.text
    assert "user 'u2'" in error_of(r)["detail"]
    assert all_objects(cfg) == before


async def test_an_oversized_manifest_meta_is_refused(make_config: MakeConfig) -> None:
    """Issue 28: a bundle's manifest ``meta`` is capped as a state file is (1 MB as JSON); a 60 MB one
    was accepted and slowed every later save. Refused whole, nothing changes; a small meta imports."""
    from harness_memory.control.bundle import MAX_STATE_FILE_BYTES

    cfg = make_config(backend="local", server={"max_request_bytes": 4_000_000},
                      limits={"import_max_bytes": 4_000_000})
    seed(cfg)
    before = all_objects(cfg)
    place = {"kind": "user-agent", "user_id": "u1", "agent_type": "default",
             "files": [{"file": "new.md", "content": GOOD}]}
    async with api(cfg, wid="u1") as c:
        r = await c.post("/users/me/memory/import",
                         json={"places": [{**place, "meta": {"pad": "x" * (MAX_STATE_FILE_BYTES + 10)}}]})
        assert r.status_code == 422, r.text
        assert "meta is" in error_of(r)["detail"] and str(MAX_STATE_FILE_BYTES) in error_of(r)["detail"]
        assert all_objects(cfg) == before
        r = await c.post("/users/me/memory/import", json={"places": [{**place, "meta": {"note": "small"}}]})
        assert r.status_code == 200, r.text
    assert services_for(cfg).user_agent_dir("u1").manifest().meta.get("note") == "small"
