"""``GET <place>/embeddings``: the semantic tier's coverage of one place.

Why an endpoint of its own: coverage costs the place's manifest and its vectors object (one GET
each, cached per pod), which a file listing should not pay; and an operator asks it when recall
looks blunt ("are my memories embedded yet?"). The CLI's ``harness-memory embeddings status``
answers the same for many places, ``harness_memory_embeddings_missing`` for the whole pod.
"""


from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from ...memdir import MemoryDir
from ..deps import ServerContext
from ..schemas import ERRORS, PlaceInfo
from .files import place_info


class EmbeddingCoverage(BaseModel):
    place: PlaceInfo
    enabled: bool = Field(description="An embeddings endpoint is configured (`HARNESS_MEMORY_EMBED_MODEL`).")
    model: str | None = Field(None, description="The embeddings model id.")
    memories: int = Field(description="Memory files in the place.")
    embedded: int = Field(description="Memories whose vectors are current (0 when embeddings are off).")
    missing: int = Field(description="Memories still to embed (the background rounds are filling them).")


def add_place_embedding_routes(router: APIRouter, prefix: str, resolve: Callable[..., MemoryDir], tag: str,
                               ctx: ServerContext) -> None:
    Dir = Annotated[MemoryDir, Depends(resolve)]
    opts: dict[str, Any] = {"tags": [tag], "responses": ERRORS}

    @router.get(prefix + "/embeddings", response_model=EmbeddingCoverage,
                summary="Semantic tier coverage: memories with current vectors", **opts)
    def coverage(mdir: Dir) -> EmbeddingCoverage:
        tier = ctx.services.semantic()
        manifest = mdir.manifest()
        total = len(manifest.entries)
        if tier is None:
            return EmbeddingCoverage(place=place_info(mdir.place), enabled=False, memories=total, embedded=0,
                                     missing=0)
        done, total = tier.coverage(mdir, manifest)
        if done < total:
            tier.schedule_fill(mdir)  # asked while incomplete: make sure a round is on its way
        return EmbeddingCoverage(place=place_info(mdir.place), enabled=True, model=tier.model, memories=total,
                                 embedded=done, missing=total - done)


__all__ = ["EmbeddingCoverage", "add_place_embedding_routes"]
