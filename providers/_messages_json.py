"""A transcript as JSON: :func:`dump_messages` and :func:`load_messages`.

The format is plain JSON, one object per message, each block tagged by
``"type"`` as the blocks' own ``type`` fields say::

    {"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "media_type": "image/png", "data": "<base64>"},
        {"type": "image", "url": "https://example.com/cat.png"}]}
    {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {"x": 1}}]}
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a cat",
         "is_error": false, "images": [...]}]}
    {"role": "assistant", "content": [
        {"type": "reasoning", "text": "The user wants...", "signature": "EqQB...",
         "provider": "anthropic"},
        {"type": "reasoning", "redacted": true, "signature": "<encrypted>",
         "provider": "anthropic"}]}

Image bytes are base64. ``images`` is left out of a tool result without any,
and ``media_type`` out of a URL image without one; a reasoning block leaves
out what it does not have (``signature``, ``provider``, ``id``, an empty
``text``, ``redacted`` when false). Reading checks every field
and says where a fault is (``data[2].content[0].text: ...``), as a
``ValueError``; an image is checked as :class:`Image` checks it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._types import (
    ContentBlock,
    Image,
    Message,
    Reasoning,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

_BLOCK_TYPES = "text, image, tool_use, tool_result, reasoning"


def dump_image(image: Image) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "image"}
    if image.media_type is not None:
        out["media_type"] = image.media_type
    if image.url is not None:
        out["url"] = image.url
    else:
        out["data"] = image.base64()
    return out


def dump_block(block: ContentBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, Image):
        return dump_image(block)
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, Reasoning):
        return dump_reasoning(block)
    out: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": block.tool_use_id,
        "content": block.content,
        "is_error": block.is_error,
    }
    if block.images:
        out["images"] = [dump_image(i) for i in block.images]
    return out


def dump_reasoning(block: Reasoning) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "reasoning"}
    if block.text:
        out["text"] = block.text
    if block.redacted:
        out["redacted"] = True
    for key in ("signature", "provider", "id"):
        value = getattr(block, key)
        if value is not None:
            out[key] = value
    return out


def dump_message(message: Message) -> dict[str, Any]:
    return {"role": message.role, "content": [dump_block(b) for b in message.content]}


def dump_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """A JSON-ready list of ``messages``; :func:`load_messages` reads it back equal.

    Tool-call inputs go as they are (they came from JSON, so they are JSON).
    """
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise TypeError(
                f"dump_messages() wants tether.Message items; item {i} is {type(message).__name__}"
            )
        out.append(dump_message(message))
    return out


def load_messages(data: Sequence[Mapping[str, Any]]) -> list[Message]:
    """The messages :func:`dump_messages` made ``data`` from (parsed JSON).

    Raises ``ValueError`` naming the place of the first fault.
    """
    if isinstance(data, str | bytes) or not isinstance(data, Sequence):
        raise ValueError(
            f"load_messages() wants a list of message objects (parsed JSON), "
            f"got {type(data).__name__}"
        )
    return [load_message(m, f"data[{i}]") for i, m in enumerate(data)]


def load_message(data: Any, where: str = "message") -> Message:
    obj = _obj(data, where)
    role = obj.get("role")
    if role not in ("user", "assistant"):
        raise ValueError(f"{where}.role: must be 'user' or 'assistant', got {role!r}")
    content = obj.get("content")
    if not isinstance(content, list | tuple):
        raise ValueError(f"{where}.content: must be a list of blocks, got {_kind(content)}")
    blocks = tuple(load_block(b, f"{where}.content[{i}]") for i, b in enumerate(content))
    return Message(role=role, content=blocks)


def load_block(data: Any, where: str) -> ContentBlock:
    obj = _obj(data, where)
    kind = obj.get("type")
    if kind == "text":
        return TextBlock(text=_str(obj, "text", where))
    if kind == "image":
        return load_image(obj, where)
    if kind == "tool_use":
        if "input" not in obj:
            raise ValueError(f"{where}.input: missing")
        return ToolUseBlock(
            id=_str(obj, "id", where), name=_str(obj, "name", where), input=obj["input"]
        )
    if kind == "tool_result":
        is_error = obj.get("is_error", False)
        if not isinstance(is_error, bool):
            raise ValueError(f"{where}.is_error: must be true or false, got {is_error!r}")
        images = obj.get("images", [])
        if not isinstance(images, list | tuple):
            raise ValueError(f"{where}.images: must be a list of images, got {_kind(images)}")
        return ToolResultBlock(
            tool_use_id=_str(obj, "tool_use_id", where),
            content=_str(obj, "content", where),
            is_error=is_error,
            images=tuple(
                load_image(_obj(im, f"{where}.images[{i}]"), f"{where}.images[{i}]")
                for i, im in enumerate(images)
            ),
        )
    if kind == "reasoning":
        return load_reasoning(obj, where)
    raise ValueError(f"{where}.type: must be one of {_BLOCK_TYPES}, got {kind!r}")


def load_reasoning(obj: Mapping[str, Any], where: str) -> Reasoning:
    text = obj.get("text", "")
    if not isinstance(text, str):
        raise ValueError(f"{where}.text: must be a string, got {_kind(text)}")
    redacted = obj.get("redacted", False)
    if not isinstance(redacted, bool):
        raise ValueError(f"{where}.redacted: must be true or false, got {redacted!r}")
    signature, provider, id_ = (
        _opt_str(obj, key, where) for key in ("signature", "provider", "id")
    )
    try:
        return Reasoning(
            text=text, redacted=redacted, signature=signature, provider=provider, id=id_
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def load_image(obj: Mapping[str, Any], where: str) -> Image:
    if obj.get("type", "image") != "image":
        raise ValueError(f"{where}.type: must be 'image', got {obj.get('type')!r}")
    media_type = obj.get("media_type")
    if media_type is not None and not isinstance(media_type, str):
        raise ValueError(f"{where}.media_type: must be a string, got {_kind(media_type)}")
    try:
        if "url" in obj:
            return Image(url=_str(obj, "url", where), media_type=media_type)
        text = _str(obj, "data", where)
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"{where}.data: not valid base64 ({exc})") from None
        return Image(data=data, media_type=media_type)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        raise ValueError(message if message.startswith(where) else f"{where}: {message}") from None


def _obj(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: must be an object, got {_kind(data)}")
    return data


def _str(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        what = "missing" if key not in obj else f"must be a string, got {_kind(value)}"
        raise ValueError(f"{where}.{key}: {what}")
    return value


def _opt_str(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{where}.{key}: must be a string, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
