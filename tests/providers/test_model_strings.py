"""Model strings (``provider="openai:gpt-4.1-mini"``), and configuration that fails fast:
a missing key raises at ``rt.start()``, a transport error names the URL it tried."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

import tether
from tether.providers import (
    AnthropicProvider,
    AuthenticationFailed,
    Backoff,
    FallbackProvider,
    GeminiProvider,
    OpenAIProvider,
    OpenAIResponsesProvider,
    ScriptedProvider,
    infer_provider,
)
from tether.providers._infer import PREFIXES

from ..helpers import assert_consistent
from . import openai_wire as oai
from .fakes import SECRET, closed_port, fake_server

pytestmark = pytest.mark.anyio

FAST = Backoff(initial=0.001, cap=0.01, jitter=False)


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)


# ----------------------------------------------------------------- model strings


@pytest.mark.parametrize(
    ("text", "cls", "model", "env"),
    [
        (
            "anthropic:claude-sonnet-4-5",
            AnthropicProvider,
            "claude-sonnet-4-5",
            "ANTHROPIC_API_KEY",
        ),
        ("openai:gpt-4.1-mini", OpenAIProvider, "gpt-4.1-mini", "OPENAI_API_KEY"),
        ("OpenAI: gpt-4.1-mini ", OpenAIProvider, "gpt-4.1-mini", "OPENAI_API_KEY"),
        (
            "openai-responses:gpt-5-mini",
            OpenAIResponsesProvider,
            "gpt-5-mini",
            "OPENAI_API_KEY",
        ),
        ("gemini:gemini-2.5-flash", GeminiProvider, "gemini-2.5-flash", "GEMINI_API_KEY"),
        ("gemini:gemini-2.5-flash", GeminiProvider, "gemini-2.5-flash", "GOOGLE_API_KEY"),
    ],
)
def test_a_model_string_makes_the_vendor_provider_with_the_environment_key(
    monkeypatch: pytest.MonkeyPatch, text: str, cls: type[Any], model: str, env: str
) -> None:
    """Agent(provider="vendor:model") holds that vendor's provider, its key from the env."""
    monkeypatch.setenv(env, SECRET)
    agent = tether.Agent(name="a", provider=text)
    assert type(agent.provider) is cls
    assert agent.provider.model == model
    assert agent.provider.api_key == SECRET
    assert SECRET not in repr(agent)
    assert type(infer_provider(text)) is cls


async def test_a_scripted_model_string_answers_with_its_text() -> None:
    """ "scripted:<text>" is an offline provider answering every request with <text>."""
    agent = tether.Agent(name="a", provider="scripted:Paris, of course")
    assert isinstance(agent.provider, ScriptedProvider)
    async with tether.Runtime() as rt:
        first = await rt.run(agent, "The capital of France?")
        second = await rt.run(agent, "And again?")
    for result in (first, second):
        assert_consistent(result)
        assert result.termination is tether.Termination.ANSWERED
        assert result.output == "Paris, of course"


async def test_a_model_string_run_against_a_fake_openai_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The provider a model string makes speaks the wire (here, to a local server)."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    made = infer_provider(f"openai:{oai.MODEL}")
    assert isinstance(made, OpenAIProvider)
    async with fake_server(oai.reply(stream=True, text=("hel", "lo"))) as server:
        local = attrs.evolve(made, base_url=f"{server.url}/v1", backoff=FAST)
        async with tether.Runtime() as rt:
            result = await rt.run(tether.Agent(name="a", provider=local), "hi")
    assert result.output == "hello"
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert server.requests[0].json()["model"] == oai.MODEL


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("gpt-4.1-mini", "has no provider prefix"),
        ("mistral:large", "unknown provider prefix 'mistral:'"),
        ("openai:", "a model name must follow 'openai:'"),
        ("scripted:", "the reply text must follow 'scripted:'"),
    ],
)
def test_a_bad_model_string_is_a_value_error_listing_the_known_prefixes(
    text: str, words: str
) -> None:
    """No prefix, an unknown one, or nothing after it: a ValueError saying so."""
    for make in (infer_provider, lambda s: tether.Agent(name="a", provider=s)):
        with pytest.raises(ValueError, match="model string") as caught:
            make(text)
        assert words in str(caught.value)
    if "prefix" in words:
        known = ", ".join(f"'{p}:'" for p in sorted(PREFIXES))
        assert f"(known prefixes: {known})" in str(caught.value)
        assert known == ("'anthropic:', 'gemini:', 'openai:', 'openai-responses:', 'scripted:'")


