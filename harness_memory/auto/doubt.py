"""Doubting the model: checks a proposed memory must pass that do not depend on the model's word.

Why: a small model, asked for facts, will hand back what it was shown — the prompt's own example
text ("I am a frontend engineer", "what the assistant did wrong"), the assistant's reply dressed
up as something the user said, the task at hand ("this repo uses Poetry") as a lasting trait. Each
check here compares the proposal with what was actually there:

* **placeholders** — text copied from our own prompt examples and templates, or a bare
  placeholder ("...", "<fact>"), is refused unless the user really said it;
* **evidence** — a fact must come from the user's words. The model quotes them (``evidence``);
  a fact whose words appear in the assistant's replies but not in the user's is refused. A quote
  found only in the assistant's replies does not decide alone: the fact's own words do (a weak
  model quotes the reply that repeated what the user said; the user's fact is kept). When neither tells
  (a paraphrase, another language), the fact is let through — refusing every translation would
  lose more than it saves;
* **scope** — a fact the model labels as task/session-scoped, or whose text is about the task at
  hand (``task_scope`` patterns), stays out of user memory: it belongs to the session summary.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from ..examples import LEGACY_EXAMPLES, ExampleTexts, bare_placeholder, normalize_text, registry

#: Scope labels that keep a fact out of user memory.
TASK_SCOPES = frozenset({"session", "task", "thread", "project", "repo", "repository", "conversation", "chat",
                         "temporary", "local", "workspace", "file"})
#: Field descriptions of the prompt's rules, refused when a whole text is just one of them.
FIELD_PHRASES = ("the right way", "the assistant's mistake", "the fact", "the user's own words it comes from",
                 "the last day it is true", "YYYY-MM-DD")
_FIELD_PHRASES = frozenset(normalize_text(p) for p in FIELD_PHRASES)
# Words that carry no content for matching (negations are kept: they carry the polarity).
_STOP = frozenset({"a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "has", "have", "he",
                   "her", "his", "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or",
                   "our", "she", "so", "that", "the", "their", "them", "they", "this", "to", "us", "was", "we",
                   "were", "what", "when", "which", "who", "will", "with", "you", "your", "user", "users",
                   "prefers", "prefer", "likes", "like", "wants", "want", "uses", "use", "always", "should",
                   "would", "can", "also", "very", "been", "being", "do", "does", "did"})


class Evidence(StrEnum):
    USER = "user"  # the user's words carry it
    ASSISTANT_ONLY = "assistant_only"  # only the assistant's words do
    UNKNOWN = "unknown"  # cannot tell (paraphrase, translation, no conversation given)


@dataclass(frozen=True)
class Conversation:
    """The words the model saw, by speaker (normalized once)."""

    user: tuple[str, ...] = ()
    assistant: tuple[str, ...] = ()
    _user_norm: str = field(default="", repr=False)
    _assistant_norm: str = field(default="", repr=False)
    _user_terms: frozenset[str] = field(default=frozenset(), repr=False)
    _assistant_terms: frozenset[str] = field(default=frozenset(), repr=False)

    @classmethod
    def of(cls, user: Iterable[str], assistant: Iterable[str]) -> Conversation:
        u, a = tuple(user), tuple(assistant)
        return cls(u, a, "\x00".join(normalize_text(t) for t in u), "\x00".join(normalize_text(t) for t in a),
                   terms(" ".join(u)), terms(" ".join(a)))

    @property
    def empty(self) -> bool:
        return not self.user

    def user_said(self, text: str) -> bool:
        """Whether ``text`` (normalized) occurs in the user's words."""
        norm = normalize_text(text)
        return bool(norm) and norm in self._user_norm

    def user_mentions(self, text: str) -> bool:
        """Whether the user's words share a content word with ``text`` (True when nothing was
        captured: without the conversation there is nothing to doubt with)."""
        return self.empty or bool(terms(text) & self._user_terms)

    def evidence(self, content: str, quote: str | None) -> Evidence:
        """Where a proposed fact comes from (see the module docstring)."""
        if self.empty:
            return Evidence.UNKNOWN
        q = normalize_text(quote or "")
        quoted_assistant = False
        if len(q) >= 4:
            if q in self._user_norm or _overlap(q, self._user_norm) >= 0.7:
                return Evidence.USER
            quoted_assistant = q in self._assistant_norm or _overlap(q, self._assistant_norm) >= 0.7
        wanted = terms(content)
        if not wanted:
            return Evidence.ASSISTANT_ONLY if quoted_assistant else Evidence.UNKNOWN
        from_user = len(wanted & self._user_terms)
        only_assistant = len((wanted & self._assistant_terms) - self._user_terms)
        if quoted_assistant:
            # The quote is the assistant's, but the fact's words may still be the user's (a weak
            # model quotes the reply that repeated them): judged by the words, a majority of
            # which must be the user's and no fewer than those only the assistant said.
            user_words = 2 * from_user > len(wanted) and from_user >= only_assistant
            return Evidence.USER if user_words else Evidence.ASSISTANT_ONLY
        if from_user >= max(1, round(0.34 * len(wanted))):
            return Evidence.USER
        if only_assistant >= 2 and only_assistant >= 2 * from_user and 2 * only_assistant >= len(wanted):
            return Evidence.ASSISTANT_ONLY
        return Evidence.UNKNOWN


