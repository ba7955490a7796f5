"""Recall's tokenizer is the search index's (``search/tokenize.py``: documents and queries must use
one tokenizer, and search sits below recall). Re-exported under its old name."""

from __future__ import annotations

from ..search.tokenize import EN_STOPWORDS, ZH_STOPWORDS, has_cjk, tokenize, warm_up

__all__ = ["EN_STOPWORDS", "ZH_STOPWORDS", "has_cjk", "tokenize", "warm_up"]
