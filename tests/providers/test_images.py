"""Images: checked when made, and encoded on each provider's wire as it expects.

The request bodies are read back from the fake Anthropic and OpenAI servers,
over real sockets: image input (bytes and URL) and an image tool result.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tether.providers import (
    IMAGE_MEDIA_TYPES,
    MAX_IMAGE_BYTES,
    Image,
    Message,
    ModelRequest,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

from . import anthropic_wire as anth
from . import openai_wire as oai
from .fakes import collect, fake_server

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(32))
JPEG = b"\xff\xd8\xff\xe0" + bytes(range(40))
PNG_B64 = base64.b64encode(PNG).decode()
JPEG_B64 = base64.b64encode(JPEG).decode()
URL = "https://example.com/cat.png"


# ------------------------------------------------------------- construction


def test_from_bytes_reads_the_media_type_and_checks_it() -> None:
    """from_bytes sniffs the type from the bytes, and refuses a media type the bytes contradict."""
    assert Image.from_bytes(PNG).media_type == "image/png"
    assert Image.from_bytes(JPEG, "IMAGE/JPEG").media_type == "image/jpeg"
    assert Image.from_bytes(bytearray(JPEG), "image/jpg") == Image.from_bytes(JPEG)
    webp = b"RIFF\x10\x00\x00\x00WEBPVP8 " + bytes(8)
    assert Image.from_bytes(webp).media_type == "image/webp"
    assert Image.from_bytes(b"GIF89a" + bytes(8)).media_type == "image/gif"
    with pytest.raises(ValueError, match="is a image/png image, but media_type says image/jpeg"):
        Image.from_bytes(PNG, "image/jpeg")


def test_an_unsupported_media_type_names_the_supported_ones() -> None:
    """A media type neither vendor takes is a ValueError listing the four that work."""
    with pytest.raises(ValueError, match="unsupported image media type 'image/tiff'") as info:
        Image.from_bytes(PNG, "image/tiff")
    for media_type in IMAGE_MEDIA_TYPES:
        assert media_type in str(info.value)
    with pytest.raises(ValueError, match="not a JPEG, PNG, GIF or WebP image"):
        Image.from_bytes(b"%PDF-1.7 not an image")


def test_a_too_large_image_says_the_limit(tmp_path: Path) -> None:
    """An image past MAX_IMAGE_BYTES (Anthropic's 5 MB of base64) is refused, naming the limit."""
    big = PNG + bytes(MAX_IMAGE_BYTES)
    with pytest.raises(ValueError, match=r"the limit is 3,932,160 bytes \(3\.75 MiB\)"):
        Image.from_bytes(big)
    path = tmp_path / "big.png"
    path.write_bytes(big)
    with pytest.raises(ValueError, match=r"big\.png' is .* the limit is 3,932,160 bytes"):
        Image.from_path(path)
    # exactly at the limit is fine, and its base64 is Anthropic's 5 MiB exactly
    edge = Image.from_bytes(PNG + bytes(MAX_IMAGE_BYTES - len(PNG)))
    assert len(edge.base64()) == 5 * 1024 * 1024


def test_from_path_and_from_url(tmp_path: Path) -> None:
    """from_path reads the file; from_url keeps http(s) URLs and decodes data: URLs."""
    path = tmp_path / "cat.png"
    path.write_bytes(PNG)
    assert Image.from_path(path) == Image(data=PNG, media_type="image/png")
    assert Image.from_url(URL) == Image(url=URL)
    assert Image.from_url(f"data:image/png;base64,{PNG_B64}") == Image.from_bytes(PNG)
    with pytest.raises(ValueError, match="must start with http:// or https://"):
        Image.from_url("ftp://example.com/cat.png")
    with pytest.raises(ValueError, match="base64 is malformed"):
        Image.from_url("data:image/png;base64,@@@")
    with pytest.raises(ValueError, match=r"either data .* or a url"):
        Image(data=PNG, media_type="image/png", url=URL)
    with pytest.raises(TypeError, match="data must be bytes, got str"):
        Image(data="abc", media_type="image/png")  # type: ignore[arg-type]


def test_repr_shows_the_size_not_the_bytes() -> None:
    """An image's repr names its size, so a log line never carries megabytes."""
    assert "<44 bytes>" in repr(Image.from_bytes(JPEG))


# ------------------------------------------------------------------- wires

#: A question with two images, the model's tool call, and a result with an image.
REQUEST = ModelRequest(
    system="",
    messages=(
        Message(
            role="user",
            content=(
                TextBlock(text="What is in these?"),
                Image.from_bytes(PNG),
                Image.from_url(URL),
            ),
        ),
        Message(
            role="assistant",
            content=(ToolUseBlock(id="call_1", name="snapshot", input={"cam": 2}),),
        ),
        Message(
            role="user",
            content=(
                ToolResultBlock(
                    tool_use_id="call_1", content="camera 2:", images=(Image.from_bytes(JPEG),)
                ),
            ),
        ),
    ),
    max_tokens=100,
)


@pytest.mark.parametrize("stream", [True, False])
async def test_anthropic_image_input_and_tool_result_bodies(stream: bool) -> None:
    """Anthropic gets base64 and url image sources, also inside the tool_result's content."""
    async with fake_server(anth.reply(stream)) as server:
        await collect(anth.provider(server.url, stream=stream), REQUEST)
    assert server.requests[0].json()["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
                },
                {"type": "image", "source": {"type": "url", "url": URL}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_1", "name": "snapshot", "input": {"cam": 2}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": [
                        {"type": "text", "text": "camera 2:"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/jpeg",
                                "data": JPEG_B64,
                            },
                        },
                    ],
                }
            ],
        },
    ]


