"""A run's input: a ``str``, or a sequence of content parts (``str``, ``tether.Image``).

A str input is the first user message's one text block, as always. A parts
input becomes the first user message's blocks, in order (empty strings left
out). Wherever tether needs the input as text (``RunStarted.input``, the
``input`` policy's subject, the judge's ``Candidate.question``, a lesson's
question), it uses the input's *text form*: the parts joined by newlines, each
image by its stand-in (``[image: image/png, 1,234 bytes]``, or
``[image: <url>]``). So a text policy keeps working on a multimodal input and
sees that images came with it, but not their pixels: check images before
``start`` if they need a policy.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.providers import Image, Message, TextBlock

#: One part of a run's input.
InputPart = str | Image
#: A run's input (``rt.start(agent, input)``).
RunInput = str | Sequence[InputPart]


def parts_input(parts: object) -> tuple[str, Message]:
    """The text form and the first user message of a parts input.

    Raises ``TypeError`` or ``ValueError`` (at ``rt.start``) for anything but
    a non-empty sequence of str and Image parts.
    """
    if isinstance(parts, bytes | bytearray | memoryview | Image) or not isinstance(parts, Sequence):
        raise TypeError(
            "a run's input must be a str or a list of str and tether.Image parts, "
            f"got {type(parts).__name__}"
        )
    blocks: list[TextBlock | Image] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            if part:
                blocks.append(TextBlock(text=part))
        elif isinstance(part, Image):
            blocks.append(part)
        else:
            raise TypeError(
                f"part {i} of a run's input is a {type(part).__name__}; parts are str or "
                "tether.Image (Image.from_path(), Image.from_bytes(), Image.from_url())"
            )
    if not blocks:
        raise ValueError("a run's input has no content: give a str, or parts with text or images")
    text = "\n".join(b.text if isinstance(b, TextBlock) else b.describe() for b in blocks)
    return text, Message(role="user", content=tuple(blocks))


def result_text(content: str, images: Sequence[Image]) -> str:
    """A tool result with images as text: its text, then each image's stand-in."""
    return "\n".join(t for t in (content, *(i.describe() for i in images)) if t)
