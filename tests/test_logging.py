"""The ``tether`` logger: one INFO line per run end, WARNING for what was handled (retries,
fallbacks, store faults, sinks dropped), ``run_id`` in ``extra``; silent by default; never a
key or a message's content."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
import tether.runtime._run as run_module
from tether.events import Event
from tether.providers import (
    Backoff,
    FallbackProvider,
    Fault,
    Price,
    RateLimited,
    Reply,
    ScriptedProvider,
)

from .providers import openai_wire as oai
from .providers.fakes import SECRET, Answer, fake_server, json_answer
from .test_durable import agent as durable_agent
from .test_store_faults import LEASE_S, flaky

pytestmark = pytest.mark.anyio

FAST = Backoff(initial=0.001, cap=0.01, jitter=False)


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tether" and r.levelno == level]


def test_the_logger_is_silent_by_default() -> None:
    """A NullHandler on 'tether': no 'No handlers could be found' and no lastResort output."""
    logger = logging.getLogger("tether")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)


async def test_one_info_line_per_run_end_with_its_figures(caplog: pytest.LogCaptureFixture) -> None:
    """Each run's end is one INFO record: run id, agent, termination, tokens, cost, duration."""
    caplog.set_level(logging.INFO, logger="tether")
    provider = ScriptedProvider(
        [Reply(text="one"), Reply(text="two")], cost_per_mtok=Price(input=1.0, output=2.0)
    )
    agent = tether.Agent(name="logged", provider=provider)
    async with tether.Runtime() as rt:
        first = await rt.run(agent, "q1")
        second = await rt.run(agent, "q2")
    ended = records(caplog, logging.INFO)
    assert [r.run_id for r in ended] == [first.run_id, second.run_id]  # type: ignore[attr-defined]
    for record, result in zip(ended, (first, second), strict=True):
        fields: dict[str, Any] = record.__dict__
        assert fields["agent"] == "logged"
        assert fields["termination"] == "answered"
        assert fields["input_tokens"] == result.usage.input_tokens
        assert fields["output_tokens"] == result.usage.output_tokens
        assert fields["cost_usd"] == result.usage.cost_usd is not None
        assert fields["duration_s"] >= 0
        text = record.getMessage()
        assert result.run_id in text
        assert "'logged' ended answered" in text
        assert f"{result.usage.input_tokens} input + {result.usage.output_tokens} output" in text


async def test_the_info_line_is_not_built_when_info_is_off(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With INFO off, a run's end builds no record (the level is checked first)."""
    built: list[str] = []
    monkeypatch.setattr(run_module, "run_ended", lambda result, *a: built.append(result.run_id))
    agent = tether.Agent(name="quiet", provider="scripted:ok")
    caplog.set_level(logging.WARNING, logger="tether")
    async with tether.Runtime() as rt:
        await rt.run(agent, "q")
    assert built == []
    caplog.set_level(logging.INFO, logger="tether")
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert built == [result.run_id]


async def test_a_provider_retry_and_a_fallback_are_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each retry is a WARNING, and so is the switch to the next provider of a chain."""
    caplog.set_level(logging.INFO, logger="tether")
    limited = Fault(error=RateLimited("scripted: rate limited (429)"))
    primary = ScriptedProvider([limited, limited, limited], backoff=FAST, model="first")
    backup = ScriptedProvider([Reply(text="ok")], model="second")
    agent = tether.Agent(name="a", provider=FallbackProvider([primary, backup]))
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert result.output == "ok"
    warned = records(caplog, logging.WARNING)
    retries = [r for r in warned if "retrying" in r.getMessage()]
    fallbacks = [r for r in warned if "falling back" in r.getMessage()]
    assert len(retries) == 2  # attempts 1 and 2 of 3 were retried
    assert len(fallbacks) == 1
    assert "scripted:first failed (rate_limited), falling back to scripted:second" in (
        fallbacks[0].getMessage()
    )
    assert {r.run_id for r in warned} == {result.run_id}  # type: ignore[attr-defined]
    assert {r.error_type for r in warned} == {"rate_limited"}  # type: ignore[attr-defined]


async def test_a_store_fault_is_a_warning_naming_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run store write lost once is retried, and the log says so once, for that run."""
    caplog.set_level(logging.WARNING, logger="tether")
    store = flaky(tmp_path)
    store.plan["commit"] = ["before"]
    async with tether.Runtime(store=store, lease_s=LEASE_S) as rt:
        with anyio.fail_after(20):
            result = await rt.run(durable_agent(), "a")
    assert result.termination is tether.Termination.ANSWERED
    [fault] = records(caplog, logging.WARNING)
    assert fault.run_id == result.run_id  # type: ignore[attr-defined]
    assert "run store fault, trying again: RunStoreUnavailable" in fault.getMessage()


@pytest.mark.filterwarnings("ignore:tether. event sink:RuntimeWarning")
async def test_a_failing_sink_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A sink that raises is dropped with one WARNING (its type, not its message)."""
    caplog.set_level(logging.WARNING, logger="tether")

    def sink(event: Event) -> None:
        raise ValueError(f"cannot take {event!r}")

    async with tether.Runtime(event_sink=sink) as rt:
        result = await rt.run(tether.Agent(name="a", provider="scripted:the answer"), "the input")
    [dropped] = records(caplog, logging.WARNING)
    assert dropped.run_id == result.run_id  # type: ignore[attr-defined]
    assert "raised ValueError; skipped from now on" in dropped.getMessage()
    assert "the input" not in dropped.getMessage()


async def test_no_key_or_content_reaches_a_log_record(caplog: pytest.LogCaptureFixture) -> None:
    """Over a real socket, with retries: no record of 'tether' shows the key, the input,
    the instructions, the answer or a server's error body."""
    caplog.set_level(logging.DEBUG, logger="tether")
    busy = json_answer(
        {"error": {"message": f"busy, key {SECRET}", "type": "overloaded"}}, status=503
    )
    answer: Answer = oai.reply(stream=True, text=("the secret ", "answer"))
    async with fake_server(busy, answer) as server:
        provider = oai.provider(server.url, backoff=FAST)
        agent = tether.Agent(
            name="a", provider=provider, instructions=lambda ctx: "the secret instructions"
        )
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "the secret input")
    assert result.output == "the secret answer"
    mine = [r for r in caplog.records if r.name == "tether"]
    assert {r.levelno for r in mine} == {logging.WARNING, logging.INFO}
    for record in mine:
        text = record.getMessage() + repr(record.__dict__)
        assert SECRET not in text
        for content in ("the secret input", "the secret instructions", "the secret answer"):
            assert content not in text
