"""The fake Responses server checked against the official ``openai`` SDK.

The SDK talks to the fake over a real socket and parses what it serves, whole
and streamed (its raw events, and its stream helper that rebuilds the response
from the events and checks their order); tether parses the same bytes to the
same answer. Needs the ``openai`` package (the dev extra): in .ci/run's
core_ignores.
"""

from __future__ import annotations

from typing import Any

import pytest

openai = pytest.importorskip("openai")

from openai.types.responses import (  # noqa: E402
    Response,
    ResponseCompletedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseReasoningSummaryTextDeltaEvent,
    ResponseTextDeltaEvent,
)

from tether.providers import Reasoning, StopReason, ToolUseBlock  # noqa: E402

from .fakes import REQUEST, SECRET, collect, fake_server, final, json_answer  # noqa: E402
from .responses_wire import (  # noqa: E402
    MODEL,
    error_body,
    function_call,
    message,
    provider,
    reasoning,
    reply,
)

pytestmark = pytest.mark.anyio

OUTPUT = [
    reasoning("rs_1", ["Adding.", "Then answering."], "ENC-1"),
    function_call("call_1", "add", '{"a": 1, "b": 2}'),
]


def client(url: str) -> Any:
    return openai.AsyncOpenAI(api_key=SECRET, base_url=f"{url}/v1", max_retries=0)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_the_sdk_and_tether_read_the_same_answer(stream: bool) -> None:
    """Reasoning, a call and text: the SDK's objects and tether's blocks agree."""
    answer = reply(stream, text="It is 3.", output=OUTPUT)
    async with fake_server(answer, answer) as server:
        sdk = client(server.url)
        if stream:
            async with sdk.responses.stream(model=MODEL, input="1 + 2?") as events:
                seen = [e async for e in events]
                got = await events.get_final_response()
        else:
            got = await sdk.responses.create(model=MODEL, input="1 + 2?")
        await sdk.close()
        ours = final(await collect(provider(server.url, stream=stream), REQUEST))
    assert isinstance(got, Response)
    assert got.status == "completed"
    assert got.output_text == ours.text == "It is 3."
    item, call = got.output[0], got.output[1]
    assert item.type == "reasoning"
    assert item.encrypted_content == "ENC-1"
    assert [s.text for s in item.summary] == [b.text for b in ours.reasoning]
    assert ours.reasoning[0] == Reasoning(
        text="Adding.", signature="ENC-1", provider="openai-responses", id=item.id
    )
    assert call.type == "function_call"
    assert ours.tool_calls == (
        ToolUseBlock(id=call.call_id, name=call.name, input={"a": 1, "b": 2}),
    )
    assert ours.stop_reason is StopReason.TOOL_USE
    usage = got.usage
    assert usage is not None
    assert usage.output_tokens_details.reasoning_tokens == ours.usage.reasoning_tokens == 5
    assert usage.input_tokens_details.cached_tokens == ours.usage.cache_read_tokens == 10
    assert usage.input_tokens == ours.usage.prompt_tokens
    if stream:
        kinds = {e.type for e in seen}
        assert {
            "response.output_text.delta",
            "response.function_call_arguments.delta",
            "response.reasoning_summary_text.delta",
            "response.completed",
        } <= kinds


async def test_the_sdk_reads_every_raw_event_as_a_known_type() -> None:
    """Every event the fake streams is one the SDK knows (none falls back to a bare model)."""
    answer = reply(True, text="Hi.", output=OUTPUT)
    async with fake_server(answer) as server:
        sdk = client(server.url)
        stream = await sdk.responses.create(model=MODEL, input="q", stream=True)
        events = [e async for e in stream]
        await sdk.close()
    assert events
    known = {
        ResponseTextDeltaEvent,
        ResponseFunctionCallArgumentsDeltaEvent,
        ResponseReasoningSummaryTextDeltaEvent,
        ResponseCompletedEvent,
    }
    assert known <= {type(e) for e in events}
    for event in events:
        assert type(event).__module__.startswith("openai.types.responses."), type(event)
        assert type(event).model_fields["type"].annotation is not str


async def test_the_sdk_reads_the_fakes_error_body() -> None:
    """The fake's 429 body is what the SDK turns into its RateLimitError, code and all."""
    limited = json_answer(
        error_body("Rate limit reached", "requests", "rate_limit_exceeded"), status=429
    )
    async with fake_server(limited) as server:
        sdk = client(server.url)
        with pytest.raises(openai.RateLimitError) as caught:
            await sdk.responses.create(model=MODEL, input="q")
        await sdk.close()
    assert caught.value.code == "rate_limit_exceeded"
    assert "Rate limit reached" in str(caught.value)


async def test_a_refusal_and_an_incomplete_answer_parse_alike() -> None:
    """A refusal part and an incomplete response mean the same to the SDK and to tether."""
    refused = reply(False, text="", output=[message("", refusal="No.")])
    cut = reply(False, text=("Par",), status="incomplete", incomplete="max_output_tokens")
    async with fake_server(refused, cut, refused, cut) as server:
        sdk = client(server.url)
        got = [await sdk.responses.create(model=MODEL, input="q") for _ in range(2)]
        await sdk.close()
        p = provider(server.url, stream=False)
        ours = [final(await collect(p, REQUEST)) for _ in range(2)]
    assert got[0].output[0].content[0].refusal == ours[0].text == "No."
    assert ours[0].stop_reason is StopReason.REFUSAL
    assert got[1].incomplete_details is not None
    assert got[1].incomplete_details.reason == ours[1].raw_stop_reason == "max_output_tokens"
    assert ours[1].stop_reason is StopReason.MAX_TOKENS
