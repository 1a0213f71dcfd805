"""ModelSettings: validation, merge rules, checks at start, and the max_tokens clamp."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import pytest

import tether
from tether import events as ev
from tether.providers import (
    AnthropicProvider,
    ModelRequest,
    ModelSettings,
    OpenAIProvider,
    ProviderContext,
    Reply,
    ScriptedProvider,
    StreamItem,
    ToolCall,
)

from .helpers import add, assert_consistent, of


def scripted(*replies: Reply) -> ScriptedProvider:
    return ScriptedProvider(list(replies) or [Reply(text="ok")], record=True)


def sent(provider: ScriptedProvider) -> list[ModelRequest]:
    return [request for _, request in provider.requests]


# ------------------------------------------------------------------ construction


@pytest.mark.parametrize(
    ("fields", "error", "words"),
    [
        ({"temperature": 2.5}, ValueError, "temperature must be in [0, 2]"),
        ({"temperature": -0.1}, ValueError, "temperature"),
        ({"temperature": math.nan}, ValueError, "temperature"),
        ({"temperature": "hot"}, TypeError, "temperature must be a number"),
        ({"temperature": True}, TypeError, "temperature must be a number"),
        ({"top_p": 1.5}, ValueError, "top_p must be in [0, 1]"),
        ({"max_tokens": 0}, ValueError, "max_tokens must be >= 1"),
        ({"max_tokens": 2.5}, TypeError, "max_tokens must be an int"),
        ({"stop_sequences": "END"}, TypeError, "wrap a single one"),
        ({"stop_sequences": ["END", ""]}, ValueError, "non-empty strings"),
        ({"tool_choice": "any tool please"}, ValueError, "'auto', 'required', 'none'"),
        ({"tool_choice": 3}, TypeError, "tool_choice"),
        ({"parallel_tool_calls": "no"}, TypeError, "parallel_tool_calls must be a bool"),
        ({"seed": 1.0}, TypeError, "seed must be an int"),
        ({"seed": False}, TypeError, "seed must be an int"),
        ({"metadata": {"user_id": 5}}, TypeError, "metadata must map str to str"),
        ({"extra_headers": {"bad header": "x"}}, ValueError, "not a valid header name"),
        ({"extra_headers": {"x-a": "line\r\nbreak"}}, ValueError, "printable ASCII"),
        ({"extra_body": {"f": object()}}, ValueError, "JSON-serializable"),
        ({"extra_body": ["top_k"]}, TypeError, "extra_body must be a dict"),
    ],
)
def test_bad_values_fail_at_construction(
    fields: dict[str, Any], error: type[Exception], words: str
) -> None:
    """A meaningless value is a TypeError/ValueError naming the field, when built."""
    with pytest.raises(error, match=words.replace("[", r"\[").replace("(", r"\(")):
        ModelSettings(**fields)


def test_header_names_are_lowered_and_values_kept_out_of_the_repr() -> None:
    """extra_headers merge case-insensitively; their values (maybe tokens) are not in the repr."""
    agent = ModelSettings(extra_headers={"X-Proxy-Token": "secret-1"})
    merged = agent.merge(ModelSettings(extra_headers={"x-proxy-token": "secret-2"}))
    assert merged.extra_headers == {"x-proxy-token": "secret-2"}
    assert "secret" not in repr(merged)
    assert "x-proxy-token" in repr(merged)
    with pytest.raises(ValueError, match="names one header twice"):
        ModelSettings(extra_headers={"X-A": "1", "x-a": "2"})


def test_unset_is_empty_and_set_fields_are_listed() -> None:
    """Every field defaults to unset; given() lists what is set."""
    assert ModelSettings().is_empty
    assert ModelSettings().given() == {}
    settings = ModelSettings(temperature=0.0, stop_sequences=["a"], parallel_tool_calls=False)
    assert settings.given() == {
        "temperature": 0.0,
        "stop_sequences": ("a",),
        "parallel_tool_calls": False,
    }


def test_merge_is_field_by_field_and_mappings_key_by_key() -> None:
    """The run's set fields win; unset ones keep the agent's; the dicts merge by key."""
    agent = ModelSettings(
        temperature=0.2,
        stop_sequences=["END"],
        metadata={"user_id": "a"},
        extra_headers={"x-a": "1", "x-both": "agent"},
        extra_body={"top_k": 3},
    )
    run = ModelSettings(temperature=0.0, seed=7, extra_headers={"x-b": "2", "x-both": "run"})
    assert agent.merge(run) == ModelSettings(
        temperature=0.0,
        stop_sequences=["END"],
        seed=7,
        metadata={"user_id": "a"},
        extra_headers={"x-a": "1", "x-b": "2", "x-both": "run"},
        extra_body={"top_k": 3},
    )
    assert agent.merge(None) is agent
    assert agent.merge(ModelSettings()) is agent
    assert ModelSettings().merge(run) is run


def test_the_agent_checks_its_own_settings_against_its_provider() -> None:
    """Agent(settings=...) fails when it is built, not at the first run."""
    with pytest.raises(ValueError, match=r"anthropic cannot honour ModelSettings\.seed"):
        tether.Agent(
            name="a",
            provider=AnthropicProvider("claude-x", api_key="k"),
            settings=ModelSettings(seed=1),
        )
    with pytest.raises(TypeError, match=r"Agent\.settings must be a tether\.ModelSettings"):
        tether.Agent(name="a", provider=scripted(), settings={"temperature": 1})  # type: ignore[arg-type]


# ------------------------------------------------------------------ checks at start


class Unsure:
    """A provider that does not say which settings it honours."""

    name = "unsure"
    model = "m"
    backoff = tether.providers.Backoff()

    async def stream(
        self, request: ModelRequest, ctx: ProviderContext
    ) -> AsyncIterator[StreamItem]:
        yield tether.providers.ModelResponse(
            content=(), stop_reason=tether.providers.StopReason.END_TURN
        )

    def price(self) -> None:
        return None

    def gate_key(self) -> None:
        return None


ANTHROPIC = AnthropicProvider("claude-x", api_key="k")
OPENAI = OpenAIProvider("gpt-x", api_key="k")


@pytest.mark.parametrize(
    ("provider", "tools", "settings", "words"),
    [
        (ANTHROPIC, [], ModelSettings(seed=7), r"anthropic cannot honour ModelSettings\.seed"),
        (ANTHROPIC, [], ModelSettings(temperature=1.5), r"temperature must be in \[0, 1\]"),
        (ANTHROPIC, [], ModelSettings(metadata={"team": "x"}), "takes only 'user_id', got team"),
        (
            OPENAI,
            [],
            ModelSettings(metadata={"user_id": "u"}),
            r"cannot honour ModelSettings\.metadata",
        ),
        (OPENAI, [], ModelSettings(stop_sequences=list("abcde")), "at most 4 stop sequences"),
        (
            ANTHROPIC,
            [],
            ModelSettings(extra_body={"max_tokens": 9}),
            "may not replace 'max_tokens'",
        ),
        (OPENAI, [], ModelSettings(extra_body={"stream": False}), "may not replace 'stream'"),
        (ANTHROPIC, [], ModelSettings(extra_headers={"X-Api-Key": "other"}), "'x-api-key'"),
        (OPENAI, [], ModelSettings(extra_headers={"AUTHORIZATION": "Bearer x"}), "api_key="),
        (Unsure(), [], ModelSettings(temperature=0.1), "does not say which ModelSettings"),
        (OPENAI, [add], ModelSettings(tool_choice="mul"), "names no tool of agent 'a'.*add"),
        (OPENAI, [], ModelSettings(tool_choice="required"), "needs a tool, and agent 'a' has none"),
        (OPENAI, [], ModelSettings(tool_choice="add"), "needs a tool"),
    ],
)
@pytest.mark.anyio
async def test_a_setting_the_run_cannot_honour_fails_at_start(
    provider: Any, tools: list[Any], settings: ModelSettings, words: str
) -> None:
    """rt.start raises ValueError for what the provider (or the agent) cannot honour."""
    agent = tether.Agent(name="a", provider=provider, tools=tools)
    async with tether.Runtime() as rt:
        with pytest.raises(ValueError, match=words):
            rt.start(agent, "q", settings=settings)
        assert rt.running == 0


@pytest.mark.anyio
async def test_tool_choice_cannot_name_a_tool_discovery_hides() -> None:
    """With discovery on, the model sees only search_tools at first: forcing a tool fails."""
    agent = tether.Agent(name="a", provider=scripted(), tools=[add], discovery="first")
    async with tether.Runtime() as rt:
        with pytest.raises(ValueError, match="discovery='off'"):
            rt.start(agent, "q", settings=ModelSettings(tool_choice="add"))
        with pytest.raises(TypeError, match=r"settings= must be a tether\.ModelSettings"):
            rt.start(agent, "q", settings={"seed": 1})  # type: ignore[arg-type]
        result = await rt.run(agent, "q", settings=ModelSettings(tool_choice="required"))
    assert result.termination == "answered"


# ------------------------------------------------------------------ through a run


@pytest.mark.anyio
async def test_the_provider_gets_the_merged_settings_on_every_request() -> None:
    """The scripted provider records each request's settings: the agent's, merged with the run's."""
    provider = scripted(
        Reply(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]), Reply(text="3")
    )
    agent = tether.Agent(
        name="a",
        provider=provider,
        tools=[add],
        settings=ModelSettings(temperature=0.2, tool_choice="auto", extra_body={"k": 1}),
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q", settings=ModelSettings(seed=3, extra_body={"j": 2}))
    assert_consistent(result)
    expected = ModelSettings(
        temperature=0.2, tool_choice="auto", seed=3, extra_body={"k": 1, "j": 2}
    )
    assert [r.settings for r in sent(provider)] == [expected, expected]


@pytest.mark.anyio
async def test_a_run_without_settings_sends_none() -> None:
    """No settings anywhere: the request carries none, and max_tokens stays unclamped."""
    provider = scripted()
    async with tether.Runtime() as rt:
        await rt.run(tether.Agent(name="a", provider=provider), "q")
    (request,) = sent(provider)
    assert request.settings is None
    assert request.max_tokens is None


@pytest.mark.parametrize(
    ("budget", "asked", "expected"),
    [
        (None, 50, 50),  # no budget: the setting is sent as is
        (10_000, 50, 50),  # the budget allows more: the setting
        (30, 50, 30),  # the budget allows less: the clamp
        (None, None, None),
    ],
)
@pytest.mark.anyio
async def test_the_budget_clamp_still_bounds_max_tokens(
    budget: int | None, asked: int | None, expected: int | None
) -> None:
    """A call's max_tokens is the smaller of ModelSettings.max_tokens and what the budget allows."""
    provider = scripted(Reply(text="ok"))
    agent = tether.Agent(name="a", provider=provider, limits=tether.Limits(max_total_tokens=budget))
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q", settings=ModelSettings(max_tokens=asked))
    (request,) = sent(provider)
    (started,) = of(result.events, ev.ModelCallStarted)
    assert request.max_tokens == expected
    assert started.max_tokens == request.max_tokens
