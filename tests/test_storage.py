"""The ObjectStore contract, run against both backends (LocalStore and CosStore on SeaweedFS),
plus each backend's own failure modes.

Why one suite for both: memdir and the tools must not be able to tell the backends apart, so
the same assertions run on each (the ``store`` fixture is parametrized ``local`` / ``cos``).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness_memory.config import ConfigError, StoreConfig
from harness_memory.errors import (
    AccessDenied,
    InvalidName,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
    StorageUnavailable,
)
from harness_memory.storage import CosStore, LocalStore, ObjectStore, make_store
from harness_memory.storage import local as local_module
from harness_memory.storage.local import TMP_MARK
from tests.conftest import cos_test_settings
from tests.servers import SeaweedFS

K = "memory/users/100/agent-memory/default/"


# -- the shared contract ------------------------------------------------------------------
def test_put_get_head_round_trip(store: ObjectStore) -> None:
    key = K + "user_role.md"
    etag = store.put(key, b"# role\nengineer\n", content_type="text/markdown")
    assert etag and '"' not in etag
    got = store.get(key)
    assert (got.key, got.data, got.etag) == (key, b"# role\nengineer\n", etag)
    assert abs(got.last_modified - time.time()) < 300
    info = store.head(key)
    assert (info.key, info.size, info.etag) == (key, 16, etag)
    assert store.exists(key) and store.get_or_none(key) == got


def test_missing_key(store: ObjectStore) -> None:
    key = K + "nope.md"
    with pytest.raises(ObjectNotFound, match=r"nope\.md"):
        store.get(key)
    with pytest.raises(ObjectNotFound):
        store.head(key)
    assert store.get_or_none(key) is None and not store.exists(key)


def test_overwrite_changes_etag(store: ObjectStore) -> None:
    key = K + "a.md"
    first = store.put(key, b"one")
    second = store.put(key, b"two")
    assert first != second
    assert store.get(key).data == b"two" and store.head(key).etag == second


def test_put_if_absent(store: ObjectStore) -> None:
    key = K + "new.md"
    etag = store.put_if_absent(key, b"first")
    assert store.get(key).etag == etag
    with pytest.raises(PreconditionFailed, match="already exists"):
        store.put_if_absent(key, b"second")
    assert store.get(key).data == b"first"


def test_put_if_match(store: ObjectStore) -> None:
    key = K + "MEMORY.md"
    stale = store.put(key, b"v1")
    fresh = store.put(key, b"v2")
    with pytest.raises(PreconditionFailed, match=r"MEMORY\.md"):
        store.put_if_match(key, b"lost update", stale)
    assert store.get(key).data == b"v2"
    newest = store.put_if_match(key, b"v3", fresh)
    assert store.get(key).etag == newest and store.get(key).data == b"v3"
    with pytest.raises(PreconditionFailed):
        store.put_if_match(K + "gone.md", b"x", fresh)
    assert not store.exists(K + "gone.md")


def test_put_if_match_race_has_exactly_one_winner(store: ObjectStore, request: pytest.FixtureRequest) -> None:
    key = K + "race.md"
    if isinstance(store, CosStore):
        # SeaweedFS makes the losers of a conditional-PUT race wait in whole-second steps (seen:
        # 1 to 5 s with 8 writers on a quiet machine), so the suite's 5 s fast-failure timeout
        # would turn a correct 412 into a timeout; this test is about the winner, not the speed.
        store = CosStore(**{**cos_test_settings(request.getfixturevalue("seaweedfs"),
                                                request.getfixturevalue("cos_bucket")), "cos_timeout": 60.0})
        request.addfinalizer(store.close)
    etag = store.put(key, b"base")
    barrier = threading.Barrier(8)

    def attempt(i: int) -> str | None:
        barrier.wait()
        try:
            store.put_if_match(key, f"writer {i}".encode(), etag)
            return f"writer {i}"
        except PreconditionFailed:
            return None

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(attempt, range(8)))
    winners = [r for r in results if r]
    assert len(winners) == 1, results
    assert store.get(key).data == winners[0].encode()


def test_delete_is_idempotent(store: ObjectStore) -> None:
    key = K + "del.md"
    store.delete(key)  # never existed
    store.put(key, b"x")
    store.delete(key)
    assert not store.exists(key)
    store.delete(key)


def test_delete_many_reports_only_real_failures(store: ObjectStore) -> None:
    keys = [K + f"m{i}.md" for i in range(5)]
    for key in keys:
        store.put(key, b"x")
    failures = store.delete_many([*keys, K + "never.md", "memory/../escape.md"])
    assert [f.key for f in failures] == ["memory/../escape.md"]
    assert all(not store.exists(k) for k in keys)
    assert store.delete_many([]) == []


def test_list_paginates_past_1000_keys_in_order_and_only_under_prefix(store: ObjectStore) -> None:
    prefix = "memory/big/"
    keys = [f"{prefix}k{i:05d}.md" for i in range(1050)]
    outside = ["memory/big-other/x.md", "memory/bi.md", "memory/other/big/y.md"]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: store.put(k, k.encode()), keys + outside))
    before = store.request_count
    listed = list(store.list(prefix))
    assert [i.key for i in listed] == keys
    if isinstance(store, CosStore):
        assert store.request_count - before == 2  # two LIST pages: 1,000 + 50
    assert all(i.size == len(i.key) and i.etag and '"' not in i.etag for i in listed)
    assert [i.key for i in store.list("memory/big")] == sorted([*keys, "memory/big-other/x.md"])
    assert list(store.list("elsewhere/")) == []
    before = store.request_count
    assert store.delete_many(keys) == []
    assert list(store.list(prefix)) == []
    if isinstance(store, CosStore):
        assert store.request_count - before == 3  # 2 batch deletes + 1 list page


UNICODE = {
    "memory/users/用户甲/agent-memory/默认/用户偏好.md": "用户喜欢简洁的回答。\n",
    "memory/users/u1/agent-memory/default/🎉 party.md": "emoji 🎉🌍 and 中文\n",
    "memory/users/u1/agent-memory/default/a+b %25 c&d=e.md": "plus, space, percent\n",
}


def test_unicode_and_odd_keys_round_trip(store: ObjectStore) -> None:
    for key, text in UNICODE.items():
        etag = store.put(key, text.encode("utf-8"))
        got = store.get(key)
        assert got.data.decode("utf-8") == text and got.etag == etag
    listed = {i.key for i in store.list("memory/users/")}
    assert listed == set(UNICODE)
    assert store.delete_many(UNICODE) == []
    assert list(store.list("memory/users/")) == []


@pytest.mark.parametrize(
    "key",
    [
        "",
        "other/x.md",
        "/memory/x.md",
        "memory/../x.md",
        "memory/a/./b.md",
        "memory/a//b.md",
        "memory/x/",
        "memory/a\\b.md",
        "memory/a\x00b.md",
        "memory/a\u200bb.md",
        "memory/" + "长" * 300,
    ],
)
def test_invalid_keys_are_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(InvalidName):
        store.put(key, b"x")
    with pytest.raises(InvalidName):
        store.get(key)
    with pytest.raises(InvalidName):
        store.head(key)
    with pytest.raises(InvalidName):
        store.delete(key)
    with pytest.raises(InvalidName):
        store.put_if_absent(key, b"x")


async def test_async_twins(store: ObjectStore) -> None:
    key = K + "async.md"
    etag = await store.aput(key, b"one")
    assert (await store.aget(key)).data == b"one"
    assert (await store.ahead(key)).etag == etag
    with pytest.raises(PreconditionFailed):
        await store.aput_if_absent(key, b"two")
    etag2 = await store.aput_if_match(key, b"two", etag)
    with pytest.raises(PreconditionFailed):
        await store.aput_if_match(key, b"three", etag)
    assert [i.key for i in await store.alist(K)] == [key]
    assert (await store.aget(key)).etag == etag2
    await store.adelete(key)
    assert await store.aget_or_none(key) is None
    await store.aput_if_absent(K + "b.md", b"b")
    assert await store.adelete_many([K + "b.md"]) == []


# -- LocalStore only ------------------------------------------------------------------------
def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if TMP_MARK in p.name]


def test_local_writes_leave_no_temp_files(local_store: LocalStore) -> None:
    for i in range(20):
        local_store.put(K + f"f{i % 3}.md", b"x" * i)
    local_store.put_if_absent(K + "new.md", b"y")
    assert _temp_files(local_store.root) == []


def test_local_failed_write_leaves_no_temp_file(local_store: LocalStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit case: the rename is made to fail (an I/O error we cannot cause for real)."""
    key = K + "keep.md"
    local_store.put(key, b"original")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(local_module.os, "replace", broken_replace)
    with pytest.raises(StorageError, match=r"keep\.md"):
        local_store.put(key, b"new")
    monkeypatch.undo()
    assert _temp_files(local_store.root) == []
    assert local_store.get(key).data == b"original"


