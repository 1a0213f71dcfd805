"""The fake Gemini server checked against Google's own SDK (``google-genai``).

The SDK talks to the fake (``HttpOptions(base_url=...)``) and parses what it
serves, whole and streamed, errors included; and for one transcript the SDK's
request body is the one GeminiProvider sends, so both sides of the fake are
Google's format, not tether's idea of it. The SDK is synchronous here (in a
worker thread), so the test runs on both backends alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import pytest

genai = pytest.importorskip("google.genai")

from google.genai import errors, types  # noqa: E402

from tether.providers import (  # noqa: E402
    Message,
    ModelRequest,
    ModelSettings,
    TextBlock,
    ToolDef,
    ToolResultBlock,
    ToolUseBlock,
)

from . import gemini_wire as gem  # noqa: E402
from .fakes import SECRET, fake_server, json_answer, sse_answer, sse_body  # noqa: E402

pytestmark = pytest.mark.anyio

T = TypeVar("T")


def client(url: str) -> Any:
    return genai.Client(
        api_key=SECRET,
        http_options=types.HttpOptions(
            base_url=url,
            api_version="v1beta",
            retry_options=types.HttpRetryOptions(attempts=1),
        ),
    )


async def in_thread(fn: Callable[[], T]) -> T:
    with anyio.fail_after(20):
        return await anyio.to_thread.run_sync(fn)


async def test_the_sdk_parses_a_whole_answer_with_calls_and_usage() -> None:
    """generateContent: the SDK reads the fake's text, calls, finish reason and usage."""
    answer = json_answer(
        gem.response_json(text="Adding.", calls=(("c1", "add", {"a": 2, "b": 3}),))
    )
    async with fake_server(answer) as server:
        sdk = client(server.url)
        response = await in_thread(
            lambda: sdk.models.generate_content(model=gem.MODEL, contents="2+3?")
        )
    (sent,) = server.requests
    assert sent.path == gem.path(False)
    assert sent.headers["x-goog-api-key"] == SECRET
    assert SECRET not in sent.path
    candidate = response.candidates[0]
    assert candidate.finish_reason == types.FinishReason.STOP
    assert candidate.content.parts[0].text == "Adding."
    (call,) = response.function_calls
    assert (call.id, call.name, call.args) == ("c1", "add", {"a": 2, "b": 3})
    usage = response.usage_metadata
    assert (usage.prompt_token_count, usage.candidates_token_count) == (30, 12)
    assert (usage.thoughts_token_count, usage.cached_content_token_count) == (5, 10)
    assert response.model_version == gem.MODEL


async def test_the_sdk_parses_a_stream() -> None:
    """streamGenerateContent?alt=sse: the SDK joins the chunks and sees the last one's finish."""
    async with fake_server(gem.reply(True, text=("Hel", "lo", "!"))) as server:
        sdk = client(server.url)
        chunks = await in_thread(
            lambda: list(sdk.models.generate_content_stream(model=gem.MODEL, contents="hi"))
        )
    assert server.requests[0].path == gem.path(True)
    assert "".join(c.text or "" for c in chunks) == "Hello!"
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.thoughts_token_count == 5


async def test_the_sdk_reads_the_fakes_errors() -> None:
    """A 429 RESOURCE_EXHAUSTED with RetryInfo is what the SDK knows as a ClientError."""
    async with fake_server(gem.rate_limited("17s")) as server:
        sdk = client(server.url)

        def call() -> Any:
            return sdk.models.generate_content(model=gem.MODEL, contents="hi")

        with pytest.raises(errors.ClientError) as caught:
            await in_thread(call)
    assert caught.value.code == 429
    assert caught.value.status == "RESOURCE_EXHAUSTED"
    details = caught.value.details["error"]["details"]
    assert {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "17s"} in details