def test_infer_provider_refuses_what_is_not_a_string() -> None:
    """A non-str is a TypeError; an Agent given one still names the Provider protocol."""
    with pytest.raises(TypeError, match="takes a model string, got int"):
        infer_provider(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Provider protocol"):
        tether.Agent(name="a", provider=3)  # type: ignore[arg-type]


# ------------------------------------------------------------------- fail fast


@pytest.mark.usefixtures("no_keys")
@pytest.mark.parametrize(
    ("provider", "env"),
    [
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("openai:gpt-4.1-mini", "OPENAI_API_KEY"),
        ("openai-responses:gpt-5-mini", "OPENAI_API_KEY"),
        ("gemini:gemini-2.5-flash", "GEMINI_API_KEY"),
    ],
)
async def test_a_missing_key_raises_at_start_before_a_run_exists(provider: str, env: str) -> None:
    """rt.start() and rt.run() raise AuthenticationFailed with the provider's message; no run."""
    agent = tether.Agent(name="a", provider=provider)
    async with tether.Runtime() as rt:
        with pytest.raises(AuthenticationFailed, match=f"no API key: pass api_key= or set {env}"):
            rt.start(agent, "hi")
        with pytest.raises(AuthenticationFailed, match=env):
            await rt.run(agent, "hi")
        assert rt.running == 0


@pytest.mark.usefixtures("no_keys")
async def test_a_fallback_chain_with_a_keyless_provider_raises_at_start() -> None:
    """A chain member without a key is a configuration error too (it would not fall through)."""
    chain = FallbackProvider([ScriptedProvider(script=[]), AnthropicProvider("claude-sonnet-4-5")])
    async with tether.Runtime() as rt:
        with pytest.raises(AuthenticationFailed, match="ANTHROPIC_API_KEY"):
            rt.start(tether.Agent(name="a", provider=chain), "hi")
        assert rt.running == 0


@pytest.mark.usefixtures("no_keys")
async def test_a_keyless_local_server_still_starts() -> None:
    """An OpenAI-compatible local server needs no key: the run starts and is answered."""
    async with fake_server(oai.reply(stream=True, text=("ok",))) as server:
        provider = OpenAIProvider("local", base_url=f"{server.url}/v1", backoff=FAST)
        async with tether.Runtime() as rt:
            result = await rt.run(tether.Agent(name="a", provider=provider), "hi")
    assert result.output == "ok"
    assert "authorization" not in server.requests[0].headers


async def test_a_key_no_header_can_carry_raises_at_start_without_echoing_it() -> None:
    """A key with a newline inside fails at start, and the message does not show it."""
    bad = "sk-abc\ndef-SECRET"
    agent = tether.Agent(name="a", provider=AnthropicProvider("claude-sonnet-4-5", api_key=bad))
    async with tether.Runtime() as rt:
        with pytest.raises(AuthenticationFailed, match="not allowed in an HTTP header") as caught:
            rt.start(agent, "hi")
    assert "SECRET" not in str(caught.value)


async def test_a_closed_port_fails_naming_the_url_without_credentials() -> None:
    """A server that is down: the error names scheme://host:port/path, no user or password."""
    port = await closed_port()
    provider = OpenAIProvider(
        "local", base_url=f"http://me:{SECRET}@127.0.0.1:{port}/v1", api_key=SECRET, backoff=FAST
    )
    async with tether.Runtime() as rt:
        result = await rt.run(tether.Agent(name="a", provider=provider), "hi")
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert result.error is not None
    assert f"POST http://127.0.0.1:{port}/v1/chat/completions" in result.error
    assert SECRET not in result.error
    assert "me:" not in result.error
    retries = [e for e in result.events if isinstance(e, tether.events.ProviderRetry)]
    assert retries
    assert all(f"127.0.0.1:{port}" in e.message for e in retries)
