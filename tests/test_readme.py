"""The README stays true: its configuration table is the config's, its commands exist."""

from __future__ import annotations

import re

from harness_memory.config import env_table, markdown_table
from tests.helpers import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_config_table_is_current() -> None:
    block = re.search(r"<!-- config-table:start -->\n(.*?)\n<!-- config-table:end -->", README, re.S)
    assert block is not None
    assert block.group(1) == markdown_table(), "run: python -m harness_memory.config and paste the table"
    for env_name, *_ in env_table():
        assert f"`{env_name}`" in README


def test_the_two_commands_and_ci() -> None:
    assert "make test" in README and "make serve" in README
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^test:", makefile, re.M) and re.search(r"^serve:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_agno_example_is_at_most_ten_lines_and_uses_build_agent() -> None:
    example = re.search(r"## Use it in an agno app\n\n```python\n(.*?)```", README, re.S)
    assert example is not None
    code = [line for line in example.group(1).splitlines() if line.strip()]
    assert len(code) <= 10 and "from harness_memory import build_agent" in code[0]
