"""Property tests of the escaping rule: hostile spellings generated from Unicode data, read back
by an independent aggressive reader (``tests/escape_reader.py``).

The class generated: each of our tag names (from the registry) in any case, its letters swapped
for look-alikes, any separator, default-ignorable code points inserted anywhere, opened and
closed by any character the data draws as ``<``/``>``/``/``, any of them spelt as an HTML
entity (numeric, named, with or without ``;``) and that entity encoded again up to three times;
the session-summary markers the same way. What the escaper returns holds none of them.
"""

from __future__ import annotations

import json
import unicodedata

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from harness_memory import escape
from harness_memory.escape import OUR_TAGS, SUMMARY_HEADER, block, escape_tags, inline, json_data
from tests import escape_reader as reader

from .gen_escape_tables import TARGET, render

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEPARATORS = ["-", "_", " ", ""]
#: Ordinary text around the hostile part: any character (hypothesis's own Unicode alphabet).
FILLER = st.text(max_size=12)


#: The data, drawn from once (a strategy per character: building one per draw is slow).
IGNORABLE = st.sampled_from(reader.ignorables())
LOOK_ALIKE = {ch: st.sampled_from(reader.drawn_as(ch)) for ch in "<>/[]:abcdefghijklmnopqrstuvwxyz"}
AMPERSAND = st.sampled_from(reader.entity_spellings("&"))


@st.composite
def spelt(draw: st.DrawFn, ch: str, *, max_depth: int = 3) -> str:
    """``ch`` as itself, a look-alike, or an entity of either, encoded again up to ``max_depth`` times."""
    ch = draw(LOOK_ALIKE[ch])
    depth = draw(st.integers(0, max_depth))
    if depth == 0:
        return ch
    out = draw(st.sampled_from(reader.entity_spellings(ch)))
    for _ in range(depth - 1):  # "&lt;" -> "&amp;lt;" -> "&#38;amp;lt;" ...
        out = draw(AMPERSAND) + out[1:]
    return out


@st.composite
def ignorable_run(draw: st.DrawFn) -> str:
    return "".join(draw(st.lists(IGNORABLE, max_size=2)))


@st.composite
def hostile_name(draw: st.DrawFn, name: str) -> str:
    out = []
    for ch in name:
        if ch in "-_":
            out.append(draw(st.sampled_from(SEPARATORS)))
        else:
            letter = draw(st.one_of(st.just(ch.upper()), LOOK_ALIKE[ch]))
            out.append(letter if draw(st.integers(0, 4)) else draw(spelt(ch, max_depth=2)))
        out.append(draw(ignorable_run()))
    return "".join(out)


@st.composite
def hostile_tag(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(OUR_TAGS))
    slash = draw(st.sampled_from(["", "/"]))
    return (draw(spelt("<")) + draw(ignorable_run()) + (draw(spelt("/", max_depth=1)) if slash else "")
            + draw(hostile_name(name)) + draw(ignorable_run()) + draw(spelt(">")))


@st.composite
def hostile_marker(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        word = reader.HEADER_WORD
        head, tail = draw(spelt("[", max_depth=2)), draw(spelt("]", max_depth=2))
    else:
        word = reader.LABEL_WORD
        head, tail = "", draw(LOOK_ALIKE[":"])
    return head + "".join(ch + draw(ignorable_run()) for ch in word) + tail


@st.composite
def hostile_text(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.one_of(hostile_tag(), hostile_marker()), min_size=1, max_size=4))
    return "".join(draw(FILLER) + part for part in parts) + draw(FILLER)


def seen(text: str) -> tuple[list[str], dict[str, int]]:
    return reader.tags_in(text), reader.markers_in(text)


@FAST
@given(hostile_tag())
def test_every_generated_spelling_is_a_tag_to_the_reader(tag: str) -> None:
    """The generator's class is what it claims: the reader sees each one as one of our tags."""
    assert len(reader.tags_in(tag)) == 1, (tag, reader.view(tag))


@FAST
@given(hostile_text())
def test_no_generated_spelling_survives_escaping(text: str) -> None:
    for escaped in (escape_tags(text), block(text), inline(text)):
        assert seen(escaped) == ([], {"header": 0, "label": 0}), (text, escaped, reader.view(escaped))
        assert escape_tags(escaped) == escaped  # idempotent
    dumped = json_data({"content": text, text: [text]})
    assert seen(dumped)[0] == [] and isinstance(json.loads(dumped)["content"], str)


@FAST
@given(st.text(alphabet=st.characters(blacklist_characters="<&[用\uff1c\ufe64"), max_size=200))
def test_text_without_anything_tag_like_is_returned_as_it_was(text: str) -> None:
    if reader.tags_in(text) or any(reader.markers_in(text).values()):
        return  # a look-alike bracket made one after all: covered by the test above
    assert escape_tags(text) == text


@settings(max_examples=30, deadline=None)
@given(FILLER, hostile_tag(), FILLER)
def test_a_neutralised_tag_reads_as_what_it_is(before: str, tag: str, after: str) -> None:
    """Not a look-alike: the neutral form names the tag and says it is not one."""
    # the filler may complete the tag's last entity into another character ("&#62" + "0" is "&#620")
    assume(reader.tags_in(tag)[0] in reader.tags_in(before + tag + after))
    out = escape_tags(before + tag + after)
    name = reader.tags_in(tag)[0].strip("</>")
    assert f"[not a tag: {'/' if reader.tags_in(tag)[0].startswith('</') else ''}{name}]" in out


def test_the_tables_are_generated_from_the_installed_unicode_data() -> None:
    """``harness_memory/escape_tables.py`` is exactly what the generator makes from the data."""
    assert TARGET.read_text(encoding="utf-8") == render()


#: Text where NFKC does something: characters it changes (full-width, compatibility, astral,
#: composition exclusions) and ordinary ones, each followed by marks or jamo that may combine with it.
NFKC_STARTER = st.one_of(st.sampled_from("eaoEAOuUnNsS <>:&\nㄱ가각か＜＞：，ｍｅ①ﬁ㎒Ǆǆ½ẛ"
                                         "\u0958\u2474\U0001d400\U0001d7ce"),
                         st.characters(codec="utf-8", exclude_categories=("Cs",)))
NFKC_MARK = st.sampled_from("\u0301\u0308\u0327\u0323\u3099\u309a\u1161\u11a8\u0f71\u0f72\u0344\u0345")
NFKC_PARTS = st.lists(st.tuples(NFKC_STARTER, st.lists(NFKC_MARK, max_size=2)), max_size=8).map(
    lambda parts: "".join(starter + "".join(marks) for starter, marks in parts))


@FAST
@given(NFKC_PARTS)
def test_normalising_run_by_run_is_nfkc(text: str) -> None:
    """The view's NFKC, done only on the runs it changes when the text splits per character, is
    ``unicodedata``'s NFKC of the whole text."""
    assert escape._nfkc(text) == unicodedata.normalize("NFKC", text)


def test_the_plain_spellings_replaced_first_become_what_the_patterns_make() -> None:
    """Our tags and markers as we write them, replaced at C speed before the patterns run, get the
    very form the general pattern gives them."""
    for spelled, form in escape._plain_forms().items():
        assert escape._PLAIN_TAG.fullmatch(spelled)
        assert escape._TAG.sub(escape._neutral_tag, spelled) == form
    for pattern, spelled in escape._PLAIN_MARKERS.items():
        assert pattern.fullmatch(spelled)
    assert escape_tags("a </memory> b " + SUMMARY_HEADER) == "a [not a tag: /memory] b [not a marker: 会话历史摘要]"
