"""Write ``tests/data/place_v1/``: one memory place exactly as the code of this commit stores it.

Run from the repository root: ``.venv/bin/python tests/data/make_place_v1.py`` (rewrites the folder).

Why a fixture written by the real code, kept byte for byte: issue #18 changes the manifest format
(a small head with a delta over an immutable base). Places written by the release before that
(``.manifest.json`` with ``"version": 1`` holding every entry, ``MEMORY.md`` rendered from it,
``.search-index.bin``) must open and keep every memory after the upgrade, and
``tests/test_manifest_migration.py`` proves it on these very bytes. So this script is only re-run
on purpose, with the OLD code checked out; re-running it with code that writes a newer format
would make the test guard nothing (it refuses when the manifest is not version 1).

How the place was made (all through ``MemoryServices`` over a ``LocalStore``, no Redis, the
way an embedded app writes; each step is a separate transaction, as in real use):

1. an import of 20 memories in one ``save_many`` (every type; tags, confidence, source, dates,
   an emoji and a Chinese description; a folder ``proj/``; a key the manifest does not copy);
2. 12 more one by one with ``MemoryTools.save_file`` (Chinese and accented names, a Chinese
   folder, a nested ``proj/sub/`` file, a body in Chinese);
3. two overwrites (``save_file`` on existing names: created_at kept, updated_at moves);
4. three ``replace_file_chunk`` edits;
5. three ``delete_file`` calls;
6. ``update_meta`` storing a ``fixture`` record (which commit wrote it) in the manifest's meta.

The store's lock folder (``.locks``) is left out; everything else under the root is copied as is.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness_memory.config import MemoryConfig
from harness_memory.memdir import Manifest
from harness_memory.services import MemoryServices

HERE = Path(__file__).resolve().parent
OUT = HERE / "place_v1"
USER = "fixture-user"
AGENT = "default"


def memory(name: str, description: str, type_: str, body: str, **extra: object) -> str:
    """A memory file's text; ``extra`` frontmatter keys are written as JSON (valid YAML flow)."""
    lines = ["---", f"name: {json.dumps(name, ensure_ascii=False)}",
             f"description: {json.dumps(description, ensure_ascii=False)}", f"type: {type_}"]
    lines += [f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in extra.items()]
    return "\n".join([*lines, "---", "", body.strip(), ""])


#: Step 1: one import. The body words the migration test searches for are unique to one file each.
IMPORTED: list[tuple[str, str]] = [
    ("user_role.md", memory("User role", "The user is a backend engineer on the payments team", "user",
                            "Works on the payments service; prefers Go and Python.", tags=["role", "team"])),
    ("user_timezone.md", memory("Time zone", "The user works from Shanghai (UTC+8)", "user",
                                "Schedules meetings before 18:00 Shanghai time.", confidence=0.9)),
    ("user_language.md", memory("Language", "Answer in Chinese unless the user writes English", "user",
                                "用户更喜欢中文回答。", tags=["语言"], source="conversation")),
    ("feedback_testing.md", memory("Testing feedback", "Run the integration tests against real services",
                                   "feedback", "Never mock the database; the user was burned by mocks before.",
                                   confidence=0.8, category="testing")),
    ("feedback_style.md", memory("Code style", "Short functions, type hints, docstrings that say why",
                                 "feedback", "Keep diffs small. Explain the reason in the docstring.",
                                 tags=["style", "python"])),
    ("feedback_emoji.md", memory("No emoji", "No emoji in commit messages 🙅", "feedback",
                                 "The user removes emoji from commit messages by hand.")),
    ("project_deadline.md", memory("Release deadline", "The v2 release is due on 2026-12-15", "project",
                                   "Freeze on 2026-12-10; the release manager is Lin.",
                                   created="2026-11-20", expires="2026-12-31")),
    ("project_stack.md", memory("Stack", "Services run on Kubernetes with Redis and COS", "project",
                                "Two regions; the bucket is in ap-shanghai.", tags=["infra"])),
    ("proj/notes.md", memory("Project notes", "Running notes of the migration project", "project",
                             "The quokka dashboard tracks the migration; check it before each release.")),
    ("proj/risks.md", memory("Risks", "Known risks of the migration", "project",
                             "Risk: the old manifest format lingers in cold places.", category="risk")),
    ("reference_grafana.md", memory("Grafana", "Latency dashboards live in Grafana", "reference",
                                    "https://grafana.example.com/d/payments — the p99 panel.")),
    ("reference_runbook.md", memory("Runbook", "Where the on-call runbook is", "reference",
                                    "The runbook is in the wiki under Ops/Payments.", source="wiki")),
    ("reference_oncall.md", memory("On-call", "Who is on call this week", "reference",
                                   "Rotation changes on Mondays.", owner="alice")),  # owner: file only
    ("user_editor.md", memory("Editor", "The user edits in Neovim", "user", "Uses LazyVim.")),
    ("feedback_reviews.md", memory("Reviews", "Wants review comments as questions", "feedback",
                                   "Phrase review remarks as questions, not orders.")),
    ("project_budget.md", memory("Budget", "Cloud budget is 20k per month", "project",
                                 "Over budget needs the director's sign-off.", confidence=0.6)),
    ("reference_api.md", memory("API docs", "The payments API reference", "reference",
                                "OpenAPI spec in the api repo, file payments.yaml.")),
    ("old_hobby.md", memory("Hobby", "The user plays chess", "user", "Plays on weekends.")),
    ("old_meeting.md", memory("Meeting", "Weekly sync on Tuesdays", "project", "Moved to Wednesdays.")),
    ("stale_link.md", memory("Stale link", "A link that moved", "reference", "http://old.example.com")),
]

