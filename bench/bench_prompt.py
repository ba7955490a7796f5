"""Token cost of the memory prompt: the full text vs the compact one for a small local model.

Run: ``.venv/bin/python -m bench.bench_prompt`` (no servers; a local store in a temporary folder).

Why it matters: a 1.5B model on 2 CPU cores reads 23-47 prompt tokens/s, so every 100 tokens of
prompt cost 2-4 s on every turn. Counted with tiktoken's cl100k_base when it is available (else the
character estimate, and the table says so), for an empty memory and for 20 memories, with the tool
schemas the agent is sent beside it (the same in both).
"""

from __future__ import annotations

import json
import tempfile
import time

from harness_memory import tokens
from harness_memory.config import MemoryConfig
from harness_memory.prompt import PromptParts, render_agent_memory_prompt
from harness_memory.services import MemoryServices


def memory(i: int) -> str:
    return (f"---\nname: memory {i}\ndescription: the user's preference number {i} about reports\ntype: user\n---\n\n"
            f"Preference {i}.\n")


def tool_schema_tokens(services: MemoryServices) -> int:
    toolkit = services.memory_tools("bench", "default")
    schemas = []
    for fn in toolkit.functions.values():
        copy = fn.model_copy(deep=True)
        copy.process_entrypoint()
        schemas.append({"type": "function", "function": copy.to_dict()})
    return tokens.count_tokens(json.dumps(schemas))


def counter_name() -> str:
    """Load tiktoken first (its first load may outlast ``count_tokens``' short wait on a busy machine)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if tokens._encoding(wait=True) is not None:
            return "tiktoken cl100k"
        time.sleep(0.5)
    return "character estimate"


def main() -> None:
    counter = counter_name()
    with tempfile.TemporaryDirectory() as root:
        cfg = MemoryConfig.load(env={}, store={"backend": "local", "local_root": root})
        services = MemoryServices.from_config(cfg)
        try:
            own = services.user_agent_dir("bench", "default")
            shared = services.shared_agent_dir("default")
            rows = []
            for count in (0, 20):
                for i in range(len(own.list_entries()), count):
                    own.save(f"user_pref_{i}.md", memory(i))
                parts = PromptParts(own.index_text(), shared.index_text())
                kw = {"own_label": own.place.label, "shared_label": shared.place.label}
                full = tokens.count_tokens(render_agent_memory_prompt(parts, **kw))
                compact = tokens.count_tokens(render_agent_memory_prompt(parts, compact=True, **kw))
                rows.append((count, full, compact))
            schema = tool_schema_tokens(services)
        finally:
            services.close()
    print(f"memory prompt tokens ({counter}); tool schemas sent beside it: {schema} tokens\n")
    print("| memories | full prompt | compact prompt | saved |")
    print("|---:|---:|---:|---:|")
    for count, full, compact in rows:
        print(f"| {count} | {full} | {compact} | {full - compact} ({(full - compact) / full:.0%}) |")


if __name__ == "__main__":
    main()
