"""An aggressive reader of prompts, written apart from ``harness_memory/escape.py``, and the
hostile spellings the property tests generate from Unicode data.

The reader sees text the way a careless model or a hostile tester would: it drops every
Default_Ignorable_Code_Point (``regex``'s ``\\p{DI}``) and control character, applies NFKC,
decodes HTML entities until nothing changes, then folds every character that TR39
``confusables.txt`` (the ``confusable-homoglyphs`` data), NFKC, its Unicode name or its letter
without diacritics says looks like a character of our tags to that character, and reads tags,
tokens and markers from the result. Nothing here imports the escaper's tables.
"""

from __future__ import annotations

import functools
import html
import json
import re
import unicodedata
from html.entities import html5
from importlib import resources

import regex

from harness_memory.escape import MESSAGE_LABEL, OUR_TAGS, SUMMARY_HEADER

_IGNORABLE = regex.compile(r"[\p{Default_Ignorable_Code_Point}\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
HEADER_WORD, LABEL_WORD = SUMMARY_HEADER[1:-1], MESSAGE_LABEL[:-1]
_TARGETS = "<>/\\|[]:-_abcdefghijklmnopqrstuvwxyz" + HEADER_WORD + LABEL_WORD
_SKELETONS = {"".join(ch for ch in tag if ch.isalpha()): tag for tag in OUR_TAGS}


@functools.cache
def _confusables() -> dict[str, list[str]]:
    raw = json.loads((resources.files("confusable_homoglyphs") / "confusables.json").read_text(encoding="utf-8"))
    return {key: ["".join(c for c in e["c"] if not _IGNORABLE.match(c)) for e in entries]
            for key, entries in raw.items()}


def _drawn_like(name: str) -> str | None:
    """What a Unicode character name says the character is drawn like (single angles, signs)."""
    if "DOUBLE" in name or "ARROW" in name:
        return None
    angle = "ANGLE" in name and ("BRACKET" in name or "QUOTATION" in name)
    if "LESS-THAN SIGN" in name or (angle and "LEFT" in name):
        return "<"
    if "GREATER-THAN SIGN" in name or (angle and "RIGHT" in name):
        return ">"
    return None


@functools.cache
def fold_table() -> dict[str, str]:
    """Character -> the character of our tags it reads as (planes 0-1 and the data's own entries)."""
    table: dict[str, str] = {}
    data = _confusables()
    for target in _TARGETS:
        for key in (target, target.upper()):
            for other in data.get(key, []):
                if len(other) == 1 and not other.isascii():
                    table.setdefault(other, target)
    for cp in range(0x20000):
        ch = chr(cp)
        if ch.isascii():
            continue
        nfkc = unicodedata.normalize("NFKC", ch)
        if len(nfkc) == 1 and nfkc.lower() in _TARGETS and nfkc.isascii():
            table.setdefault(ch, nfkc.lower())
        elif len(nfkc) == 1 and nfkc in _TARGETS:
            table.setdefault(ch, nfkc)
        named = _drawn_like(unicodedata.name(ch, ""))
        if named:
            table.setdefault(ch, named)
    for cp in range(0x20000):  # diacritics: what is left when the combining marks are taken off
        ch = chr(cp)
        bare = "".join(c for c in unicodedata.normalize("NFD", ch) if unicodedata.category(c) != "Mn")
        if bare != ch and len(bare) == 1:
            target = bare.lower() if bare.isascii() else table.get(bare, bare)
            if target in _TARGETS:
                table.setdefault(ch, target)
    return table


def view(text: str) -> str:
    """Ignorables dropped, NFKC, entities decoded, until nothing changes (no bound but sanity)."""
    for _ in range(64):
        step = html.unescape(unicodedata.normalize("NFKC", _IGNORABLE.sub("", text)))
        if step == text:
            break
        text = step
    table = fold_table()
    return "".join(table.get(ch, ch.lower() if ch.isascii() else ch) for ch in text)


def _name_at(folded: str, i: int) -> tuple[str, int] | None:
    """The tag of ours whose name starts at ``i`` (letters, with -, _ or spaces between), and where it ends."""
    letters = ""
    best = None
    j = i
    while j < len(folded):
        ch = folded[j]
        if "a" <= ch <= "z":
            letters += ch
            j += 1
            k = j
            while k < len(folded) and folded[k] in "-_":
                k += 1
            follows = folded[k] if k < len(folded) else ""
            if letters in _SKELETONS and not (follows.isalnum()):
                best = (_SKELETONS[letters], j)
        elif ch in "-_" or ch.isspace():
            j += 1
        else:
            break
        if not any(s.startswith(letters) for s in _SKELETONS):
            break
    return best


def tags_in(text: str) -> list[str]:
    """Every tag of ours (and ``<|…|>`` token) the reader sees in ``text``, in order."""
    folded = view(text)
    found = []
    for i, ch in enumerate(folded):
        if ch != "<":
            continue
        j = i + 1
        while j < len(folded) and folded[j].isspace():
            j += 1
        spaced = j > i + 1
        if j < len(folded) and folded[j] == "|":
            end = folded.find("|", j + 1)
            if 0 < end - j <= 41 and not any(c.isspace() or c in "<>[]:" for c in folded[j + 1:end]):
                found.append("<|" + folded[j + 1:end] + "|>")
            continue
        closing = j < len(folded) and folded[j] in "/\\"
        if closing:
            j += 1
            while j < len(folded) and folded[j].isspace():
                j += 1
        named = _name_at(folded, j)
        if named is None:
            continue
        tag, end = named
        if spaced and not re.match(r"\s*[/\\]?\s*>", folded[end:]):
            continue  # "x < memory use": a comparison
        found.append(f"</{tag}>" if closing else f"<{tag}>")
    return found


def markers_in(text: str) -> dict[str, int]:
    """How often the reader sees each session-summary marker (spaces inside ignored)."""
    folded = "".join(view(text).split())
    return {"header": folded.count("[" + HEADER_WORD + "]"), "label": folded.count(LABEL_WORD + ":")}


# -- the generated class of hostile spellings --------------------------------------------------
@functools.cache
def ignorables() -> list[str]:
    """Every default-ignorable code point (and control character) of planes 0-1 and the tag block."""
    return [chr(cp) for cp in [*range(0x20000), *range(0xE0000, 0xE1000)] if _IGNORABLE.match(chr(cp))]


@functools.cache
def drawn_as(target: str) -> list[str]:
    """``target`` and every character the reader folds to it."""
    return [target, *sorted(ch for ch, t in fold_table().items() if t == target and view(ch) == target)]


def entity_spellings(ch: str) -> list[str]:
    """Every way HTML spells ``ch`` once: decimal and hex, with zeros and with or without ``;``,
    and each named entity whose value it is."""
    cp = ord(ch)
    out = [f"&#{cp};", f"&#00{cp};", f"&#x{cp:x};", f"&#X{cp:X};", f"&#x000{cp:x};"]
    out += [f"&#{cp}"] if not ch.isdigit() else []
    out += ["&" + name for name, value in html5.items() if value == ch]
    return out


__all__ = ["HEADER_WORD", "LABEL_WORD", "drawn_as", "entity_spellings", "fold_table", "ignorables", "markers_in",
           "tags_in", "view"]
