"""What a memory tool refuses before it writes, judged against the run it is called in.

Why a module of its own: each check compares what a model wants to write with what the run
actually holds — our own example texts (``examples``), the names the user and the tools said, the
names the user rejected — and the tools (``tools.py``) only decide when to ask. Every refusal is a
``MemoryFormatError`` whose message names what to fix and says nothing was saved, so the model can
act on it and the user's store is untouched.
"""

from __future__ import annotations

import math
import re

from agno.run.base import RunContext

from .auto.doubt import contradicts_user, terms
from .errors import MemoryFormatError
from .examples import OWN_MESSAGE, bare_placeholder, normalize_text, registry, said_by_user
from .memdir import MemoryFile
from .session.messages import content_text, strip_injected


def user_texts(run_context: RunContext | None) -> list[str]:
    """The user's messages of this run (history included), without the blocks our own hooks put in
    front of a message (a summary, recalled memories)."""
    messages = getattr(run_context, "messages", None) or []
    return [strip_injected(content_text(m.content)) for m in messages if getattr(m, "role", None) == "user"]


def user_words(run_context: RunContext | None) -> str:
    """What the user wrote in this run's messages, normalised for comparison."""
    return normalize_text("\n".join(user_texts(run_context)))


#: A name in a memory's text: CamelCase or with inner capitals ("PostgreSQL", "GitLab"), a word with a
#: digit ("Q1", "v16", "2027-01-15"), all capitals ("ISO", "CI"), or a capitalised word of 3+ letters
#: that does not start a sentence, line or list item ("reviews Go and Python code").
_NAME_TOKEN = re.compile(r"(?<![\w.+#-])(?:[A-Za-z]*[a-z][A-Z][\w+#.-]*|[A-Za-z]*\d[\w.+#-]*|[A-Z]{2,}[\w+#]*"
                         r"|[A-Z][a-z]{2,}[\w+#]*)(?![\w-])")
_STARTS = re.compile(r"(?:^|[.!?:;]\s+|\n\s*(?:[-*+]|\d+[.)])?\s*|\(\s*|[\"'“‘]\s*)$")


def grounded_words(run_context: RunContext | None) -> str:
    """What the user and the tools said in the run (tool results: a file read, a search), lower-cased:
    what a memory the agent writes may name."""
    messages = getattr(run_context, "messages", None) or []
    parts = [strip_injected(content_text(m.content)) if getattr(m, "role", None) == "user" else content_text(m.content)
             for m in messages if getattr(m, "role", None) in ("user", "tool")]
    return "\n".join(parts).casefold()


def ungrounded_names(text: str, said: str) -> list[str]:
    """The names in ``text`` (``_NAME_TOKEN``) that ``said`` (``grounded_words``) never holds, in order."""
    out: list[str] = []
    for match in _NAME_TOKEN.finditer(text):
        word = match.group(0).rstrip(".")
        capitalised_only = word[:1].isupper() and word[1:].islower() and word.isalpha()
        if capitalised_only and (_STARTS.search(text[: match.start()]) or _title_line(text, match.start())):
            continue  # "Uses Polars": a sentence's first word; "Date Format Preference": a title
        if word.casefold() not in said and word not in out:
            out.append(word)
    return out


def _title_line(text: str, at: int) -> bool:
    """Whether the line holding position ``at`` is written in title case (every word of 3+ letters
    capitalised): its capitals mark a heading, not names."""
    start, end = text.rfind("\n", 0, at) + 1, text.find("\n", at)
    words = re.findall(r"[A-Za-z]{3,}", text[start : end if end >= 0 else len(text)])
    return len(words) >= 2 and all(w[0].isupper() for w in words)


def refuse_ungrounded(text: str, run_context: RunContext | None, *, what: str = "memory",
                      tool: str = "save_file") -> None:
    """Raise ``MemoryFormatError`` when ``text`` names what neither the user nor a tool result said
    in the run (``agent.grounded_saves``).

    Why: a 1.5B model asked to remember "I'm a backend engineer … I write the payment service in Go"
    saved "skills: Go, Python, Java" and "role: 前端工程师": a memory read back in every later session
    as the user's own words. A name nobody said is the model's invention, whatever else is right.

    A whole memory (``what="memory"``) must also share at least a quarter of its content words with
    what was said: the same model, asked to write a deploy script, saved its own generic steps
    ("Pull latest code … Monitor application") as a project memory nobody asked for."""
    said = grounded_words(run_context)
    verb = "saved" if tool == "save_file" else "changed"
    names = ungrounded_names(text, said)
    if names:
        raise MemoryFormatError(
            f"the {what} names {', '.join(names[:5])}, which nobody said in this conversation. Nothing was "
            f"{verb}. Keep only what the user said, then call {tool} again.")
    mine = terms(text)
    if what == "memory" and mine and len(mine & terms(said)) < max(1, math.ceil(MIN_SHARED_WORDS * len(mine))):
        raise MemoryFormatError(
            f"the {what} shares almost no words with what the user or a tool said in this conversation. Nothing "
            f"was {verb}. Save what the user said, in their words, then call {tool} again.")


