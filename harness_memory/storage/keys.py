"""Key validation shared by every backend, and the local-path <-> key mapping.

Why here: a key is the one thing every backend must agree on; a key that one backend would
normalise (``a//b``, ``a/./b``) and another would not could make two trees differ or let a
name escape its place.
"""

from __future__ import annotations

import unicodedata
from pathlib import PurePosixPath

from ..errors import InvalidName
from .base import MAX_KEY_BYTES

HARNESS_DIR = ".harness"


def validate_key(key: str, prefix: str = "memory/") -> str:
    """Return ``key`` if it is a clean object key under ``prefix``; raise InvalidName otherwise."""
    if not isinstance(key, str) or not key:
        raise InvalidName("object key must be a non-empty string")
    if not key.startswith(prefix):
        raise InvalidName(f"object key {key!r} must start with {prefix!r}")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidName(f"object key is longer than {MAX_KEY_BYTES} bytes")
    if "\\" in key or key.startswith("/") or key.endswith("/"):
        raise InvalidName(f"object key {key!r} has a backslash or a leading/trailing slash")
    for ch in key:
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            raise InvalidName(f"object key {key!r} contains a control or invisible character")
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise InvalidName(f"object key {key!r} has an empty, '.' or '..' segment")
    return key


def key_from_local_path(path: str, prefix: str = "memory/") -> str:
    """``/Users/mac/.harness/users/100/x.md`` -> ``memory/users/100/x.md`` (cut at ``/.harness/``)."""
    posix = str(path).replace("\\", "/")
    marker = f"/{HARNESS_DIR}/"
    if marker not in posix:
        raise InvalidName(f"path {path!r} is not under a {HARNESS_DIR} root")
    rel = posix.split(marker, 1)[1]
    return validate_key(prefix + rel, prefix)


def local_path_from_key(root: str, key: str, prefix: str = "memory/") -> str:
    """``memory/users/100/x.md`` -> ``<root>/users/100/x.md``."""
    validate_key(key, prefix)
    return str(PurePosixPath(root) / key[len(prefix) :])
