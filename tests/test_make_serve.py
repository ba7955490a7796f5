"""``make serve`` on the embedded defaults answers health and a memory round trip, and the
README.s curl examples work as written against it.

The server runs as the operator starts it: ``make serve SERVE_PORT=<free port>`` with HOME pointed at a
temp dir (so the default local store ``~/.harness`` is private to the test) and no
``HARNESS_MEMORY_*`` variables. ``-o <stamp>`` tells make the venv is installed (the test runs in
it); without it a stale stamp would make ``make`` reinstall the package first.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.servers import free_ports

DOCS = ROOT / "README.md"
START_DEADLINE = 60.0


def venv_stamp(kind: str = "installed") -> str:
    """The Makefile's stamp file name (``.venv/.installed-<cksum of pyproject.toml>``; ``serve-installed``
    for the server-only install of ``make serve``)."""
    out = subprocess.run("cat pyproject.toml | cksum | cut -d' ' -f1", shell=True, cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    return f".venv/.{kind}-{out}"


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(base URL, HOME) of a ``make serve`` process, stopped (its whole process group) afterwards."""
    port = free_ports(1)[0]
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_MEMORY_")}
    env.update(HOME=str(home), AGNO_TELEMETRY="false", NO_PROXY="127.0.0.1")
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(["make", "-o", venv_stamp(), "-o", venv_stamp("serve-installed"), "serve",
                             f"SERVE_PORT={port}"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_DEADLINE
        while True:
            try:
                if get(f"{base}/health/live")[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"make serve did not come up:\n{(tmp_path / 'serve.log').read_text()[-3000:]}")
            time.sleep(0.2)
        (home / "serve.log").symlink_to(tmp_path / "serve.log")
        yield base, home
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # make and the server it started: our own group
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        log.close()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


def test_make_serve_health_and_memory_round_trip(served: tuple[str, Path]) -> None:
    base, home = served
    status, body = get(f"{base}/health/ready")
    checks = json.loads(body)["checks"]
    assert status == 200 and checks["redis"]["detail"] == "not configured (in-process mode)"
    assert checks["store"]["detail"] == "local directory reachable"

    content = "---\nname: trip\ndescription: business trip next week\ntype: project\n---\n\nTokyo.\n"
    url = f"{base}/users/me/agents/default/memory/files/trip.md"
    put = urllib.request.Request(url, method="PUT", data=json.dumps({"content": content}).encode(),
                                 headers={"wid": "u1", "Content-Type": "application/json"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(put, timeout=10) as resp:
        assert resp.status == 201
    on_disk = home / ".harness" / "users" / "u1" / "agent-memory" / "default"
    assert (on_disk / "trip.md").read_text() == content
    assert "- [trip](trip.md) — business trip next week" in (on_disk / "MEMORY.md").read_text()
    status, body = get(url + "?raw=true", {"wid": "u1"})
    assert status == 200 and body.decode() == content
    status, body = get(f"{base}/ui/")  # the memory page (README "The memory page")
    assert status == 200 and b"What the assistant remembers about you" in body

    run = urllib.request.Request(f"{base}/agents/default/runs", method="POST",
                                 data=b'{"message": "hi"}', headers={"wid": "u1", "Content-Type": "application/json"})
    try:
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(run, timeout=10)
        raise AssertionError("a run without a model must not succeed")
    except urllib.error.HTTPError as exc:
        assert exc.code == 503 and "HARNESS_MEMORY_MODEL" in json.loads(exc.read())["detail"]


def test_first_minutes_page_docs_offline_and_the_start_line(served: tuple[str, Path]) -> None:
    """``/`` leads to the page, ``/docs`` needs no CDN (Swagger UI's files come from a package),
    and the start line names both addresses."""
    base, home = served
    log = (home / "serve.log").read_text()
    assert f"the memory page: {base}/ui" in log and f"API docs: {base}/docs" in log, log
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    try:
        opener.open(f"{base}/", timeout=5)
        raise AssertionError("/ did not redirect")
    except urllib.error.HTTPError as exc:
        assert exc.code == 307 and exc.headers["Location"] == "/ui/"
    for page, asset in (("/docs", "/docs/assets/swagger-ui-bundle.js"), ("/redoc", "/docs/assets/redoc.standalone.js")):
        status, body = get(base + page)
        assert status == 200 and asset.encode() in body and b"/openapi.json" in body
        assert b"cdn." not in body and b"https://" not in body.replace(b"https://fastapi.tiangolo.com", b"")
        status, script = get(base + asset)
        assert status == 200 and len(script) > 100_000
    status, css = get(f"{base}/docs/assets/swagger-ui.css")
    assert status == 200 and b".swagger-ui" in css
    assert get(f"{base}/docs/assets/..%2Fconsts.py")[0] == 404 and get(f"{base}/docs/assets/nope.js")[0] == 404


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def test_make_serve_installs_the_server_extra_only(tmp_path: Path) -> None:
    """On a fresh machine ``make serve`` installs ``.[server]``, not the test toolchain (``make -n``
    prints what it would run, into a venv that does not exist)."""
    venv = tmp_path / "venv"
    out = subprocess.run(["make", "-n", "serve", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "-m pip install -q -e '.[server]'" in out and ".[test]" not in out
    assert f"{venv}/bin/harness-memory serve --host 127.0.0.1 --port 8765" in out


def readme_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.DOTALL)


def runnable_examples() -> str:
    """The README's ```bash blocks of curl examples (run against ``make serve``)."""
    return "\n".join(b for b in readme_blocks("bash") if "curl " in b)


def cli_examples() -> str:
    """The README's ```bash block of CLI examples (``.venv/bin/harness-memory`` from the project folder)."""
    return "\n".join(b for b in readme_blocks("bash") if ".venv/bin/harness-memory" in b)


def test_the_documented_curl_examples_work_as_written(served: tuple[str, Path], tmp_path: Path) -> None:
    base, home = served
    script = runnable_examples().replace("127.0.0.1:8765", base.removeprefix("http://"))
    assert script.count("curl ") >= 14
    workdir = tmp_path / "work"
    workdir.mkdir()
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=workdir, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for fragment in ['"status":"ok"', '"file":"user_role.md","created":true', '"count":1',
                     "TypeScript and Vue.\n", '"text":"# Memory index\\n\\n- [user role](user_role.md)',
                     '"content":"Business trip to Tokyo next week"', '"deleted_files":2', '"written":2',
                     '"mode":"replace"', "204\n", '"code":"forbidden"']:
        assert fragment in text, (fragment, text[-2000:])
    assert (workdir / "u1-memory.json").exists() and (workdir / "u1-memory.zip").exists()
    place = home / ".harness" / "users" / "u1"
    assert not (place / "agent-memory" / "default" / "user_role.md").exists()
    facts = list((place / "projects" / "default" / "memory").glob("fact-*.md"))
    assert len(facts) == 1 and "Business trip to Tokyo next week" in facts[0].read_text()

    # then the CLI examples, as written, from a folder laid out like the project (its .venv, its snapshots/)
    (workdir / ".venv").symlink_to(ROOT / ".venv")
    (workdir / "snapshots").symlink_to(ROOT / "snapshots")
    script = cli_examples()
    assert script.count(".venv/bin/harness-memory ") >= 10
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_MEMORY_")}
    env.update(HOME=str(home), AGNO_TELEMETRY="false", TIKTOKEN_CACHE_DIR=str(tmp_path / "tiktoken"))
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=workdir, capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    said = out.stdout + out.stderr
    for fragment in ["users/u1/projects/default/memory\tuser-auto\t1 files", '"Business trip to Tokyo next week"',
                     "would write 1 files into 1 places (merge): 1 created, 0 updated, 0 unchanged, 0 removed — dry",
                     "wrote 1 files into 1 places (merge): 1 created, 0 updated, 0 unchanged, 0 removed",
                     '"state": "initialize"', '"action": "mark-synced"', "files indexed",
                     "stored the cl100k_base encoding", "doctor: OK"]:
        assert fragment in said, (fragment, said)
    assert (workdir / "u1-backup.zip").exists()
    u2 = home / ".harness" / "users" / "u2"
    assert not u2.exists() or not any(p.name != "MEMORY.md" for p in u2.rglob("*.md"))  # `clear users/u2` forgot u2
    assert "moved to each place's trash" in said  # ... restorably (`trash restore`), as the command says
