"""Smoke test of the benchmarks: every bench's smallest configuration runs and its tables can be read
(except the Sentinel failover bench, which waits ~10 s on servers at any size: ``make bench`` only).

Why: ``make bench`` runs rarely; a bench broken by a library change should fail ``make test``,
not the next benchmark run. No timing is asserted (speed belongs in bench/, not in tests): only
that each bench produced its tables, that the orchestrator can read the targets back from them,
and that the README block is replaced without touching anything else.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import bench_auto, common
from bench.run import BENCHES, END, START, Section, readme_block, replace_block, results_markdown, run_bench
from bench.targets import evaluate_targets, find_row, parse_tables
from tests.servers import RedisServer, SeaweedFS

#: One worker runs the module (its fixture runs every bench once) and the other multi-process storms
#: (``make test`` uses ``--dist loadgroup``), so two storms never share the 2 cores.
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("storms")]


@pytest.fixture(scope="module")
def quick_sections(seaweedfs: SeaweedFS, redis_server: RedisServer) -> Iterator[dict[str, Section]]:
    with pytest.MonkeyPatch.context() as mp, common.shared_servers(seaweedfs, redis_server):
        if "quick" not in inspect.signature(bench_auto.run).parameters:  # keep its sweep short here
            mp.setattr(bench_auto, "TURNS", 10, raising=False)
            mp.setattr(bench_auto, "PACES", bench_auto.PACES[:2], raising=False)
        # a tiny synthetic file in LongMemEval's format (tests/data), so the loader and scoring run
        mp.setenv("HARNESS_MEMORY_LONGMEMEVAL", str(Path(__file__).parent / "data" / "longmemeval_sample.json"))
        yield {b.key: run_bench(b, quick=True) for b in BENCHES if b.smoke}


def test_every_bench_runs_its_smallest_configuration(quick_sections: dict[str, Section]) -> None:
    assert set(quick_sections) == {b.key for b in BENCHES if b.smoke}
    for key, section in quick_sections.items():
        assert section.error is None, f"bench {key} failed:\n{section.error}"
        tables = parse_tables(section.markdown)
        assert tables and all(rows for rows in tables), f"bench {key} printed no table"


def test_longmemeval_quick_run_scores_the_sample(quick_sections: dict[str, Section]) -> None:
    rows = {(r["granularity"], r["ranking"]): r for t in parse_tables(quick_sections["longmemeval"].markdown)
            for r in t}
    # one answerable question (the abstention one is left out); its answer is in the dog session only
    assert rows[("session", "lexical")]["questions"] == "1" and rows[("session", "lexical")]["recall@1"] == "1.000"
    assert rows[("fact", "lexical")]["questions"] == "1"  # the has_answer turn's exchange


def test_concurrency_quick_run_loses_nothing(quick_sections: dict[str, Section]) -> None:
    rows = [r for t in parse_tables(quick_sections["concurrency"].markdown) for r in t]
    assert {r["deployment"] for r in rows} == {"cos + Redis lock", "local + flock"}
    for row in rows:
        assert row["failed saves"] == "0" and row["lost MEMORY.md entries"] == "0"
        assert row["lost manifest entries"] == "0"


def test_cost_quick_run_classifies_every_request(quick_sections: dict[str, Section]) -> None:
    md = quick_sections["cost"].markdown
    rows = {r["system"].split(" ")[0]: r for t in parse_tables(md) for r in t}
    assert {"harness-memory", "agno", "plain"} <= set(rows)
    assert int(rows["agno"]["memory calls (summaries + extraction)"]) > 0  # agno's manager and summaries ran
    assert int(rows["harness-memory"]["memory calls (summaries + extraction)"]) > 0  # auto extraction ran
    assert "not recognised" not in md and "unrecognised" not in md


def test_targets_and_documents_are_built(quick_sections: dict[str, Section]) -> None:
    import datetime as dt

    sections = list(quick_sections.values())
    targets = evaluate_targets({s.bench.key: s.markdown for s in sections})
    measured = {t.name: t for t in targets}
    # recall's 10 + the memory page + trustworthy writes (4; bench_trust is no smoke bench) + issue 18's 3
    assert len(targets) == 18
    ui = find_row(quick_sections["ui"].markdown, memories="100")
    assert ui is not None and ui["rows in DOM"] == "50" and ui["count shown"] == "100"
    assert measured["memory page with 1,000 memories on screen in < 1 s"].met is None  # quick: 100 memories only
    assert measured["post-run hook p50 ≤ 1 ms with Redis"].met is not None
    assert measured["metrics cost on the post-run hook and a tool call < 5 %"].met is not None
    assert measured["lexical recall over 1,000 memories: p50 ≤ 10 ms"].met is not None
    for name in ("agent build with 10,000 memories: p50 ≤ 15 ms", "`save_file` with 1,000 memories on SeaweedFS: "
                 "p50 ≤ 10 ms", "8 processes saving into one place: ≥ 200 saves/s, 0 lost entries"):
        assert measured[name].met is None  # quick runs measure none of these sizes: not judged
    now = dt.datetime.now(dt.UTC)
    report = results_markdown(sections, targets, now, quick=True)
    assert "## Targets from the issues" in report and "FAILED" not in report
    block = readme_block(targets, sections, now)
    assert "bench/RESULTS.md" in block


def test_readme_block_is_replaced_and_nothing_else() -> None:
    text = f"# Title\n\nintro\n\n## Benchmarks\n\n{START}\nold table\n{END}\n\n## Limits\n\nrest\n"
    out = replace_block(text, "| new | table |")
    assert out == f"# Title\n\nintro\n\n## Benchmarks\n\n{START}\n| new | table |\n{END}\n\n## Limits\n\nrest\n"
    assert replace_block(out, "| new | table |") == out  # idempotent
    assert replace_block("no markers here", "x") == "no markers here"


def test_issue_18_targets_are_judged_from_full_size_tables() -> None:
    """The three scale targets read the rows a full run prints (quick runs have none of those sizes)."""
    from bench import bench_concurrency, bench_tools
    from bench.common import table

    build = table(["backend", "memories", "session + auto", "builds", "build p50 ms", "build p95 ms",
                   "requests (cold)", "requests (warm)"], [["cos", 10000, "off", 10, 14.2, 30.0, 4, 1]])
    build += "\n\n" + table(["backend", "memories", "loads", "load p50 ms", "load p95 ms", "µs per memory"],
                            [["cos", 1000, 30, 1.5, 2.0, 1.5], ["cos", 10000, 10, 9.0, 12.0, 0.9]])

    def tools(overwrite_ms: float) -> str:
        return table(bench_tools.HEADERS, [
            ["cos", "redis", 1000, "save_file (new file)", 60, 8.5, 12.0, 3.0],
            ["cos", "redis", 1000, "save_file (overwrite)", 60, overwrite_ms, 14.0, 3.0]])

    def storm(rate: float, lost: int) -> str:
        return table(bench_concurrency.HEADERS,
                     [["cos + Redis lock", 8, 240, rate, "5.00×", 9.0, 20.0, "6.0", "4.0", 0, lost, 0]])

    def judged(**sections: str) -> dict[str, bool | None]:
        return {t.name: t.met for t in evaluate_targets(sections) if t.issue == "#18 scale"}

    met = judged(build=build, tools=tools(9.9), concurrency=storm(250.0, 0))
    assert list(met.values()) == [True, True, True]
    assert "0.90 µs per memory" in next(t.measured for t in evaluate_targets({"build": build})
                                         if t.name.startswith("agent build with 10,000"))
    missed = judged(build=build.replace("| 14.20 |", "| 15.10 |"), tools=tools(10.5), concurrency=storm(250.0, 1))
    assert list(missed.values()) == [False, False, False]
    assert judged(concurrency=storm(199.0, 0))["8 processes saving into one place: ≥ 200 saves/s, 0 lost entries"] \
        is False
    assert "pods 6.00 ms + SeaweedFS and Redis 4.00 ms, so 2 cores carry at most ~200 saves/s" in next(
        t.measured for t in evaluate_targets({"concurrency": storm(199.0, 0)}) if t.name.startswith("8 processes"))


def test_update_keeps_a_section_it_did_not_rerun_as_it_was() -> None:
    """``--update`` of some benches writes the others back verbatim, notes in their headings included."""
    import datetime as dt

    from bench.run import BENCHES, previous_sections

    ui = next(b for b in BENCHES if b.key == "ui")
    block = (f"## {ui.title} (run separately)\n\n_Run on its own on a loaded machine._\n\n"
             "| memories | page load p50 ms |\n|---|---|\n| 1000 | 900 |")
    text = f"# Benchmark results\n\n{block}\n\n## Run times\n\n| bench | seconds | load average at start |\n" \
           "|---|---|---|\n| ui | 12.0 | 3.50 |\n"
    kept = previous_sections(text)
    assert set(kept) == {"ui"} and kept["ui"].seconds == 12.0
    assert find_row(kept["ui"].markdown, memories="1000") is not None  # its tables still feed the targets
    report = results_markdown(list(kept.values()), [], dt.datetime.now(dt.UTC), quick=False, rerun=("build",))
    assert block in report and "| ui | 12.0 | 3.50 |" in report