#: Share of a memory's content words that what was said in the run must hold (``refuse_ungrounded``).
MIN_SHARED_WORDS = 0.25


def refuse_contradicting(text: str, run_context: RunContext | None, *, what: str = "memory",
                         tool: str = "save_file") -> None:
    """Raise ``MemoryFormatError`` when ``text`` puts forward a name the user said NOT to use in
    this run ("don't use pandas — use Polars") and never said to use (``auto.doubt.contradicts_user``).

    Why: a small model, its own pandas code in view, saved "Load CSV files with pandas." right after
    being corrected; auto memory already refuses such facts, and what the tools write is read back
    in every later session just the same."""
    names = sorted(contradicts_user(text, user_texts(run_context)))
    if names:
        raise MemoryFormatError(
            f"the {what} puts forward {', '.join(names)}, which the user said not to use in this conversation. "
            f"Nothing was {'saved' if tool == 'save_file' else 'changed'}. Write what the user asked for instead, "
            f"then call {tool} again.")


def copies_example(text: str, said: str = "", *, placeholders: bool = True) -> bool:
    """Whether ``text`` is a bare placeholder, one of our tool messages, or copies one of our
    examples that the user did not say themselves (``said``: ``user_words``).

    Why the user's words count: our examples are realistic on purpose, so a real user can say the
    same thing — "I'm a backend engineer at a bank" met an old refusal hint "Backend engineer at a
    bank; reviews Go code" and a 1.5B model's faithful save was refused as a copy (issue 30). Auto
    memory already exempted what the user said (``auto.doubt.Placeholders``); the tools now do too,
    paraphrases included (``examples.said_by_user``)."""
    if OWN_MESSAGE.search(text):
        return True
    if placeholders and bare_placeholder(text):
        norm = normalize_text(text)  # a number or date the user wrote ("2026-12-01") is theirs
        return not (norm.isdigit() and said_by_user(norm, said))
    hit = registry().example(text)
    return hit is not None and not said_by_user(hit, said)


def refuse_copied_examples(memory: MemoryFile | None, said: str = "") -> None:
    """Raise ``MemoryFormatError`` (a message the model can act on) when a memory's description or
    body is copied from our own examples or templates (``harness_memory.examples``) and the user
    did not say it (``said``: ``user_words`` of the run).

    Why in the tool and not in ``MemoryDir.save``: the tool's caller is a model that was shown the
    examples; imports, snapshots and people writing files were not. The name is not checked: it is
    a label (``user_role``), and a real memory may well use the example's kind of name."""
    if memory is None:
        return
    if not memory.body.strip():
        raise MemoryFormatError("the memory text is empty: write the memory itself, in your own words, on the "
                                "lines after the closing '---'. Nothing was saved; call save_file again.")
    fields = (("description", memory.description), ("body", memory.body))
    bare = [f"the {what} {short(text)}" for what, text in fields
            if bare_placeholder(text) and copies_example(text, said)]
    if bare:
        raise MemoryFormatError(
            f"{' and '.join(bare)} {'is' if len(bare) == 1 else 'are'} a placeholder, not a memory. Nothing was "
            "saved. Write the description as one line saying what this memory holds, and the body as the memory "
            "itself in your own words from what the user said, then call save_file again.")
    problems = [f"the {what} {short(text)}" for what, text in fields if copies_example(text, said)]
    if problems:
        raise MemoryFormatError(
            f"{' and '.join(problems)} {'is' if len(problems) == 1 else 'are'} copied from the example or "
            "template in your instructions, not about this user. Nothing was saved. Write the description as "
            "one line in your own words saying what this memory holds, from what THIS user said, and the body "
            "as the memory itself, then call save_file again.")


def short(text: str, limit: int = 80) -> str:
    """``text`` on one line, cut to ``limit``, quoted: how a refusal quotes what it refuses."""
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "…")


__all__ = ["copies_example", "grounded_words", "refuse_contradicting", "refuse_copied_examples", "refuse_ungrounded",
           "short", "ungrounded_names", "user_texts", "user_words"]
