"""Signal patterns as packaged data: English and Chinese detection per signal, the trivial filter,
extension by ``auto.patterns_dir`` (adding, not replacing), and what each signal changes in the
extractor's prompt (seen at the scripted server)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness_memory.auto import SignalPatterns, Signals, capture_messages, default_patterns
from harness_memory.auto.signals import BUNDLED, SIGNALS
from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from tests.fakellm import ScriptedLLM, text

CASES = {
    "correction": ["That's wrong, use uv", "you misunderstood me", "不对，别用 npm，用 pnpm", "你理解错了，改用 Go"],
    "reinforcement": ["perfect, exactly right", "Yes, exactly! That's what I needed.", "完全正确，就是这个意思",
                      "以后都保持这样"],
    "preference": ["I prefer uv over pip", "I'd rather get short answers", "我更喜欢简洁的回答", "我讨厌长篇大论"],
    "identity": ["I am an engineer", "I work as a data analyst", "我是一名数据分析师", "我在腾讯工作"],
    "goal": ["I plan to migrate to uv", "my goal is to pass the AWS exam", "我打算下个月学 Rust", "我的目标是转岗"],
    "decision": ["let's go with uv", "We decided to drop Python 2", "我们决定用 PostgreSQL", "那就用 Redis 吧"],
    "forget": ["forget what I said about Java", "I no longer use Windows", "忘掉我之前说的地址", "我已经不用 Vim 了"],
    "remember": ["Remember that I deploy on Fridays", "please remember: my editor is Helix", "Don't forget I use uv",
                 "记住：周五发布", "请记住我用 uv", "别忘了我下周去东京"],
}
NOTHING = ["what is the weather", "I'm going to check the logs", "I am not sure", "我是说这个函数", "帮我写个报告",
           "It's not perfect"]


@pytest.mark.parametrize("signal, message", [(s, m) for s, ms in CASES.items() for m in ms])
def test_each_signal_in_english_and_chinese(signal: str, message: str) -> None:
    assert signal in default_patterns().detect_text(message)


@pytest.mark.parametrize("message", NOTHING)
def test_ordinary_messages_carry_no_signal(message: str) -> None:
    assert default_patterns().detect_text(message) == set()


def test_bundled_files_and_a_message_with_two_signals() -> None:
    patterns = default_patterns()
    assert set(BUNDLED) <= set(patterns.sets) and all(patterns.sets[n].patterns for n in BUNDLED)
    assert all(patterns.sets[n].hint for n in SIGNALS)
    assert patterns.detect_text("I am an engineer and I prefer uv") == {"identity", "preference"}
    signals = patterns.detect(capture_messages([
        {"role": "assistant", "content": "That's wrong, sorry"},
        {"role": "user", "content": "不对，别用 npm 用 pnpm，perfect otherwise"}]))
    assert signals.names == {"correction"}  # the assistant's words never count; a correction does not confirm
    assert signals.excerpts_of("correction") == ("不对，别用 npm 用 pnpm，perfect otherwise",)


@pytest.mark.parametrize("message, trivial", [
    ("好的", True), ("嗯嗯", True), ("ok.", True), ("OK!", True), ("Thanks!", True), ("收到", True), ("👍", True),
    ("use uv to install, ok?", False), ("perfect", False), ("完全正确", False), ("ok, and the tests?", False),
])
def test_trivial_messages(message: str, trivial: bool) -> None:
    assert default_patterns().is_trivial(message) is trivial


def test_every_signal_changes_what_the_extractor_is_told() -> None:
    patterns = default_patterns()
    none = patterns.hints(Signals())
    assert any("record no \"correction\" facts" in h for h in none) and len(none) == 1
    for name in SIGNALS:
        hints = patterns.hints(Signals.of(name, excerpts=((name, "MARK"),)))
        assert any("«MARK»" in h for h in hints), name
        assert (name == "correction") != any("record no" in h for h in hints)


def test_a_deployment_adds_patterns_and_signals(tmp_path: Path, make_config: Callable[..., MemoryConfig],
                                                llm_server: ScriptedLLM, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "correction.yaml").write_text("patterns:\n  - '\\bnah\\b'\n  - '(unclosed'\n  - 'NEIN'\n",
                                              encoding="utf-8")
    (tmp_path / "decision.yaml").write_text("replace: true\npatterns: ['\\bwe go with\\b']\n", encoding="utf-8")
    (tmp_path / "allergy.yaml").write_text(
        "hint: The user mentioned a food allergy ({excerpts}); record it as context with confidence 1.0.\n"
        "patterns: ['\\ballergic to\\b', '过敏']\n", encoding="utf-8")
    caplog.set_level(logging.ERROR, "harness_memory.auto.signals")
    patterns = SignalPatterns.load(tmp_path)
    assert "bad regular expression '(unclosed'" in caplog.text  # logged and skipped, the rest loads
    assert patterns.detect_text("nah, use tabs") == {"correction"}
    assert patterns.detect_text("不对") == {"correction"}  # the bundled ones are still there: added, not replaced
    assert patterns.detect_text("nein") == {"correction"}  # case-insensitive by default
    assert patterns.detect_text("we go with uv") == {"decision"} and patterns.detect_text("let's go with uv") == set()
    assert patterns.detect_text("我对花生过敏") == {"allergy"}

    cfg = make_config(model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      auto={"debounce_seconds": 3600, "patterns_dir": str(tmp_path)})
    services = MemoryServices.from_config(cfg)
    auto = services.new_auto_memory(start_worker=False)
    llm_server.script(text(json.dumps({"newFacts": []})))
    auto.capture("u1", "s1", [{"role": "user", "content": "I'm allergic to peanuts."},
                              {"role": "assistant", "content": "Noted."}])
    assert auto.flush(10)
    prompt = llm_server.chat_requests[0].messages[-1]["content"]
    assert "The user mentioned a food allergy («I'm allergic to peanuts.»)" in prompt
    assert 'record no "correction" facts' in prompt
    auto.close(1)
    services.close()


# -- issue #30: phrasings a weak model's users write, generalised ------------------------------------
CLAUSE = st.text(st.sampled_from("写数据处理脚本时平常工作里报告的在这类项目中用来做分析周末家里公司"), max_size=14)
TOOL = st.sampled_from(["polars", "uv", "Go", "Rust", "Vim", "中文", "英文"])


@given(between=CLAUSE, how=st.sampled_from(["更", "比较", "最", "一直", "通常"]), tool=TOOL)
def test_a_chinese_preference_with_words_between(between: str, how: str, tool: str) -> None:
    assert "preference" in default_patterns().detect_text(f"我{between}{how}喜欢用 {tool}")


@given(place=st.sampled_from(["杭州一家银行", "一家创业公司", "北京的研究所", "腾讯", ""]), between=CLAUSE,
       role=st.sampled_from(["后端工程师", "数据分析师", "产品经理", "老师", "研究员", "架构师"]))
def test_a_chinese_role_after_a_place(place: str, between: str, role: str) -> None:
    assert "identity" in default_patterns().detect_text(f"我是{place}的{between}{role}")


@given(when=st.sampled_from(["以后", "今后", "从现在起"]), between=CLAUSE, lang=TOOL,
       verb=st.sampled_from(["写", "回答", "回复"]))
def test_a_chinese_rule_for_later(when: str, between: str, lang: str, verb: str) -> None:
    assert "preference" in default_patterns().detect_text(f"{when}{between}都用{lang}{verb}")


@given(ask=st.sampled_from(["Remember that", "remember:", "Please remember,", "Also remember that", "Don't forget",
                            "Never forget that", "Keep in mind that", "记住", "请记住", "你要记住", "别忘了",
                            "不要忘记"]),
       fact=st.sampled_from(["I deploy on Fridays", "my cat is Miso", "我用 uv", "周五发布", "我下周去东京"]))
def test_asking_to_remember_is_a_signal_and_not_a_forget(ask: str, fact: str) -> None:
    found = default_patterns().detect_text(f"{ask} {fact}")
    assert "remember" in found and "forget" not in found


@pytest.mark.parametrize("message", ["I don't remember the name", "Do you remember when we used Go?",
                                     "I can't remember how", "我记不住这个命令", "你还记得吗", "日记一下子写完了"])
def test_not_remembering_is_no_remember_signal(message: str) -> None:
    assert "remember" not in default_patterns().detect_text(message)
