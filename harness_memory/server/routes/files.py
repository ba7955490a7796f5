"""Memory files of one place: list, read, create, replace, patch, delete, index, reindex, clear.

One set of endpoints serves all four place kinds; ``add_place_routes`` is called once per kind with
the dependency that turns the path (and the caller) into a ``MemoryDir``. Endpoints are plain
``def``: FastAPI runs them in its thread pool, so a slow store or a held place lock never
blocks the event loop.
"""

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Response, status
from fastapi import Path as PathParam
from fastapi.responses import PlainTextResponse

from ...control.places import place_path
from ...errors import ObjectNotFound, PreconditionFailed
from ...layout import Place, validate_filename
from ...memdir import ABSENT, ManifestEntry, MemoryDir
from ...memdir import trash as kept
from ..errors import ApiError
from ..schemas import (
    ERRORS,
    Cleared,
    CreateFile,
    FileContent,
    FileEntry,
    FileList,
    IndexText,
    PatchFile,
    PlaceInfo,
    ReplaceFile,
    SavedFile,
)

FilePath = Annotated[str, PathParam(description="File name inside the place, e.g. `user_role.md`.",
                                    max_length=1024)]
Purge = Annotated[bool, Query(description="Delete for good instead of moving to the trash: the place's trash "
                             "and history go too, nothing can be restored.")]
Offset = Annotated[int, Query(ge=0, le=1_000_000, description="Skip this many matching files.")]
Limit = Annotated[int | None, Query(ge=1, le=1000, description="At most this many files (default: all).")]
TypeFilter = Annotated[str | None, Query(max_length=40, description="Only files of this type.")]
Search = Annotated[str | None, Query(max_length=200, description="Only files holding every word of this "
                                     "anywhere (name, description, body; Chinese segmented), through the "
                                     "place's search index.")]
Order = Annotated[Literal["file", "type", "updated"], Query(
    description="`file`: by file name. `type`: user, feedback, project, reference, others; most recently "
    "changed first. `updated`: most recently changed first.")]
TYPE_ORDER = {"user": 0, "feedback": 1, "project": 2, "reference": 3}


def place_info(place: Place) -> PlaceInfo:
    return PlaceInfo(path=place_path(place), kind=place.kind.value, user_id=place.user_id,
                     agent_type=place.agent_type, project=place.project)


def entry_out(entry: ManifestEntry, last_recalled: float | None = None) -> FileEntry:
    return FileEntry(file=entry.file, name=entry.name, description=entry.description, type=entry.type,
                     size=entry.size, created_at=entry.created_at, updated_at=entry.updated_at,
                     extra=dict(entry.extra), last_recalled=last_recalled)


#: file -> when recall last put it into a conversation (``ServerContext.last_recalled``).
Recalled = Callable[[Place, list[str]], dict[str, float]]


def filter_entries(entries: list[ManifestEntry], type_: str | None, q: str | None, order: str,
                   found: set[str] | None = None) -> list[ManifestEntry]:
    """The entries of one type and/or matching ``q``, in the order asked (a page of 1,000 memories
    is one manifest read either way; paging saves the answer's size and the page's work).
    ``found``: the names the place's search index matched (``search.match``); without it, ``q``
    is looked for in the file name, name and description."""
    needle = (q or "").strip().casefold()
    chosen = [e for e in entries if (not type_ or e.type == type_)
              and (found is None or e.file in found)
              and (found is not None or not needle or needle in f"{e.file}\n{e.name}\n{e.description}".casefold())]
    if order == "type":
        chosen.sort(key=lambda e: (TYPE_ORDER.get(e.type, len(TYPE_ORDER)), -e.updated_at, e.file))
    elif order == "updated":
        chosen.sort(key=lambda e: (-e.updated_at, e.file))
    return chosen


def search_place(mdir: MemoryDir, q: str | None) -> tuple[list[ManifestEntry], set[str] | None]:
    """The place's entries and the names holding every word of ``q`` (None: no query, or a place
    without a manifest, whose entries are searched by their lines)."""
    manifest = mdir.manifest()
    if not manifest.entries:
        return mdir.list_entries(), None
    entries = manifest.sorted_entries()
    if not (q or "").strip():
        return entries, None
    from ...search.match import matching

    return entries, matching(mdir, manifest, q or "")


def _not_found(mdir: MemoryDir, file: str) -> ApiError:
    return ApiError(404, f"there is no memory file {file!r} in {place_path(mdir.place)}", "not_found")


