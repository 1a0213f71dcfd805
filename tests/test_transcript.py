"""A transcript round-trips through JSON (``tether.dump_messages`` / ``load_messages``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tether
from tether.providers import TextBlock, ToolResultBlock, ToolUseBlock

from .test_state import messages

PNG = b"\x89PNG\r\n\x1a\n" + bytes(16)


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, max_size=5))
def test_any_transcript_round_trips_through_json_text(transcript: list[tether.Message]) -> None:
    """Any list of messages, images included, goes to JSON text and back equal."""
    text = json.dumps(tether.dump_messages(transcript))
    assert tether.load_messages(json.loads(text)) == transcript


def test_the_format_is_plain_and_tagged() -> None:
    """Each block is tagged by its type; image bytes are base64; empty images are left out."""
    transcript = [
        tether.Message(
            role="user",
            content=(
                TextBlock(text="What is this?"),
                tether.Image.from_bytes(PNG),
                tether.Image.from_url("https://example.com/a.png"),
            ),
        ),
        tether.Message(
            role="assistant", content=(ToolUseBlock(id="t1", name="zoom", input={"x": 1}),)
        ),
        tether.Message(
            role="user",
            content=(
                ToolResultBlock(tool_use_id="t1", content="zoomed"),
                ToolResultBlock(
                    tool_use_id="t2",
                    content="",
                    is_error=True,
                    images=(tether.Image.from_bytes(PNG),),
                ),
            ),
        ),
    ]
    png = "iVBORw0KGgoAAAAAAAAAAAAAAAAAAAAA"
    assert tether.dump_messages(transcript) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "media_type": "image/png", "data": png},
                {"type": "image", "url": "https://example.com/a.png"},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "zoom", "input": {"x": 1}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": "zoomed",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": "",
                    "is_error": True,
                    "images": [{"type": "image", "media_type": "image/png", "data": png}],
                },
            ],
        },
    ]


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"role": "user"}, "wants a list of message objects"),
        ("[]", "wants a list of message objects"),
        ([[]], r"data\[0\]: must be an object, got list"),
        ([{"role": "system", "content": []}], r"data\[0\]\.role: must be 'user' or 'assistant'"),
        ([{"role": "user", "content": "hi"}], r"data\[0\]\.content: must be a list of blocks"),
        (
            [{"role": "user", "content": [{"type": "img"}]}],
            r"data\[0\]\.content\[0\]\.type: must be one of text, image, tool_use, tool_result",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": 3}]}],
            r"content\[0\]\.text: must be a string, got int",
        ),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "b"}]}],
            r"content\[0\]\.input: missing",
        ),
        (
            [{"role": "user", "content": [{"type": "image", "data": "!!", "media_type": "x"}]}],
            r"content\[0\]\.data: not valid base64",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "data": "iVBORw0KGgo=", "media_type": "image/bmp"}
                    ],
                }
            ],
            r"content\[0\]: unsupported image media type 'image/bmp'; supported: image/jpeg",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": "", "images": [1]}
                    ],
                }
            ],
            r"content\[0\]\.images\[0\]: must be an object, got int",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": "", "is_error": 1}
                    ],
                }
            ],
            r"content\[0\]\.is_error: must be true or false",
        ),
    ],
)
def test_malformed_data_says_where(data: Any, error: str) -> None:
    """A malformed transcript is a ValueError that names the place of the fault."""
    with pytest.raises(ValueError, match=error):
        tether.load_messages(data)


def test_dump_refuses_what_is_not_a_message() -> None:
    """dump_messages() names the item that is not a Message."""
    with pytest.raises(TypeError, match="item 1 is dict"):
        tether.dump_messages([tether.Message.user("hi"), {"role": "user"}])  # type: ignore[list-item]
