"""Model strings: ``"anthropic:claude-sonnet-4-5"`` made into a provider.

A model string is ``"<prefix>:<model>"``; :data:`PREFIXES` maps each prefix to
what makes the provider from the part after the colon. A provider class whose
first argument is the model name needs one small function that imports it on
first use (``"gemini": gemini,``), so no provider's module (nor httpx) is loaded
until a model string names it. Keys come from the environment, as the provider
classes read them when made (``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``,
``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``).

``"scripted:<text>"`` is a :class:`ScriptedProvider` that answers every request
with ``<text>``: an offline stand-in for examples, demos and tests that needs
no key and no server.
"""

from __future__ import annotations

from collections.abc import Callable

from ._scripted import Reply, ScriptedProvider
from ._types import ModelRequest, Provider, ProviderContext


def scripted(text: str) -> ScriptedProvider:
    """A :class:`ScriptedProvider` answering every request with ``text`` (``"scripted:<text>"``)."""
    reply = Reply(text=text)

    def answer(request: ModelRequest, ctx: ProviderContext) -> Reply:
        return reply

    return ScriptedProvider(answer)


# The HTTP providers' modules (and httpx with them) are imported when a model
# string names one, not when tether is imported.


def anthropic(model: str) -> Provider:
    """``AnthropicProvider(model)`` (``"anthropic:<model>"``)."""
    from ._anthropic import AnthropicProvider

    return AnthropicProvider(model)


def gemini(model: str) -> Provider:
    """``GeminiProvider(model)`` (``"gemini:<model>"``)."""
    from ._gemini import GeminiProvider

    return GeminiProvider(model)


def openai(model: str) -> Provider:
    """``OpenAIProvider(model)`` (``"openai:<model>"``)."""
    from ._openai import OpenAIProvider

    return OpenAIProvider(model)


def openai_responses(model: str) -> Provider:
    """``OpenAIResponsesProvider(model)`` (``"openai-responses:<model>"``)."""
    from ._openai_responses import OpenAIResponsesProvider

    return OpenAIResponsesProvider(model)


#: Prefix → what makes the provider from a model name.
PREFIXES: dict[str, Callable[[str], Provider]] = {
    "anthropic": anthropic,
    "gemini": gemini,
    "openai": openai,
    "openai-responses": openai_responses,
    "scripted": scripted,
}


def infer_provider(model: str) -> Provider:
    """The provider a model string names: ``"anthropic:claude-sonnet-4-5"``,
    ``"openai:gpt-4.1-mini"``, ``"scripted:Hello"`` (a provider answering ``Hello``).

    ``TypeError`` for a value that is not a ``str``; ``ValueError`` for a string
    without a ``prefix:``, with an unknown prefix (the message lists the known
    ones) or with nothing after the colon. The provider is made with its defaults
    (its key from the environment); for more (``base_url``, ``max_tokens``), make
    it yourself: ``AnthropicProvider("claude-sonnet-4-5", max_tokens=1024)``.
    """
    if not isinstance(model, str):
        raise TypeError(f"infer_provider() takes a model string, got {type(model).__name__}")
    known = ", ".join(f"'{p}:'" for p in sorted(PREFIXES))
    prefix, colon, name = model.partition(":")
    prefix = prefix.strip().lower()
    if not colon:
        raise ValueError(
            f"model string {model!r} has no provider prefix: write '<provider>:<model>', "
            f"e.g. 'anthropic:claude-sonnet-4-5' (known prefixes: {known})"
        )
    make = PREFIXES.get(prefix)
    if make is None:
        raise ValueError(
            f"model string {model!r}: unknown provider prefix {prefix + ':'!r} "
            f"(known prefixes: {known})"
        )
    if not name.strip():
        what = "the reply text" if prefix == "scripted" else "a model name"
        raise ValueError(f"model string {model!r}: {what} must follow {prefix + ':'!r}")
    return make(name if prefix == "scripted" else name.strip())


__all__ = ["PREFIXES", "infer_provider"]