def add_place_routes(router: APIRouter, prefix: str, resolve: Callable[..., MemoryDir], tag: str, *,
                     recalled: Recalled | None = None) -> None:
    """The file endpoints below ``prefix`` (which holds the place's path parameters); ``recalled``
    fills each listed file's ``last_recalled``."""
    Dir = Annotated[MemoryDir, Depends(resolve)]
    opts: dict[str, Any] = {"tags": [tag], "responses": ERRORS}
    one = prefix + "/files/{file:path}"

    @router.get(prefix, response_model=FileList, summary="List the memory files (filtered and paged on request)",
                **opts)
    def list_files(mdir: Dir, offset: Offset = 0, limit: Limit = None, type: TypeFilter = None,
                   q: Search = None, order: Order = "file") -> FileList:
        entries, found = search_place(mdir, q)
        matched = filter_entries(entries, None, q, "file", found)  # the counts follow the search
        types: dict[str, int] = {}
        for e in matched:
            types[e.type] = types.get(e.type, 0) + 1
        chosen = filter_entries(matched, type, None, order)
        page = chosen[offset:] if limit is None else chosen[offset:offset + limit]
        last = recalled(mdir.place, [e.file for e in page]) if recalled is not None and page else {}
        return FileList(place=place_info(mdir.place), count=len(page),
                        files=[entry_out(e, last.get(e.file)) for e in page],
                        matched=len(chosen), types=types, total=len(entries))

    @router.delete(prefix, response_model=Cleared, summary="Clear: every memory file goes to the trash "
                   "(restorable); `?purge=true` deletes for good, trash and history too", **opts)
    def clear(mdir: Dir, purge: Purge = False) -> Cleared:
        deleted = mdir.clear(purge=purge, origin="api")
        return Cleared(deleted_files=deleted, places=[place_path(mdir.place)], in_trash=not purge,
                       keep_days=None if purge else mdir.limits.trash_days)

    @router.get(prefix + "/index", response_model=IndexText, summary="MEMORY.md as the model sees it", **opts)
    def index(mdir: Dir) -> IndexText:
        capped = mdir.index_text()
        return IndexText(place=place_info(mdir.place), text=capped.text, truncated=capped.truncated,
                         total_lines=capped.total_lines, max_lines=mdir.limits.index_max_lines)

    @router.post(prefix + "/reindex", response_model=FileList,
                 summary="Rebuild the manifest and MEMORY.md from the files (LIST; on demand)", **opts)
    def reindex(mdir: Dir) -> FileList:
        manifest = mdir.reindex()
        entries = manifest.sorted_entries()
        return FileList(place=place_info(mdir.place), count=len(entries), files=[entry_out(e) for e in entries])

    @router.get(one, response_model=FileContent, summary="Read a memory file",
                tags=[tag], responses={**ERRORS, 200: {"content": {"text/markdown": {}}}})
    def read_file(mdir: Dir, file: FilePath, response: Response,
                  raw: Annotated[bool, Query(description="Answer with the file itself (text/markdown).")] = False
                  ) -> FileContent | PlainTextResponse:
        try:
            result = mdir.read(file)
        except ObjectNotFound:
            raise _not_found(mdir, file) from None
        if raw:
            return PlainTextResponse(result.text, media_type="text/markdown; charset=utf-8",
                                     headers={"ETag": f'"{result.etag}"'})
        response.headers["ETag"] = f'"{result.etag}"'
        return FileContent(file=result.file, content=result.text, etag=result.etag,
                           size=len(result.text.encode("utf-8")), last_modified=result.last_modified)

    @router.post(prefix + "/files", response_model=SavedFile, status_code=status.HTTP_201_CREATED,
                 summary="Create a memory file (409 when it exists)", **opts)
    def create_file(mdir: Dir, body: CreateFile) -> SavedFile:
        name = validate_filename(body.file)
        try:
            result = mdir.save(name, body.content, expect=ABSENT, origin="api")  # checked under the place lock
        except PreconditionFailed:
            raise ApiError(409, f"{name!r} already exists in {place_path(mdir.place)}; PUT replaces it",
                           "conflict") from None
        return SavedFile(file=result.file, created=result.created, entry=entry_out(result.entry))

    @router.put(one, response_model=SavedFile, summary="Replace (or create) a whole file", **opts)
    def replace_file(mdir: Dir, file: FilePath, body: ReplaceFile, response: Response,
                     if_match: Annotated[str | None, Header(description="Only replace this version "
                                                             "(the ETag from GET); 412 otherwise")] = None
                     ) -> SavedFile:
        try:
            result = kept.save_versioned(mdir, file, body.content, expect=if_match, origin="api")
        except PreconditionFailed as exc:
            raise ApiError(412, f"{exc}; GET the file for its current ETag", "precondition_failed") from None
        if result.created:
            response.status_code = status.HTTP_201_CREATED
        return SavedFile(file=result.file, created=result.created, entry=entry_out(result.entry))

    @router.patch(one, response_model=SavedFile, summary="Replace one exact chunk of a file", **opts)
    def patch_file(mdir: Dir, file: FilePath, body: PatchFile) -> SavedFile:
        try:
            result = mdir.replace_chunk(file, body.old, body.new, replace_all=body.replace_all, origin="api")
        except ObjectNotFound:
            raise _not_found(mdir, file) from None
        return SavedFile(file=result.file, created=False, entry=entry_out(result.entry))

    @router.delete(one, status_code=status.HTTP_204_NO_CONTENT,
                   summary="Delete a memory file (kept in the trash; `X-Trash-Id` names the item)", **opts)
    def delete_file(mdir: Dir, file: FilePath) -> Response:
        batch, gone = kept.trash_files(mdir, [file], "api")
        if not gone:
            raise _not_found(mdir, file)
        headers = {"X-Trash-Id": batch.id} if batch is not None else {}
        return Response(status_code=status.HTTP_204_NO_CONTENT, headers=headers)
