"""A storm process for the trust storm (test and bench): saves new files and appends to a shared
ledger by chunk replace, in one place, logging what each operation reported.

Run as ``python -m tests.trust_worker USER WORKER SECONDS LOGFILE`` with ``HARNESS_MEMORY_CONFIG``
set. Prints ``ready`` once built and starts on a line on stdin; one JSON line per operation
goes to LOGFILE: ``op``, ``kind`` (save / replace), ``outcome`` (done / failed / unknown),
``error``, ``wait`` (seconds spent waiting for the place lock) and ``seconds`` (the whole operation).
With ``HM_STORM_DEBUG_DIR`` set, each worker also writes a DEBUG log there (``worker-NN.log``: every
operation's start and end beside the library's own log lines) to trace a lost or leaked operation.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator

from harness_memory.config import MemoryConfig
from harness_memory.errors import OutcomeUnknown
from harness_memory.locks import Lease
from harness_memory.memdir import ABSENT
from harness_memory.services import MemoryServices

LEDGER = "ledger.md"
END = "<!-- end of ledger -->"


def ledger_seed() -> str:
    return f"---\nname: ledger\ndescription: one line per replace\ntype: project\n---\n\n{END}\n"


def note(op: str) -> str:
    return f"---\nname: {op}\ndescription: storm note {op}\ntype: project\n---\n\nWritten by {op}.\n"


def main() -> int:
    user, worker, seconds, log_path = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    debug_dir = os.environ.get("HM_STORM_DEBUG_DIR")  # a storm under investigation: each worker's log
    if debug_dir:
        logging.basicConfig(filename=os.path.join(debug_dir, f"worker-{worker:02d}.log"), level=logging.DEBUG,
                            format="%(asctime)s.%(msecs)03d %(threadName)s %(name)s %(levelname)s %(message)s",
                            datefmt="%H:%M:%S")
        for noisy in ("urllib3", "qcloud_cos", "httpx", "openai"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    create_only = os.environ.get("HM_STORM_CREATE_ONLY") == "1"  # saves are create-only (``expect=ABSENT``)
    services = MemoryServices.from_config(MemoryConfig.load())
    mdir = services.user_agent_dir(user)
    waited = {"s": 0.0}
    hold = services.locker.hold

    @contextlib.contextmanager
    def timed(name: str, **kwargs: float | None) -> Iterator[Lease]:
        started = time.monotonic()
        with hold(name, **kwargs) as lease:
            waited["s"] += time.monotonic() - started
            yield lease

    services.locker.hold = timed  # type: ignore[method-assign]
    handed = getattr(services.locker, "hold_or_answer", None)
    if handed is not None:  # a save that hands its change to the holder: waits until held or answered

        @contextlib.contextmanager
        def timed_handed(name: str, propose: object, **kwargs: float | None) -> Iterator[Lease | None]:
            started = time.monotonic()
            with handed(name, propose, **kwargs) as lease:
                waited["s"] += time.monotonic() - started
                yield lease

        services.locker.hold_or_answer = timed_handed  # type: ignore[attr-defined]
    mdir.list_entries()  # open the connections before the gate
    print("ready", flush=True)
    sys.stdin.readline()  # the start gate: every worker starts at once
    end = time.monotonic() + seconds
    i = 0
    with open(log_path, "a", encoding="utf-8") as fh:
        while time.monotonic() < end:
            kind = "replace" if i % 2 else "save"
            op = f"w{worker:02d}-{i:05d}"
            started, error, waited["s"] = time.monotonic(), "", 0.0
            logging.getLogger("storm").debug("start %s %s", op, kind)
            try:
                if kind == "save":
                    mdir.save(f"{op}.md", note(op), expect=ABSENT if create_only else None)
                else:
                    mdir.replace_chunk(LEDGER, END, f"- {op}\n{END}")
                outcome = "done"
            except OutcomeUnknown as exc:
                outcome, error = "unknown", str(exc)[:200]
            except Exception as exc:
                outcome, error = "failed", f"{type(exc).__name__}: {str(exc)[:200]}"
            logging.getLogger("storm").debug("end %s %s %s %s", op, kind, outcome, error)
            fh.write(json.dumps({"op": op, "kind": kind, "outcome": outcome, "error": error,
                                 "wait": round(waited["s"], 4), "seconds": round(time.monotonic() - started, 4)})
                     + "\n")
            fh.flush()
            i += 1
    services.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
