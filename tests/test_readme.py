"""The README stays a true quickstart: short, every command in it run by the suite, every link
alive; the reference in docs/ keeps the configuration table equal to the config."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from harness_memory.config import MemoryConfig, env_table, markdown_table
from tests.fakellm import ScriptedLLM, text
from tests.helpers import ROOT, child_env, write_config

README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = ROOT / "docs"
#: The reference files other branches add sections to: their names are fixed.
REFERENCE = ("configuration", "storage-layout", "consistency", "security-model", "observability", "capacity",
             "limits", "architecture", "recall")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def test_readme_is_a_quickstart() -> None:
    assert len(README.splitlines()) <= 400
    for heading in ("## The two commands", "## Use it in an agno app", "## The memory page", "## HTTP API",
                    "## Operator CLI", "## Documentation"):
        assert heading in README


def test_config_table_is_current() -> None:
    doc = (DOCS / "configuration.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- config-table:start -->\n(.*?)\n<!-- config-table:end -->", doc, re.S)
    assert block is not None
    assert block.group(1) == markdown_table(), "run: python -m harness_memory.config --write docs/configuration.md"
    for env_name, *_ in env_table():
        assert f"`{env_name}`" in doc


def test_the_two_commands_and_ci() -> None:
    assert "make test" in README and "make serve" in README
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^test:", makefile, re.M) and re.search(r"^serve:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_every_block_of_the_readme_is_run_by_the_suite() -> None:
    """python: the agno example (below); bash: the curl and the CLI examples (tests/test_make_serve.py
    runs both against ``make serve``); sh: only make targets (``make serve`` is what that test starts,
    ``make test`` is the suite); text: output shown, not commands."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for lang, body in FENCE.findall(README):
        if lang == "bash":
            assert ("curl " in body) != (".venv/bin/harness-memory" in body), body[:200]
        elif lang == "sh":
            for line in body.splitlines():
                command = line.split("#", 1)[0].split()
                if command:
                    assert command[0] == "make" and re.search(rf"^{command[1]}:", makefile, re.M), line
        else:
            assert lang in ("python", "text"), lang


def test_the_agno_example_is_at_most_ten_lines_and_uses_build_agent() -> None:
    code = [line for line in agno_example().splitlines() if line.strip()]
    assert len(code) <= 10 and "from harness_memory import build_agent" in code[0]


def agno_example() -> str:
    example = re.search(r"## Use it in an agno app\n\n```python\n(.*?)```", README, re.S)
    assert example is not None
    return example.group(1)


def test_the_agno_example_runs_as_written(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM,
                                          tmp_path: Path) -> None:
    """The example, unchanged, with its settings from the environment (a scripted model server)."""
    cfg = make_config(backend="local", model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      session={"enabled": False}, auto={"enabled": False}, recall={"use_model": False})
    llm_server.script(text("Here is the weekly report."))
    script = tmp_path / "example.py"
    script.write_text(agno_example(), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=child_env(write_config(cfg, tmp_path / "c.yaml")))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Here is the weekly report."
    (request,) = llm_server.chat_requests
    assert any("# Persistent Agent Memory" in str(m.get("content")) for m in request.messages)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def test_every_local_link_and_anchor_resolves() -> None:
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    for page in pages:
        text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", page.read_text(encoding="utf-8")))  # no code
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            resolved = (page.parent / file).resolve() if file else page
            assert resolved.exists(), f"{page.name}: {target}"
            if anchor and resolved.suffix == ".md":
                assert anchor in anchors(resolved), f"{page.name}: {target}"


def test_the_reference_is_in_docs_and_linked_from_the_readme() -> None:
    for name in REFERENCE:
        assert (DOCS / f"{name}.md").exists(), name
    for doc in DOCS.glob("*.md"):
        if doc.name != "README.md":
            assert f"](docs/{doc.name})" in README, f"the README does not link docs/{doc.name}"
