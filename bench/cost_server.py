"""The scripted model server of the memory-cost bench: one conversation script, and a handler that
classifies, counts and answers every request like a competent model would.

Why classify by system prompt: both systems talk to the same server through their real clients,
and each memory task opens with its own fixed instructions (taken here from the installed
harness-memory and agno code, so a reworded prompt is still recognised). Anything else is an
agent turn, answered with the scripted reply to the user's message.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from harness_memory.tokens import count_message_tokens, count_tokens
from tests.fakellm import Answer, RecordedRequest, text, tool_calls

from .common import extraction_conversation

# What the scripted "model" recognises as worth remembering: marker -> (fact, category, confidence, error).
SALIENT = {
    "I'm a frontend engineer": ("Is a frontend engineer", "context", 0.95, None),
    "TypeScript": ("Works in TypeScript", "knowledge", 0.9, None),
    "reports in Chinese": ("Wants reports written in Chinese", "preference", 0.95, None),
    "Composition API": ("Prefers the Vue Composition API", "preference", 0.9, None),
    "别用 npm": ("Use pnpm, not npm", "correction", 0.95, "ran npm install"),
    "deadline": ("Dashboard migration is due at the end of the month", "goal", 0.85, None),
    "不要写注释": ("Keep code comments short and in English", "correction", 0.95, "wrote long Chinese comments"),
}
SPECIAL_TURNS = {
    1: "Hi! I'm a frontend engineer, I work in TypeScript, and please write reports in Chinese.",
    7: "For Vue components I prefer the Composition API with <script setup>.",
    15: "不对，别用 npm，用 pnpm 安装依赖。",
    48: "The deadline for the dashboard migration is the end of this month.",
    66: "不要写注释那么长，注释用英文，简短一点。",
}
TOPICS = ["router guards", "Pinia stores", "a data table", "lazy loading", "form validation", "i18n",
          "unit tests with Vitest", "a chart component", "SSR hydration", "the build config"]


def conversation(turns: int) -> list[tuple[str, str]]:
    out = []
    for i in range(1, turns + 1):
        topic = TOPICS[i % len(TOPICS)]
        if i in SPECIAL_TURNS:
            user = SPECIAL_TURNS[i]
        elif i % 3 == 0:
            user = f"第{i}个问题：{topic} 这里该怎么写？给我一个例子，并解释一下为什么这样做比较好。"
        else:
            user = f"Question {i}: how should I implement {topic} in our Vue 3 dashboard? Show an example."
        reply = (f"Here is how to handle {topic}: define the logic in a composable, keep the component thin, "
                 f"type the props, and test the edge cases. " * (2 + i % 4)
                 + "\n```ts\nexport function useThing() {\n  const state = ref(0)\n  return { state }\n}\n```")
        out.append((user, reply))
    return out


class Kind(StrEnum):
    AGENT = "agent turn"
    HM_SESSION = "harness-memory session summary"
    HM_AUTO = "harness-memory auto-memory extraction"
    HM_COMBINED = "harness-memory session summary + extraction in one call"
    HM_RECALL = "harness-memory recall selection"
    AGNO_MEMORY = "agno memory manager"
    AGNO_SUMMARY = "agno session summary"


def markers() -> list[tuple[str, Kind]]:
    """The opening words of each memory task's system prompt, taken from the installed code."""
    from agno.memory.manager import MemoryManager
    from agno.session.summary import SessionSummaryManager

    from harness_memory.auto.updater import SYSTEM_PROMPT as AUTO_PROMPT
    from harness_memory.recall.select import SYSTEM_PROMPT as RECALL_PROMPT
    from harness_memory.session.combined import COMBINED_MARKER
    from harness_memory.session.summary import PROMPT_MARKER

    agno_memory = str(MemoryManager().get_system_message().content)
    agno_summary = str(SessionSummaryManager().get_system_message([], {"type": "json_object"}).content)
    return [(COMBINED_MARKER, Kind.HM_COMBINED), (PROMPT_MARKER, Kind.HM_SESSION), (AUTO_PROMPT[:60], Kind.HM_AUTO),
            (RECALL_PROMPT[:50], Kind.HM_RECALL),
            (agno_memory[:60], Kind.AGNO_MEMORY), (agno_summary[:60], Kind.AGNO_SUMMARY)]


@dataclass
class Tally:
    calls: int = 0
    prompt: int = 0
    completion: int = 0


