"""Body-aware search over memory places: one compact index object per place, kept in step by the
commit that changes the manifest (``place.after_commit``), rebuilt by ``reindex``, loaded and
cached per pod by readers (``place.load`` / ``place.parts``), scored with BM25 (``index.bm25``).

Used by recall (``recall/service.py``) and the agent's ``search_memories`` tool (``tools.py``).
"""

from __future__ import annotations

from .index import Doc, Part, SearchIndex, bm25, make_doc
from .place import after_commit, clear_cache, load, parts, rebuild, snippets

__all__ = ["Doc", "Part", "SearchIndex", "after_commit", "bm25", "clear_cache", "load", "make_doc", "parts",
           "rebuild", "snippets"]
