"""A terminal chat app whose agent remembers you across runs.

    HARNESS_MEMORY_MODEL=gpt-4o-mini HARNESS_MEMORY_BASE_URL=https://api.openai.com/v1 \
    HARNESS_MEMORY_API_KEY=sk-... python examples/agno_app.py --user alice

Each line you type is one turn. The agent is built per turn with ``build_agent`` (as a web app
would per request), so it sees the memories saved in earlier turns and earlier runs; the
conversation itself is kept by agno in an in-memory db for this process.
"""

from __future__ import annotations

import argparse
import sys
import uuid

from agno.db.in_memory import InMemoryDb

from harness_memory import build_agent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", required=True, help="user id (A-Z a-z 0-9 _ . @ -)")
    parser.add_argument("--agent-type", default="default")
    parser.add_argument("--session", default=None, help="session id (default: a new one)")
    args = parser.parse_args(argv)
    session_id = args.session or uuid.uuid4().hex
    db = InMemoryDb()
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("you> ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            break
        message = line.strip()
        if not message:
            continue
        agent = build_agent(args.user, agent_type=args.agent_type, session_id=session_id, query=message,
                            db=db, add_history_to_context=True, num_history_runs=5)
        reply = agent.run(message)
        print(f"agent> {reply.content}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