def terms(text: str) -> frozenset[str]:
    """Content words of ``text`` (see ``term_list``)."""
    return frozenset(term_list(text))


def term_list(text: str) -> list[str]:
    """Content words of ``text`` in order: Latin words (lower-cased, a plural/verb ending dropped,
    stop words left out) and CJK character pairs."""
    out: list[str] = []
    for match in re.finditer(r"[a-z0-9][a-z0-9+#.'-]*[a-z0-9+#]|[a-z0-9]|[\u3400-\u9fff\uf900-\ufaff]+",
                             text.casefold()):
        token = match.group(0)
        if token[0].isascii():
            word = token.strip(".'-")
            word = word[:-2] if word.endswith("'s") else word
            if word and word not in _STOP:  # single letters count: "C", "R", option "B"
                out.append(word if word[0].isdigit() else _stem(word))
        else:
            out += [token[i : i + 2] for i in range(max(1, len(token) - 1))]
    return out


def _stem(word: str) -> str:
    for ending in ("ing", "ed", "es", "s"):
        if len(word) > len(ending) + 2 and word.endswith(ending):
            return word[: -len(ending)]
    return word


def _trigrams(text: str) -> set[str]:
    return {text[i : i + 3] for i in range(len(text) - 2)} if len(text) >= 3 else {text}


def _overlap(quote: str, haystack: str) -> float:
    """Share of the quote's character trigrams found in ``haystack`` (a paraphrased quote)."""
    grams = _trigrams(quote)
    return sum(1 for g in grams if g in haystack) / len(grams) if grams else 0.0


class Placeholders:
    """Texts that are ours, not the user's: the given example texts, the registry's legacy
    templates (``examples.LEGACY_EXAMPLES``), the rules' field phrases and bare placeholders."""

    def __init__(self, examples: Iterable[str]) -> None:
        self._texts = ExampleTexts([*examples, *LEGACY_EXAMPLES])

    def copied(self, text: str, conversation: Conversation | None = None) -> bool:
        """Whether ``text`` is a placeholder or copies an example (and the user did not say it)."""
        if bare_placeholder(text) or normalize_text(text) in _FIELD_PHRASES:
            return True
        hit = self._texts.example(text) or registry().match(text)  # every example and message we send a model
        if hit is None:
            return False
        return not (conversation is not None and conversation.user_said(hit))


# -- the direction of a correction ("use X, not Y") --------------------------------------------
_NAME = r"([A-Za-z][\w.+#-]*[\w+#]|[A-Za-z])"
_NEGATED = re.compile(r"(?:\bdon'?t|\bdo not|\bnever|\bstop|\bno more|n't|别|不要|不许|禁止|不用|不|再)\s*$",
                      re.IGNORECASE)
_USER_AVOID = [re.compile(p, re.IGNORECASE) for p in (
    r"\b(?:don'?t|do not|never|stop|no more)\s+(?:use|using)\s+" + _NAME,
    r"(?:别|不要|不许|禁止|不用)(?:再)?(?:用|使用)\s*" + _NAME,
    r"\binstead of\s+" + _NAME,
    r"\buse\s+[\w.+#-]+\s*,?\s+not\s+" + _NAME,
)]
_USE = re.compile(r"(?:\b(?:use|using|switch to|move to|change to)\s+|(?:改用|换成|换用|使用|用)\s*)" + _NAME,
                  re.IGNORECASE)
