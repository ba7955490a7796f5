"""The scripted user scenarios of the quality harness (English and Chinese).

Each scenario is one user's two sessions: session 1 tells the assistant something worth keeping
(a role, a preference, feedback, a project fact, a reference, a correction; one long session) and,
in most, asks it to remember; session 2 asks a question that only the memory can answer. Every
scenario names the words that show a fact was kept (``keywords``: any one of each group), so
the judge needs no model; and the recall check has a labelled answer (``recall_file``).

``answer`` is what session 2's question asks for: the words an answer must hold to show memory was
used. None of them is in the question (a test checks it): an answer that only repeats the question
("ledgerd" for "…the ledgerd migration?") used nothing (issue 30: the harness counted it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryFixture:
    """A memory file put in place before the recall check (a distractor or the labelled answer)."""

    file: str
    description: str
    body: str
    type: str = "user"

    def render(self) -> str:
        desc = json.dumps(self.description, ensure_ascii=False)  # a JSON string is a quoted YAML scalar
        return f"---\nname: {self.file[:-3]}\ndescription: {desc}\ntype: {self.type}\n---\n\n{self.body}\n"


@dataclass(frozen=True)
class Scenario:
    """One user's story. ``keywords``: groups of alternatives; a text "has the fact" when it contains
    one word of every group (case-insensitive). ``correction``: (what the user wants, what they
    said not to use) when the user corrects the assistant."""

    key: str
    lang: str
    kind: str
    turns: tuple[str, ...]
    keywords: tuple[tuple[str, ...], ...]
    question: str
    recall_file: MemoryFixture
    remember: bool = True
    correction: tuple[str, str] | None = None
    answer: tuple[tuple[str, ...], ...] = ()

    def answered(self, text: str) -> bool:
        """Whether ``text`` holds the fact the question asks for: one word of every ``answer`` group
        (a Latin word as a whole word: "Go" is not found in "Google")."""
        return bool(self.answer) and all(any(contains_word(text, w) for w in group) for group in self.answer)

    def has_fact(self, text: str) -> bool:
        low = text.casefold()
        return all(any(w.casefold() in low for w in group) for group in self.keywords)

    def words_found(self, text: str) -> int:
        """How many keyword groups ``text`` covers (a summary's faithfulness)."""
        low = text.casefold()
        return sum(1 for group in self.keywords if any(w.casefold() in low for w in group))


def contains_word(text: str, word: str) -> bool:
    """``word`` in ``text``, case-blind; a word starting or ending with a Latin letter or digit must
    not continue into one there."""
    pattern = re.escape(word.casefold())
    if word[:1].isascii() and word[:1].isalnum():
        pattern = r"(?<![a-z0-9])" + pattern
    if word[-1:].isascii() and word[-1:].isalnum():
        pattern += r"(?![a-z0-9])"
    return re.search(pattern, text.casefold()) is not None


#: Facts every user already has (learned earlier); none of the scenarios contradicts them, so a
#: removal of one of them is a wrong removal.
SEED_FACTS = ("Has a cat named Miso", "Plays chess on Sundays")

DISTRACTORS = (
    MemoryFixture("user_pets.md", "Has a cat named Miso", "Has a cat named Miso (mentioned 2026-10-02)."),
    MemoryFixture("project_office_move.md", "Office moves to Building C on 2026-02-01",
                  "The team moves to Building C on 2026-02-01; desks are booked in Deskbird.", "project"),
    MemoryFixture("reference_oncall.md", "On-call rota is the PagerDuty schedule core-infra",
                  "On-call rota: PagerDuty schedule `core-infra`.", "reference"),
    MemoryFixture("feedback_tone.md", "Keep answers short; no emojis",
                  "Keep answers short and skip emojis.\n**Why:** reads on a phone.", "feedback"),
    MemoryFixture("user_hobby.md", "Plays chess on Sundays", "Plays chess on Sundays at the club."),
)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "role_en", "en", "role",
        ("Hi! Quick intro: I'm a data engineer at Nordwind Logistics and I mostly write Airflow DAGs in "
         "Python. Please remember this.",),
        (("data engineer",), ("Airflow",)),
        "Which orchestration tool are my DAGs written for? Answer in one short sentence.",
        MemoryFixture("user_role.md", "Data engineer at Nordwind Logistics; writes Airflow DAGs in Python",
                      "Data engineer at Nordwind Logistics; writes Airflow DAGs in Python."),
        answer=(("Airflow",),),
    ),
    Scenario(
        "role_zh", "zh", "role",
        ("你好，我是杭州一家银行的后端工程师，主要用 Go 写支付服务。请记住这一点。",),
        (("后端", "backend"), ("Go", "golang")),
        "我写支付服务主要用什么编程语言？用一句话回答。",
        MemoryFixture("user_role.md", "杭州银行的后端工程师，用 Go 写支付服务",
                      "杭州一家银行的后端工程师，主要用 Go 写支付服务。"),
        answer=(("Go", "golang"),),
    ),
    Scenario(
        "preference_en", "en", "preference",
        ("From now on, write every date as ISO 8601 (2026-12-01), never as 12/01. Remember that, please.",),
        (("ISO", "2026-12-01", "YYYY-MM-DD"),),
        "How should you write dates for me? One short sentence.",
        MemoryFixture("feedback_date_format.md", "Write dates as ISO 8601 (YYYY-MM-DD), never 12/01",
                      "Write every date as ISO 8601, e.g. 2026-12-01; never 12/01.", "feedback"),
        answer=(("ISO", "2026-12-01", "YYYY-MM-DD"),),
    ),
    Scenario(
        "preference_zh", "zh", "preference",
        ("以后给我的周报都用中文写，不要用英文。请记住。",),
        (("中文", "Chinese"),),
        "我的周报应该用什么语言写？用一句话回答。",
        MemoryFixture("feedback_report_language.md", "周报用中文写，不用英文", "周报一律用中文写，不要用英文。",
                      "feedback"),
        answer=(("中文", "Chinese"),),
    ),
    Scenario(
        "feedback_en", "en", "feedback",
        ("Your last SQL used Postgres syntax but our warehouse is Snowflake. Always write Snowflake SQL for "
         "me. Remember this.",),
        (("Snowflake",),),
        "Which SQL dialect should you write for me? One short sentence.",
        MemoryFixture("feedback_sql_dialect.md", "Write Snowflake SQL, not Postgres",
                      "Warehouse is Snowflake: write Snowflake SQL, never Postgres syntax.", "feedback"),
        answer=(("Snowflake",),),
    ),
    Scenario(
        "project_en", "en", "project",
        ("Heads-up for the Atlas project: the code freeze is on 2027-01-15 and Priya owns the release. "
         "Please remember this.",),
        (("2027-01-15", "January 15"), ("Priya",)),
        "When is the Atlas code freeze, and who owns the release? One short sentence.",
        MemoryFixture("project_atlas_freeze.md", "Atlas code freeze 2027-01-15; Priya owns the release",
                      "Atlas: code freeze 2027-01-15; release owner Priya.", "project"),
        answer=(("2027-01-15", "January 15"), ("Priya",)),
    ),
    Scenario(
        "reference_en", "en", "reference",
        ("Bugs for the billing service are tracked in the Linear project BILL, and the Grafana board "
         "'billing-latency' shows its p99. Remember where these live.",),
        (("BILL", "Linear"),),
        "Where are billing bugs tracked? One short sentence.",
        MemoryFixture("reference_billing.md", "Billing bugs: Linear project BILL; p99 on Grafana billing-latency",
                      "Billing bugs live in the Linear project BILL; Grafana board `billing-latency` shows p99.",
                      "reference"),
        answer=(("BILL", "Linear"),),
    ),
    Scenario(
        "correction_en", "en", "correction",
        ("Load this CSV and give me the mean of the price column.",
         "No, don't use pandas for this — use Polars. I always want Polars for dataframes. Remember that."),
        (("Polars",),),
        "Which dataframe library should you use for me? One short sentence.",
        MemoryFixture("feedback_dataframes.md", "Use Polars for dataframes, not pandas",
                      "Always use Polars for dataframes, never pandas.", "feedback"),
        correction=("polars", "pandas"),
        answer=(("Polars",),),
    ),
    Scenario(
        "correction_zh", "zh", "correction",
        ("帮我写一个部署脚本。",
         "不要用 Jenkins，改用 GitLab CI。我们团队只用 GitLab CI。请记住。"),
        (("GitLab",),),
        "我们团队用什么做 CI？用一句话回答。",
        MemoryFixture("feedback_ci.md", "团队只用 GitLab CI，不用 Jenkins",
                      "部署和 CI 一律用 GitLab CI，不要用 Jenkins。", "feedback"),
        correction=("gitlab", "jenkins"),
        answer=(("GitLab",),),
    ),
    Scenario(
        "long_en", "en", "long",
        ("I'm planning the Q1 migration of our ledger service from MySQL 5.7 to PostgreSQL 16.",
         "The service is called ledgerd; it has 41 tables and about 900 GB of data.",
         "We decided on logical replication with pglogical rather than a dump and restore.",
         "The cutover window is Saturday 2027-02-06, 02:00-04:00 UTC.",
         "The rollback plan keeps MySQL as a replica for 7 days after cutover.",
         "Marta from the DBA team reviews the plan on Thursday.",
         "Summarise where we are in two sentences."),
        (("ledgerd",), ("PostgreSQL", "Postgres"), ("pglogical",), ("2027-02-06",)),
        "Which replication tool did we pick for the ledgerd migration? One short sentence.",
        MemoryFixture("project_ledgerd_migration.md", "ledgerd MySQL to PostgreSQL 16 migration: pglogical, "
                      "cutover 2027-02-06", "ledgerd moves to PostgreSQL 16 via pglogical; cutover 2027-02-06.",
                      "project"),
        remember=False,
        answer=(("pglogical",),),
    ),
)

BY_KEY = {s.key: s for s in SCENARIOS}


def pick(keys: str | None) -> list[Scenario]:
    """The scenarios named in ``keys`` (comma-separated), or all of them."""
    if not keys:
        return list(SCENARIOS)
    chosen = []
    for key in (k.strip() for k in keys.split(",") if k.strip()):
        if key not in BY_KEY:
            raise SystemExit(f"unknown scenario {key!r}; known: {', '.join(BY_KEY)}")
        chosen.append(BY_KEY[key])
    return chosen
