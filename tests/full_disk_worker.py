"""The process whose disk fills: ``python -m tests.full_disk_worker DB LIMIT BACKEND``.

It limits the size of every file it writes to ``LIMIT`` bytes
(``RLIMIT_FSIZE``, with ``SIGXFSZ`` ignored so that a write past it fails with
``EFBIG`` instead of killing the process), runs :data:`RUNS` durable runs on the
SQLite run store ``DB`` at once, and prints one JSON object on stdout: each run's
id and the termination its caller got.
"""

from __future__ import annotations

import faulthandler
import json
import re
import resource
import signal
import sys
import warnings

import anyio

import tether
from tether.providers import ModelRequest, ProviderContext, Reply, ScriptedProvider, ToolCall

RUNS = 60
ROUNDS = 5
LEASE_S = 1.0


@tether.tool
async def note(key: str) -> str:
    """A tool with a result worth keeping."""
    await anyio.sleep(0.02)
    return f"noted {key}: " + "x" * 200


def model(request: ModelRequest, ctx: ProviderContext) -> Reply:
    text = request.messages[0].text
    done = sum(1 for m in request.messages if m.role == "assistant")
    if done < ROUNDS:
        return Reply(tool_calls=[ToolCall(name="note", arguments={"key": f"{text}-{done}"})])
    return Reply(text=f"done {text}")


def agent() -> tether.Agent:
    return tether.Agent(
        name="filler",
        provider=ScriptedProvider(model),
        tools=[note],
        limits=tether.Limits(max_steps=ROUNDS + 2),
    )


async def main(path: str) -> None:
    """Print what each caller was told, and which runs' ``store_failed`` the Runtime said it
    could not record (its ``RuntimeWarning``: the test expects none)."""
    store = tether.SQLiteRunStore(path, poll_s=0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with tether.Runtime(store=store, lease_s=LEASE_S) as rt:
            handles = [rt.start(agent(), f"q{i}", run_id=f"disk-{i}") for i in range(RUNS)]
            results = [await h.result() for h in handles]
    unrecorded = [
        found.group(1)
        for w in caught
        if (
            found := re.match(
                r"run (\S+) ended store_failed and the run store could not", str(w.message)
            )
        )
    ]
    told = {r.run_id: r.termination.value for r in results}
    print(json.dumps({"told": told, "unrecorded": unrecorded}), flush=True)


if __name__ == "__main__":
    db, limit, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    faulthandler.dump_traceback_later(float(sys.argv[4]) if len(sys.argv) > 4 else 120, exit=True)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    anyio.run(main, db, backend=backend)
