"""A separate OS process that saves memories into one place (used by the write-storm tests).

Run as ``python -m tests.storm_worker USER WORKER COUNT`` with ``HARNESS_MEMORY_CONFIG`` set.
Prints one line per failed save and exits 1 if any failed.
"""

from __future__ import annotations

import sys

from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from harness_memory.tools import MemoryTools


def main() -> int:
    user, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    services = MemoryServices.from_config(MemoryConfig.load())
    tools = MemoryTools(services.user_agent_dir(user))
    failures = 0
    for i in range(count):
        content = (f"---\nname: w{worker} m{i}\ndescription: worker {worker} memory {i}\ntype: project\n---\n\n"
                   f"Saved by worker {worker}.\n")
        result = tools.save_file(f"w{worker:02d}_m{i:03d}.md", content)
        if not result.startswith("Created"):
            failures += 1
            print(result, flush=True)
    services.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
