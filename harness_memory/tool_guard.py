"""The loop guard of the memory tools: one run makes a given call once.

Why: a 1.5B model called the same ``save_file`` with the same arguments 11 times in one turn, each
answered "Updated memory", and never answered the user (issue 30). Doing it again changes nothing
(or, for a write, rewrites the same file and costs a commit each time), and the model reads each
success as a reason to go on. So within one agno run (``run_context.run_id``) a call repeating an
earlier one — same tool, same arguments, nothing written in between — gets a short "already done"
naming the first answer instead of running again. A write that changed something forgets what the
run did before it (a read after a write may see new text; saving A, B, then A again is a change).

Under ``arun()`` agno runs one turn's calls concurrently: a duplicate of a call still running is
refused too. State is per ``MemoryTools`` object, bounded to the most recent runs.
"""

from __future__ import annotations

import functools
import inspect
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

#: Runs remembered per toolkit (a toolkit serves one user's agents; runs end quickly).
MAX_RUNS = 256
#: Calls remembered per run (a run that makes more distinct calls is not a loop of one).
MAX_CALLS_PER_RUN = 256
_QUOTE_CHARS = 160
_RUNNING = object()


def call_key(tool: str, arguments: dict[str, Any]) -> str:
    """One string per (tool, arguments), whatever their order or spelling as keywords."""
    return tool + "\x00" + json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)


class RepeatGuard:
    """Per run: the calls made and their first answers (see the module docstring)."""

    def __init__(self, max_runs: int = MAX_RUNS) -> None:
        self._lock = threading.Lock()
        self._runs: OrderedDict[str, OrderedDict[str, Any]] = OrderedDict()
        self._max_runs = max_runs

    def claim(self, run_id: str, tool: str, key: str) -> str | None:
        """None: go ahead (the call is now this run's); else the refusal to answer with."""
        with self._lock:
            calls = self._runs.get(run_id)
            if calls is None:
                calls = self._runs[run_id] = OrderedDict()
                while len(self._runs) > self._max_runs:
                    self._runs.popitem(last=False)
            else:
                self._runs.move_to_end(run_id)
            if key not in calls:
                calls[key] = _RUNNING
                while len(calls) > MAX_CALLS_PER_RUN:
                    calls.popitem(last=False)
                return None
            first = calls[key]
        if first is _RUNNING:
            return (f"Already being done: the same {tool} call with the same arguments is running right now. "
                    "Do not repeat it; go on with your answer to the user.")
        if str(first).startswith("Error"):
            return (f"Already tried: this exact {tool} call failed earlier in this turn ({_quote(first)}). The "
                    "same arguments fail the same way: change them as the error says, or answer the user.")
        return (f"Already done: this exact {tool} call was made earlier in this turn ({_quote(first)}). Do not "
                "repeat it; go on with your answer to the user.")

    def settle(self, run_id: str, key: str, result: str, *, changed: bool) -> None:
        """Record the first answer to ``key``; ``changed`` (a write that landed) forgets the run's
        other calls, which may now answer differently."""
        with self._lock:
            calls = self._runs.get(run_id)
            if calls is None:
                return
            if changed:
                calls.clear()
            calls[key] = result


def once_per_run(*, write: bool) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Decorate a toolkit method (its object has ``guard: RepeatGuard`` and ``telemetry``): in an agno
    run (a ``run_context`` with a ``run_id`` is passed) a call repeating an earlier one of the run is
    answered with the guard's refusal instead of running. ``write``: a call that landed (its answer
    does not start with "Error") changes memory, so the run's earlier calls may answer differently.
    Outside a run (code calling the tool itself) nothing is guarded."""

    def wrap(fn: Callable[..., str]) -> Callable[..., str]:
        tool = fn.__name__
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> str:
            run_id = getattr(kwargs.get("run_context"), "run_id", None)  # passed on: tools read the run's words
            if not run_id:
                return fn(*args, **kwargs)
            owner = args[0]
            key = call_key(tool, _arguments(signature, args, kwargs))
            refusal = owner.guard.claim(run_id, tool, key)
            if refusal is not None:
                owner.telemetry.repeated_tool_call(tool)
                return refusal
            result = "Error: the tool did not answer."
            try:
                result = fn(*args, **kwargs)
            finally:
                owner.guard.settle(run_id, key, result, changed=write and not str(result).startswith("Error"))
            return result

        return inner

    return wrap


def _arguments(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by name, defaults filled in (so ``f(x)`` and ``f(x, limit=200)`` match)."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return {"args": args[1:], **kwargs}
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if k not in ("self", "run_context")}


def _quote(result: Any) -> str:
    flat = " ".join(str(result).split())
    return flat if len(flat) <= _QUOTE_CHARS else flat[: _QUOTE_CHARS - 1] + "…"


__all__ = ["RepeatGuard", "call_key", "once_per_run"]