def test_anthropic_image_only_error_result() -> None:
    """A result that is only images sends only image blocks, and keeps is_error."""
    request = ModelRequest(
        system="",
        messages=(
            Message(
                role="user",
                content=(
                    ToolResultBlock(
                        tool_use_id="t", content="", is_error=True, images=(Image(url=URL),)
                    ),
                ),
            ),
        ),
    )
    body = anth.provider("http://h").request_body(request)
    assert body["messages"][0]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "t",
            "content": [{"type": "image", "source": {"type": "url", "url": URL}}],
            "is_error": True,
        }
    ]


@pytest.mark.parametrize("stream", [True, False])
async def test_openai_image_input_and_tool_result_bodies(stream: bool) -> None:
    """OpenAI gets image_url parts (data: URLs for bytes); a tool result's images follow
    the tool messages in a user message, and the tool message names them in its text."""
    async with fake_server(oai.reply(stream)) as server:
        await collect(oai.provider(server.url, stream=stream), REQUEST)
    assert server.requests[0].json()["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
                {"type": "image_url", "image_url": {"url": URL}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "snapshot", "arguments": '{"cam":2}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "camera 2:\n[image: image/jpeg, 44 bytes]",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images returned by tool call call_1:"},
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG_B64}"}},
            ],
        },
    ]


def test_openai_images_of_several_results_come_after_every_tool_message() -> None:
    """Tool messages stay right after the assistant's calls; one user message carries the images."""
    request = ModelRequest(
        system="",
        messages=(
            Message(
                role="user",
                content=(
                    ToolResultBlock(tool_use_id="a", content="x", images=(Image(url=URL),)),
                    ToolResultBlock(tool_use_id="b", content="plain"),
                    ToolResultBlock(
                        tool_use_id="c", content="", is_error=True, images=(Image(url=URL),)
                    ),
                    TextBlock(text="go on"),
                ),
            ),
        ),
    )
    messages = oai.provider("http://h").request_body(request)["messages"]
    assert [m["role"] for m in messages] == ["tool", "tool", "tool", "user", "user"]
    assert messages[2]["content"] == f"Error: [image: {URL}]"
    assert messages[3]["content"] == [
        {"type": "text", "text": "Images returned by tool call a:"},
        {"type": "image_url", "image_url": {"url": URL}},
        {"type": "text", "text": "Images returned by tool call c:"},
        {"type": "image_url", "image_url": {"url": URL}},
    ]
    assert messages[4] == {"role": "user", "content": "go on"}
