"""The zip form of a bundle: the store tree itself, plus an index with checksums and meta.

Why a tree: ``unzip`` gives the same layout as ``~/.harness`` (``users/100/agent-memory/default/
user_role.md``), so a person can read or edit a backup with any editor, and a zip of a local
``.harness`` folder imports as it is. ``harness-memory-bundle.json`` beside the files keeps what
the tree cannot: sha256 per file, created times and the manifest meta.

Reading a zip is all or nothing: every entry is checked (``entry_problem``: ``..``, absolute
names, drive letters, backslashes, symlinks and other non-regular entries; NFC collisions;
entries outside any memory directory; sizes) and any problem refuses the whole zip with every
problem listed. The entry count and total uncompressed size are bounded before anything is
read, and each entry again while reading (zip bombs). Names only ever become places through
``place_of_rel`` + ``validate_filename``; nothing is extracted to disk.
"""

from __future__ import annotations

import io
import re
import stat
import unicodedata
import zipfile
import zlib

from pydantic import ValidationError

from ..errors import MemoryFormatError
from ..layout import INDEX_FILE, is_derived
from ..memdir import is_state_file
from .bundle import MAX_STATE_FILE_BYTES, Bundle, BundleFile, BundlePlace, encode_file
from .bundle_import import BundleInvalid
from .places import normalize_path, place_of_rel

ZIP_INDEX = "harness-memory-bundle.json"
ZIP_MEDIA_TYPE = "application/zip"
#: Top-level folders of a store tree that hold no memories (a zipped ``.harness`` folder has them).
IGNORED_TOP_DIRS = frozenset({"sessions", ".locks"})
_DOS_REPARSE_POINT = 0x400
_DRIVE = re.compile(r"^[A-Za-z]:")


def bundle_to_zip(bundle: Bundle) -> bytes:
    """The zip bytes: every file at its tree path, and the index without contents."""
    buffer = io.BytesIO()
    index = bundle.model_copy(deep=True)
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for src, dst in zip(bundle.places, index.places, strict=True):
            base = src.place().rel_dir
            for item in src.files:
                zf.writestr(base + item.file, item.data())
            for item in src.state:
                zf.writestr(base + item.file, item.data())
            for item in dst.files:
                item.content = None
            dst.state = []
        zf.writestr(ZIP_INDEX, index.model_dump_json(indent=1))
    return buffer.getvalue()


def bundle_from_zip(data: bytes, *, max_file_bytes: int, max_total_bytes: int, max_entries: int = 20000,
                    key_prefix: str = "memory/") -> Bundle:
    """Rebuild a Bundle from a zip; raise BundleInvalid listing every bad entry (or
    MemoryFormatError when the body is no zip at all). Nothing is extracted to disk."""
    bundle, problems = read_zip(data, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes,
                                max_entries=max_entries, key_prefix=key_prefix)
    if problems:
        raise BundleInvalid(problems)
    return bundle


