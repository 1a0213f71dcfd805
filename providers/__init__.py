"""Model providers: the protocol, normalized types, HTTP providers, the scripted provider.

The public names are ``__all__``. ``HttpPool`` (the Runtime's shared connection
pools), ``parse_retry_after``, ``bound_response``, ``text_too_deep`` (the
tool-argument depth bound), ``dump_message``/``load_message`` (one message of
a transcript, for the run state's converter) and ``name_errors_by_package``
are importable for the actors, the runtime and the tests, but are not part of
the public API.

The HTTP providers (``AnthropicProvider``, ``OpenAIProvider``,
``OpenAIResponsesProvider``, ``GeminiProvider``) are imported on first use
(the module's ``__getattr__``), and httpx with them: ``import tether`` loads
neither.
"""

from typing import TYPE_CHECKING, Any

from ._arguments import MAX_TOOL_ARGUMENT_DEPTH as MAX_TOOL_ARGUMENT_DEPTH
from ._arguments import bound_response as bound_response
from ._arguments import text_too_deep as text_too_deep
from ._errors import AuthenticationFailed as AuthenticationFailed
from ._errors import ConnectionDropped as ConnectionDropped
from ._errors import ContextWindowExceeded as ContextWindowExceeded
from ._errors import FatalProviderError as FatalProviderError
from ._errors import InvalidRequest as InvalidRequest
from ._errors import MalformedResponse as MalformedResponse
from ._errors import NotFound as NotFound
from ._errors import Overloaded as Overloaded
from ._errors import PermissionDenied as PermissionDenied
from ._errors import ProviderError as ProviderError
from ._errors import ProviderTimeout as ProviderTimeout
from ._errors import RateLimited as RateLimited
from ._errors import ResponseTooLarge as ResponseTooLarge
from ._errors import ServerError as ServerError
from ._errors import StreamErrorEvent as StreamErrorEvent
from ._errors import StreamInterrupted as StreamInterrupted
from ._errors import TetherError as TetherError
from ._errors import TransientProviderError as TransientProviderError
from ._errors import name_errors_by_package as name_errors_by_package
from ._fallback import FallbackProvider as FallbackProvider
from ._fallback import falls_through as falls_through
from ._infer import infer_provider as infer_provider
from ._messages_json import dump_message as dump_message
from ._messages_json import dump_messages as dump_messages
from ._messages_json import load_message as load_message
from ._messages_json import load_messages as load_messages
from ._pool import HttpPool as HttpPool
from ._prices import context_window_for as context_window_for
from ._prices import price_for as price_for
from ._scripted import Fault as Fault
from ._scripted import Reply as Reply
from ._scripted import ScriptedProvider as ScriptedProvider
from ._scripted import ScriptExhausted as ScriptExhausted
from ._scripted import ToolCall as ToolCall
from ._settings import ModelSettings as ModelSettings
from ._settings import check_settings as check_settings
from ._types import IMAGE_MEDIA_TYPES as IMAGE_MEDIA_TYPES
from ._types import IMAGE_TOKENS_ESTIMATE as IMAGE_TOKENS_ESTIMATE
from ._types import MAX_IMAGE_BYTES as MAX_IMAGE_BYTES
from ._types import Backoff as Backoff
from ._types import ContentBlock as ContentBlock
from ._types import HttpPoolLike as HttpPoolLike
from ._types import Image as Image
from ._types import Message as Message
from ._types import ModelRequest as ModelRequest
from ._types import ModelResponse as ModelResponse
from ._types import OutputFormat as OutputFormat
from ._types import Price as Price
from ._types import Provider as Provider
from ._types import ProviderContext as ProviderContext
from ._types import Reasoning as Reasoning
from ._types import ReasoningDelta as ReasoningDelta
from ._types import StopReason as StopReason
from ._types import StreamItem as StreamItem
from ._types import TextBlock as TextBlock
from ._types import TextDelta as TextDelta
from ._types import TokenUsage as TokenUsage
from ._types import ToolCallDelta as ToolCallDelta
from ._types import ToolDef as ToolDef
from ._types import ToolResultBlock as ToolResultBlock
from ._types import ToolUseBlock as ToolUseBlock
from ._types import UsageDelta as UsageDelta
from ._wire_errors import parse_retry_after as parse_retry_after

__all__ = [  # noqa: RUF022  (plain sorted(), which tests/test_api.py checks)
    "AnthropicProvider",
    "AuthenticationFailed",
    "Backoff",
    "ConnectionDropped",
    "ContentBlock",
    "ContextWindowExceeded",
    "FallbackProvider",
    "FatalProviderError",
    "Fault",
    "GeminiProvider",
    "IMAGE_MEDIA_TYPES",
    "IMAGE_TOKENS_ESTIMATE",
    "Image",
    "InvalidRequest",
    "MAX_IMAGE_BYTES",
    "MAX_TOOL_ARGUMENT_DEPTH",
    "MalformedResponse",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "NotFound",
    "OpenAIProvider",
    "OpenAIResponsesProvider",
    "OutputFormat",
    "Overloaded",
    "PermissionDenied",
    "Price",
    "Provider",
    "ProviderContext",
    "ProviderError",
    "ProviderTimeout",
    "RateLimited",
    "Reasoning",
    "ReasoningDelta",
    "Reply",
    "ResponseTooLarge",
    "ScriptExhausted",
    "ScriptedProvider",
    "ServerError",
    "StopReason",
    "StreamErrorEvent",
    "StreamInterrupted",
    "StreamItem",
    "TetherError",
    "TextBlock",
    "TextDelta",
    "TokenUsage",
    "ToolCall",
    "ToolCallDelta",
    "ToolDef",
    "ToolResultBlock",
    "ToolUseBlock",
    "TransientProviderError",
    "UsageDelta",
    "check_settings",
    "context_window_for",
    "dump_messages",
    "falls_through",
    "infer_provider",
    "load_messages",
    "price_for",
]

if TYPE_CHECKING:
    from ._anthropic import AnthropicProvider as AnthropicProvider
    from ._gemini import GeminiProvider as GeminiProvider
    from ._openai import OpenAIProvider as OpenAIProvider
    from ._openai_responses import OpenAIResponsesProvider as OpenAIResponsesProvider

#: Public name → the private module that defines it, imported on first use.
_LAZY = {
    "AnthropicProvider": "_anthropic",
    "GeminiProvider": "_gemini",
    "OpenAIProvider": "_openai",
    "OpenAIResponsesProvider": "_openai_responses",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


name_errors_by_package(__name__, globals())
