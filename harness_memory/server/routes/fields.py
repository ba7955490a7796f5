"""A memory file as form fields: what the ``/ui`` edit form reads and writes.

Why on the server: the page must not parse or write YAML itself (a quote or a colon in a
description would corrupt the file). GET splits a file with the same parser the tools use; PUT
checks each field for a person (``invalid_<field>``: the page shows the message on that field),
composes the file and saves it keeping the text it replaces as an earlier version
(``memdir.trash.save_versioned``); a refused edit changes nothing. The
If-Match etag keeps a person from overwriting what an agent saved meanwhile.
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Response, status

from ...control.places import place_path
from ...errors import InvalidName, MemoryFormatError, ObjectNotFound, PreconditionFailed
from ...layout import validate_filename
from ...memdir import ABSENT, MemoryDir, MemoryType, parse_memory
from ...memdir import trash as kept
from ...memdir.model import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS, clean_line, compose_memory
from ..errors import ApiError
from ..schemas import ERRORS, SavedFile
from ..schemas_ui import MemoryForm, MemoryFormIn
from .files import FilePath, Recalled, entry_out

#: What the form says for a field a person left wrong (the tools' messages speak to the model).
FIELD_HINTS = {
    "name": "Give the memory a short name (a few words).",
    "description": "Write one line saying what this memory holds: the assistant reads it to decide "
                   "whether to open the memory.",
    "type": "Choose a type: " + ", ".join(t.value for t in MemoryType) + ".",
}


def field_error(field: str, message: str) -> ApiError:
    """422 ``invalid_<field>``: the page puts ``message`` on that field."""
    return ApiError(422, message, f"invalid_{field}")


def check_fields(file: str, body: MemoryFormIn) -> None:
    """The form's fields judged for a person, field by field, before the file is composed."""
    try:
        validate_filename(file)
    except InvalidName as exc:
        raise field_error("file", f"This file name cannot be used: {exc}. Use letters, digits and _ "
                          "ending in .md, e.g. user_role.md.") from None
    for key, limit in (("name", MAX_NAME_CHARS), ("description", MAX_DESCRIPTION_CHARS)):
        text = clean_line(getattr(body, key))
        if not text:
            raise field_error(key, FIELD_HINTS[key])
        if len(text) > limit:
            raise field_error(key, f"This is {len(text)} characters; keep it under {limit}.")
    if body.type.strip().lower() not in {t.value for t in MemoryType}:
        raise field_error("type", FIELD_HINTS["type"])


def add_field_routes(router: APIRouter, prefix: str, resolve: Callable[..., MemoryDir], tag: str, *,
                     recalled: Recalled | None = None) -> None:
    """``GET|PUT {prefix}/fields/{file}`` for the place kind below ``prefix`` (``recalled``: fills
    ``last_recalled``)."""
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
        manifest = mdir.manifest()  # the pod's cached head: usually no request
        entry = manifest.entries.get(result.file)
        return MemoryForm(file=result.file, name=memory.name, description=memory.description,
                          type=memory.type.value, body=memory.body, extra=memory.extra, etag=result.etag,
                          last_modified=result.last_modified, created_at=entry.created_at if entry else None,
                          origin=kept.origin_of(manifest, result.file),
                          last_recalled=(recalled(mdir.place, [result.file]) if recalled else {}).get(result.file))

    @router.put(one, response_model=SavedFile, summary="Save a memory file from form fields", **opts)
    def save_fields(mdir: Dir, file: FilePath, body: MemoryFormIn, response: Response,
                    if_match: Annotated[str | None, Header(description="The etag read; 412 when the file "
                                                           "changed since")] = None,
                    if_none_match: Annotated[str | None, Header(description="`*`: only create")] = None
                    ) -> SavedFile:
        check_fields(file, body)
        extra: dict[str, Any] = {}
        if if_none_match != "*":
            try:  # keep the annotations the form does not show (If-Match makes this read the saved one)
                extra = parse_memory(mdir.read(file).text).extra
            except (ObjectNotFound, MemoryFormatError):
                pass  # gone (If-Match then answers 412) or unreadable: the form's fields make the file
        text = compose_memory(body.name, body.description, body.type, body.body, extra)
        expect = ABSENT if if_none_match == "*" else (if_match.strip('"') if if_match else None)
        try:
            result = kept.save_versioned(mdir, file, text, expect=expect, origin="person")
        except MemoryFormatError as exc:  # e.g. too large: the first sentence, without the model's example
            raise ApiError(422, str(exc).split(" Expected:", 1)[0], "invalid_body") from None
        except PreconditionFailed:
            what = "already exists" if expect == ABSENT else "changed since you opened it"
            raise ApiError(412, f"{file!r} {what}; reload it and edit again", "precondition_failed") from None
        if result.created:
            response.status_code = status.HTTP_201_CREATED
        return SavedFile(file=result.file, created=result.created, entry=entry_out(result.entry))
