"""Our own example texts, in one registry, and the check that refuses them as memory.

Why: a small model copies the shape — and often the words — of what it is shown. The first
memory-file example was a template (``description: one line saying what this memory holds``),
and a 1.5B model saved it verbatim in 3 of 5 saves, so the next session's MEMORY.md said
nothing. So every example we show a model is now a concrete, realistic memory of a made-up
person, introduced as an example, and every text of every example (the memory-file example
here, the extraction prompt's worked example in ``auto/prompt.py``, the templates of earlier
versions) is refused when a model hands it back as memory.

Comparison is on normalised text (NFKC, case-folded, spaces and punctuation removed), so a copy
with other spacing, quotes or capitals is still a copy; an example text of at least
``MIN_EXAMPLE_CHARS`` is also refused inside a longer text (``"I am a frontend engineer, …"``).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

# -- the memory-file example the agent is shown (prompt, tool errors) -----------------------------
EXAMPLE_FILE_NAME = "user_sql_dialect.md"
EXAMPLE_NAME = "user_sql_dialect"
EXAMPLE_DESCRIPTION = "Data analyst on BigQuery; wants BigQuery SQL, never PostgreSQL syntax"
EXAMPLE_BODY = ("Data analyst at a freight company (said 2026-03-02). Their warehouse is BigQuery, so write "
                "its dialect (backtick-quoted tables, SAFE_CAST) and never PostgreSQL-only syntax.")
FRONTMATTER_EXAMPLE = (f"---\nname: {EXAMPLE_NAME}\ndescription: {EXAMPLE_DESCRIPTION}\n"
                       f"type: user\n---\n\n{EXAMPLE_BODY}")
#: How every prompt introduces an example: what it is, and that its words are refused.
EXAMPLE_INTRO = ("An EXAMPLE about a made-up user — it shows the format only. Write your own name, "
                 "description and text from what THIS user said; text copied from the example is refused:")

#: Examples in the texts of other parts we send a model — the tools' descriptions
#: (``tools.py``: search_memories' query example), the session summary template's title line
#: (``session/summary.py``) and the field words of the structured memory ask (``save_ask.py``).
#: Kept here as data, since this module sits below them; tests read every tool description,
#: template and ask actually sent and check each example in it is refused.
SENT_EXAMPLES = (
    "staging database password rotation",
    "<a distinctive 5-10 word title of the session>",
    "a distinctive 5-10 word title of the session",
    # the field words of the structured ask for a memory the user asked to keep (``save_ask.FIELD_WORDS``)
    "about me",
    "how you should work",
    "about the work",
    "where things are",
    "a few words",
    "one line",
    "the memory, in my words",
)

#: Phrases of our own tool answers and error messages: a text holding one is a tool answer echoed
#: back ("Nothing was saved. Write the description as …"), never a memory.
OWN_MESSAGE = re.compile(r"nothing was (?:saved|changed|deleted|removed)|memory\.md updated|copied from the example"
                         r"|call (?:save_file|list_files|read_file|search_memories)\b|^\W*error\s*:", re.IGNORECASE)

#: Templates and examples of earlier versions (a model fine-tuned on, or caching, an old prompt).
LEGACY_EXAMPLES = (
    "one line saying what this memory holds",
    "The memory itself, in markdown.",
    "I am a frontend engineer",
    "what the assistant did wrong",
)
#: The texts of the auto-memory extraction prompt's worked example and example conversation
#: (``auto/prompt.py``: ``example_texts()``). Held here as data because the memory file format
#: (``memdir``) checks against them and must not import the feature above it; a test keeps the two
#: in step (``tests/test_placeholders.py``).
EXTRACTION_EXAMPLES = (
    "Runs a bakery in Lyon; keeps the accounts in LibreOffice Calc.",
    "Runs a bakery in Lyon",
    "I run a bakery in Lyon",
    "Give LibreOffice Calc formulas, not Excel ones",
    "Gave Excel formulas to a LibreOffice Calc user",
    "stop giving me Excel formulas",
    "At the Sirha trade fair until Sunday",
    "I'm at the Sirha trade fair until Sunday",
    "keeps her books in Calc now, not Excel",
    "I run a bakery in Lyon and do my books in LibreOffice Calc, so stop giving me Excel formulas",
)


def example_texts() -> tuple[str, ...]:
    """The extraction prompt's example texts, as this module holds them (``EXTRACTION_EXAMPLES``)."""
    return EXTRACTION_EXAMPLES


#: Bare placeholders a template or a lazy model produces (compared normalised).
GENERIC = frozenset({"", "string", "text", "content", "fact", "thefact", "example", "todo", "tbd", "na",
                     "none", "null", "xxx", "placeholder", "yourfacthere", "factcontent", "summary",
                     "sourceerror", "evidence", "reason", "description", "onelinedescription", "name",
                     "memory", "thememory"})