def request_tokens(req: RecordedRequest) -> int:
    """Prompt tokens of a request: messages, plus tool schemas and a response-format schema if sent."""
    total = count_message_tokens(req.messages)
    if req.tools:
        total += count_tokens(json.dumps(req.tools, ensure_ascii=False))
    fmt = (req.body or {}).get("response_format") if isinstance(req.body, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        total += count_tokens(json.dumps(fmt, ensure_ascii=False))
    return total


def _facts_in(text_: str) -> list[tuple[str, str, float, str | None]]:
    return [fact for marker, fact in SALIENT.items() if marker in text_]


@dataclass
class CostServer:
    """Classifies, counts and answers every request like a competent model would."""

    replies: dict[str, str]
    kinds: list[tuple[str, Kind]] = field(default_factory=markers)
    tallies: dict[Kind, Tally] = field(default_factory=lambda: {k: Tally() for k in Kind})
    unmatched_agent_turns: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def classify(self, req: RecordedRequest) -> Kind:
        system = str(req.messages[0].get("content")) if req.messages else ""
        for marker, kind in self.kinds:
            if system.startswith(marker) or (kind is Kind.HM_SESSION and marker in system):
                return kind
        return Kind.AGENT

    def __call__(self, req: RecordedRequest) -> Answer:
        kind = self.classify(req)
        answer = getattr(self, "_" + kind.name.lower())(req)
        completion = count_tokens(answer.content or "") + sum(count_tokens(n + a) for n, a in answer.calls)
        prompt = request_tokens(req)
        with self._lock:
            tally = self.tallies[kind]
            tally.calls += 1
            tally.prompt += prompt
            tally.completion += completion
        return Answer(content=answer.content, calls=answer.calls, prompt_tokens=prompt, completion_tokens=completion)

    # -- answers --------------------------------------------------------------------------
    def _agent(self, req: RecordedRequest) -> Answer:
        last = req.last_user_text()
        for user, reply in self.replies.items():
            if last.endswith(user) or user in last:
                return text(reply)
        with self._lock:
            self.unmatched_agent_turns += 1
        return text("OK.")

    @staticmethod
    def _hm_session(req: RecordedRequest) -> Answer:
        prompt = str(req.messages[-1].get("content"))
        prev = re.findall(r"^- (.+)$", prompt.split("</previous_summary>", 1)[0], re.MULTILINE)
        new = [u[:60] for u in re.findall(r"\] user: (.{0,60})", prompt)]
        lines = "\n".join(f"- {x}" for x in [*prev, *new][-40:]) or "- started"
        return text("# Vue dashboard implementation questions\n\n## Current State\n- answering questions\n\n"
                    f"## Task\n- help build the dashboard\n\n## Worklog\n{lines}\n")

    @classmethod
    def _hm_combined(cls, req: RecordedRequest) -> Answer:
        """Both parts of a summary call with the extraction riding along."""
        summary, update = cls._hm_session(req).content, cls._hm_auto(req).content
        return text(f"<session_summary>\n{summary}</session_summary>\n<memory_update>\n{update}\n</memory_update>")

    @staticmethod
    def _hm_auto(req: RecordedRequest) -> Answer:
        convo = extraction_conversation(str(req.messages[-1].get("content")))
        facts = [{"content": c, "category": cat, "confidence": conf, "evidence": marker,
                  **({"sourceError": e} if e else {})}
                 for marker, (c, cat, conf, e) in SALIENT.items() if marker in convo]
        topics = sorted({t for t in TOPICS if t in convo})[:3]
        answer: dict[str, Any] = {"newFacts": facts, "factsToRemove": []}
        if topics:
            answer["user"] = {"topOfMind": {"summary": "Working on " + ", ".join(topics) + " in a Vue 3 dashboard.",
                                            "shouldUpdate": True}}
        return text(json.dumps(answer, ensure_ascii=False))

    @staticmethod
    def _hm_recall(req: RecordedRequest) -> Answer:
        files = re.findall(r"(\S+\.md)", str(req.messages[-1].get("content")))
        return text(json.dumps({"files": files[:2]}))

    @staticmethod
    def _agno_memory(req: RecordedRequest) -> Answer:
        if any(m.get("role") == "tool" for m in req.messages):
            return text("Memories updated.")
        facts = _facts_in(req.last_user_text())
        if not facts:
            return text("No memory changes are needed.")
        return tool_calls([("add_memory", {"memory": "The user: " + c[0].lower() + c[1:], "topics": [cat]})
                           for c, cat, _, _ in facts])

    @staticmethod
    def _agno_summary(req: RecordedRequest) -> Answer:
        system = str(req.messages[0].get("content"))
        convo = system.split("<conversation>", 1)[-1].split("</conversation>", 1)[0]
        facts = [c for c, _, _, _ in _facts_in(convo)]
        topics = [t for t in TOPICS if t in convo]
        summary = ("The user is building a Vue 3 dashboard and asks how to implement its parts. "
                   + (" ".join(f"{f}." for f in facts) + " " if facts else "")
                   + ("Discussed: " + ", ".join(topics) + "." if topics else ""))
        return text(json.dumps({"summary": summary, "topics": topics[:5]}))
