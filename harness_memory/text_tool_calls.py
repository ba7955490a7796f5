"""Tool calls a model wrote as text, recovered strictly against the tools offered in that request.

Why: small local models (Qwen2.5-Coder 0.5B-7B on llama.cpp or Ollama) write their calls as text —
a fenced ```json {"name": …, "arguments": …}``` block, a bare JSON object, ``<tool_call>…</tool_call>``
or a ``<tools>`` block — and the server returns that as ``content`` with no ``tool_calls``. agno then
sees an answer, the memory tools are never called, and the user is shown raw JSON (issue 30: 0 of 55
calls recognised). Clients that work well with such models parse these calls themselves, strictly.

The rules (all must hold, else the text stays text and nothing runs):
- the call block(s) are the END of the answer: after them only whitespace; between two blocks only
  whitespace; the first starts a line. Text before them (a short lead-in, "I'll save that:") is kept
  and shown; a block followed by more prose is a call QUOTED in an explanation and stays text;
- the lead-in is short (``MAX_LEAD_CHARS``) and does not introduce an example ("for example", "e.g.");
- every block is valid JSON (no repair of broken JSON) holding one call object or a list of them,
  ``{"name": …, "arguments": {…}}`` (``parameters`` is accepted for ``arguments``; ``arguments`` may be
  a JSON string, as in OpenAI's own format; ``{"function": {…}}`` wrappers are unwrapped);
- the name is a tool offered in THIS request, and the arguments validate against its JSON schema
  (``validate``: the subset agno emits; an argument the schema does not name is refused too).

Pure functions, no agno: the agno seam is ``agent_model.LoopAwareOpenAILike``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: A lead-in longer than this is an explanation, not a preface to a call.
MAX_LEAD_CHARS = 300
#: Words that introduce an example: a call after them is quoted, not made.
_EXAMPLE_WORDS = re.compile(r"\b(?:for example|for instance|e\.g\.|example|such as|like this|would look like|"
                            r"format is|looks like)\b|例如|比如|示例|例子|格式", re.IGNORECASE)
#: The opening of each block shape, matched at a line start; its closing text (None: a bare object).
_OPENERS: tuple[tuple[str, re.Pattern[str], str | None], ...] = (
    ("fenced", re.compile(r"```[ \t]*(?:json|tool_call|tool_code|javascript|js)?[ \t]*\n?", re.IGNORECASE), "```"),
    ("tool_call", re.compile(r"<tool_call>", re.IGNORECASE), "</tool_call>"),
    ("tools", re.compile(r"<tools>", re.IGNORECASE), "</tools>"),
    ("bare", re.compile(r"(?=[{\[])"), None),
)
#: What a line may start with for a call block to follow (the stream holds text from such a line).
MARKERS = ("```", "<tool_call>", "<tools>", "{", "[")


@dataclass(frozen=True, slots=True)
class TextCall:
    """One recovered call: a tool offered in the request and arguments its schema accepts."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Recovery:
    """What an answer's text holds. ``outcome``: ``recovered`` (``calls`` are real calls; ``lead`` is
    the text to keep), ``none`` (no call-shaped text: an ordinary answer) or why a call-shaped text
    stays text: ``quoted``, ``bad_json``, ``not_offered``, ``bad_arguments``. ``kind`` is the shape.
    (``agent_model_text`` adds ``repeated``: a call the run already made too often, not run again.)"""

    outcome: str
    kind: str = ""
    calls: tuple[TextCall, ...] = ()
    lead: str = ""
    detail: str = field(default="", compare=False)


NONE = Recovery("none")


