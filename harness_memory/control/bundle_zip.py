"""The zip form of a bundle: the store tree itself, plus an index with checksums and meta.

Why a tree: ``unzip`` gives the same layout as ``~/.harness`` (``users/100/agent-memory/default/
user_role.md``), so a person can read or edit a backup with any editor, and a zip of a local
``.harness`` folder imports as it is. ``harness-memory-bundle.json`` beside the files keeps what
the tree cannot: sha256 per file, created times and the manifest meta.

Reading a zip is bounded: entry sizes and the total are checked before and while reading
(zip bombs), and names only ever become places through ``place_of_rel`` + ``validate_filename``
(nothing is extracted to disk).
"""

from __future__ import annotations

import io
import zipfile

from pydantic import ValidationError

from ..errors import MemoryFormatError
from ..layout import INDEX_FILE, MANIFEST_FILE
from ..memdir import is_state_file
from .bundle import MAX_STATE_FILE_BYTES, Bundle, BundleFile, BundlePlace, encode_file
from .bundle_import import BundleInvalid
from .places import normalize_path, place_of_rel

ZIP_INDEX = "harness-memory-bundle.json"
ZIP_MEDIA_TYPE = "application/zip"


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


def bundle_from_zip(data: bytes, *, max_file_bytes: int, max_total_bytes: int,
                    key_prefix: str = "memory/") -> Bundle:
    """Rebuild a Bundle from a zip; raise BundleInvalid (or MemoryFormatError) when it is unusable."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError) as exc:
        raise MemoryFormatError(f"the body is not a valid zip file ({exc})") from None
    problems: list[str] = []
    with zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        declared = sum(i.file_size for i in infos)
        if declared > max_total_bytes:
            raise MemoryFormatError(f"the zip unpacks to {declared} bytes; the limit is {max_total_bytes}")
        bundle = _read_index(zf, problems)
        by_path = {p.place(key_prefix).rel_dir: p for p in bundle.places if _safe_place(p)}
        known = {(path, f.file): f for path, p in by_path.items() for f in p.files}
        total = 0
        for info in infos:
            if info.filename == ZIP_INDEX:
                continue
            located = place_of_rel(normalize_path(info.filename, key_prefix), key_prefix)
            if located is None:
                continue  # sessions/, .locks/ and other objects that are not memory places
            place, name = located
            if name in (INDEX_FILE, MANIFEST_FILE) or name.endswith("/" + INDEX_FILE):
                continue  # regenerated on import
            state = is_state_file(name)
            limit = MAX_STATE_FILE_BYTES if state else max_file_bytes
            if info.file_size > limit:
                problems.append(f"{info.filename}: {info.file_size} bytes; the limit is {limit}")
                continue
            with zf.open(info) as fh:
                raw = fh.read(limit + 1)
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
    if problems:
        raise BundleInvalid(problems)
    return bundle


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


__all__ = ["ZIP_INDEX", "ZIP_MEDIA_TYPE", "BundleFile", "bundle_from_zip", "bundle_to_zip"]