MIN_EXAMPLE_CHARS = 12  # normalised; a shorter example text is only refused as a whole
#: Normalised length from which a piece of an example ("Keeps the accounts in LibreOffice Calc."
#: out of "Runs a bakery in Lyon; keeps the accounts in LibreOffice Calc.") is refused too.
MIN_FRAGMENT_CHARS = 20
_CLAUSE_SPLIT = re.compile(r"[;；。!?！？]|\.(?:\s|$)|,\s|，|\s[—–-]\s")
_TEMPLATE = re.compile(r"^\s*(?:<[^<>]{1,80}>|\{[^{}]{1,80}\}|\[[^\[\]]{1,80}\])\s*$")
_PUNCT_OR_SPACE = re.compile(r"[\s\W_]+", re.UNICODE)


def normalize_text(text: str) -> str:
    """Key for comparing texts: NFKC, case-folded, spaces and punctuation removed."""
    return _PUNCT_OR_SPACE.sub("", unicodedata.normalize("NFKC", text).casefold())


class ExampleTexts:
    """A set of example texts, normalised once; ``match`` says which one a text copies."""

    def __init__(self, texts: Iterable[str]) -> None:
        whole = list(texts)
        clauses = [c for t in whole for c in _CLAUSE_SPLIT.split(t)]  # each clause is an example too
        self._norm = frozenset(n for n in (normalize_text(t) for t in [*whole, *clauses]) if n)
        self._joined = "\x00".join(sorted(self._norm))

    def match(self, text: str) -> str | None:
        """The example ``text`` copies (normalised), or a bare placeholder it is, or None."""
        if bare_placeholder(text):
            return normalize_text(text) or "(empty)"
        if OWN_MESSAGE.search(text):
            return normalize_text(text)
        return self.example(text)

    def example(self, text: str) -> str | None:
        """The (normalised) example text ``text`` is, or contains when the example has at least
        ``MIN_EXAMPLE_CHARS``, or — when ``text`` has at least ``MIN_FRAGMENT_CHARS`` — the piece of
        an example ``text`` is (then ``text`` itself, normalised); None when it copies none."""
        norm = normalize_text(text)
        if not norm:
            return None
        hit = next((e for e in self._norm if norm == e or (len(e) >= MIN_EXAMPLE_CHARS and e in norm)), None)
        if hit is None and len(norm) >= MIN_FRAGMENT_CHARS and norm in self._joined:
            return norm
        return hit


def said_by_user(hit: str, said: str) -> bool:
    """Whether the user's words (``said``, normalised) hold ``hit`` (a normalised example text or
    fragment ``ExampleTexts.example`` returned): exactly, or as a close paraphrase — at least 70 %
    of its character trigrams ("I'm a backend engineer at a bank and I mostly review Go code" holds
    "Backend engineer at a bank; reviews Go code"). The user's own words are never a copy."""
    if not hit or not said:
        return False
    if hit in said:
        return True
    grams = {hit[i : i + 3] for i in range(len(hit) - 2)}
    return len(grams) >= 4 and sum(1 for g in grams if g in said) / len(grams) >= 0.7


def bare_placeholder(text: str) -> bool:
    """A bare template (``<fact>``, ``{description}``), a generic word ("placeholder", "TODO"), or
    a number: never a memory, whoever said it."""
    if _TEMPLATE.match(text):
        return True
    norm = normalize_text(text)
    return norm in GENERIC or norm.isdigit()


def _memory_file_texts() -> list[str]:
    sentences = [s.strip() for s in EXAMPLE_BODY.split(".") if s.strip()]
    return [EXAMPLE_DESCRIPTION, EXAMPLE_BODY, *sentences]


@functools.cache
def registry() -> ExampleTexts:
    """Every example text we show any model: the memory-file example, the extraction prompt's worked
    example (``EXTRACTION_EXAMPLES``: data, this module imports nothing of ``auto``) and the legacy templates."""

    return ExampleTexts([*_memory_file_texts(), *example_texts(), *SENT_EXAMPLES, *LEGACY_EXAMPLES])


def copied_example(text: str) -> str | None:
    """The example text ``text`` copies (normalised), or None — ``registry().match``."""
    return registry().match(text)


__all__ = ["EXAMPLE_BODY", "EXAMPLE_DESCRIPTION", "EXAMPLE_FILE_NAME", "EXAMPLE_INTRO",
           "EXAMPLE_NAME", "FRONTMATTER_EXAMPLE", "GENERIC", "LEGACY_EXAMPLES", "OWN_MESSAGE", "SENT_EXAMPLES",
           "ExampleTexts", "bare_placeholder",
           "copied_example",
           "normalize_text", "registry", "said_by_user"]