def offered_schemas(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Tool name -> parameters schema, from the ``tools`` list an OpenAI request carries."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            out[fn["name"]] = dict(params) if isinstance(params, Mapping) else {"type": "object", "properties": {}}
    return out


def recover(text: str | None, tools: Sequence[Mapping[str, Any]] | None) -> Recovery:
    """The calls ``text`` makes (see the module docstring for the rules), or why it makes none."""
    schemas = offered_schemas(tools)
    if not text or not schemas:
        return NONE
    found = _tail_blocks(text)
    if found is None:
        return _quoted_or_none(text)
    start, blocks = found
    kind = blocks[0][0]
    lead = text[:start].rstrip()
    payloads: list[Any] = []
    for block_kind, body in blocks:
        try:
            payloads.append(json.loads(body))
        except ValueError as exc:
            if block_kind == "bare" or '"name"' not in body:
                return _quoted_or_none(text)  # JSON-looking text that never claimed to be a call
            return Recovery("bad_json", kind, detail=str(exc))
    objects = [obj for payload in payloads for obj in (payload if isinstance(payload, list) else [payload])]
    shaped = [_call_shape(obj) for obj in objects]
    if not objects or any(s is None for s in shaped):
        if kind == "bare" or not any(s is not None for s in shaped):
            return NONE  # a JSON answer (data, an example) that is not a call
        return Recovery("bad_arguments", kind, detail="a block holds something other than a call")
    if len(lead) > MAX_LEAD_CHARS or _EXAMPLE_WORDS.search(lead):
        return Recovery("quoted", kind, detail="the call follows an explanation")
    calls: list[TextCall] = []
    for name, args in (s for s in shaped if s is not None):
        if name not in schemas:
            return Recovery("not_offered", kind, detail=f"{name!r} is not a tool of this request")
        if not isinstance(args, dict):
            return Recovery("bad_arguments", kind, detail="arguments are not an object")
        problem = validate(args, schemas[name], top=True)
        if problem:
            return Recovery("bad_arguments", kind, detail=f"{name}: {problem}")
        calls.append(TextCall(name, args))
    return Recovery("recovered", kind, tuple(calls), lead)


def hold_from(text: str, start: int = 0) -> int:
    """Where, at or after ``start``, a call block may begin in ``text`` (a line starting with, or
    still able to become, one of ``MARKERS``); ``len(text)`` when nowhere. A stream shows the text
    before it and holds the rest until the answer ends."""
    pos = start
    while pos <= len(text):
        if pos == 0 or text[pos - 1] == "\n":
            rest = text[pos:].lstrip(" \t")
            if not rest or any(rest.startswith(m) or m.startswith(rest) for m in MARKERS):
                return pos
        nl = text.find("\n", pos)
        if nl < 0:
            return len(text)
        pos = nl + 1
    return len(text)


# -- parsing --------------------------------------------------------------------------------------
def _tail_blocks(text: str) -> tuple[int, list[tuple[str, str]]] | None:
    """(start of the first block, [(kind, JSON text)]) when ``text`` ends with call blocks, one
    after another, the first at a line start; None otherwise. Tries each line start from the top."""
    for line_start in _line_starts(text):
        pos = line_start + len(text[line_start:]) - len(text[line_start:].lstrip(" \t"))
        blocks = _blocks_from(text, pos)
        if blocks:
            return line_start, blocks
    return None


def _line_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in re.finditer(r"\n", text))]


def _blocks_from(text: str, pos: int) -> list[tuple[str, str]] | None:
    blocks: list[tuple[str, str]] = []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return blocks or None
        step = _one_block(text, pos)
        if step is None:
            return None
        kind, body, pos = step
        blocks.append((kind, body))


def _one_block(text: str, pos: int) -> tuple[str, str, int] | None:
    for kind, opener, closer in _OPENERS:
        m = opener.match(text, pos)
        if m is None:
            continue
        if closer is None:  # a bare JSON value: it ends where the decoder says
            try:
                _, end = json.JSONDecoder().raw_decode(text, m.end())
            except ValueError:
                return None  # not JSON: prose that starts with a brace (a later line may still hold a call)
            return kind, text[m.end():end], end
        close = text.find(closer, m.end()) if closer != "```" else _fence_end(text, m.end())
        if close < 0:  # an unclosed block at the very end (the model stopped): its rest is the body
            return kind, text[m.end():].strip(), len(text)
        return kind, text[m.end():close].strip(), close + len(closer)
    return None