#: Step 2: saved one by one through the tool.
SAVED: list[tuple[str, str]] = [
    ("用户偏好.md", memory("用户偏好", "用户喜欢简洁的回答", "user",
                           "用户每天下午喝乌龙茶，讨论时喜欢先看结论。", tags=["偏好", "中文"])),
    ("项目/计划.md", memory("项目计划", "第二季度的迁移计划", "project",
                            "先迁移冷数据，再迁移热数据；负责人是王伟。", confidence=0.7)),
    ("café_notes.md", memory("Café", "Notes from the café meetup", "project",
                             "Ideas: a gentler retry policy; résumé the search work.")),
    ("proj/sub/architecture.md", memory("Architecture", "How the memory service is laid out", "reference",
                                        "Pods, one Redis, one bucket; places are key prefixes.")),
    ("feedback_naming.md", memory("Naming", "Names say what, not how", "feedback",
                                  "Prefer `load_manifest` over `get_json`.")),
    ("user_pets.md", memory("Pets", "The user has a cat called Mochi", "user", "Mochi is twelve.")),
    ("project_flags.md", memory("Feature flags", "Flags are in the flags service", "project",
                                "Flag names are snake_case.", tags=["flags"])),
    ("reference_slack.md", memory("Slack", "The team channel is #payments-dev", "reference",
                                  "Alerts go to #payments-alerts.")),
    ("日本語メモ.md", memory("日本語メモ", "東京オフィスの連絡先", "reference", "東京オフィスの担当は佐藤さん。")),
    ("feedback_tests_first.md", memory("Tests first", "Write the failing test before the fix", "feedback",
                                       "A regression test with every bug fix.")),
    ("project_owner.md", memory("Owner", "The service owner is the platform team", "project",
                                "Escalate to the platform lead.")),
    ("user_hours.md", memory("Hours", "The user is away on Fridays", "user", "Async only on Fridays.")),
]

#: Step 3: overwrites of existing names.
OVERWRITES: list[tuple[str, str]] = [
    ("user_editor.md", memory("Editor", "The user edits in Neovim and VS Code", "user",
                              "Uses LazyVim; VS Code for notebooks.", tags=["tools"])),
    ("project_stack.md", memory("Stack", "Services run on Kubernetes with Redis Cluster and COS", "project",
                                "Two regions; the bucket is in ap-shanghai. Redis moved to a cluster.",
                                tags=["infra", "redis"])),
]

#: Step 4: (file, old chunk, new chunk).
REPLACES: list[tuple[str, str, str]] = [
    ("project_budget.md", "20k per month", "25k per month"),
    ("user_pets.md", "Mochi is twelve.", "Mochi is thirteen."),
    ("项目/计划.md", "负责人是王伟", "负责人是李娜"),
]

#: Step 5: deleted again.
DELETES = ("old_hobby.md", "old_meeting.md", "stale_link.md")


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _expect(answer: str, *prefixes: str) -> None:
    if not answer.startswith(prefixes):
        raise SystemExit(f"the tool refused a fixture step: {answer}")


def write_place(root: Path) -> None:
    """Make the place under the LocalStore ``root`` (steps 1–6 of the module docstring)."""
    cfg = MemoryConfig.load(env={}, store={"backend": "local", "local_root": str(root)},
                            agent={"snapshots_dir": str(root.parent / "no-snapshots")},
                            session={"enabled": False}, auto={"enabled": False})
    with MemoryServices.from_config(cfg) as services:
        tools = services.memory_tools(USER, AGENT)
        tools.own.save_many(IMPORTED)
        for file, text in SAVED:
            _expect(tools.save_file(file, text), "Created")
        for file, text in OVERWRITES:
            _expect(tools.save_file(file, text), "Updated")
        for file, old, new in REPLACES:
            _expect(tools.replace_file_chunk(file, old, new), "Updated")
        for file in DELETES:
            _expect(tools.delete_file(file), "Deleted")

        def stamp(manifest: Manifest) -> None:
            manifest.meta["fixture"] = {"written_by": "tests/data/make_place_v1.py", "commit": _commit(),
                                        "manifest_version": 1}

        tools.own.update_meta(stamp)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="hm-fixture-") as tmp:
        root = Path(tmp) / ".harness"
        write_place(root)
        manifests = list(root.rglob(".manifest.json"))
        if len(manifests) != 1 or json.loads(manifests[0].read_text("utf-8")).get("version") != 1:
            raise SystemExit("this code does not write a version-1 manifest; the fixture must come from the old code")
        if OUT.exists():
            shutil.rmtree(OUT)
        shutil.copytree(root, OUT, ignore=shutil.ignore_patterns(".locks"))
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT.relative_to(HERE.parent.parent)}: {sum(1 for p in OUT.rglob('*') if p.is_file())} files, "
          f"{size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
