"""Scripted models for the quality harness test: one that does the job, one that fails like the
1.5B CPU model of issue 15 did.

Both answer every kind of call the harness makes (agent turns with tools, session summaries,
auto-memory extractions, recall picks) from what the request carries — the user's words, the
memory index, the memory lines — so they work for every scenario without a script per call.
Each answer reports distinct token counts per purpose, so the test can check the harness's
per-call numbers against what the server really sent.

``FailingModel`` imitates the four failures: placeholder saves (the old frontmatter template)
and tool calls written as text the server does not parse; a summary slower than the light
timeout; an agent answer slower than the agent timeout; extraction answers that copy the
prompt's example, invent or reverse corrections and remove every fact they see.
"""

from __future__ import annotations

import json
import re

from harness_memory.auto.doubt import term_list
from tests.fakellm import Answer, RecordedRequest, delay, text, tool_calls

USAGE = {"agent": (300, 30), "summary": (500, 50), "extraction": (700, 70), "recall": (200, 20)}
OLD_TEMPLATE = ("---\nname: user_role\ndescription: one line saying what this memory holds\ntype: user\n---\n\n"
                "The memory itself, in markdown.\n")
_REMEMBER = re.compile(r"remember|记住", re.IGNORECASE)


def _system(req: RecordedRequest) -> str:
    return "\n".join(str(m.get("content")) for m in req.messages if m.get("role") in ("system", "developer"))


def _user_text(req: RecordedRequest) -> str:
    return "\n".join(str(m.get("content")) for m in req.messages if m.get("role") == "user")


def purpose(req: RecordedRequest) -> str:
    if req.tools:
        return "agent"
    system = _system(req)
    if "running summary of one conversation" in system:
        return "summary"
    if "long-term memory about one user" in system:
        return "extraction"
    if "You select memory files" in system:
        return "recall"
    return "other"


def _usage(kind: str) -> dict[str, int]:
    p, c = USAGE[kind]
    return {"prompt_tokens": p, "completion_tokens": c}


def _conversation_lines(req: RecordedRequest) -> list[str]:
    """The user's lines of the conversation an extraction request carries."""
    body = _user_text(req)
    conv = body.split("<conversation>", 1)[-1].split("</conversation>", 1)[0]
    return [line[len("User: "):].strip() for line in conv.splitlines() if line.startswith("User: ")]


def _summary_user_lines(req: RecordedRequest) -> list[str]:
    return re.findall(r"^\[\d+\] user: (.*)$", _user_text(req), re.MULTILINE)


def _fact_ids(req: RecordedRequest) -> list[str]:
    return re.findall(r'"id": "(fact-[0-9a-f]+)"', _user_text(req))


class GoodModel:
    """Saves what the user asks to keep, reads memory before answering, summarises and extracts
    faithfully, picks the memory that shares most words with the question."""

    def __call__(self, req: RecordedRequest) -> Answer:
        kind = purpose(req)
        return {"agent": self.agent, "summary": self.summary, "extraction": self.extraction,
                "recall": self.recall}.get(kind, lambda r: text("ok"))(req)

    def agent(self, req: RecordedRequest) -> Answer:
        last = req.messages[-1]
        if last.get("role") == "tool":
            result = str(last.get("content"))
            if result.startswith("Created memory") or result.startswith("Updated memory"):
                return text("Saved — I will remember that.", **_usage("agent"))
            return text(f"From your memory: {result}", **_usage("agent"))
        said = req.last_user_text()
        if _REMEMBER.search(said):
            one_line = " ".join(said.split())[:300]
            content = (f"---\nname: user_note\ndescription: {json.dumps(one_line, ensure_ascii=False)}\n"
                       f"type: user\n---\n\n{said}\n")
            return tool_calls([("save_file", {"file_name": "user_note.md", "content": content})], **_usage("agent"))
        system = _system(req)
        files = re.findall(r"\]\(([^)]+\.md)\)", system.split("### Your memories", 1)[-1])
        if "?" in said or "？" in said:
            if files:
                return tool_calls([("read_file", {"file_name": files[0]})], **_usage("agent"))
            reminder = system.split("<system-reminder>", 1)[-1].split("</system-reminder>", 1)[0]
            return text(f"From what I know of you: {reminder}", **_usage("agent"))
        return text("Noted.", **_usage("agent"))

    def summary(self, req: RecordedRequest) -> Answer:
        said = _summary_user_lines(req)
        bullets = "\n".join(f"- {s}" for s in said) or "_none_"
        doc = (f"# Session about the user's request\n## Current State\n- answered\n## Task\n{bullets}\n"
               f"## Files and Artefacts\n_none_\n## Decisions\n_none_\n## Errors and Corrections\n_none_\n"
               f"## Learnings\n_none_\n## Key Results\n{bullets}\n## Worklog\n- talked\n")
        return text(doc, **_usage("summary"))

    def extraction(self, req: RecordedRequest) -> Answer:
        facts = []
        for line in _conversation_lines(req):
            corrected = bool(re.search(r"^no\b|改用", line, re.IGNORECASE))  # "No, don't use X" / "改用 Y"
            fact = {"content": line[:200], "category": "correction" if corrected else "preference",
                    "confidence": 0.95, "evidence": line[:200]}
            if corrected:
                fact["sourceError"] = "Used the tool the user does not want"
            facts.append(fact)
        answer = {"user": {}, "newFacts": facts, "factsToReinforce": [], "factsToRemove": []}
        return text(json.dumps(answer, ensure_ascii=False), **_usage("extraction"))

    def recall(self, req: RecordedRequest) -> Answer:
        """Every memory sharing a word (its first four letters, or a CJK pair) with the question,
        most shared first."""
        body = _user_text(req)
        query = body.split("User message:\n", 1)[-1].split("\n\nMemories", 1)[0]
        wanted = {t[:4] for t in term_list(query)}
        scored = []
        for line in body.splitlines():
            match = re.match(r"- \[\w+\] (\S+\.md) \(", line)
            if match:
                score = len(wanted & {t[:4] for t in term_list(line)})
                if score:
                    scored.append((-score, match.group(1)))
        return text(json.dumps({"files": [f for _, f in sorted(scored)[:5]]}), **_usage("recall"))


