"""Property-based run of the whole API from its OpenAPI spec (schemathesis): no answer is a 5xx.

Every operation gets a few generated requests in both modes — valid ones, and invalid ones
(wrong types, missing fields, odd path values and headers) — against the app on SeaweedFS +
Redis, with the scripted model server behind the runs endpoint. The bound (``MAX_EXAMPLES``)
keeps it well under a minute; the point is breadth: every route, parameter and body schema.
With all servers up no 5xx is a legitimate answer, and every status must be one the spec
declares for that operation. Every failing operation is reported, not only the first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import status_code_conformance

from harness_memory.config import MemoryConfig
from harness_memory.layout import ID_RE
from harness_memory.server import create_app
from tests.fakellm import ScriptedLLM, text
from tests.servers import RedisServer, SeaweedFS

from .test_server_memory import ADMIN, private_config

MAX_EXAMPLES = 3
HEADERS = {"wid": "fuzz-user", "Authorization": f"Bearer {ADMIN}"}


@pytest.fixture(scope="module")
def fuzz_cfg(seaweedfs: SeaweedFS, redis_server: RedisServer) -> Iterator[tuple[MemoryConfig, ScriptedLLM]]:
    llm = ScriptedLLM().start()
    llm.set_handler(lambda req: text("ok"))
    model = {"model": "fake-model", "base_url": llm.base_url, "api_key": "k"}
    try:
        with private_config(seaweedfs, redis_server, server={"admin_token": ADMIN}, model=model,
                            recall={"enabled": False}, auto={"enabled": False}) as cfg:
            yield cfg, llm
    finally:
        llm.stop()


def steer(case: schemathesis.Case) -> None:
    """Valid-mode cases reach the real logic: the caller's own memory and a valid agent type or
    project (random ids are almost always refused at the door with a 422, a path tested below)."""
    params = case.path_parameters or {}
    if "user_id" in params:
        params["user_id"] = "me"
    for name in ("agent_type", "project"):
        if name in params and not ID_RE.fullmatch(str(params[name])):
            params[name] = "default"


def fuzz(operation: Any, mode: GenerationMode, statuses: Counter[int]) -> Callable[[], None]:
    """A hypothesis test of one operation in one generation mode."""

    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case: schemathesis.Case) -> None:
        case.headers = {**HEADERS, **{k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}}
        if mode is GenerationMode.POSITIVE:
            steer(case)
        response = case.call()
        statuses[response.status_code] += 1
        assert response.status_code < 500, (response.status_code, response.text[:300])
        case.validate_response(response, checks=[status_code_conformance])

    return check


def test_no_operation_answers_a_server_error(fuzz_cfg: tuple[MemoryConfig, ScriptedLLM]) -> None:
    cfg, _ = fuzz_cfg
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(cfg))
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 70
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                fuzz(operation, mode, statuses)()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, operation.path  # nothing to get wrong (no inputs)
            except Exception as exc:  # collect every operation's failure
                failures.append(f"{operation.method.upper()} {operation.path} [{mode.value}]: "
                                f"{type(exc).__name__}: {str(exc)[:600]}")
    assert not failures, "\n".join(failures)
    # It really exercised the API: many calls, successes and refusals alike.
    assert statuses.total() > 300, statuses
    assert sum(n for code, n in statuses.items() if code < 300) > 50, statuses
    assert sum(n for code, n in statuses.items() if 400 <= code < 500) > 100, statuses
