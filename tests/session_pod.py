"""A separate OS process acting as one "pod" of session memory (multi-pod acceptance tests).

Run as ``python -m tests.session_pod COMMAND SESSION [ARGS]`` with ``HARNESS_MEMORY_CONFIG`` set;
prints one JSON object on its last stdout line.

Commands:
  collect-extract SESSION RUNS   collect RUNS user/assistant pairs, then ``maybe_extract``
  get-twice SESSION              ``get_summary`` twice, with the store's request count around each
  race SESSION N GO_KEY          INCR GO_KEY:ready, wait for a token on the list GO_KEY, then N concurrent
                                 ``maybe_extract`` calls
"""

from __future__ import annotations

import asyncio
import json
import sys

from harness_memory.config import MemoryConfig
from harness_memory.redis_client import make_redis
from harness_memory.services import MemoryServices


def conversation(session: str, runs: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"[{session}] question {i}: " + "please check the logs " * 8},
             {"role": "assistant", "content": f"answer {i}: " + "the logs look fine " * 8}]
            for i in range(runs)]


async def main() -> dict[str, object]:
    command, session = sys.argv[1], sys.argv[2]
    services = MemoryServices.from_config(MemoryConfig.load())
    manager = services.session_manager()
    out: dict[str, object] = {"mode": manager.mode}
    try:
        if command == "collect-extract":
            for run in conversation(session, int(sys.argv[3])):
                await manager.collect_messages(session, run)
            out["due"] = await manager.should_extract(session)
            result = await manager.maybe_extract(session)
            out.update(status=result.status.value, version=result.version, sent=result.messages_sent,
                       summary=result.summary)
        elif command == "get-twice":
            store = services.store
            before = store.request_count
            first = await manager.get_summary(session)
            middle = store.request_count
            second = await manager.get_summary(session)
            out.update(first=first, second=second, first_requests=middle - before,
                       second_requests=store.request_count - middle)
        elif command == "race":
            count, go_key = int(sys.argv[3]), sys.argv[4]
            client = make_redis(services.config.redis.model_copy(update={"socket_timeout": 30}))
            assert client is not None
            client.incr(go_key + ":ready")  # the test pushes the go tokens once every pod is here
            client.blpop([go_key], timeout=20)
            results = await asyncio.gather(*(manager.maybe_extract(session) for _ in range(count)))
            out["statuses"] = [r.status.value for r in results]
            client.close()
        else:
            raise SystemExit(f"unknown command {command}")
    finally:
        manager.close()
        services.close()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), ensure_ascii=False), flush=True)
