"""Generates ``harness_memory/escape_tables.py`` from Unicode data (not from a list of tricks).

Sources, all of them Unicode's own data:

* ``Default_Ignorable_Code_Point`` (DerivedCoreProperties, read through the ``regex`` module's
  ``\\p{DI}``) plus the Hangul fillers (by name) and the C0/C1 controls: dropped before tags
  are looked for;
* TR39 ``confusables.txt`` (through the ``confusable-homoglyphs`` package): every single
  character confusable with one of the characters our tags and markers are made of (``<``,
  ``>``, ``/``, ``|``, ``[``, ``]``, ``:``, ``-``, ``_``, a–z, and the CJK characters of the
  session-summary markers);
* the Unicode character names: every single left/right-pointing angle bracket or quotation
  mark, every ``LESS-THAN SIGN`` / ``GREATER-THAN SIGN``, every vertical line;
* NFKC: every character whose compatibility form is one of the above (``＜``, ``﹤``, ``〈``);
* canonical decomposition: every one of the above with diacritics (``ó``, ``ý``, ``≮``);
* NFKC: the BMP characters it changes, and those it may combine with the character before them,
  so that ``escape.py`` normalises a text without the latter run by run, not as a whole.

``python -m tests.gen_escape_tables`` rewrites the module; ``tests/test_escape.py`` checks that
the committed module is what this generator makes from the installed data.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from importlib import resources
from pathlib import Path

import regex

TARGET = Path(__file__).resolve().parent.parent / "harness_memory" / "escape_tables.py"
#: The characters our tags, tokens and markers are made of (see ``escape.OUR_TAGS`` and the markers).
ASCII_TARGETS = "<>/\\|[]:-_" + "abcdefghijklmnopqrstuvwxyz"
CJK_TARGETS = "会话历史摘要用户最新消息"


def _by_name(name: str) -> str | None:
    """The ASCII character a Unicode name says a character is drawn like, if any."""
    if "DOUBLE" in name or "ARROW" in name:
        return None
    angle = "ANGLE" in name and ("BRACKET" in name or "QUOTATION MARK" in name)
    if "LESS-THAN SIGN" in name or (angle and ("LEFT" in name or "LEFT-POINTING" in name)):
        return "<"
    if "GREATER-THAN SIGN" in name or (angle and ("RIGHT" in name or "RIGHT-POINTING" in name)):
        return ">"
    if name.endswith("VERTICAL LINE") and "MODIFIER" not in name:
        return "|"
    return None


def build() -> tuple[list[tuple[int, int]], dict[int, str]]:
    """(ranges of code points to drop, map of code point -> the ASCII/CJK character it folds to)."""
    drop_re = regex.compile(r"[\p{Default_Ignorable_Code_Point}\p{Cc}]")
    drop: list[int] = []
    for cp in range(sys.maxunicode + 1):
        ch = chr(cp)
        if ch in "\t\n\r":
            continue
        if drop_re.match(ch) or ("HANGUL" in unicodedata.name(ch, "") and "FILLER" in unicodedata.name(ch, "")):
            drop.append(cp)
    ranges = _ranges(drop)

    data = json.loads((resources.files("confusable_homoglyphs") / "confusables.json").read_text(encoding="utf-8"))
    fold: dict[int, str] = {}

    def add(ch: str, target: str) -> None:
        ch = "".join(c for c in ch if not drop_re.match(c))  # the data wraps RTL characters in LRM marks
        if len(ch) != 1 or ch.isascii() or ch == target:
            return
        fold.setdefault(ord(ch), target)

    targets = ASCII_TARGETS + CJK_TARGETS
    for target in targets:  # TR39: both directions of the data, upper case letters fold to lower
        for source in {target, target.upper()}:
            for entry in data.get(source, []):
                add(entry["c"], target)
    for cp in range(sys.maxunicode + 1):
        ch = chr(cp)
        named = _by_name(unicodedata.name(ch, ""))
        if named:
            add(ch, named)
    for cp in range(sys.maxunicode + 1):  # NFKC closure: a character whose compatibility form folds
        ch = chr(cp)
        nfkc = unicodedata.normalize("NFKC", ch)
        if nfkc == ch or len(nfkc) != 1:
            continue
        low = nfkc.lower() if nfkc.isascii() else nfkc
        target = low if low in targets else fold.get(ord(nfkc))
        if target:
            add(ch, target)
    for cp in range(sys.maxunicode + 1):  # a target with diacritics: "ó", "ý", "≮" (canonical decomposition)
        ch = chr(cp)
        nfd = unicodedata.normalize("NFD", ch)
        if len(nfd) > 1 and all(unicodedata.category(c) == "Mn" for c in nfd[1:]):
            base = nfd[0].lower() if nfd[0].isascii() else nfd[0]
            target = base if base in targets else fold.get(ord(nfd[0]))
            if target:
                add(ch, target)
    for cp in range(sys.maxunicode + 1):  # non-ASCII capitals confusable with a lower-case target
        ch = chr(cp)
        if cp in fold or ch.isascii():
            continue
        low = ch.lower()
        if len(low) == 1 and ord(low) in fold:
            add(ch, fold[ord(low)])
    return ranges, dict(sorted(fold.items()))


def _ranges(cps: list[int]) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for cp in cps:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1] = (ranges[-1][0], cp)
        else:
            ranges.append((cp, cp))
    return ranges


def nfkc_classes() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(BMP characters NFKC changes, BMP characters with no NFKC boundary before them). No
    boundary: the first character of its NFKD form is not a starter or composes with a character
    before it (the second of a canonical pair, the Hangul vowels and final consonants). A text
    without the latter normalises character by character."""
    second = {int(d.split()[1], 16) for d in map(unicodedata.decomposition, map(chr, range(0x10000)))
              if d and not d.startswith("<") and len(d.split()) == 2}
    second |= set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    changes, no_boundary = [], []
    for cp in range(0x10000):
        ch = chr(cp)
        if unicodedata.normalize("NFKC", ch) != ch:
            changes.append(cp)
        first = unicodedata.normalize("NFKD", ch)[:1]
        if first and (unicodedata.combining(first) or ord(first) in second):
            no_boundary.append(cp)
    return _ranges(changes), _ranges(no_boundary)


