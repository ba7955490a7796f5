"""Pleasantries the relevance floor compares a query with, in the embedding model's own terms.

Why anchors instead of a fixed cosine: what a cosine of 0.3 means depends on the model, the
language and the memory (a paraphrased question scores 0.12 against a long conversation with
all-MiniLM-L6-v2, while "Thanks, that's all for today!" scores 0.26 against the chit-chat in
the same conversation). But any embedding model puts "thanks, that's all" next to "thank you,
bye". So the query is compared with these phrases (embedded once per tier, one request): when
it is at least ``SMALL_TALK_SIMILARITY`` close to one of them — on a scale where 0 is the
model's similarity of unrelated sentences (``BASE_PROBES``) — and closer to it than to every
memory, it is small talk and recall returns nothing.
"""

from __future__ import annotations

SMALL_TALK_SIMILARITY = 0.45  # on the ``rescaled`` scale (all-MiniLM-L6-v2: a cosine of about 0.5)

PHRASES = (
    "Thanks, that's all for today!", "Thank you so much.", "Thanks!", "OK, got it.", "Okay cool.",
    "Hello!", "Hi there, how are you?", "Good morning.", "Good night!", "Bye, see you later.",
    "Great, sounds good.", "lol that's funny", "Nice.", "Can you say that again?", "Never mind.",
    "谢谢，今天就到这里吧！", "谢谢！", "好的，明白了。", "你好！", "早上好。", "晚安！", "再见，回头见。",
    "哈哈，太好笑了", "没事了。", "好的，非常感谢。",
)

#: Unrelated sentences of one script: a model that knows the language puts them far apart (English
#: sentences under all-MiniLM-L6-v2: cosine 0.0-0.2); a model that does not puts them together
#: (the same model on Chinese: 0.5-0.7). Then its similarities say nothing about queries in that
#: script and the tier abstains on them (words rank alone).
CJK_PROBES = ("我明天要去银行办理业务。", "这只猫喜欢在窗台上晒太阳。", "公司下周开始实行新的报销制度。")
#: The same three sentences in English: their similarity is the model's baseline for "unrelated"
#: (all-MiniLM-L6-v2: ~0.1; multilingual-e5-small: ~0.75, its vectors share one direction).
BASE_PROBES = ("I need to go to the bank tomorrow.", "The cat likes to sunbathe on the windowsill.",
               "The company starts a new expense policy next week.")
#: Blind to CJK: unrelated Chinese sentences this much closer than unrelated English ones.
BLIND_SIMILARITY = 0.25


def rescaled(similarity: float, baseline: float) -> float:
    """A cosine on a model-independent scale: 0 at the model's "unrelated" baseline, 1 at identity."""
    return (similarity - baseline) / max(1.0 - baseline, 1e-6)


def mostly_cjk(text: str) -> bool:
    """More than half of the text's letters are CJK."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return False
    cjk = sum(1 for c in letters if "\u3040" <= c <= "\u30ff" or "\u3400" <= c <= "\u9fff"
              or "\uac00" <= c <= "\ud7af" or "\uf900" <= c <= "\ufaff")
    return cjk * 2 > len(letters)


__all__ = ["BASE_PROBES", "BLIND_SIMILARITY", "CJK_PROBES", "PHRASES", "SMALL_TALK_SIMILARITY", "mostly_cjk",
           "rescaled"]