_FACT_WANT_AVOID = [re.compile(p, re.IGNORECASE) for p in (
    r"^\W*(?:always\s+)?(?:use|prefer|pick|choose|run)\s+" + _NAME
    + r"[\s,;]+(?:not|instead of|rather than|over|never)\s+(?:use\s+)?" + _NAME,
    r"^\W*" + _NAME + r"\s*,\s*not\s+" + _NAME,
    r"(?:用|使用)\s*" + _NAME + r"\s*[，,]?\s*(?:而不是|不要用|别用|不用)\s*" + _NAME,
)]


def user_directions(texts: Iterable[str]) -> tuple[set[str], set[str]]:
    """(names the user said to use, names the user said not to use) in ``texts``."""
    want: set[str] = set()
    avoid: set[str] = set()
    for text in texts:
        for pattern in _USER_AVOID:
            avoid.update(m.group(1).casefold() for m in pattern.finditer(text))
        for match in _USE.finditer(text):
            if not _NEGATED.search(text[max(0, match.start() - 10) : match.start()]):
                want.add(match.group(1).casefold())
    return want, avoid


def reversed_correction(content: str, user_texts: Iterable[str]) -> bool:
    """Whether a correction says to use what the user said NOT to use (and never said to use):
    "Use pandas instead of Polars" after "don't use pandas, use Polars"."""
    fact_want: set[str] = set()
    for pattern in _FACT_WANT_AVOID:
        match = pattern.search(content)
        if match:
            fact_want.add(match.group(1).casefold())
    if not fact_want:
        return False
    want, avoid = user_directions(user_texts)
    return bool(fact_want & avoid) and not (fact_want & want)


# Words that put a name on the side of what to avoid: said just before it ("not pandas", "instead of
# Jenkins", "over pandas", "switched from pandas", "不要用 Jenkins", "替代 Jenkins") or just after it
# ("pandas is replaced", "Jenkins 换成 GitLab CI", "Jenkins 已弃用").
_AVOID_BEFORE = re.compile(
    r"(?:\b(?:don'?t|do\s+not|does\s+not|doesn'?t|not|never|no|stop|avoid|avoids|avoiding|instead\s+of|rather\s+than|"
    r"over|than|without|against|dislikes?|hates?|from|replac(?:e|es|ed|ing)|drop(?:s|ped)?|ditch(?:es|ed)?|"
    r"except|unlike|vs\.?|versus|rejects?|rejected|refuses?|refused|bans?|banned|forbids?|forbidden|disallows?)|n't|"
    r"不要用|不要|别用|别|不用|不再用|不再|而不是|不是|禁止|不许|代替|替代|取代|替换|弃用|放弃|除了|而非|非|拒绝|不喜欢|讨厌)"
    r"[\s\W]*(?:(?:to|use|using|used|want|wants|like|likes|need|needs|recommend|suggest|the|a|an|any|"
    r"用|使用|喜欢|想用|要用|再)[\s\W]*){0,3}$", re.IGNORECASE)
_AVOID_AFTER = re.compile(
    r"^[\s\W]*(?:(?:is|was|are|were|gets?|got|has\s+been|should\s+be|must\s+be)\s+)?(?:replaced|dropped|"
    r"deprecated|banned|forbidden|not\b|no\s+longer|换成|改成|改为|改用|替换为|换为|已弃用|弃用|不用|不再用|被替换|"
    r"被取代)|^\s*(?:→|->|=>)", re.IGNORECASE)