def _emit_ranges(out: list[str], ranges: list[tuple[int, int]]) -> None:
    line = "   "
    for first, last in ranges:
        item = f" (0x{first:X}, 0x{last:X}),"
        if len(line) + len(item) > 110:
            out.append(line)
            line = "   "
        line += item
    out += [line, ")"]


def render() -> str:
    ranges, fold = build()
    out = ['"""Generated by ``python -m tests.gen_escape_tables`` from Unicode data: do not edit by hand.',
           "",
           "``DROP``: Default_Ignorable_Code_Point, the Hangul fillers and the control characters (not tab,",
           "newline, carriage return), as (first, last) code point ranges. ``FOLD``: every character",
           "that TR39 confusables.txt, its Unicode name or its NFKC form says is drawn like a character of",
           "our tags or markers, and that character (``escape.py`` reads tags through this fold).",
           "``NFKC_CHANGES``: the BMP characters NFKC changes. ``NFKC_NO_BOUNDARY``: the BMP characters",
           "NFKC may combine with the one before (a text without them, or astral ones, normalises character",
           "by character: ``escape.py`` then normalises only the runs of ``NFKC_CHANGES``).",
           '"""',
           "",
           f"UNICODE_VERSION = {unicodedata.unidata_version!r}",
           "",
           "DROP: tuple[tuple[int, int], ...] = ("]
    _emit_ranges(out, ranges)
    changes, no_boundary = nfkc_classes()
    out += ["", "NFKC_CHANGES: tuple[tuple[int, int], ...] = ("]
    _emit_ranges(out, changes)
    out += ["", "NFKC_NO_BOUNDARY: tuple[tuple[int, int], ...] = ("]
    _emit_ranges(out, no_boundary)
    out += ["", "FOLD: dict[int, str] = {"]
    line = "   "
    for cp, target in fold.items():
        item = f" 0x{cp:X}: {target!r},"
        if len(line) + len(item) > 110:
            out.append(line)
            line = "   "
        line += item
    out += [line, "}", ""]
    return "\n".join(out)


if __name__ == "__main__":
    TARGET.write_text(render(), encoding="utf-8")
    print(f"wrote {TARGET}")
