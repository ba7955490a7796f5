"""Tokenisation for search and recall: English words and jieba-segmented Chinese in one stream.

Here, below both, because the search index (documents, ``index.py``) and recall (queries) must
use one tokenizer and search sits below recall; ``recall/tokenize.py`` re-exports it.

Why this shape: memory descriptions mix languages ("部署 checklist for the redis 集群"). BM25 needs
the same tokens on both sides, so text is NFKC-folded (full-width letters become ASCII) and
lower-cased, then split into runs: a CJK run is segmented by jieba in search mode (which also
emits the shorter words inside long ones, so 数据库迁移 matches 数据库 and 迁移), every other run of
letters/digits is a word (with a light plural folding, "deployments" ~ "deployment"). Punctuation
and a short list of stop words of both languages are dropped.

jieba's dictionary takes ~0.5-1 s to load, so it is loaded once per process, lazily, by the first
text that contains CJK characters (or ahead of time with ``warm_up()``), through a private
``jieba.Tokenizer`` so the application's own jieba settings are left alone.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jieba

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_RUN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_HAS_CJK = re.compile(rf"[{_CJK}]")

def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


EN_STOPWORDS = _words(
    "a an and are as at be but by can do does for from has have how i if in into is it its me my "
    "of on or our should so that the their them then there these they this to was we what when "
    "where which who why will with you your md"
)
ZH_STOPWORDS = _words(
    "的 了 是 在 和 与 或 也 就 都 而 及 着 把 被 让 给 对 从 向 这 那 这个 那个 这些 那些 什么 怎么 "
    "怎样 如何 吗 呢 吧 啊 呀 我 你 他 她 它 我们 你们 他们 一个 一下 一些 有 没有 要 会 能 可以 "
    "请 请问 哪 哪些 哪个 为什么 之 以 于 其 中 上 下 为 么 个 到 再 又 还 很 已 已经 得 地 过 吧 被"
)

_lock = threading.Lock()
_tokenizer: jieba.Tokenizer | None = None


def _jieba() -> jieba.Tokenizer:
    """The process-wide jieba tokenizer, loaded on first use (thread-safe, once)."""
    global _tokenizer
    if _tokenizer is not None:
        return _tokenizer
    with _lock:
        if _tokenizer is None:
            import jieba

            logging.getLogger("jieba").setLevel(logging.WARNING)  # no "Building prefix dict" chatter
            tok = jieba.Tokenizer()
            tok.initialize()
            _tokenizer = tok
    return _tokenizer


def warm_up() -> None:
    """Load jieba's dictionary now (e.g. at app start) instead of on the first Chinese query."""
    _jieba()


def _fold_plural(word: str) -> str:
    """Harman's S-stemmer: a conservative plural folding that never merges unrelated words."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if word.endswith("s") and not word.endswith(("us", "ss", "is")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Lower-cased search tokens of ``text`` (English words, Chinese words), stop words removed."""
    if not text:
        return []
    folded = unicodedata.normalize("NFKC", text).lower()
    out: list[str] = []
    for run in _RUN.findall(folded):
        if _HAS_CJK.match(run):
            for word in _jieba().cut_for_search(run):
                word = word.strip()
                if word and word not in ZH_STOPWORDS:
                    out.append(word)
        elif run not in EN_STOPWORDS:
            out.append(_fold_plural(run))
    return out


def has_cjk(text: str) -> bool:
    return _HAS_CJK.search(text) is not None


__all__ = ["EN_STOPWORDS", "ZH_STOPWORDS", "has_cjk", "tokenize", "warm_up"]
