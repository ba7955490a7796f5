"""The stored vectors of one place: every memory as one or more chunk vectors, merged in O(changed).

Why chunks: an embedding model reads a few hundred tokens (all-MiniLM-L6-v2: 256 word pieces);
a memory of 20,000 characters cut to its first 2,000 was, for the model, its first paragraph.
A memory is split into chunks of about ``chunk_tokens`` estimated tokens (CJK characters count
one each, other text one per four characters), each prefixed with the memory's name so a chunk
keeps its topic, and scored by the **best chunk** (max over chunks): the question is "does this
memory hold the answer somewhere", and a mean over chunks would dilute a one-paragraph answer in
a long conversation with every unrelated paragraph around it.

Layout of ``.search-vectors.bin`` (``MAGIC``): a JSON header (model, one ``[file, size,
updated_at, chunks]`` row per memory: the manifest entry's version) and a little-endian float16
matrix, the chunk rows of each memory one after the other. The first format (one 2,000-character
vector per memory) is not read: its vectors are made again, whole.

Why merges are O(changed): a background round embeds up to 64 memories of a place that may hold
10,000. ``merged`` copies the position map and file list as whole objects (C-level copies, no
per-memory Python work), turns the replaced or removed memories' slots into tombstones and appends
the new rows; slots are compacted only when tombstones outnumber live memories (amortised O(1)).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

MAGIC = b"HMVECTORS2\n"
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")

Stamp = tuple[int, float]


def estimate_tokens(text: str) -> float:
    """A model-free token estimate: one per CJK character, one per four other characters."""
    cjk = len(_CJK.findall(text))
    return cjk + (len(text) - cjk) / 4.0


def chunk_texts(name: str, description: str, body: str, chunk_tokens: int = 80, max_chunks: int = 64
                ) -> list[str]:
    """The texts embedded for one memory: the head (name, description, start of the body), then
    the rest of the body in chunks of about ``chunk_tokens`` estimated tokens, each prefixed with
    the name. Splits fall on a paragraph, line, sentence or word boundary where one is near.
    At most ``max_chunks`` (the end of a longer body is not embedded; words still find it)."""
    head = f"{name}. {description}".strip()
    budget = max(16, chunk_tokens)
    out: list[str] = []
    rest = body.strip()
    prefix = head + "\n"
    while rest and len(out) < max_chunks:
        piece = _take(rest, budget - estimate_tokens(prefix) if not out else budget - estimate_tokens(name))
        out.append((prefix if not out else f"{name}: ") + piece.strip())
        rest = rest[len(piece):].lstrip()
    return out or [head or " "]


def _take(text: str, budget: float) -> str:
    """The longest start of ``text`` within ``budget`` estimated tokens, cut at a boundary."""
    budget = max(budget, 8.0)
    if estimate_tokens(text) <= budget:
        return text
    lo, hi = 1, len(text)  # binary search on characters: estimate_tokens is monotone
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    cut = text[:lo]
    for sep in ("\n\n", "\n", ". ", "。", "！", "？", "? ", "! ", " ", "，", ", "):
        at = cut.rfind(sep)
        if at >= len(cut) // 2:
            return cut[: at + len(sep)]
    return cut


@dataclass(frozen=True, slots=True)
class Vectors:
    """A place's chunk vectors (rows L2-normalised, float32 in memory).

    Slot ``i`` is one memory (``files[i]``; None: a tombstone left by a merge), its rows
    ``matrix[starts[i]: starts[i] + counts[i]]``. ``position`` maps a live file to its slot."""

    model: str
    files: list[str | None]
    stamps: list[Stamp | None]
    starts: np.ndarray  # int64 per slot
    counts: np.ndarray  # int64 per slot (0 for a tombstone)
    matrix: np.ndarray  # (rows, dim) float32
    position: dict[str, int]

    @classmethod
    def empty(cls, model: str) -> Vectors:
        return cls(model, [], [], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 0), np.float32), {})

    @classmethod
    def build(cls, model: str, docs: Iterable[tuple[str, Stamp, np.ndarray]]) -> Vectors:
        """From (file, stamp, its chunk rows) in order."""
        return cls.empty(model).merged({f: (s, m) for f, s, m in docs}, ())

    # -- reading ---------------------------------------------------------------------------------
    @property
    def rows(self) -> dict[str, Stamp]:
        """file -> the version its vectors were made from (live memories only)."""
        return {f: s for f, s in zip(self.files, self.stamps, strict=True) if f is not None and s is not None}

    def stamp(self, file: str) -> Stamp | None:
        slot = self.position.get(file)
        return None if slot is None else self.stamps[slot]

    def __len__(self) -> int:
        return len(self.position)

    def best(self, query: np.ndarray) -> np.ndarray:
        """Per slot, the best chunk's cosine with ``query`` (-inf for a tombstone)."""
        out = np.full(len(self.files), -np.inf, dtype=np.float32)
        if not self.matrix.size:
            return out
        sims = self.matrix @ query.astype(np.float32)
        live = self.counts > 0
        if live.any():
            out[live] = np.maximum.reduceat(sims, self.starts[live])
        return out

    # -- changing ----------------------------------------------------------------------------------
    def merged(self, new: Mapping[str, tuple[Stamp, np.ndarray]], removed: Iterable[str]) -> Vectors:
        """These vectors with ``removed`` dropped and ``new`` (file -> (stamp, chunk rows)) put in.
        Python-level work is O(changed); the arrays are copied whole (C-level)."""
        position = self.position.copy()
        files = self.files.copy()
        stamps = self.stamps.copy()
        counts = self.counts.copy()
        for file in (*removed, *new):
            slot = position.pop(file, None)
            if slot is not None:
                files[slot] = None
                stamps[slot] = None
                counts[slot] = 0
        blocks = [self.matrix] if self.matrix.size else []
        next_row = int(self.matrix.shape[0]) if self.matrix.size else 0
        new_starts: list[int] = []
        new_counts: list[int] = []
        for file, (stamp, rows) in new.items():
            rows = np.atleast_2d(np.asarray(rows, dtype=np.float32))
            if not rows.size:
                continue
            position[file] = len(files)
            files.append(file)
            stamps.append(stamp)
            new_starts.append(next_row)
            new_counts.append(int(rows.shape[0]))
            next_row += int(rows.shape[0])
            blocks.append(rows)
        if blocks and len({b.shape[1] for b in blocks}) > 1:
            raise ValueError("vectors of different dimensions in one place (the model changed its output)")
        matrix = np.concatenate(blocks) if len(blocks) > 1 else (blocks[0] if blocks else self.matrix)
        out = Vectors(self.model, files, stamps, np.concatenate([self.starts, np.asarray(new_starts, np.int64)]),
                      np.concatenate([counts, np.asarray(new_counts, np.int64)]), matrix, position)
        return out.compacted() if len(files) - len(position) > max(len(position), 64) else out

    def compacted(self) -> Vectors:
        """The live slots only (rows copied once)."""
        live = [i for i, f in enumerate(self.files) if f is not None]
        if not live:
            return Vectors.empty(self.model)
        rows = np.concatenate([np.arange(self.starts[i], self.starts[i] + self.counts[i]) for i in live])
        counts = self.counts[live]
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        files = [self.files[i] for i in live]
        return Vectors(self.model, files, [self.stamps[i] for i in live], starts, counts.astype(np.int64),
                       self.matrix[rows], {f: i for i, f in enumerate(files) if f is not None})

    # -- bytes -------------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        packed = self.compacted() if len(self.files) != len(self.position) else self
        docs = [[f, s[0], s[1], int(c)] for f, s, c in zip(packed.files, packed.stamps, packed.counts, strict=True)
                if f is not None and s is not None]
        header = json.dumps({"model": self.model, "docs": docs}, ensure_ascii=False).encode("utf-8")
        dim = int(packed.matrix.shape[1]) if packed.matrix.size else 0
        return MAGIC + struct.pack("<II", len(header), dim) + header + packed.matrix.astype("<f2").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> Vectors:
        """Parse a vectors object (``ValueError`` when it is not one of this format)."""
        if not data.startswith(MAGIC):
            raise ValueError("not a vectors object of this format")
        n_header, dim = struct.unpack_from("<II", data, len(MAGIC))
        pos = len(MAGIC) + 8
        header = json.loads(data[pos: pos + n_header].decode("utf-8"))
        docs = header["docs"]
        counts = np.asarray([int(d[3]) for d in docs], dtype=np.int64)
        total = int(counts.sum())
        if dim:
            matrix = np.frombuffer(data, dtype="<f2", count=total * dim, offset=pos + n_header)
            matrix = matrix.reshape(total, dim).astype(np.float32)
        else:
            matrix = np.zeros((0, 0), np.float32)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if len(docs) else counts
        files: list[str | None] = [str(d[0]) for d in docs]
        return cls(str(header["model"]), files, [(int(d[1]), float(d[2])) for d in docs], starts, counts, matrix,
                   {f: i for i, f in enumerate(files) if f is not None})


def normalise(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


__all__ = ["MAGIC", "Vectors", "chunk_texts", "estimate_tokens", "normalise"]