class FailingModel(GoodModel):
    """The four failures of issue 15 (see the module docstring)."""

    def __init__(self, slow_seconds: float) -> None:
        self.slow_seconds = slow_seconds

    def agent(self, req: RecordedRequest) -> Answer:
        last = req.messages[-1]
        if last.get("role") == "tool":
            return text("Done.", **_usage("agent"))
        said = req.last_user_text()
        if _REMEMBER.search(said):
            if re.search(r"[\u4e00-\u9fff]", said):  # the tool call written as text: no tool call
                call = {"name": "save_file", "arguments": {"file_name": "x.md", "content": said}}
                return text(f"```json\n{json.dumps(call, ensure_ascii=False)}\n```", **_usage("agent"))
            return tool_calls([("save_file", {"file_name": "user_role.md", "content": OLD_TEMPLATE})],
                              **_usage("agent"))
        if "?" in said or "？" in said:  # session 2: slower than the agent timeout
            return delay(self.slow_seconds, text("late answer", **_usage("agent")))
        return text("Sure.", **_usage("agent"))

    def summary(self, req: RecordedRequest) -> Answer:
        return delay(self.slow_seconds, super().summary(req))

    def extraction(self, req: RecordedRequest) -> Answer:
        lines = _conversation_lines(req)
        facts = [{"content": "I run a bakery in Lyon", "category": "context", "confidence": 0.95},
                 {"content": "Use pandas instead of Polars" if any("Polars" in x for x in lines)
                  else "Use Excel, not LibreOffice", "category": "correction", "confidence": 0.95,
                  "sourceError": "what the assistant did wrong"}]
        # a merge of the facts it also removes (issue #31: refused whole, nothing folded)
        facts.append({"content": "Has a cat and plays chess", "category": "context", "confidence": 0.95,
                      "merges": _fact_ids(req)})
        removals = [{"id": fid, "reason": "outdated"} for fid in _fact_ids(req)]
        answer = {"user": {}, "newFacts": facts, "factsToReinforce": [], "factsToRemove": removals}
        return text(json.dumps(answer, ensure_ascii=False), **_usage("extraction"))


class EchoModel(GoodModel):
    """Does the job in session 1, then answers session 2 by repeating the question."""

    def agent(self, req: RecordedRequest) -> Answer:
        said = req.last_user_text()
        if req.messages[-1].get("role") != "tool" and ("?" in said or "？" in said):
            return text(f"You asked: {said}", **_usage("agent"))
        return super().agent(req)


class InventingModel(GoodModel):
    """Extracts faithfully, except that from a conversation holding a question (session 2) it also
    invents a tool the user never named."""

    def extraction(self, req: RecordedRequest) -> Answer:
        answer = super().extraction(req)
        if not any("?" in line for line in _conversation_lines(req)):
            return answer
        parsed = json.loads(answer.content or "{}")
        parsed["newFacts"].append({"content": "Uses RDataFrame for analysis", "category": "knowledge",
                                   "confidence": 0.9})
        return text(json.dumps(parsed, ensure_ascii=False), **_usage("extraction"))


class WanderingModel(GoodModel):
    """Saves what nobody asked to keep (the 1.5B model stored its own deploy-script steps as a
    project memory when asked to write a script), and saves its own pandas code as the way to load
    a CSV before the user corrects it (the memory then contradicts the correction)."""

    def agent(self, req: RecordedRequest) -> Answer:
        last = req.messages[-1]
        said = req.last_user_text()
        if last.get("role") != "tool" and not _REMEMBER.search(said) and "?" not in said and "？" not in said:
            if "CSV" in said:
                content = ("---\nname: Dataframes\ndescription: Load CSV files with pandas\ntype: feedback\n---\n\n"
                           "Load CSV files with pandas.\n")
                return tool_calls([("save_file", {"file_name": "feedback_csv.md", "content": content})],
                                  **_usage("agent"))
            content = ("---\nname: Deployment Script\ndescription: A script to deploy a new application.\n"
                       "type: project\n---\n\n- Pull the latest code\n- Build\n- Deploy\n")
            return tool_calls([("save_file", {"file_name": "project_deploy_script.md", "content": content})],
                              **_usage("agent"))
        return super().agent(req)


class EmbellishingModel(GoodModel):
    """Saves the user's words, plus languages they never named when they write in Chinese."""

    def agent(self, req: RecordedRequest) -> Answer:
        said = req.last_user_text()
        if req.messages[-1].get("role") != "tool" and _REMEMBER.search(said) and re.search(r"[\u4e00-\u9fff]", said):
            content = ("---\nname: 后端工程师\ndescription: 后端工程师\ntype: user\n---\n\n"
                       f"- role: {said}\n- skills: Go, Python, Java\n")
            return tool_calls([("save_file", {"file_name": "user_role.md", "content": content})], **_usage("agent"))
        return super().agent(req)
