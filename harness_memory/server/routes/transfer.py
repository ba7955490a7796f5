"""Export, import and clear: per place, and for all of one user's places at once.

Import bodies are read by hand (not through a pydantic parameter) so that the size limit is
enforced while reading, a zip is accepted beside JSON, and a bad bundle answers 422 listing
every problem. Both forms share ``plan_import`` / ``apply_import`` with the CLI.
"""

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from ...auto import auto_memory_for
from ...control.bundle import Bundle, export_places
from ...control.bundle_import import ImportReport, ImportTarget, apply_import, plan_import
from ...control.bundle_zip import ZIP_MEDIA_TYPE, bundle_to_zip, read_zip
from ...control.places import Scope, discover_places, place_path
from ...layout import PlaceKind
from ...memdir import MemoryDir
from ..deps import ServerContext
from ..errors import ApiError
from ..schemas import ERRORS, Cleared, ErrorBody, ImportPlaceResult, ImportResult, PlaceSummary, UserPlaces

Format = Annotated[Literal["json", "zip"], Query(description="`json` bundle or `zip` of the tree.")]
Mode = Annotated[Literal["merge", "replace"], Query(
    description="`merge`: add and overwrite the bundle's files, keep the rest. `replace`: clear first.")]
DryRun = Annotated[bool, Query(description="Validate and report without writing anything.")]
Purge = Annotated[bool, Query(description="Delete for good instead of moving to the trash: the trash and history "
                             "of every place go too, nothing can be restored.")]
IMPORT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "A bundle from the export endpoint (JSON), or its zip form.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Bundle"}},
                    ZIP_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
    }
}
IMPORT_ERRORS: dict[int | str, dict[str, Any]] = {415: {"model": ErrorBody}}
EXPORT_200: dict[int | str, dict[str, Any]] = {200: {"content": {"application/json": {}, ZIP_MEDIA_TYPE: {}}}}
USER_PLACE_KINDS = (PlaceKind.USER_AGENT, PlaceKind.USER_AUTO)


async def read_bundle(request: Request, ctx: ServerContext) -> tuple[Bundle, list[str]]:
    """The request body as a Bundle (JSON or zip), bounded by ``server.max_request_bytes``, and
    the problems of a zip's bad entries (for ``plan_import`` to list with its own)."""
    limit = ctx.server.max_request_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the body is {declared} bytes; the limit is {limit} (server.max_request_bytes)",
                       "too_large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"the body is larger than {limit} bytes (server.max_request_bytes)", "too_large")
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media in (ZIP_MEDIA_TYPE, "application/x-zip-compressed") or bytes(body[:4]) == b"PK\x03\x04":
        limits = ctx.config.limits
        return await run_in_threadpool(read_zip, bytes(body), max_file_bytes=limits.max_file_bytes,
                                       max_total_bytes=limits.import_max_bytes,
                                       max_entries=limits.import_max_entries, key_prefix=ctx.services.key_prefix)
    if media not in ("application/json", ""):
        raise ApiError(415, f"send the bundle as application/json or {ZIP_MEDIA_TYPE}, not {media}",
                       "unsupported_media_type")
    if not body:
        raise ApiError(422, "the body is empty; send a bundle from the export endpoint", "invalid_request")
    try:
        return Bundle.model_validate_json(bytes(body)), []
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()]
        raise ApiError(422, "the body is not a valid bundle: " + "; ".join(problems[:3]), "invalid_bundle",
                       problems=problems[:50]) from None


def export_response(bundle: Bundle, fmt: str, name: str) -> Response:
    safe = name.replace("/", "_")
    if fmt == "zip":
        return Response(bundle_to_zip(bundle), media_type=ZIP_MEDIA_TYPE,
                        headers={"Content-Disposition": f'attachment; filename="{safe}.zip"'})
    return JSONResponse(bundle.model_dump(mode="json"),
                        headers={"Content-Disposition": f'attachment; filename="{safe}.json"'})


def import_result(report: ImportReport) -> ImportResult:
    return ImportResult(mode=report.mode, dry_run=report.dry_run, written=report.written,  # type: ignore[arg-type]
                        created=report.total("created"), updated=report.total("updated"),
                        unchanged=report.total("unchanged"), removed=report.total("removed"),
                        places=[ImportPlaceResult(path=p.path, created=p.created, updated=p.updated,
                                                  unchanged=p.unchanged, removed=p.removed, cleared=p.removed)
                                for p in report.places])


