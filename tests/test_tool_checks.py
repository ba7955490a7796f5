"""The write checks of the memory tools (``tool_checks``), over generated text: a memory that names
only what the run said passes, one more name nobody said is found, capitals that only start a
sentence or mark a title are not names."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness_memory.tool_checks import ungrounded_names

_NAMES = st.one_of(st.from_regex(r"[A-Z][a-z]{2,7}[A-Z][a-z]{2,6}", fullmatch=True),  # CamelCase
                   st.from_regex(r"[A-Z][a-z]{2,8}", fullmatch=True),  # Capitalised
                   st.from_regex(r"[A-Z]{2,4}", fullmatch=True),  # an acronym
                   st.from_regex(r"[a-z]{2,5}[0-9]{1,3}", fullmatch=True))  # with a digit
_LEADS = ("Uses", "Prefers", "Works with", "Deploys with", "Always", "Keeps notes in")


@settings(max_examples=150, deadline=None)
@given(st.lists(_NAMES, min_size=1, max_size=4, unique_by=str.casefold), _NAMES, st.sampled_from(_LEADS))
def test_only_names_nobody_said_are_found(said_names: list[str], other: str, lead: str) -> None:
    said = ("I work on " + " and ".join(said_names) + " every day. Remember that.").casefold()
    memory = f"{lead} " + ", ".join(said_names) + ".\n- also " + " and ".join(said_names)
    assert ungrounded_names(memory, said) == []
    if other.casefold() not in said:
        assert ungrounded_names(memory + f" with {other}", said) == [other]


def test_capitals_that_start_a_sentence_or_a_title_are_not_names() -> None:
    said = "write every date as iso 8601 (2026-12-01). remember that."
    assert ungrounded_names("Date Format Preference\nWrite dates as ISO 8601. Always 2026-12-01.", said) == []
    assert ungrounded_names("- Prefers ISO 8601\n1. Never 12/01", said) == []
    assert ungrounded_names("Writes dates as ISO 8601 (as Python does).", said) == ["Python"]
