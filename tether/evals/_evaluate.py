"""``evaluate``: run an agent over a dataset, judge every answer, report."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any, cast

import anyio
import attrs

from tether import events as ev
from tether.providers import ProviderContext
from tether.runtime import (
    Agent,
    BudgetExhausted,
    Candidate,
    Limits,
    RunHandleLike,
    RunResult,
    Runtime,
    RuntimeLike,
)

from ._dataset import Case, Dataset
from ._judges import Evaluator, apply, check_judges
from ._report import CaseResult, EvalReport

#: ``on_result``: called (in the event loop; it must not block) with each result as it lands.
OnResult = Callable[[CaseResult], object]


class EvalControl:
    """Stops an eval in flight and keeps what it has: :meth:`stop` starts no more
    runs and cancels those in flight; :func:`evaluate` then returns a report with
    ``complete=False``, the cancelled runs as ``stopped`` and the rest ``skipped``.

    Safe to call from a signal watcher (the CLI's Ctrl-C) or an ``on_result`` callback.
    """

    def __init__(self) -> None:
        self.reason: str | None = None
        self._handles: set[RunHandleLike[Any]] = set()

    @property
    def stopped(self) -> bool:
        return self.reason is not None

    def stop(self, reason: str = "stopped") -> None:
        """Stop the eval (the first reason given is kept)."""
        self.halt(reason)
        for handle in list(self._handles):
            handle.cancel(f"eval stopped: {reason}")

    def halt(self, reason: str) -> None:
        """Start no more runs, and let those in flight finish (a spent budget)."""
        if self.reason is None:
            self.reason = reason


def _jsonable(value: Any) -> Any:
    """A typed output as JSON data (pydantic, attrs, dataclasses), or its ``repr``."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if hasattr(value, "model_dump"):
        try:
            return value.model_dump(mode="json")
        except Exception:
            return repr(value)
    if attrs.has(type(value)):
        value = attrs.asdict(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    try:
        return json.loads(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        return repr(value)


def _as_dataset(dataset: Dataset | Sequence[Case] | str | Path) -> Dataset:
    if isinstance(dataset, Dataset):
        return dataset
    if isinstance(dataset, str | Path):
        return Dataset.load(dataset)
    if isinstance(dataset, Sequence):
        # (mypy keeps ``str`` in the union here: a str is a Sequence too)
        return Dataset(cast("Sequence[Case]", dataset))
    raise TypeError(f"dataset must be a Dataset, a list of Case or a path, got {dataset!r}")


def _check_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"evaluate({name}=...) must be an int >= 1, got {value!r}")


@asynccontextmanager
async def _runtime(
    runtime: RuntimeLike | None, limits: Limits | None
) -> AsyncIterator[RuntimeLike]:
    if runtime is not None:
        yield runtime
        return
    async with Runtime(limits=limits) as rt:
        yield rt


async def evaluate(
    agent: Agent[Any, Any],
    dataset: Dataset | Sequence[Case] | str | Path,
    *,
    judges: Sequence[Evaluator] | Mapping[str, Evaluator] = (),
    concurrency: int = 8,
    repeat: int = 1,
    limits: Limits | None = None,
    runtime: RuntimeLike | None = None,
    deps: Any = None,
    on_result: OnResult | None = None,
    control: EvalControl | None = None,
) -> EvalReport:
    """Run ``agent`` on every case of ``dataset`` ``repeat`` times, ``concurrency`` runs
    at a time, judge each answer with every judge, and return the :class:`EvalReport`.

    ``judges`` are evaluators (a list, or a dict naming them): any ``tether.Judge``
    (``RuleJudge``, ``LLMJudge``: it sees the answer and the case's input as the
    question) and the expected-aware ones (:class:`ExactMatch`, :class:`Contains`,
    :class:`JsonEqual`, :class:`LLMRubric`). A result passes when its run ended
    ``answered`` or ``terminal_tool``, the agent's own judge (if any) passed it, and
    every evaluator did; without evaluators the run's ending decides.

    ``limits`` bounds the whole eval: its ``max_total_tokens`` and ``max_cost_usd``
    become the Runtime-wide budget of the Runtime the eval makes (``Runtime(limits=...)``)
    and also count the evaluators' own calls; once spent, no case starts (the rest are
    ``skipped``) and the runs in flight end at their ceiling. Each run's own limits are
    the agent's. Pass ``runtime`` to run on a Runtime of yours instead (its own budget,
    if any, applies; ``limits`` is then refused).

    ``deps`` is every run's ``deps`` (what its tools, policies and judges read as
    ``ctx.deps``). A case's input is text: ``Case.input`` is a ``str``.

    ``on_result`` is called with each :class:`CaseResult` as it lands (a progress bar,
    :class:`tether.otel.OtelEvalRecorder`). If it has a ``case_context(case_id, repeat)``
    method, each case (its run and its judging) runs inside the context manager that
    returns, in the worker's task: the run starts there, so it inherits its context
    (``contextvars``; an OpenTelemetry span made current there is the run's parent).

    ``control`` (an :class:`EvalControl`) stops the eval early, keeping the results so far.
    """
    data = _as_dataset(dataset)
    if not isinstance(agent, Agent):
        raise TypeError(f"evaluate() takes a tether.Agent, got {type(agent).__name__}")
    _check_int("concurrency", concurrency)
    _check_int("repeat", repeat)
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError(f"evaluate(limits=...) must be a tether.Limits, got {limits!r}")
    if runtime is not None and limits is not None:
        raise ValueError(
            "evaluate() takes limits or a runtime, not both: the runtime's own budget applies"
        )
    named = check_judges(judges)
    control = control if control is not None else EvalControl()
    work = [(case, k) for case in data.cases for k in range(repeat)]
    results: dict[tuple[str, int], CaseResult] = {}
    started_at = time.time()
    state = _Spend(limits)
    async with _runtime(runtime, limits) as rt:

        def record(result: CaseResult) -> None:
            results[(result.case_id, result.repeat)] = result
            state.add(result)
            if on_result is not None:
                on_result(result)

        items = iter(work)
        # An observer that wants each case in a context of its own (OtelEvalRecorder: a
        # span, current while the case runs, so the run's own span is its child).
        opener: Callable[[str, int], AbstractContextManager[object]] | None = getattr(
            on_result, "case_context", None
        )

        async def worker() -> None:
            for case, k in items:
                if not control.stopped and (reason := state.spent()) is not None:
                    control.halt(reason)
                if control.stopped:
                    record(_skipped(case, k, control.reason))
                    continue
                with opener(case.id or "", k) if opener is not None else nullcontext():
                    await _one(rt, agent, case, k, named, deps, control, record)

        async with anyio.create_task_group() as tg:
            for _ in range(min(concurrency, len(work))):
                tg.start_soon(worker)
    ordered = tuple(results[(case.id or "", k)] for case, k in work)
    return EvalReport(
        dataset=data.name,
        agent=agent.name,
        results=ordered,
        judges=tuple(named),
        repeat=repeat,
        concurrency=concurrency,
        started_at=started_at,
        finished_at=time.time(),
        complete=not control.stopped,
        stopped=control.reason,
    )


@attrs.define
class _Spend:
    """The eval's spend so far (runs and evaluators) against ``limits``."""

    limits: Limits | None
    tokens: int = 0
    cost_usd: float = 0.0

    def add(self, result: CaseResult) -> None:
        self.tokens += result.tokens
        self.cost_usd += result.cost_usd or 0.0

    def spent(self) -> str | None:
        limits = self.limits
        if limits is None:
            return None
        if limits.max_total_tokens is not None and self.tokens >= limits.max_total_tokens:
            return f"the eval's token budget is spent ({self.tokens} of {limits.max_total_tokens})"
        if limits.max_cost_usd is not None and self.cost_usd >= limits.max_cost_usd:
            return (
                f"the eval's cost budget is spent (${self.cost_usd:.6f} of "
                f"${limits.max_cost_usd:.6f})"
            )
        return None


def _base(case: Case, k: int) -> dict[str, Any]:
    return {
        "case_id": case.id or "",
        "repeat": k,
        "input": case.input,
        "expected": case.expected,
        "metadata": dict(case.metadata),
    }


def _skipped(case: Case, k: int, why: str | None) -> CaseResult:
    return CaseResult(**_base(case, k), status="skipped", note=why)


async def _one(
    rt: RuntimeLike,
    agent: Agent[Any, Any],
    case: Case,
    k: int,
    judges: dict[str, Any],
    deps: Any,
    control: EvalControl,
    record: Callable[[CaseResult], None],
) -> None:
    t0 = anyio.current_time()
    try:
        handle = rt.start(agent, case.input, deps=deps)
    except BudgetExhausted as exc:
        control.halt(str(exc))
        record(_skipped(case, k, str(exc)))
        return
    control._handles.add(handle)  # a stop cancels it
    try:
        result: RunResult[Any] = await handle.result()
    finally:
        control._handles.discard(handle)
    latency = anyio.current_time() - t0
    common = {
        **_base(case, k),
        "output": _jsonable(result.output),
        "termination": result.termination.value,
        "error": result.error,
        "run_passed": result.passed,
        "usage": result.usage,
        "latency_s": latency,
        "run_id": result.run_id,
        "summary": result.summary(),
    }
    if control.stopped and result.termination.value == "cancelled":
        record(CaseResult(**common, status="stopped", note=control.reason))
        return
    if (ceiling := _runtime_ceiling(result)) is not None:
        # The eval's budget ended it, not the agent: it does not count as a failure.
        note = f"ended by the Runtime-wide budget ({ceiling})"
        record(CaseResult(**common, status="stopped", note=note))
        return
    judgements: dict[str, Any] = {}
    tokens_in = tokens_out = 0
    cost: float | None = 0.0
    if result.output is not None:
        candidate = Candidate(
            text=_text(result),
            question=case.input,
            round=result.usage.steps,
            output=result.output,
        )
        for i, (name, judge) in enumerate(judges.items()):
            ctx = ProviderContext(run_id=f"eval-{result.run_id}", call_index=2 * i)
            verdict = await apply(judge, candidate, case, ctx)
            judgements[name] = verdict.judgement
            if verdict.usage is not None:
                tokens_in += verdict.usage.input_tokens
                tokens_out += verdict.usage.output_tokens
                cost = None if cost is None or verdict.cost_usd is None else cost + verdict.cost_usd
    passed = (
        result.termination.ok
        and result.passed is not False
        and all(j.passed for j in judgements.values())
    )
    record(
        CaseResult(
            **common,
            judgements=judgements,
            passed=passed,
            judge_input_tokens=tokens_in,
            judge_output_tokens=tokens_out,
            judge_cost_usd=cost,
        )
    )


def _runtime_ceiling(result: RunResult[Any]) -> str | None:
    """The Runtime-wide ceiling (``runtime.max_total_tokens``...) that ended the run, if one did."""
    if result.termination.ok:
        return None
    for event in reversed(result.events):
        if isinstance(event, ev.CeilingHit) and event.ceiling.startswith("runtime."):
            return event.ceiling
    return None


def _text(result: RunResult[Any]) -> str:
    output = result.output
    if isinstance(output, str):
        return output
    return json.dumps(_jsonable(output), ensure_ascii=False)
