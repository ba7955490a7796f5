"""Request and response models of the safety net: the trash, earlier versions, bulk delete.

Why separate: these endpoints are new beside the core API (``schemas``) and the page's form
(``schemas_ui``); their models say what was kept, for how long, and what came back.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from .schemas import SavedFile, _Strict


class TrashFileOut(BaseModel):
    file: str
    name: str
    description: str
    type: str
    size: int = Field(description="Bytes of the kept text (UTF-8).")


class TrashItemOut(BaseModel):
    id: str = Field(description="Pass it to `POST …/trash/{id}/restore` (or `harness-memory trash restore`).")
    deleted_at: float
    expires_at: float = Field(description="When the trash drops it for good (`limits.trash_days`).")
    origin: str = Field(description="What removed it: `person`, `api`, `cli`, `import`, `snapshot`, "
                        "`assistant` (its tools), `auto` (an auto-memory update).")
    files: list[TrashFileOut]


class TrashList(BaseModel):
    place: str
    count: int
    items: list[TrashItemOut]
    keep_days: float = Field(description="How long the trash keeps what is removed (`limits.trash_days`).")


class RestoreIn(_Strict):
    files: list[str] | None = Field(None, max_length=10_000, description="Only these files of the item "
                                    "(default: all).")


class Restored(BaseModel):
    restored: list[str]
    place: str


class Purged(BaseModel):
    purged: int


class DeleteMany(_Strict):
    files: list[str] = Field(min_length=1, max_length=10_000, description="Memory files to delete.")


class DeletedMany(BaseModel):
    deleted: list[str] = Field(description="Files removed (names that did not exist are left out).")
    missing: list[str] = Field(description="Names that were not there.")
    trash_id: str | None = Field(None, description="The trash item holding them (restore with it).")


class VersionOut(BaseModel):
    id: str
    file: str
    saved_at: float = Field(description="When this text was replaced by a newer one.")
    origin: str
    size: int
    content: str


class VersionList(BaseModel):
    file: str
    count: int
    versions: list[VersionOut]


class RestoreVersionIn(_Strict):
    version: str = Field(min_length=1, max_length=40, description="A version id from the history.")


class VersionRestored(SavedFile):
    pass
