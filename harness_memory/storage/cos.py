"""Tencent COS (or any COS/S3-compatible endpoint) object store over ``qcloud_cos``.

Why this shape:
- The SDK is synchronous and, by default, shares one class-wide ``requests.Session`` with a
  pool of 10 connections between every client in the process. Each CosStore owns its session
  (pool ``cos_pool_size``) so a busy async caller neither starves nor is starved by others.
- Real COS has no If-Match / If-None-Match on PUT: create-only uses its own
  ``x-cos-forbid-overwrite: true`` (409 when the key exists). S3-compatible servers (SeaweedFS,
  used by the tests) enforce ``If-Match`` / ``If-None-Match: *`` (412). ``cos_conditional_put``
  says which world we are in; ``auto`` = on for a custom ``cos_domain``, off for real COS.
- With conditional PUT off, ``put_if_match`` is a plain PUT: the caller's per-directory lock
  (Redis or in-process) is the real guard, as DESIGN.md's consistency section requires.
- SDK errors are mapped by HTTP status first (some servers' XML lacks fields, so the SDK's
  error code can read "Unknown"), into messages that name the key and what happened.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor
from datetime import datetime
from email.utils import parsedate_to_datetime
from hashlib import md5
from typing import Any, Literal, TypeVar
from urllib.parse import unquote_plus

import requests
import urllib3
from pydantic import ValidationError
from qcloud_cos import CosConfig, CosS3Client
from qcloud_cos.cos_exception import CosClientError, CosServiceError

from ..config import ConfigError, StoreConfig
from ..errors import (
    AccessDenied,
    InvalidName,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
    StorageUnavailable,
)
from .base import DeleteFailure, ObjectInfo, ObjectStore, StoredObject
from .keys import validate_key

T = TypeVar("T")
Condition = Literal["absent", "match"] | None

#: The S3/COS limit of keys per DeleteObjects request and per LIST page.
BATCH = 1000
_NETWORK_ERRORS = (requests.RequestException, urllib3.exceptions.HTTPError, OSError)
#: ``_call``'s action words -> the store-request metric's ``op`` label.
_OPS = {"read": "get", "look up": "head", "list": "list", "write": "put", "delete": "delete"}


class _DropSdkErrorLogs(logging.Filter):
    """The SDK logs every 4xx (even an expected 404 or 412) at ERROR, and every network failure
    with a traceback, right before raising. CosStore turns each of those into an exception with a
    clearer message, so the records only duplicate it and alarm log readers: drop them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.funcName == "send_request" and record.levelno >= logging.WARNING)


def _quiet_sdk_logs() -> None:
    sdk_logger = logging.getLogger("qcloud_cos.cos_client")
    if not any(isinstance(f, _DropSdkErrorLogs) for f in sdk_logger.filters):
        sdk_logger.addFilter(_DropSdkErrorLogs())