def _fence_end(text: str, pos: int) -> int:
    """The closing fence: three backticks at a line start (or right after the JSON)."""
    m = re.compile(r"(?:^|\n)[ \t]*```|(?<=[}\]])[ \t]*```").search(text, pos)
    if m is None:
        return -1
    return m.end() - 3


def _call_shape(obj: Any) -> tuple[str, Any] | None:
    """(name, arguments) of one call object, or None when ``obj`` is not shaped like a call."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict) and "name" not in obj:
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    keys = set(obj) - {"name", "type", "id"}
    arg_keys = keys & {"arguments", "parameters"}
    if len(arg_keys) > 1 or keys - arg_keys:
        return None  # other keys: a record that happens to have a name, not a call
    args: Any = obj.get(arg_keys.pop()) if arg_keys else {}
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return name, None
    return name, args


# -- JSON schema (the subset agno emits for tool parameters) ----------------------------------------
_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float),
                                      "boolean": (bool,), "array": (list,), "object": (dict,),
                                      "null": (type(None),)}


def validate(value: Any, schema: Mapping[str, Any], *, top: bool = False, path: str = "") -> str | None:
    """Why ``value`` does not match ``schema`` (a short message naming the field), or None.

    Supports type (one or a list), enum, const, properties, required, additionalProperties, items,
    anyOf / oneOf / allOf; other keywords are ignored. At the top level an argument the schema does
    not name is refused (agno would pass it to the function, which does not take it), and ``null``
    is accepted for an argument that is not required (its default is used)."""
    where = path or "arguments"
    if not isinstance(schema, Mapping):
        return None
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options and all(validate(value, o, path=path) for o in options):
            return f"{where} matches none of the allowed forms"
    for sub in schema.get("allOf") or ():
        problem = validate(value, sub, path=path)
        if problem:
            return problem
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_is_type(value, t) for t in names):
            return f"{where} must be {' or '.join(map(str, names))}, not {_json_type(value)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} must be one of {schema['enum']}"
    if "const" in schema and value != schema["const"]:
        return f"{where} must be {schema['const']!r}"
    if isinstance(value, dict):
        return _validate_object(value, schema, top=top, path=path)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            problem = validate(item, schema["items"], path=f"{where}[{i}]")
            if problem:
                return problem
    return None


def _validate_object(value: dict[str, Any], schema: Mapping[str, Any], *, top: bool, path: str) -> str | None:
    props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    required = [r for r in schema.get("required") or () if isinstance(r, str)]
    for name in required:
        if name not in value:
            return f"missing required argument {_join(path, name)!r}"
    extra = schema.get("additionalProperties", not (top and props))
    for name, item in value.items():
        if name in props:
            if item is None and name not in required:
                continue
            problem = validate(item, props[name], path=_join(path, name))
            if problem:
                return problem
        elif extra is False:
            return f"{_join(path, name)!r} is not an argument of this tool"
        elif isinstance(extra, Mapping):
            problem = validate(item, extra, path=_join(path, name))
            if problem:
                return problem
    return None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _is_type(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(name, (object,)))


def _json_type(value: Any) -> str:
    return next((n for n in ("null", "boolean", "integer", "number", "string", "array", "object")
                 if _is_type(value, n)), type(value).__name__)


def _quoted_or_none(text: str) -> Recovery:
    """A call block that is not at the end of the answer is quoted in an explanation: say so (for
    the metrics) when one is there and names a call; else the answer holds no call at all."""
    for m in re.finditer(r"```[^\n]*\n(.*?)```|<tool_call>(.*?)</tool_call>|<tools>(.*?)</tools>", text, re.S):
        body = next(g for g in m.groups() if g is not None)
        try:
            obj = json.loads(body)
        except ValueError:
            continue
        if any(_call_shape(o) for o in (obj if isinstance(obj, list) else [obj])):
            return Recovery("quoted", "fenced" if m.group(1) is not None else "tool_call" if m.group(2) is not None
                            else "tools", detail="text follows the call")
    return NONE


__all__ = ["MARKERS", "MAX_LEAD_CHARS", "NONE", "Recovery", "TextCall", "hold_from", "offered_schemas",
           "recover", "validate"]
