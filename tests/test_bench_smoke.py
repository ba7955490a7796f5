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

pytestmark = pytest.mark.timeout(300)


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
    assert len(targets) == 15  # recall's 10 + the memory page + trustworthy writes (4; bench_trust is no smoke bench)
    ui = find_row(quick_sections["ui"].markdown, memories="100")
    assert ui is not None and ui["rows in DOM"] == "50" and ui["count shown"] == "100"
    assert measured["memory page with 1,000 memories on screen in < 1 s"].met is None  # quick: 100 memories only
    assert measured["post-run hook p50 ≤ 1 ms with Redis"].met is not None
    assert measured["metrics cost on the post-run hook and a tool call < 5 %"].met is not None
    assert measured["lexical recall over 1,000 memories: p50 ≤ 10 ms"].met is not None
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