def read_zip(data: bytes, *, max_file_bytes: int, max_total_bytes: int, max_entries: int = 20000,
             key_prefix: str = "memory/") -> tuple[Bundle, list[str]]:
    """The Bundle of a zip's good entries and the problems of its bad ones. Importers pass the
    problems on to ``plan_import(problems=…)`` so one 422 lists the zip's bad entries and the
    bad memories (frontmatter, places) together. Raises BundleInvalid only when the zip is too
    big to look at (entry count, total size), MemoryFormatError when it is no zip."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError) as exc:
        raise MemoryFormatError(f"the body is not a valid zip file ({exc})") from None
    problems: list[str] = []
    with zf:
        infos = zf.infolist()
        declared = sum(i.file_size for i in infos)
        if len(infos) > max_entries:  # checked before looking at any entry: a million names is a bomb too
            raise BundleInvalid([f"the zip holds {len(infos)} entries; the limit is {max_entries} "
                                 "(limits.import_max_entries)"])
        if declared > max_total_bytes:
            raise BundleInvalid([f"the zip unpacks to {declared} bytes; the limit is {max_total_bytes} "
                                 "(limits.import_max_bytes)"])
        bundle = _read_index(zf, problems)
        by_path = {p.place(key_prefix).rel_dir: p for p in bundle.places if _safe_place(p)}
        known = {(path, f.file): f for path, p in by_path.items() for f in p.files}
        seen: dict[str, str] = {}
        total = 0
        for info in infos:
            problem = entry_problem(info)
            if problem is not None:
                problems.append(f"{info.filename}: {problem}")
                continue
            if info.is_dir() or info.filename == ZIP_INDEX:
                continue
            rel = unicodedata.normalize("NFC", normalize_path(info.filename, key_prefix))
            if rel in seen:
                problems.append(f"{info.filename}: appears twice in the zip" if seen[rel] == info.filename else
                                f"{info.filename}: the same name as {seen[rel]} after Unicode (NFC) normalisation")
                continue
            seen[rel] = info.filename
            located = place_of_rel(rel, key_prefix)
            if located is None:
                if rel.split("/", 1)[0] in IGNORED_TOP_DIRS:
                    continue  # session summaries and locks of a zipped .harness folder: not memories
                problems.append(f"{info.filename}: not inside a memory directory (users/<id>/agent-memory/<type>/, "
                                "users/<id>/projects/<project>/memory/, agent-memory/<type>/ or "
                                "projects/<project>/memory/)")
                continue
            place, name = located
            if name == INDEX_FILE or is_derived(name) or name.endswith("/" + INDEX_FILE):
                continue  # regenerated on import
            state = is_state_file(name)
            limit = MAX_STATE_FILE_BYTES if state else max_file_bytes
            if info.file_size > limit:
                problems.append(f"{info.filename}: {info.file_size} bytes; the limit is {limit}")
                continue
            try:
                with zf.open(info) as fh:
                    raw = fh.read(limit + 1)
            except (zipfile.BadZipFile, RuntimeError, NotImplementedError, ValueError, EOFError,
                    zlib.error) as exc:
                problems.append(f"{info.filename}: cannot be read ({exc})")
                continue
            total += len(raw)
            if len(raw) > limit or total > max_total_bytes:
                problems.append(f"{info.filename}: larger than it claims")
                continue
            entry = by_path.get(place.rel_dir)
            if entry is None:
                entry = by_path[place.rel_dir] = BundlePlace.of(place)
                bundle.places.append(entry)
            if state:
                entry.state.append(encode_file(name, raw))
                continue
            fresh = encode_file(name, raw)
            listed = known.get((place.rel_dir, name))
            if listed is None:
                entry.files.append(fresh)
            else:
                if listed.sha256 is not None and listed.sha256 != fresh.sha256:
                    problems.append(f"{info.filename}: sha256 does not match the zip's index")
                listed.encoding, listed.content = fresh.encoding, fresh.content
    for place in bundle.places:
        for item in place.files:
            if item.content is None:
                problems.append(f"{place.path}/{item.file}: listed in {ZIP_INDEX} but missing from the zip")
    for place in bundle.places:  # the missing ones are reported; they must not fail plan_import again
        place.files = [item for item in place.files if item.content is not None]
    return bundle, problems


def entry_problem(info: zipfile.ZipInfo) -> str | None:
    """Why a zip entry can never be imported (its name or its kind), or None.

    Names are checked as written, before any normalisation: ``..``, an absolute path, a drive
    letter, a backslash or a control character is refused, never "repaired" (an absolute
    ``/users/u1/…`` must not be read as relative). Only regular files and directories are
    accepted: a symlink (or device, FIFO…) says so in the Unix mode of ``external_attr``, a
    Windows reparse point in its DOS attributes; an encrypted entry cannot be checked."""
    name = info.filename
    mode = (info.external_attr >> 16) & 0o170000
    if info.create_system == 3 and mode not in (0, stat.S_IFREG, stat.S_IFDIR):
        return "a symbolic link" if mode == stat.S_IFLNK else "not a regular file"
    if info.external_attr & _DOS_REPARSE_POINT:
        return "not a regular file (a Windows reparse point)"
    if info.flag_bits & 0x1:
        return "encrypted"
    if "\\" in name:
        return "a backslash in the name (zip names use '/')"
    if name.startswith(("/", "~")):
        return "an absolute path (names in the zip are relative to the .harness folder)"
    if _DRIVE.match(name):
        return "a drive letter (names in the zip are relative to the .harness folder)"
    if ".." in name.split("/"):
        return "'..' in the path"
    if any(unicodedata.category(ch) in ("Cc", "Cf") for ch in name):
        return "a control or invisible character in the name"
    return None


def _read_index(zf: zipfile.ZipFile, problems: list[str]) -> Bundle:
    try:
        info = zf.getinfo(ZIP_INDEX)
    except KeyError:
        return Bundle(scope="zip")
    if info.file_size > 16 * 1024 * 1024:
        problems.append(f"{ZIP_INDEX} is too large")
        return Bundle(scope="zip")
    try:
        return Bundle.model_validate_json(zf.read(info))
    except ValidationError as exc:
        problems.append(f"{ZIP_INDEX} is not a valid bundle index: {exc.errors()[0]['msg']}")
        return Bundle(scope="zip")


def _safe_place(place: BundlePlace) -> bool:
    try:
        place.place()
    except MemoryFormatError:
        return False
    except ValueError:
        return False
    return True


__all__ = ["ZIP_INDEX", "ZIP_MEDIA_TYPE", "BundleFile", "bundle_from_zip", "bundle_to_zip", "entry_problem", "read_zip"]
