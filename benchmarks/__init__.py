"""tether's benchmarks: ``python -m benchmarks [--backend ...] [--quick] [--only ...]``.

Every row pairs tether with a *bare loop* doing the identical work in the same
invocation: one coroutine per run that, for ``R`` rounds, awaits the "model"
(``anyio.sleep(L)``; at ``L == 0`` that is one checkpoint per round, so bare
runs started together really interleave, as tether's do), calls the async
tool ``add(a, b)`` and checks the final text. No channels, no events. B1 also
shows the bare loop without that checkpoint. (``ScriptedProvider`` itself
does not sleep at all when ``L == 0``.)

The workload: in rounds ``1..R-1`` the ``ScriptedProvider`` asks for one call
of ``add(a, b)``; in round ``R`` it answers with text. Every run is verified:
termination ``answered``, the final text, exactly ``R-1`` tool executions
(counted inside ``add``) with the right sums, a gap-free event trail ending in
one ``RunFinished``. Cancelled runs (B4, B5) must end ``cancelled``, and no
task may outlive its run. Verification failures make the exit status 1;
timings are never asserted, and the targets' pass/miss marks are
informational (they apply to the full sizes on asyncio; trio is reported
beside them).

- **B1** µs per round at L=0, R=10, one run at a time.
- **B2** rounds/s with 1,000 runs at once, L=0, R=5.
- **B3** wall time ÷ the ideal R·L for 5,000 and 20,000 runs at once at
  L=50 ms, R=5, with peak RSS and RSS per run.
- **B4** RSS per run with 10,000 and 100,000 runs parked in the model call
  (a provider that sleeps for ever), then every one cancelled.
- **B5** 1,000 parked runs cancelled from outside (``handle.cancel``): ms from
  the first cancel until every run has its ``RunFinished``, and leaked tasks
  (``anyio.get_running_tasks()`` before and after; must be 0). Its second row
  measures it as a peer benchmark does: each run awaited by a caller task (what
  ``Runtime.run`` does), the callers cancelled by one scope around them, timed
  until every run has its result; the bare side cancels bare callers alike.
- **B6** rounds/s with one deliberately slow ``handle.events()`` reader
  (it sleeps per event) against no reader.
- **B8** B1's workload and sizes, with every run read through
  ``handle.stream_text()`` against nobody streaming (the two alternate
  between repeats): what a streamed run costs, and that a run nobody streams
  pays nothing for deltas.
- **B7** rounds/s over a real wire: ``AnthropicProvider`` and
  ``OpenAIProvider`` streaming from a local SSE server
  (:mod:`benchmarks._sse_server`, a process of its own on 127.0.0.1), 1,000
  runs at once, R=3, against the same requests made with bare httpx +
  httpx-sse in the same process (:mod:`benchmarks._wire`): what tether costs
  over the HTTP floor. Both sides use the providers' pool limits.
- **B9** B2's workload and sizes with a ``SQLiteRunStore`` (a fresh file per
  repeat; every run recorded, checkpointed per round and finished in it)
  against no store, alternately: what durability costs.
- **B10** the same with a ``PostgresRunStore`` (``python -m benchmarks.durable_pg``
  in a child process; the server of ``TETHER_TEST_POSTGRES``).
- **IMPORT** ``import tether`` (with the backend) against ``import anyio``: the
  least cumulative ``-X importtime`` of several fresh interpreters.

Memory: *RSS now* is read from ``/proc/self/statm``; *peak RSS* is ``VmHWM``
from ``/proc/self/status``, reset to the RSS now (``/proc/self/clear_refs``)
just before the runs start, so it is the peak of the runs alone (elsewhere
than Linux, ``getrusage``'s ``ru_maxrss``; on Linux that one is unusable in a
child, which inherits its parent's peak across ``vfork`` + ``exec``). B3's
"RSS per run" is (peak RSS − RSS before the runs) ÷ runs; B4's is (RSS with
every run parked − RSS before they started) ÷ runs. B3 and B4 run every side
and size in a child process of its own (``python -m benchmarks._child``), so
one job's memory never shows in another's; B1, B2, B5 and B6 run in this
process.

``python -m benchmarks._profile [B1|B2] [--backend ...]`` runs B1's or B2's
workload under cProfile and prints the functions in µs per round.

Every Runtime here is created with ``provider_concurrency`` at least the number
of runs: the default gate (64 requests in flight per provider) is meant for a
real API and would otherwise be what B3 and B4 measure.
"""
