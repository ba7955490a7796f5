"""Recall on LongMemEval: do the memories holding an answer come back for the question?

Run: ``HARNESS_MEMORY_LONGMEMEVAL=/path/to/longmemeval_s.json .venv/bin/python -m bench.bench_longmemeval``
(``--quick``: the first 2 haystacks). Without the variable the bench is skipped and says so (it
does not count as a pass). Nothing is downloaded: the dataset file is given.

Data: LongMemEval (Wu et al., 2024, MIT). Each haystack is one user's chat history (~40-50 sessions)
and questions about it; ``answer_session_ids`` name the sessions holding the answer and
``has_answer`` marks the turns that do. Both the original format (``question`` /
``answer_session_ids``: list of ids) and the multi-question variant (``questions`` /
``answer_session_ids``: one list per question) are read.

Memories are stored the way a user of this library would store a conversation, through the real
write path (``save_many`` → ``PlaceTxn`` → manifest + search index), one place per haystack:

* **session** granularity — one memory per session: name ``Conversation of <date>``, the first
  user message as description, the transcript as body;
* **fact** granularity — one memory per exchange (a user message and the reply): the user message
  as description, both as body; an exchange holds the answer when one of its turns has
  ``has_answer``, or — for questions whose turns are not marked — when it quotes the (short,
  ≤ 80 characters) answer verbatim within an answer session.

Each question is asked through the ranking ``recall()`` uses (no model): recall@k = share of
questions with an answer memory in the top k (k = 1, 5, 10). Rows: the manifest-line ranking recall
used before the search index ("lines only"), the search index ("lexical"), and with an embeddings
endpoint (``HARNESS_MEMORY_EMBED_*`` or ``--embed`` = the bundled all-MiniLM-L6-v2 server) the fused
ranking ("hybrid"; ``HARNESS_MEMORY_BENCH_EMBED=1`` does the same as ``--embed`` under ``bench.run``).
"model calls / query" is how often recall with a light model configured would
ask it (the confident-ranking skip), counted at a scripted model server.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_memory.config import MemoryConfig
from harness_memory.memdir import MemoryDir
from harness_memory.recall import find_relevant_memories, recall
from harness_memory.recall.ranking import PlaceRanker, places_for
from harness_memory.search import clear_cache
from harness_memory.services import MemoryServices
from tests.fakellm import RecordedRequest, ScriptedLLM, text

from .common import scratch_dir, table

ENV = "HARNESS_MEMORY_LONGMEMEVAL"
KS = (1, 5, 10)
DESC_CHARS = 150
QUOTE_MAX_CHARS = 80
MAX_FILE_BYTES = 1_000_000  # a few sessions are longer than the default 64 KB cap on one memory


@dataclass
class Question:
    text: str
    sessions: set[str]  # memory files of the answer sessions
    facts: set[str]  # memory files of the answer exchanges (empty when the data marks none)


@dataclass
class Haystack:
    key: str
    sessions: dict[str, str] = field(default_factory=dict)  # file -> memory text
    facts: dict[str, str] = field(default_factory=dict)
    questions: list[Question] = field(default_factory=list)


def _slug(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", value)[:80]


def _one_line(value: str, limit: int = DESC_CHARS) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _memory(name: str, description: str, body: str, kind: str = "project") -> str:
    return (f"---\nname: {json.dumps(name, ensure_ascii=False)}\ndescription: "
            f"{json.dumps(description or name, ensure_ascii=False)}\ntype: {kind}\n---\n\n{body}\n")


def _haystack(raw: dict[str, Any]) -> Haystack:
    hay = Haystack(str(raw["question_id"]))
    dates = raw.get("haystack_dates") or [""] * len(raw["haystack_sessions"])
    answer_turns: set[str] = set()
    for sid, date, turns in zip(raw["haystack_session_ids"], dates, raw["haystack_sessions"], strict=False):
        file = f"session_{_slug(sid)}.md"
        first_user = next((t["content"] for t in turns if t.get("role") == "user"), "")
        body = "\n\n".join(f"**{t.get('role', 'user')}:** {t.get('content', '')}" for t in turns)
        hay.sessions[file] = _memory(f"Conversation of {date}".strip(), _one_line(first_user), body)
        for n in range(0, len(turns), 2):
            pair = turns[n: n + 2]
            fact = f"fact_{_slug(sid)}_{n // 2:03d}.md"
            user = pair[0].get("content", "")
            hay.facts[fact] = _memory(f"Exchange {n // 2 + 1} of the conversation of {date}".strip(),
                                      _one_line(user), "\n\n".join(f"**{t.get('role')}:** {t.get('content')}"
                                                                   for t in pair))
            if any(t.get("has_answer") for t in pair):
                answer_turns.add(fact)
    by_session: dict[str, set[str]] = {}
    for fact in answer_turns:
        sid = fact[len("fact_"):].rsplit("_", 1)[0]
        by_session.setdefault(sid, set()).add(fact)
    questions = raw.get("questions") or [raw.get("question", "")]
    answers = raw.get("answers") or [raw.get("answer", "")]
    session_ids = raw["answer_session_ids"]
    if questions and session_ids and not isinstance(session_ids[0], list):
        session_ids = [session_ids]
    for q, ids, answer in zip(questions, session_ids, answers, strict=False):
        sessions = {f"session_{_slug(s)}.md" for s in ids}
        facts = set().union(*(by_session.get(_slug(s), set()) for s in ids)) if ids else set()
        if not facts:  # no turn marked: the exchanges of the answer sessions that quote the answer
            facts = _quoting(hay, ids, str(answer))
        hay.questions.append(Question(q, sessions, facts))
    return hay


def _quoting(hay: Haystack, session_ids: list[str], answer: str) -> set[str]:
    """Exchanges of these sessions whose text holds ``answer`` verbatim (short answers only)."""
    needle = " ".join(answer.split()).lower()
    if not needle or len(needle) > QUOTE_MAX_CHARS:
        return set()
    prefixes = tuple(f"fact_{_slug(s)}_" for s in session_ids)
    return {f for f, t in hay.facts.items() if f.startswith(prefixes) and needle in " ".join(t.split()).lower()}


def load(path: str | Path, limit: int | None = None) -> list[Haystack]:
    """Haystacks from a LongMemEval JSON file (questions sharing a haystack's sessions are grouped)."""
    data = json.loads(Path(path).read_text("utf-8"))
    out: list[Haystack] = []
    for raw in data:
        if str(raw["question_id"]).endswith("_abs"):
            continue  # abstention questions have no answer session
        out.append(_haystack(raw))
        if limit is not None and len(out) >= limit:
            break
    return out


@dataclass
class Scores:
    hits: dict[int, int] = field(default_factory=lambda: dict.fromkeys(KS, 0))
    n: int = 0

    def add(self, ranked: list[str], wanted: set[str]) -> None:
        if not wanted:
            return
        self.n += 1
        for k in KS:
            self.hits[k] += bool(wanted.intersection(ranked[:k]))

    def row(self) -> list[object]:
        return [self.n, *(f"{self.hits[k] / self.n:.3f}" if self.n else "—" for k in KS)]


def _services(extra: dict[str, Any] | None = None) -> MemoryServices:
    cfg = MemoryConfig.load(env={}, store={"backend": "local", "local_root": scratch_dir("hm-lme-") + "/.harness"},
                            session={"enabled": False}, auto={"enabled": False},
                            limits={"max_file_bytes": MAX_FILE_BYTES}, **(extra or {}))
    return MemoryServices.from_config(cfg)


def _ranked(services: MemoryServices, own: MemoryDir, query: str, mode: str) -> list[str]:
    manifest = own.manifest()
    if mode == "lines only":
        return find_relevant_memories(query, manifest, max_files=5)  # the old ranking (top 5 at most)
    ranker = PlaceRanker(places_for(own, manifest, None, None), _semantic(services) if mode == "hybrid" else None)
    return [s.file for s in ranker(query, max(KS))]


def _semantic(services: MemoryServices) -> object | None:
    from harness_memory.recall.semantic import semantic_tier

    return semantic_tier(services)


def evaluate(haystacks: list[Haystack], modes: tuple[str, ...], embed: dict[str, Any] | None = None
             ) -> dict[tuple[str, str], Scores]:
    """recall@k per (granularity, mode)."""
    out: dict[tuple[str, str], Scores] = {}
    for granularity in ("session", "fact"):
        services = _services({"embed": embed} if embed else None)
        try:
            for i, hay in enumerate(haystacks):
                own = services.user_agent_dir(f"h{i}")
                own.save_many(list((hay.sessions if granularity == "session" else hay.facts).items()))
                if embed:  # the saves scheduled the embedding in the background: wait for it
                    _semantic(services).wait_idle(timeout=3600)  # type: ignore[attr-defined]
                for q in hay.questions:
                    wanted = q.sessions if granularity == "session" else q.facts
                    for mode in modes:
                        ranked = _ranked(services, own, q.text, mode)
                        out.setdefault((granularity, mode), Scores()).add(ranked, wanted)
                if i == 0 and hay.questions:  # the ranking is what recall() itself returns
                    q = hay.questions[0]
                    chosen = recall(services, f"h{i}", "default", q.text).chosen
                    assert list(chosen) == _ranked(services, own, q.text, "hybrid" if embed else "lexical")[:5]
        finally:
            services.close()
            clear_cache()
    return out


def model_calls(haystacks: list[Haystack]) -> tuple[int, int]:
    """(light-model calls, queries) with a model configured and the default confidence margin."""
    queries = 0
    with ScriptedLLM() as llm:
        def answer(req: RecordedRequest) -> Any:
            files = re.findall(r"(\S+\.md)", str(req.messages[-1].get("content")))
            return text(json.dumps({"files": files[:1]}))

        llm.set_handler(answer)
        services = _services({"model": {"model": "fake-model", "base_url": llm.base_url, "api_key": "k"}})
        try:
            for i, hay in enumerate(haystacks):
                services.user_agent_dir(f"h{i}").save_many(list(hay.sessions.items()))
                for q in hay.questions:
                    recall(services, f"h{i}", "default", q.text)
                    queries += 1
        finally:
            services.close()
            clear_cache()
        return len(llm.chat_requests), queries


@dataclass
class _Embed:
    config: dict[str, Any]
    label: str


def _embed_config(argv: list[str]) -> Iterator[_Embed | None]:
    """The embeddings endpoint to compare with: the environment's, or ``--embed``: the bundled server."""
    if os.environ.get("HARNESS_MEMORY_EMBED_MODEL"):
        yield _Embed({"model": os.environ["HARNESS_MEMORY_EMBED_MODEL"],
                      "base_url": os.environ.get("HARNESS_MEMORY_EMBED_BASE_URL"),
                      "api_key": os.environ.get("HARNESS_MEMORY_EMBED_API_KEY", "k")},
                     os.environ["HARNESS_MEMORY_EMBED_MODEL"])
        return
    if "--embed" in argv or os.environ.get("HARNESS_MEMORY_BENCH_EMBED") == "1":
        from .embed_server import EmbedServer

        with EmbedServer() as server:
            # a CPU model on a shared 2-core box: long deadlines for the bulk embedding of the haystacks
            yield _Embed({"model": server.model, "base_url": server.base_url, "api_key": "k", "timeout": 600,
                          "batch_timeout": 600, "batch_size": 16},
                         f"{server.model} (numpy, 256 tokens, bench/embed_server.py)")
        return
    yield None


def run(quick: bool = False, argv: list[str] | None = None) -> str:
    path = os.environ.get(ENV)
    if not path or not Path(path).is_file():
        return ("### Recall on LongMemEval\n\n**Skipped** (not a pass): set `$HARNESS_MEMORY_LONGMEMEVAL` to a "
                "LongMemEval JSON file (e.g. `longmemeval_s.json`) to run it.\n\n"
                + table(["granularity", "ranking", "questions", "recall@1", "recall@5", "recall@10"],
                        [["—", "skipped: no dataset", 0, "—", "—", "—"]]))
    haystacks = load(path, 2 if quick else None)
    n_q = sum(len(h.questions) for h in haystacks)
    multi = sum(1 for h in haystacks if len(h.questions) > 1)
    t0 = time.monotonic()
    rows: list[list[object]] = []
    embed_label = "none"
    for embed in _embed_config(argv or []):
        modes = ("lines only", "lexical", "hybrid") if embed else ("lines only", "lexical")
        scores = evaluate(haystacks, modes, embed.config if embed else None)
        embed_label = embed.label if embed else "none"
        for (granularity, mode), s in sorted(scores.items()):
            rows.append([granularity, mode, *s.row()])
    calls, queries = model_calls(haystacks)
    memories = sum(len(h.sessions) for h in haystacks), sum(len(h.facts) for h in haystacks)
    return "\n\n".join([
        f"### Recall on LongMemEval ({Path(path).name}: {len(haystacks)} haystacks, {n_q} questions, "
        f"{memories[0]} session memories, {memories[1]} fact memories; {time.monotonic() - t0:.0f} s)",
        table(["granularity", "ranking", "questions", "recall@1", "recall@5", "recall@10"], rows),
        f"- embeddings model: {embed_label}. \"lines only\" = manifest lines (the ranking before the search "
        "index; it returns at most 5). \"lexical\" = the search index, as `recall()` ranks without a model.",
        f"- questions: {n_q} over {len(haystacks)} haystacks"
        + (f" ({multi} haystacks carry several questions each: the multi-question variant)" if multi else "")
        + "; fact-level rows count only questions with a labelled answer turn (`has_answer`, or an exchange "
        "quoting a short answer verbatim in an answer session).",
        f"- light-model calls with a model configured (confident-ranking skip, default margin): {calls} for "
        f"{queries} questions ({calls / max(queries, 1):.2f} per query), counted at a scripted model server.",
    ])


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv[1:], argv=sys.argv[1:]))