class CosStore(ObjectStore):
    """ObjectStore on a COS bucket. Build with ``CosStore(store_config)`` or field kwargs
    (``CosStore(cos_domain="127.0.0.1:8333/b", cos_anonymous=True, cos_scheme="http")``);
    kwargs override the config's fields. Raises ConfigError when a needed setting is missing."""

    def __init__(self, cfg: StoreConfig | None = None, *, executor: Executor | None = None, **fields: Any) -> None:
        cfg = _merge(cfg, fields)
        _check(cfg)
        super().__init__(cfg.io_threads, executor)
        self.cfg = cfg
        self.key_prefix = cfg.key_prefix
        self.bucket: str = cfg.cos_bucket or _bucket_from_domain(cfg.cos_domain or "")
        mode = cfg.cos_conditional_put
        self.supports_conditional_put = mode == "on" or (mode == "auto" and bool(cfg.cos_domain))
        self._where = cfg.cos_domain or cfg.cos_endpoint or f"{self.bucket} in {cfg.cos_region}"
        self._count_lock = threading.Lock()
        self._session = _DirectSession()
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=cfg.cos_pool_size, pool_block=False)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        sdk = _sdk_config(cfg)
        self._client = CosS3Client(sdk, retry=cfg.cos_retries, session=self._session)
        #: Conditional PUTs go through a client that never retries: ``_put_conditional`` does, and
        #: so knows when a refusal answers a retry (whose first attempt may have landed).
        self._once = CosS3Client(sdk, retry=0, session=self._session)
        _settle_environment(self._session, sdk, self.bucket)
        _quiet_sdk_logs()

    def describe(self) -> str:
        cond = "on" if self.supports_conditional_put else "off"
        return (
            f"CosStore(bucket={self.bucket}, at={self._where}, scheme={self.cfg.cos_scheme}, "
            f"prefix={self.key_prefix}, conditional_put={cond})"
        )

    def close(self) -> None:
        super().close()
        self._session.close()

    # -- reads ----------------------------------------------------------------------------
    def get(self, key: str) -> StoredObject:
        validate_key(key, self.key_prefix)

        def fetch() -> StoredObject:
            resp = self._client.get_object(Bucket=self.bucket, Key=key)
            raw = resp["Body"].get_raw_stream()
            try:
                data = raw.read()  # read fully: only then does the connection go back to the pool
            except BaseException:
                raw.close()
                raise
            return StoredObject(key, data, _etag(resp) or _md5(data), _mtime(resp))

        return self._call("read", key, fetch)

    def head(self, key: str) -> ObjectInfo:
        validate_key(key, self.key_prefix)
        resp = self._call("look up", key, lambda: self._client.head_object(Bucket=self.bucket, Key=key))
        size = int(_header(resp, "Content-Length") or 0)
        return ObjectInfo(key, size, _etag(resp), _mtime(resp))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` in key order, all pages read before returning (so errors
        surface here). Sorted client-side: COS and S3 return key order, but a filer-backed server
        such as SeaweedFS walks folders (``a/b/x`` before ``a/b-c``). Places are small (bounded by
        ``max_files_per_place``), so holding one listing in memory is cheap."""
        if not prefix.startswith(self.key_prefix):
            return iter(())
        found = [info for info in self._list_pages(prefix) if info.key.startswith(prefix)]
        found.sort(key=lambda info: info.key)
        return iter(found)

    def _list_pages(self, prefix: str) -> Iterator[ObjectInfo]:
        marker = ""
        while True:
            page = self._call(
                "list",
                prefix + "*",
                lambda m=marker: self._client.list_objects(  # type: ignore[misc]
                    Bucket=self.bucket, Prefix=prefix, Marker=m, MaxKeys=BATCH, EncodingType="url"
                ),
            )
            contents = page.get("Contents") or []
            last = ""
            for item in contents:
                # The SDK decodes with unquote(), which leaves S3's "+" for a space: decode here
                # the way COS's own Go SDK does (QueryUnescape), correct for COS and S3 alike.
                last = unquote_plus(item["Key"])
                yield ObjectInfo(
                    last,
                    int(item.get("Size") or 0),
                    _strip(item.get("ETag")),
                    _iso_time(item.get("LastModified")),
                )
            if str(page.get("IsTruncated", "false")).lower() != "true" or not contents:
                return
            next_marker = page.get("NextMarker")
            marker = unquote_plus(next_marker) if next_marker else last

    # -- writes ---------------------------------------------------------------------------
    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> str:
        return self._put(key, data, content_type, None)

    def put_if_absent(self, key: str, data: bytes, *, content_type: str | None = None) -> str:
        """Create-only. Sends COS's ``x-cos-forbid-overwrite`` always (S3 servers ignore it) and
        ``If-None-Match: *`` where conditional PUT is on (real COS may not accept it)."""
        headers: dict[str, Any] = {"Metadata": {"x-cos-forbid-overwrite": "true"}}
        if self.supports_conditional_put:
            headers["IfNoneMatch"] = "*"
        return self._put(key, data, content_type, "absent", **headers)

    def put_if_match(self, key: str, data: bytes, etag: str, *, content_type: str | None = None) -> str:
        """With conditional PUT off this is a plain PUT (COS ignores If-Match): callers must hold
        the place lock, which is the real guard against lost updates there."""
        if not self.supports_conditional_put:
            return self._put(key, data, content_type, None)
        quoted = '"' + _strip(etag) + '"'
        return self._put(key, data, content_type, "match", IfMatch=quoted)

    def _put(self, key: str, data: bytes, content_type: str | None, cond: Condition, **headers: Any) -> str:
        validate_key(key, self.key_prefix)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"data for {key} must be bytes, not {type(data).__name__}")
        body = bytes(data)
        if content_type:
            headers["ContentType"] = content_type
        if cond is not None:
            return self._put_conditional(key, body, cond, headers)
        resp = self._call(
            "write",
            key,
            lambda: self._client.put_object(Bucket=self.bucket, Key=key, Body=body, **headers),
            cond=cond,
        )
        return _etag(resp) or _md5(body)

    def _put_conditional(self, key: str, body: bytes, cond: Condition, headers: dict[str, Any]) -> str:
        """A conditional PUT with our own retries (``cos_retries``; 0.25 s, 0.5 s, then 1 s apart).

        Why not the SDK's: it resends blindly, so when a first attempt lands and its answer is lost
        (a timeout, a connection dropped after delivery, a 5xx from a proxy), the retry meets the
        version that attempt wrote and is refused (412 / 409) — a write that happened, reported as
        a conflict. Here a refusal that answers a retry is checked: when the object holds exactly
        the bytes we sent, our earlier attempt landed and its etag is returned. (A conditional PUT
        can be resent safely: both attempts carry the same condition, so at most one lands.)"""
        unclear: StorageError | None = None
        for attempt in range(self.cfg.cos_retries + 1):
            if attempt:
                time.sleep(min(1.0, 0.25 * 2 ** (attempt - 1)))
            try:
                resp = self._call(
                    "write", key,
                    lambda: self._once.put_object(Bucket=self.bucket, Key=key, Body=body, **headers), cond=cond)
                return _etag(resp) or _md5(body)
            except PreconditionFailed:
                if unclear is None:
                    raise
                try:
                    current = self.get_or_none(key)
                except StorageError as exc:
                    raise StorageUnavailable(f"the retry of a write of {key} was refused after an unanswered "
                                             f"attempt ({unclear}), and it cannot be read back ({exc})",
                                             maybe_applied=True) from exc
                if current is not None and current.data == body:
                    logging.getLogger(__name__).info(
                        "%s: the retry of a conditional write was refused because its first attempt had "
                        "landed (%s)", key, unclear)
                    return current.etag
                raise
            except StorageUnavailable as exc:
                if exc.maybe_applied or _server_said(exc):  # (a refused connection sent nothing)
                    unclear = exc
                if attempt == self.cfg.cos_retries:
                    if unclear is not None and not exc.maybe_applied:  # an attempt may have landed
                        raise StorageUnavailable(str(exc), maybe_applied=True) from exc
                    raise
        raise AssertionError("unreachable")

    def delete(self, key: str) -> None:
        validate_key(key, self.key_prefix)
        try:
            self._call("delete", key, lambda: self._client.delete_object(Bucket=self.bucket, Key=key))
        except ObjectNotFound:
            return  # S3 answers 204 for a missing key; some servers say 404: both mean "gone"

    def delete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        """Batch DeleteObjects, 1,000 keys per request; returns per-key failures."""
        failures: list[DeleteFailure] = []
        valid: list[str] = []
        for key in dict.fromkeys(keys):
            try:
                valid.append(validate_key(key, self.key_prefix))
            except InvalidName as exc:
                failures.append(DeleteFailure(key, str(exc)))
        for start in range(0, len(valid), BATCH):
            chunk = valid[start : start + BATCH]
            spec = {"Quiet": "true", "Object": [{"Key": k} for k in chunk]}
            what = f"{len(chunk)} keys from {chunk[0]}"
            try:
                resp = self._call(
                    "delete", what, lambda s=spec: self._client.delete_objects(Bucket=self.bucket, Delete=s)
                )
            except StorageError as exc:
                failures.extend(DeleteFailure(k, str(exc)) for k in chunk)
                continue
            for err in (resp or {}).get("Error") or []:
                key = str(err.get("Key", ""))
                code, msg = err.get("Code", "error"), err.get("Message", "")
                failures.append(DeleteFailure(key, f"could not delete {key}: {code} {msg}".strip()))
        return failures

    # -- plumbing -------------------------------------------------------------------------
    def _call(self, action: str, key: str, fn: Callable[[], T], *, cond: Condition = None) -> T:
        """Run one SDK call (one request, plus the SDK's own retries) and map its errors."""
        with self._count_lock:
            self.request_count += 1
        with self.telemetry.store_request(f"put_if_{cond}" if cond else _OPS.get(action, action)):
            self._session.forget_status()
            try:
                out = fn()
            except CosServiceError as exc:
                raise self._service_error(exc, action, key, cond) from exc
            except CosClientError as exc:
                raise self._client_error(str(exc), action, key, exc.__context__) from exc
            except _NETWORK_ERRORS as exc:  # raised while reading a body, outside the SDK
                raise self._client_error(str(exc), action, key, exc) from exc
            status = self._session.last_status()
            if status is not None and 300 <= status < 400:
                # The SDK hands any status below 400 back as success (it follows no redirect): a
                # PUT would be "stored" and a GET would read an empty body. Neither happened.
                raise StorageError(f"{self._where} answered HTTP {status} (a redirect) to {action} {key}; "
                                   "it was not done. Point cos_endpoint / cos_domain at the store itself")
            return out

    def _service_error(self, exc: CosServiceError, action: str, key: str, cond: Condition) -> StorageError:
        status = int(exc.get_status_code() or 0)
        code, message = _error_fields(exc)
        said = f"HTTP {status}" + (f" {code}" if code else "") + (f": {message}" if message else "")
        if cond and status in (409, 412):
            what = "already exists" if cond == "absent" else "changed since it was read"
            return PreconditionFailed(f"{key} {what} (conditional write refused, {said})")
        if cond == "match" and status == 404:
            return PreconditionFailed(f"{key} no longer exists (conditional write refused)")
        if status == 404 and code == "NoSuchBucket":
            return StorageError(f"bucket {self.bucket} does not exist at {self._where} (to {action} {key})")
        if status == 404:
            return ObjectNotFound(f"no object at {key}")
        if status in (401, 403):
            return AccessDenied(
                f"{self._where} refused to {action} {key} ({said}); check the COS credentials "
                "and the bucket's permissions"
            )
        if status >= 500:
            return StorageUnavailable(f"{self._where} failed to {action} {key} ({said}); try again later")
        return StorageError(f"{self._where} refused to {action} {key} ({said})")

    def _client_error(self, text: str, action: str, key: str, cause: BaseException | None) -> StorageError:
        low = text.lower()
        if "timed out" in low or "timeout" in low:
            reason = f"no answer within {self.cfg.cos_timeout:g} s"
        elif "refused" in low:
            reason = "connection refused (is the server running?)"
        elif "name or service not known" in low or "nodename nor servname" in low:
            reason = "host name not found"
        else:
            reason = text[:300]
        if isinstance(cause, _NETWORK_ERRORS):
            never_sent = "refused" in low or "not known" in low or "nodename" in low
            return StorageUnavailable(f"cannot reach {self._where} to {action} {key}: {reason}",
                                      maybe_applied=not never_sent)
        # No network cause: the SDK refused its input before sending (a settings problem).
        return StorageError(f"COS client could not {action} {key}: {reason}")


# -- helpers ------------------------------------------------------------------------------
def _merge(cfg: StoreConfig | None, fields: Mapping[str, Any]) -> StoreConfig:
    if not fields:
        return cfg or StoreConfig()
    base = cfg.model_dump() if cfg else {}
    try:
        return StoreConfig.model_validate({**base, **fields})
    except ValidationError as exc:
        raise ConfigError(f"invalid COS store settings: {exc}") from None


def _check(cfg: StoreConfig) -> None:
    """Fail at construction, naming the env var, rather than on the first request."""
    if not cfg.cos_bucket and not cfg.cos_domain:
        raise ConfigError("the COS store needs a bucket: set HARNESS_MEMORY_COS_BUCKET")
    if not (cfg.cos_domain or cfg.cos_region or cfg.cos_endpoint):
        raise ConfigError(
            "the COS store needs a region: set HARNESS_MEMORY_COS_REGION (e.g. ap-guangzhou), "
            "or HARNESS_MEMORY_COS_ENDPOINT / HARNESS_MEMORY_COS_DOMAIN"
        )
    if not cfg.cos_anonymous and not (cfg.cos_secret_id and cfg.cos_secret_key):
        raise ConfigError(
            "the COS store needs credentials: set HARNESS_MEMORY_COS_SECRET_ID and "
            "HARNESS_MEMORY_COS_SECRET_KEY (or HARNESS_MEMORY_COS_ANONYMOUS=true for a local server)"
        )


class _DirectSession(requests.Session):
    """The session the SDK sends through: a request goes straight from ``PreparedRequest`` to the
    transport adapter.

    Why: ``Session.request`` merges session-wide cookies, headers, params, hooks and auth into
    every request and then walks the redirect machinery; none of it applies to signed COS
    requests (the SDK sets every header itself, signs in ``auth`` and uses no cookies), yet it
    cost ~0.4 ms of CPU per request here (about a fifth of a request's client CPU, measured with
    requests 2.34), and a pod's CPU per store request is what bounds its saves per second. The
    same ``PreparedRequest``, ``HTTPAdapter``, ``Response`` and exceptions are used, so the SDK's
    retries and our error mapping see exactly what they saw. The SDK asks for no redirects; a
    caller that allows them has one sent again through the full ``Session.request``, which
    follows it. Each thread's last status is kept for ``CosStore._call``, which refuses a 3xx the
    SDK would pass on as success. Instrumentation that patches ``Session.send`` (OpenTelemetry's
    requests instrumentor) does not see these requests; the store's own metrics and spans
    (``Telemetry.store_request``) do."""

    def __init__(self) -> None:
        super().__init__()
        self._answers = threading.local()

    def last_status(self) -> int | None:
        """The HTTP status of the last response this thread received (None: none since ``forget``)."""
        return getattr(self._answers, "status", None)

    def forget_status(self) -> None:
        self._answers.status = None

    def request(self, method: str | bytes, url: str | bytes, params: Any = None, data: Any = None,
                headers: Any = None, cookies: Any = None, files: Any = None, auth: Any = None,
                timeout: Any = None, allow_redirects: bool = True, proxies: Any = None, hooks: Any = None,
                stream: bool | None = None, verify: Any = None, cert: Any = None, json: Any = None
                ) -> requests.Response:
        if cookies or hooks:  # not sent by the SDK: keep requests' own handling for them
            return self._noted(super().request(method, url, params, data, headers, cookies, files, auth, timeout,
                                               allow_redirects, proxies, hooks, stream, verify, cert, json))
        verb = method.decode() if isinstance(method, bytes) else method
        prepared = requests.PreparedRequest()
        prepared.prepare(method=verb.upper(), url=url, headers=headers, files=files, data=data, params=params,
                         auth=auth, json=json)
        address = prepared.url or ""
        resp = self.get_adapter(address).send(
            prepared, stream=bool(stream), timeout=timeout, verify=self.verify if verify is None else verify,
            cert=self.cert if cert is None else cert, proxies={**self.proxies, **(proxies or {})})
        if resp.is_redirect and allow_redirects:
            resp.close()
            return self._noted(super().request(method, url, params, data, headers, cookies, files, auth, timeout,
                                               allow_redirects, proxies, hooks, stream, verify, cert, json))
        if not stream:
            _ = resp.content  # read it whole: only then does the connection go back to the pool
        return self._noted(resp)

    def _noted(self, resp: requests.Response) -> requests.Response:
        self._answers.status = resp.status_code
        return resp


def _settle_environment(session: requests.Session, sdk: CosConfig, bucket: str) -> None:
    """Read the proxy and CA-bundle environment once, for this store's one endpoint, instead of on
    every request: with ``trust_env`` requests walks ``os.environ`` and the no-proxy rules per
    request (~1 ms each, measured, a tenth of a save). The settings it would have found are set on
    the session, so HTTP(S)_PROXY / NO_PROXY / REQUESTS_CA_BUNDLE still apply as before."""
    try:
        url = sdk.uri(bucket=bucket, path="probe")
        found = session.merge_environment_settings(url, {}, None, None, None)
    except Exception as exc:  # keep requests' per-request behaviour
        logging.getLogger(__name__).debug("COS session reads the environment per request (%s)", exc)
        return
    session.proxies.update(found.get("proxies") or {})
    if isinstance(found.get("verify"), str):
        session.verify = found["verify"]
    session.trust_env = False


def _sdk_config(cfg: StoreConfig) -> CosConfig:
    def secret(value: Any) -> str | None:
        return value.get_secret_value() if value is not None else None

    kwargs: dict[str, Any] = {
        "Region": cfg.cos_region,
        "Scheme": cfg.cos_scheme,
        "Timeout": cfg.cos_timeout,
        "Endpoint": cfg.cos_endpoint,
        "Domain": cfg.cos_domain,
        "PoolConnections": 4,
        "PoolMaxSize": cfg.cos_pool_size,
    }
    if cfg.cos_anonymous:
        kwargs["Anonymous"] = True
    else:
        kwargs.update(
            SecretId=secret(cfg.cos_secret_id),
            SecretKey=secret(cfg.cos_secret_key),
            Token=secret(cfg.cos_token),
        )
    try:
        return CosConfig(**kwargs)
    except CosClientError as exc:
        raise ConfigError(f"invalid COS settings: {exc}") from None


def _server_said(exc: StorageError) -> bool:
    """A 5xx answer (the server, or a proxy before it, may have applied the request)."""
    cause = exc.__cause__
    return isinstance(cause, CosServiceError)


def _bucket_from_domain(domain: str) -> str:
    """``127.0.0.1:8333/my-bucket`` -> ``my-bucket``; a bare host names no bucket (used as is)."""
    host, _, path = domain.partition("/")
    return path.strip("/") or host


def _header(resp: Mapping[str, Any], name: str) -> str | None:
    """Servers choose header case (``ETag`` vs ``Etag``): look up case-blind."""
    low = name.lower()
    for key, value in resp.items():
        if isinstance(key, str) and key.lower() == low:
            return value if isinstance(value, str) else None
    return None


def _strip(etag: str | None) -> str:
    return (etag or "").strip().removeprefix("W/").strip('"')


def _etag(resp: Mapping[str, Any]) -> str:
    return _strip(_header(resp, "ETag"))


def _md5(data: bytes) -> str:
    return md5(data, usedforsecurity=False).hexdigest()


def _mtime(resp: Mapping[str, Any]) -> float:
    value = _header(resp, "Last-Modified")
    try:
        return parsedate_to_datetime(value).timestamp() if value else 0.0
    except (TypeError, ValueError):
        return 0.0


def _iso_time(value: str | None) -> float:
    try:
        return datetime.fromisoformat(value).timestamp() if value else 0.0
    except ValueError:
        return 0.0


def _error_fields(exc: CosServiceError) -> tuple[str, str]:
    """(code, message) from the SDK's parsed body, else from the raw XML, else empty."""
    digest = exc.get_digest_msg()
    if isinstance(digest, dict) and "code" in digest:
        return str(digest.get("code") or ""), str(digest.get("message") or "")
    raw = exc.get_origin_msg()
    text = raw if isinstance(raw, str) else ""
    code = re.search(r"<Code>([^<]*)</Code>", text)
    message = re.search(r"<Message>([^<]*)</Message>", text)
    return (code.group(1) if code else ""), (message.group(1) if message else "")