def test_local_permission_denied_is_access_denied(local_store: LocalStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit case: CI runs as root, which ignores folder permissions, so the OS refusal is simulated."""
    key = K + "ro.md"
    local_store.put(key, b"x")

    def refused(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(local_module.tempfile, "mkstemp", refused)
    with pytest.raises(AccessDenied, match=r"ro\.md"):
        local_store.put(key, b"y")
    monkeypatch.undo()
    assert _temp_files(local_store.root) == []
    assert local_store.get(key).data == b"x"


def test_local_keys_cannot_escape_root(local_store: LocalStore, tmp_path: Path) -> None:
    for key in ["memory/../outside.md", "memory/a/../../outside.md", "memory//etc/passwd"]:
        with pytest.raises(InvalidName):
            local_store.put(key, b"x")
    local_store.put("memory/inside.md", b"x")
    assert (local_store.root / "inside.md").read_bytes() == b"x"
    assert not (tmp_path / "outside.md").exists()
    assert local_store.path_for(K + "a.md").is_relative_to(local_store.root)


# -- CosStore only --------------------------------------------------------------------------
def test_cos_maps_404_to_object_not_found(cos_store: CosStore) -> None:
    with pytest.raises(ObjectNotFound, match=r"no object at memory/x/missing\.md"):
        cos_store.get("memory/x/missing.md")
    with pytest.raises(ObjectNotFound):
        cos_store.head("memory/x/missing.md")


def test_cos_missing_bucket_is_not_a_missing_object(seaweedfs: SeaweedFS) -> None:
    settings = cos_test_settings(seaweedfs, "no-such-bucket-hm")
    with closing(CosStore(**settings)) as store:
        with pytest.raises(StorageError, match="bucket no-such-bucket-hm does not exist") as err:
            store.get("memory/a.md")
        assert not isinstance(err.value, ObjectNotFound)


def test_cos_server_gone_is_storage_unavailable() -> None:
    """A private SeaweedFS (the session one must stay up) is killed under a live store."""
    server = SeaweedFS(boot_bucket="private").start()
    try:
        with closing(CosStore(**cos_test_settings(server, "private"))) as store:
            store.put("memory/a.md", b"x")
            server.kill()
            for call in (
                lambda: store.get("memory/a.md"),
                lambda: store.put("memory/a.md", b"y"),
                lambda: list(store.list("memory/")),
            ):
                with pytest.raises(StorageUnavailable, match="refused") as err:
                    call()
                assert f"127.0.0.1:{server.s3_port}/private" in str(err.value)
            assert store.delete_many(["memory/a.md"])[0].key == "memory/a.md"
    finally:
        server.stop()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def test_cos_timeout_is_storage_unavailable(silent_port: int) -> None:
    settings = {
        "cos_domain": f"127.0.0.1:{silent_port}/b",
        "cos_scheme": "http",
        "cos_anonymous": True,
        "cos_timeout": 0.3,
        "cos_retries": 0,
    }
    with closing(CosStore(**settings)) as store:
        started = time.monotonic()
        with pytest.raises(StorageUnavailable, match=r"memory/a\.md: no answer within 0\.3 s"):
            store.get("memory/a.md")
        assert time.monotonic() - started < 3


class _StatusHandler(BaseHTTPRequestHandler):
    """Answers every request with the status named by the first path segment after the bucket."""

    def _answer(self) -> None:
        status = int(self.path.split("/")[3].split(".")[0])
        body = b"<Error><Code>Test</Code><Message>scripted</Message></Error>"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def status_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StatusHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (403, AccessDenied),
        (401, AccessDenied),
        (503, StorageUnavailable),
        (500, StorageUnavailable),
        (400, StorageError),
        (409, StorageError),
    ],
)
def test_cos_maps_http_status(status_server: int, status: int, error: type[StorageError]) -> None:
    """Error mapping by status code alone (this stub's XML lacks RequestId, so the SDK's own
    parsing gives up, as with some real servers)."""
    settings = {
        "cos_domain": f"127.0.0.1:{status_server}/b",
        "cos_scheme": "http",
        "cos_anonymous": True,
        "cos_retries": 0,
    }
    with closing(CosStore(**settings)) as store:
        key = f"memory/{status}.md"
        with pytest.raises(error, match=rf"{status}\.md.*HTTP {status}") as err:
            store.get(key)
        assert type(err.value) is error


def test_cos_requests_go_straight_to_the_adapter(cos_store: CosStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """#18: a COS request skips ``Session.request``'s merging (a fifth of its client CPU): every
    operation works with that path made to fail."""
    import requests

    def merged(*args: object, **kwargs: object) -> None:
        raise AssertionError("Session.prepare_request was used")

    monkeypatch.setattr(requests.Session, "prepare_request", merged)
    etag = cos_store.put("memory/direct.md", b"one")
    assert cos_store.get("memory/direct.md").data == b"one"
    cos_store.put_if_match("memory/direct.md", b"two", etag)
    with pytest.raises(PreconditionFailed):
        cos_store.put_if_absent("memory/direct.md", b"three")
    assert cos_store.head("memory/direct.md").size == 3
    assert [i.key for i in cos_store.list("memory/")] == ["memory/direct.md"]
    cos_store.delete("memory/direct.md")
    with pytest.raises(ObjectNotFound):
        cos_store.get("memory/direct.md")


def test_cos_direct_session_follows_a_redirect_only_when_asked(cos_store: CosStore, seaweedfs: SeaweedFS,
                                                               cos_bucket: str) -> None:
    """The direct path has no redirect machinery of its own: a redirect is sent again through
    ``Session.request`` when the caller allows redirects, and returned as it is when not (the
    SDK's default, ``AllowRedirects=False``)."""
    from harness_memory.storage.cos import _DirectSession

    cos_store.put("memory/moved.md", b"followed")
    target = f"http://{seaweedfs.domain_for(cos_bucket)}/memory/moved.md"

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(307)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        with _DirectSession() as session:
            url = f"http://127.0.0.1:{server.server_address[1]}/moved.md"
            followed = session.get(url, timeout=5)
            assert (followed.status_code, followed.content) == (200, b"followed")
            kept = session.get(url, timeout=5, allow_redirects=False)
            assert kept.status_code == 307 and kept.headers["Location"] == target
    finally:
        server.shutdown()
        server.server_close()


def test_cos_redirect_is_an_error_not_a_stored_object(cos_store: CosStore, seaweedfs: SeaweedFS,
                                                       cos_bucket: str) -> None:
    """The SDK follows no redirect and hands any status below 400 back as success: through a
    proxy answering 307, a PUT was reported stored (nothing was) and a GET read an empty body.
    Now both are errors that say what to fix, and nothing is written."""
    class Redirect(BaseHTTPRequestHandler):
        def _go(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(307)
            self.send_header("Location", f"http://{seaweedfs.domain_for('')[:-1]}{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_PUT = do_HEAD = do_DELETE = _go

        def log_message(self, *args: object) -> None:
            pass

    cos_store.put("memory/there.md", b"stored directly")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        settings = {**cos_test_settings(seaweedfs, cos_bucket),
                    "cos_domain": f"127.0.0.1:{server.server_address[1]}/{cos_bucket}"}
        with closing(CosStore(**settings)) as store:
            with pytest.raises(StorageError, match=r"HTTP 307 \(a redirect\) to write memory/moved\.md"):
                store.put("memory/moved.md", b"never stored")
            with pytest.raises(StorageError, match=r"HTTP 307 \(a redirect\) to read memory/there\.md"):
                store.get("memory/there.md")
        with pytest.raises(ObjectNotFound):
            cos_store.get("memory/moved.md")
    finally:
        server.shutdown()
        server.server_close()


def test_cos_conditional_put_off_degrades_put_if_match(seaweedfs: SeaweedFS, cos_bucket: str) -> None:
    """Real-COS mode: If-Match is not sent, so a stale etag wins (the caller's lock guards)."""
    settings = {**cos_test_settings(seaweedfs, cos_bucket), "cos_conditional_put": "off"}
    with closing(CosStore(**settings)) as store:
        assert not store.supports_conditional_put
        stale = store.put("memory/a.md", b"v1")
        store.put("memory/a.md", b"v2")
        store.put_if_match("memory/a.md", b"v3", stale)
        assert store.get("memory/a.md").data == b"v3"


def test_cos_settings_and_describe() -> None:
    real = CosStore(
        cos_bucket="mem-1250000000",
        cos_region="ap-guangzhou",
        cos_secret_id="AKIDsecretid",
        cos_secret_key="topsecretkey",
        cos_token="tok123",
    )
    try:
        assert not real.supports_conditional_put  # auto: off for real COS
        text = real.describe()
        assert "mem-1250000000" in text and "ap-guangzhou" in text
        assert not any(s in text for s in ("AKIDsecretid", "topsecretkey", "tok123"))
    finally:
        real.close()
    local = CosStore(cos_domain="127.0.0.1:1/b", cos_anonymous=True)
    try:
        assert local.supports_conditional_put and local.bucket == "b"  # auto: on for a domain
    finally:
        local.close()


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"cos_region": "ap-guangzhou", "cos_anonymous": True}, "HARNESS_MEMORY_COS_BUCKET"),
        ({"cos_bucket": "b-1250000000", "cos_anonymous": True}, "HARNESS_MEMORY_COS_REGION"),
        ({"cos_bucket": "b-1250000000", "cos_region": "ap-guangzhou"}, "HARNESS_MEMORY_COS_SECRET_ID"),
    ],
)
def test_cos_missing_settings_raise_config_error(fields: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        make_store(StoreConfig(backend="cos", **fields))  # type: ignore[arg-type]


# -- make_store -----------------------------------------------------------------------------
def test_make_store_picks_backend(tmp_path: Path, seaweedfs: SeaweedFS, cos_bucket: str) -> None:
    local = make_store(StoreConfig(local_root=tmp_path / ".harness"))
    assert isinstance(local, LocalStore) and local.root == (tmp_path / ".harness").resolve()
    local.close()
    cos = make_store(StoreConfig(**cos_test_settings(seaweedfs, cos_bucket)))
    try:
        assert isinstance(cos, CosStore)
        cos.put("memory/a.md", b"x")
        assert cos.get("memory/a.md").data == b"x"
    finally:
        cos.close()
    implied = make_store(StoreConfig(cos_bucket="b-1250000000", cos_region="ap-guangzhou", cos_anonymous=True))
    assert isinstance(implied, CosStore)  # a bucket implies the cos backend
    implied.close()


def test_local_symlinked_folder_cannot_lead_outside(local_store: LocalStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (local_store.root / "users").mkdir(parents=True, exist_ok=True)
    (local_store.root / "users" / "evil").symlink_to(outside, target_is_directory=True)
    with pytest.raises(AccessDenied, match="outside the store root"):
        local_store.put("memory/users/evil/x.md", b"x")
    with pytest.raises(AccessDenied):
        local_store.get("memory/users/evil/x.md")
    assert list(outside.iterdir()) == []


def test_local_lock_folder_is_not_a_key(local_store: LocalStore) -> None:
    with pytest.raises(InvalidName, match="lock folder"):
        local_store.put("memory/.locks/x.md", b"x")
