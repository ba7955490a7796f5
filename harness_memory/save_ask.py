"""Asking a small model for the memory the user asked it to keep, as data the server must shape.

Why: when the user says "remember that" / "请记住" and a small local model answers in words with
no call (issue #30: correction_en, correction_zh, preference_zh made no save even when told so in
words), the second ask is not another request in prose. It asks for the memory itself under a JSON
schema (``response_format: json_schema``), which llama.cpp, Ollama, vLLM and OpenAI enforce with
a grammar: the answer is a memory's four fields, never prose, never a half-written call.

What comes back is only turned into an ordinary ``save_file`` call; every check the tool makes
(frontmatter, examples copied, placeholders, the user's own words, size) still decides. Nothing
here writes anything, and nothing from the answer is shown to the user.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .memdir.model import MemoryType, compose_memory

#: How the structured ask starts (how it is recognised in a request's messages).
MARK = "Memory: keep what I asked you to remember in this message of mine"
#: The words that describe the fields (each a registered example: a memory handing them back is a copy).
FIELD_WORDS = ("about me", "how you should work", "about the work", "where things are", "a few words", "one line",
               "the memory, in my words")
_FENCE = "<<<"
_FENCE_END = ">>>"


def ask(said: str) -> str:
    """The user turn of the structured ask: the user's own message quoted (the nearest text a small
    model copies is then the user's: a faithful memory), the fields named, no example values.

    Why quoted: asked in prose ("I asked you to remember something, and nothing was saved…") the
    1.5B model put that very prose into ``text`` in 6 of 8 answers; what it copies should be what
    the user said."""
    quoted = said.strip().replace(_FENCE, "<< <").replace(_FENCE_END, "> >>")
    return (f"{MARK}:\n{_FENCE}\n{quoted}\n{_FENCE_END}\nAnswer with JSON: \"type\" (user: {FIELD_WORDS[0]}; "
            f"feedback: {FIELD_WORDS[1]}; project: {FIELD_WORDS[2]}; reference: {FIELD_WORDS[3]}), \"name\" "
            f"({FIELD_WORDS[4]}), \"description\" ({FIELD_WORDS[5]}), \"text\" ({FIELD_WORDS[6]}). No secrets.")


def is_ask(text: object) -> bool:
    """Whether a message's text is the structured ask."""
    return isinstance(text, str) and text.startswith(MARK)


_TYPES = [t.value for t in MemoryType]
#: The shape the server must hold the answer to.
SCHEMA: dict[str, Any] = {  # no length bounds: OpenAI's strict mode refuses them; the tools bound sizes
    "type": "object",
    "properties": {"type": {"type": "string", "enum": _TYPES}, "name": {"type": "string"},
                   "description": {"type": "string"}, "text": {"type": "string"}},
    "required": ["type", "name", "description", "text"],
    "additionalProperties": False,
}
RESPONSE_FORMAT: dict[str, Any] = {"type": "json_schema",
                                   "json_schema": {"name": "memory", "schema": SCHEMA, "strict": True}}
#: Most tokens of the structured answer: four short fields. A grammar keeps the shape, not the length —
#: a small model can loop inside a JSON string until its context is full.
MAX_TOKENS = 600
_SLUG_WORD = re.compile(r"[a-z0-9]+|[\u3400-\u9fff\uf900-\ufaff]+")
_SLUG_CHARS = 40


def save_arguments(answer: str | None) -> dict[str, str] | None:
    """The ``save_file`` arguments the structured answer describes, or None when it is not such
    an answer (prose, broken JSON, a field missing or empty, an unknown type): then nothing is
    saved and the user gets the model's first answer."""
    if not isinstance(answer, str):
        return None
    try:
        data = json.loads(answer.strip())
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    fields = {k: data.get(k) for k in ("type", "name", "description", "text")}
    if not all(isinstance(v, str) and v.strip() for v in fields.values()):
        return None
    type_ = str(fields["type"]).strip().lower()
    if type_ not in _TYPES:
        return None
    name = " ".join(str(fields["name"]).split())
    content = compose_memory(name, " ".join(str(fields["description"]).split()), type_,
                             str(fields["text"]).strip() + "\n")
    return {"file_name": file_name(type_, name), "content": content}


def file_name(type_: str, name: str) -> str:
    """``<type>_<words of the name>.md``: the type's prefix (which the tools read the type from)
    and the name's words, lower-cased, ASCII and CJK kept, at most 40 characters."""
    words = _SLUG_WORD.findall(name.casefold())
    slug = ""
    for word in words:
        nxt = f"{slug}_{word}" if slug else word
        if len(nxt) > _SLUG_CHARS:
            break
        slug = nxt
    return f"{type_}_{slug or 'note'}.md"