def add_place_transfer_routes(router: APIRouter, prefix: str, resolve: Callable[..., MemoryDir], tag: str,
                              ctx: ServerContext) -> None:
    """Export and import of the one place below ``prefix``."""
    Dir = Annotated[MemoryDir, Depends(resolve)]

    @router.get(prefix + "/export", summary="Export this memory directory (JSON bundle or zip)",
                response_model=Bundle, tags=[tag], responses={**ERRORS, **EXPORT_200})
    def export(mdir: Dir, format: Format = "json") -> Response:
        bundle = export_places([mdir], place_path(mdir.place))
        return export_response(bundle, format, place_path(mdir.place))

    @router.post(prefix + "/import", response_model=ImportResult, openapi_extra=IMPORT_BODY,
                 tags=[tag], responses={**ERRORS, **IMPORT_ERRORS},
                 summary="Import a bundle with one memory directory into this one")
    async def import_(request: Request, mdir: Dir, mode: Mode = "merge", dry_run: DryRun = False
                      ) -> ImportResult:
        bundle, problems = await read_bundle(request, ctx)
        target = ImportTarget(place=mdir.place)
        plans = await run_in_threadpool(lambda: plan_import(bundle, target, ctx.services.memdir,
                                                            ctx.services.key_prefix, problems=problems,
                                                            limits=ctx.config.limits))
        report = await run_in_threadpool(lambda: apply_import(plans, mode, dry_run=dry_run))
        return import_result(report)


def add_user_routes(router: APIRouter, ctx: ServerContext) -> None:
    """All of one user's places: what exists, export, import, forget everything."""
    User = Annotated[str, Depends(ctx.user_dep())]
    base = "/users/{user_id}/memory"
    opts: dict[str, Any] = {"tags": ["whole user"], "responses": ERRORS}

    def user_dirs(user: str) -> list[MemoryDir]:
        found = discover_places(ctx.services.store, Scope(user_id=user), ctx.services.key_prefix)
        return [ctx.services.memdir(f.place) for f in found if f.place.kind in USER_PLACE_KINDS]

    @router.get(base, response_model=UserPlaces, summary="The user's memory directories (LIST; on demand)", **opts)
    def places(user: User) -> UserPlaces:
        found = discover_places(ctx.services.store, Scope(user_id=user), ctx.services.key_prefix)
        return UserPlaces(user_id=user, places=[
            PlaceSummary(path=place_path(f.place), kind=f.place.kind.value, files=f.files, bytes=f.bytes)
            for f in found])

    @router.get(base + "/export", summary="Export every memory of the user (JSON bundle or zip)",
                response_model=Bundle, tags=["whole user"], responses={**ERRORS, **EXPORT_200})
    def export(user: User, format: Format = "json") -> Response:
        bundle = export_places(user_dirs(user), f"users/{user}")
        return export_response(bundle, format, f"users-{user}")

    @router.post(base + "/import", response_model=ImportResult, openapi_extra=IMPORT_BODY,
                 tags=["whole user"], responses={**ERRORS, **IMPORT_ERRORS},
                 summary="Import a bundle into the user's memory (every place in it becomes the user's)")
    async def import_(request: Request, user: User, mode: Mode = "merge", dry_run: DryRun = False
                      ) -> ImportResult:
        bundle, problems = await read_bundle(request, ctx)
        target = ImportTarget(user_id=user)
        plans = await run_in_threadpool(lambda: plan_import(bundle, target, ctx.services.memdir,
                                                            ctx.services.key_prefix, problems=problems,
                                                            limits=ctx.config.limits))

        def run() -> ImportReport:
            others: list[MemoryDir] = []
            if mode == "replace":  # a dry run counts what they would lose too
                planned = {p.mdir.place.prefix for p in plans}
                others = [d for d in user_dirs(user) if d.place.prefix not in planned]
            return apply_import(plans, mode, clear_also=others, dry_run=dry_run)

        return import_result(await run_in_threadpool(run))

    @router.delete(base, response_model=Cleared, summary="Forget everything: all of the user's memory goes to "
                   "each place's trash (restorable); `?purge=true` deletes for good, trash and history too", **opts)
    def forget(user: User, purge: Purge = False) -> Cleared:
        auto_memory_for(ctx.services).forget_user(user)  # queued updates must not re-add facts
        dirs = user_dirs(user)
        deleted = sum(d.clear(purge=purge, origin="person") for d in dirs)
        return Cleared(deleted_files=deleted, places=[place_path(d.place) for d in dirs], in_trash=not purge,
                       keep_days=None if purge else ctx.config.limits.trash_days)
