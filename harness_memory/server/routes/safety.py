"""The safety net of a place over HTTP: its trash (list, restore, purge), bulk delete, and the
earlier versions of a memory file (list, restore).

Everything goes through ``memdir.trash`` (the place's own writer), so what these endpoints say
was kept is in the store before the removal commits (``PlaceTxn.put_aside``).
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Response, status
from fastapi import Path as PathParam

from ...control.places import place_path
from ...memdir import MemoryDir
from ...memdir import trash as kept
from ..schemas import ERRORS
from ..schemas_safety import (
    DeletedMany,
    DeleteMany,
    Purged,
    Restored,
    RestoreIn,
    RestoreVersionIn,
    TrashFileOut,
    TrashItemOut,
    TrashList,
    VersionList,
    VersionOut,
    VersionRestored,
)
from .files import FilePath, entry_out

TrashId = Annotated[str, PathParam(description="A trash item id (from the trash list).", max_length=40)]


def trash_item(batch: kept.TrashBatch, days: float) -> TrashItemOut:
    return TrashItemOut(id=batch.id, deleted_at=batch.deleted_at, expires_at=batch.expires_at(days),
                        origin=batch.origin,
                        files=[TrashFileOut(file=f.file, name=f.name, description=f.description, type=f.type,
                                            size=len(f.content.encode("utf-8"))) for f in batch.files])


def add_safety_routes(router: APIRouter, prefix: str, resolve: Callable[..., MemoryDir], tag: str) -> None:
    """Trash, bulk delete and history endpoints below ``prefix`` (one place kind)."""
    Dir = Annotated[MemoryDir, Depends(resolve)]
    opts: dict[str, Any] = {"tags": [tag], "responses": ERRORS}

    @router.get(prefix + "/trash", response_model=TrashList, summary="What was deleted lately (restorable)", **opts)
    def list_trash(mdir: Dir) -> TrashList:
        days = mdir.limits.trash_days
        items = [trash_item(b, days) for b in kept.list_trash(mdir)]
        return TrashList(place=place_path(mdir.place), count=len(items), items=items, keep_days=days)

    @router.post(prefix + "/trash/{trash_id}/restore", response_model=Restored,
                 summary="Put a trash item back (a file that exists now is replaced; its text becomes a version)",
                 **opts)
    def restore_trash(mdir: Dir, trash_id: TrashId, body: Annotated[RestoreIn | None, Body()] = None) -> Restored:
        files = kept.restore(mdir, trash_id, body.files if body is not None else None)
        return Restored(restored=files, place=place_path(mdir.place))

    @router.delete(prefix + "/trash/{trash_id}", response_model=Purged, summary="Remove a trash item for good",
                   **opts)
    def purge_one(mdir: Dir, trash_id: TrashId) -> Purged:
        return Purged(purged=kept.purge(mdir, trash_id))

    @router.delete(prefix + "/trash", response_model=Purged, summary="Empty the trash for good", **opts)
    def purge_all(mdir: Dir) -> Purged:
        return Purged(purged=kept.purge(mdir))

    @router.post(prefix + "/delete", response_model=DeletedMany,
                 summary="Delete several memory files at once (kept in one trash item)", **opts)
    def delete_many(mdir: Dir, body: DeleteMany) -> DeletedMany:
        batch, gone = kept.trash_files(mdir, body.files, "person")
        return DeletedMany(deleted=gone, missing=[f for f in dict.fromkeys(body.files) if f not in gone],
                           trash_id=batch.id if batch is not None else None)

    @router.get(prefix + "/history/{file:path}", response_model=VersionList,
                summary="Earlier versions of a memory file, newest first", **opts)
    def list_history(mdir: Dir, file: FilePath) -> VersionList:
        versions = [VersionOut(id=v.id, file=v.file, saved_at=v.saved_at, origin=v.origin,
                               size=len(v.content.encode("utf-8")), content=v.content)
                    for v in kept.history(mdir, file)]
        return VersionList(file=file, count=len(versions), versions=versions)

    @router.post(prefix + "/restore-version/{file:path}", response_model=VersionRestored,
                 summary="Make an earlier version current (the current text becomes a version)", **opts)
    def restore_version(mdir: Dir, file: FilePath, body: RestoreVersionIn, response: Response) -> VersionRestored:
        result = kept.restore_version(mdir, file, body.version)
        response.status_code = status.HTTP_200_OK
        return VersionRestored(file=result.file, created=result.created, entry=entry_out(result.entry))