async def test_the_sdk_sends_what_tether_sends() -> None:
    """The same transcript, tools and settings: the SDK's body is GeminiProvider's, exactly."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    request = ModelRequest(
        system="Use the tools.",
        messages=(
            Message.user("1 + 2?"),
            Message(
                role="assistant",
                content=(ToolUseBlock(id="c1", name="add", input={"a": 1, "b": 2}),),
            ),
            Message(
                role="user",
                content=(ToolResultBlock(tool_use_id="c1", content="3"), TextBlock(text="ok?")),
            ),
        ),
        tools=(ToolDef(name="add", description="Add two integers.", input_schema=schema),),
        max_tokens=256,
        settings=ModelSettings(
            temperature=0.5, top_p=0.9, stop_sequences=["END"], seed=7, tool_choice="add"
        ),
    )
    contents = [
        types.Content(role="user", parts=[types.Part(text="1 + 2?")]),
        types.Content(
            role="model",
            parts=[
                types.Part(
                    function_call=types.FunctionCall(id="c1", name="add", args={"a": 1, "b": 2})
                )
            ],
        ),
        types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id="c1", name="add", response={"output": "3"}
                    )
                ),
                types.Part(text="ok?"),
            ],
        ),
    ]
    config = types.GenerateContentConfig(
        system_instruction="Use the tools.",
        tools=[
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name="add",
                        description="Add two integers.",
                        parameters=types.Schema(
                            type=types.Type.OBJECT,
                            properties={
                                "a": types.Schema(type=types.Type.INTEGER),
                                "b": types.Schema(type=types.Type.INTEGER),
                            },
                            required=["a", "b"],
                        ),
                    )
                ]
            )
        ],
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["add"]
            )
        ),
        max_output_tokens=256,
        temperature=0.5,
        top_p=0.9,
        stop_sequences=["END"],
        seed=7,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    async with fake_server(json_answer(gem.response_json())) as server:
        sdk = client(server.url)
        await in_thread(
            lambda: sdk.models.generate_content(model=gem.MODEL, contents=contents, config=config)
        )
    sdk_body = server.requests[0].json()
    ours = gem.provider(server.url, stream=False).request_body(request)
    assert _normalized(sdk_body) == _normalized(ours)


def _normalized(value: Any) -> Any:
    """Schema type names compared without case (the SDK writes OBJECT, JSON Schema object)."""
    if isinstance(value, dict):
        return {
            k: (v.lower() if k == "type" and isinstance(v, str) else _normalized(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    return value


async def test_the_sdk_parses_thoughts_and_signatures() -> None:
    """The fake's thought parts and thoughtSignatures are what the SDK reads as such."""
    import base64

    async with fake_server(sse_answer(sse_body(gem.thinking_chunks()))) as server:
        sdk = client(server.url)
        chunks = await in_thread(
            lambda: list(sdk.models.generate_content_stream(model=gem.MODEL, contents="hi"))
        )
    parts = [p for c in chunks for p in (c.candidates[0].content.parts or [])]
    assert [p.text for p in parts if p.thought] == ["I should ", "add."]
    signed = [p for p in parts if p.thought_signature]
    assert [p.thought_signature for p in signed] == [
        base64.b64decode(gem.SIG_CALL),
        base64.b64decode(gem.SIG_TEXT),
    ]
    assert signed[0].function_call is not None
    assert signed[0].function_call.name == "add"


def test_every_schema_keyword_tether_sends_is_one_the_sdk_knows() -> None:
    """The converted schema uses only fields of Google's Schema type, and the SDK reads it."""
    import re

    from tether.providers._gemini_schema import _KEEP, gemini_schema

    fields = {
        re.sub(r"_([a-z])", lambda m: m.group(1).upper(), f) for f in types.Schema.model_fields
    }
    assert _KEEP | {"type", "enum", "items", "properties", "required", "anyOf"} <= fields
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": ["integer", "null"], "exclusiveMinimum": 0},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
            "pick": {"oneOf": [{"type": "string"}, {"type": "number"}]},
        },
        "required": ["n"],
        "additionalProperties": False,
    }
    parsed = types.Schema.model_validate(gemini_schema(schema))
    assert parsed.properties is not None
    assert parsed.properties["n"].nullable is True
    assert parsed.properties["tags"].items is not None
    assert parsed.properties["tags"].items.enum == ["a", "b"]
