"""A memory file as form fields: what the ``/ui`` edit form reads and writes.

Why on the server: the page must not parse or write YAML itself (a quote or a colon in a
description would corrupt the file). GET splits a file with the same parser the tools use; PUT
composes the file from the fields and saves it through ``MemoryDir.save``, so an empty
description or a wrong type is refused with the tools' own message and changes nothing. The
If-Match etag keeps a person from overwriting what an agent saved meanwhile.
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Response, status

from ...control.places import place_path
from ...errors import MemoryFormatError, ObjectNotFound, PreconditionFailed
from ...memdir import ABSENT, MemoryDir, parse_memory
from ...memdir.model import compose_memory
from ..errors import ApiError
from ..schemas import ERRORS, SavedFile
from ..schemas_ui import MemoryForm, MemoryFormIn
from .files import FilePath, entry_out


def add_field_routes(router: APIRouter, prefix: str, resolve: Callable[..., MemoryDir], tag: str) -> None:
    """``GET|PUT {prefix}/fields/{file}`` for the place kind below ``prefix``."""
    Dir = Annotated[MemoryDir, Depends(resolve)]
    opts: dict[str, Any] = {"tags": [tag], "responses": ERRORS}
    one = prefix + "/fields/{file:path}"

    @router.get(one, response_model=MemoryForm, summary="Read a memory file as form fields", **opts)
    def read_fields(mdir: Dir, file: FilePath) -> MemoryForm:
        try:
            result = mdir.read(file)
        except ObjectNotFound:
            raise ApiError(404, f"there is no memory file {file!r} in {place_path(mdir.place)}", "not_found") from None
        memory = parse_memory(result.text)  # a broken file answers 422 with what is wrong
        return MemoryForm(file=result.file, name=memory.name, description=memory.description,
                          type=memory.type.value, body=memory.body, extra=memory.extra, etag=result.etag,
                          last_modified=result.last_modified)

    @router.put(one, response_model=SavedFile, summary="Save a memory file from form fields", **opts)
    def save_fields(mdir: Dir, file: FilePath, body: MemoryFormIn, response: Response,
                    if_match: Annotated[str | None, Header(description="The etag read; 412 when the file "
                                                           "changed since")] = None,
                    if_none_match: Annotated[str | None, Header(description="`*`: only create")] = None
                    ) -> SavedFile:
        extra: dict[str, Any] = {}
        if if_none_match != "*":
            try:  # keep the annotations the form does not show (If-Match makes this read the saved one)
                extra = parse_memory(mdir.read(file).text).extra
            except (ObjectNotFound, MemoryFormatError):
                pass  # gone (If-Match then answers 412) or unreadable: the form's fields make the file
        text = compose_memory(body.name, body.description, body.type, body.body, extra)
        expect = ABSENT if if_none_match == "*" else (if_match.strip('"') if if_match else None)
        try:
            result = mdir.save(file, text, expect=expect)
        except PreconditionFailed:
            what = "already exists" if expect == ABSENT else "changed since you opened it"
            raise ApiError(412, f"{file!r} {what}; reload it and edit again", "precondition_failed") from None
        if result.created:
            response.status_code = status.HTTP_201_CREATED
        return SavedFile(file=result.file, created=result.created, entry=entry_out(result.entry))