def contradicts_user(content: str, user_texts: Iterable[str]) -> set[str]:
    """The names the user said NOT to use (and never said to use) that ``content`` puts forward:
    a mention not governed by an avoiding word next to it.

    Why: a weak model, shown "don't use pandas — use Polars" beside the assistant's pandas code,
    proposes "Uses pandas to load CSV files" as a plain fact (no correction label, most of its words
    the user's). Whatever its category, a fact that recommends what the user has just rejected in
    this very conversation contradicts them; "Prefers Polars over pandas" names it only to avoid it."""
    want, avoid = user_directions(user_texts)
    rejected = avoid - want
    if not rejected:
        return set()
    found: set[str] = set()
    for name in rejected:
        for match in re.finditer(r"(?<![\w.+#-])" + re.escape(name) + r"(?![\w+#-])", content, re.IGNORECASE):
            before = content[max(0, match.start() - 30) : match.start()]
            after = content[match.end() : match.end() + 30]
            if not (_AVOID_BEFORE.search(before) or _AVOID_AFTER.search(after) or _listed_with_avoided(before)):
                found.add(name)
                break
    return found


_JOINER = r"(?:,|、|，|\bor\b|\band\b|\bnor\b|或|和|与|或者)"


def _listed_with_avoided(before: str) -> bool:
    """"not pandas or NumPy", "不要用 Jenkins 和 Travis": the avoiding word governs a short list."""
    tail = re.split(r"[.;:!?。；：！？]", before)[-1]
    head = re.sub(r"(?:\s*" + _JOINER + r"\s*[\w.+#-]+)*[\s,、，]*" + _JOINER + r"\s*$", "", tail, flags=re.IGNORECASE)
    if head == tail:
        return False
    head = re.sub(r"[\w.+#-]+\s*$", "", head)
    return bool(_AVOID_BEFORE.search(head))


def task_scope_label(scope: object) -> bool:
    """Whether the model labelled a fact as belonging to the task/session, not the user."""
    return isinstance(scope, str) and scope.strip().lower() in TASK_SCOPES


# -- what a fact says, and what a correction says to avoid ---------------------------------------
#: An instruction to remember, or a bare pointer, in front of what is to be remembered: not content.
_PREAMBLE = re.compile(
    r"^\W*(?:(?:please|pls|and|also|oh|ok(?:ay)?|so|hey)\W+)*"
    r"(?:remember|note|keep\s+in\s+mind|don'?t\s+forget|do\s+not\s+forget|never\s+forget|fyi|correction|"
    r"请记住|记住|记得|别忘了|不要忘了|别忘记|不要忘记|注意|纠正一下|更正)"
    r"(?:\W+(?:that|this|it|the\s+following))?\W*", re.IGNORECASE)
_POINTERS = frozenset({"that", "this", "it", "thi", "these", "those", "here", "there", "following", "one", "thing",
                       "stuff", "something", "ok", "okay", "yes", "no", "please", "thank", "thanks", "sure",
                       "right", "wrong", "correct", "incorrect", "again", "now", "too", "also", "just"})


def says_something(text: str | None) -> bool:
    """Whether ``text`` states anything once an instruction to remember ("Remember that",
    "请记住") and bare pointers ("that", "this", "ok") are set aside."""
    if not text:
        return False
    rest = _PREAMBLE.sub("", text.strip(), count=1)
    return bool(terms(rest) - _POINTERS)


def _directions(text: str) -> tuple[set[str], set[str]]:
    """(names ``text`` says to use, names it says not to use), in a fact's or a user's wording."""
    want, avoid = user_directions([text])
    for pattern in _FACT_WANT_AVOID:
        match = pattern.search(text)
        if match:
            want.add(match.group(1).casefold())
            avoid.add(match.group(2).casefold())
    return want, avoid - want


def mistake_text(content: str, source_error: str | None) -> str | None:
    """What a correction says to avoid, never holding the corrected belief itself.

    A weak model puts the user's whole correction into ``sourceError`` ("No, don't use pandas …
    use Polars …"), which rendered as ``(avoid: … use Polars …)`` tells the agent to avoid the
    right way. When the error text says to use what ``content`` says to use, or restates the
    content, only the names it says not to use are kept (``pandas``), or nothing."""
    if not source_error or not source_error.strip():
        return None
    err_want, err_avoid = _directions(source_error)
    right = _directions(content)[0]
    norm_content, norm_error = normalize_text(content), normalize_text(source_error)
    carries_belief = bool(err_want & right) or (bool(norm_content) and norm_content in norm_error)
    if not carries_belief and says_something(source_error) and norm_error != norm_content:
        return source_error
    return ", ".join(sorted(err_avoid - right)) or None
