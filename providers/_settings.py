"""``ModelSettings``: sampling and request options, and what each provider honours.

Every field defaults to ``None``, which means *unset*: an unset field is not
sent, and the provider's own default applies. Values are checked when a
``ModelSettings`` is built (types and ranges, valid for *some* provider);
whether the agent's provider can honour them is checked at ``Runtime.start``
through :func:`check_settings`, so a setting is never silently dropped.

Merging (:meth:`ModelSettings.merge`) is field by field: a field the run sets
wins over the agent's. The three mappings (``metadata``, ``extra_headers``,
``extra_body``) merge key by key, the run's keys over the agent's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ._errors import InvalidRequest

__all__ = ["ModelSettings", "check_settings"]

_TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
#: ``tool_choice`` values that name no tool.
TOOL_CHOICE_MODES = ("auto", "required", "none")


def _number(name: str, value: object, low: float, high: float) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"ModelSettings.{name} must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and low <= value <= high):
        raise ValueError(f"ModelSettings.{name} must be in [{low:g}, {high:g}], got {value!r}")


def _check_temperature(_: Any, __: Any, value: object) -> None:
    _number("temperature", value, 0.0, 2.0)


def _check_top_p(_: Any, __: Any, value: object) -> None:
    _number("top_p", value, 0.0, 1.0)


def _check_max_tokens(_: Any, __: Any, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"ModelSettings.max_tokens must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"ModelSettings.max_tokens must be >= 1, got {value!r}")


def _to_stops(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(
            "ModelSettings.stop_sequences must be a list of strings, "
            f"got {type(value).__name__} (wrap a single one: [{value!r}])"
        )
    for stop in value:
        if not isinstance(stop, str) or not stop:
            raise ValueError(
                f"ModelSettings.stop_sequences must hold non-empty strings, got {stop!r}"
            )
    return tuple(value)


def _check_tool_choice(_: Any, __: Any, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(
            "ModelSettings.tool_choice must be 'auto', 'required', 'none' or a tool's name, "
            f"got {type(value).__name__}"
        )
    if value not in TOOL_CHOICE_MODES and not _TOOL_NAME_RE.match(value):
        raise ValueError(
            "ModelSettings.tool_choice must be 'auto', 'required', 'none' or a tool's name, "
            f"got {value!r}"
        )


def _check_bool(name: str) -> Any:
    def check(_: Any, __: Any, value: object) -> None:
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"ModelSettings.{name} must be a bool, got {type(value).__name__}")

    return check


def _check_seed(_: Any, __: Any, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"ModelSettings.seed must be an int, got {type(value).__name__}")


#: ``reasoning_effort`` values some vendor takes (OpenAI's ``reasoning.effort`` and
#: Chat Completions' ``reasoning_effort``; Gemini's ``thinkingLevel``): each
#: provider says which of them it takes.
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def _check_effort(_: Any, __: Any, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"ModelSettings.reasoning_effort must be a str, got {type(value).__name__}")
    if value not in REASONING_EFFORTS:
        raise ValueError(
            f"ModelSettings.reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, "
            f"got {value!r}"
        )


def _check_budget(_: Any, __: Any, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"ModelSettings.thinking_budget must be an int, got {type(value).__name__}")
    if value < -1:
        raise ValueError(
            "ModelSettings.thinking_budget must be a number of tokens (>= 0), or -1 for "
            f"the model's own choice (Gemini), got {value!r}"
        )


def _str_map(name: str, value: object) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"ModelSettings.{name} must be a dict of str, got {value!r}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"ModelSettings.{name} must map str to str, got {key!r}: {item!r}")
        out[key] = item
    return out


def _to_metadata(value: object) -> Mapping[str, str] | None:
    return _str_map("metadata", value)


def _to_headers(value: object) -> Mapping[str, str] | None:
    """The headers, names lower-cased (HTTP names are case-insensitive, so merges are exact)."""
    headers = _str_map("extra_headers", value)
    if headers is None:
        return None
    for key, item in headers.items():
        if not _HEADER_NAME_RE.match(key):
            raise ValueError(f"ModelSettings.extra_headers: {key!r} is not a valid header name")
        if not item.isascii() or not item.isprintable():
            raise ValueError(
                f"ModelSettings.extra_headers[{key!r}]: the value must be printable ASCII "
                "(no line breaks)"
            )
    lowered = {key.lower(): item for key, item in headers.items()}
    if len(lowered) < len(headers):
        raise ValueError("ModelSettings.extra_headers names one header twice (in other cases)")
    return lowered


def _header_names(headers: Mapping[str, str] | None) -> str:
    """Header names only: a value may be a credential (a proxy's token)."""
    return "None" if headers is None else f"<headers {sorted(headers)}>"


def _to_body(value: object) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"ModelSettings.extra_body must be a dict with str keys, got {value!r}")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"ModelSettings.extra_body must be JSON-serializable: {exc}") from None
    return dict(value)


@attrs.frozen(kw_only=True)
class ModelSettings:
    """Sampling and request options for a model call; ``None`` is *unset* (not sent).

    Set on the agent (``Agent(settings=...)``) and per run
    (``rt.start(..., settings=...)``); the run's fields win (:meth:`merge`).

    - ``temperature`` in [0, 2] (Anthropic accepts [0, 1]), ``top_p`` in [0, 1];
    - ``max_tokens``: the output cap; the budget clamp still bounds it (the
      smaller of the two is sent);
    - ``stop_sequences``: strings that end the answer (OpenAI's ``stop``);
    - ``tool_choice``: ``"auto"``, ``"required"`` (some tool must be called),
      ``"none"``, or the name of one of the agent's tools (that tool must be
      called); it applies to every request of the run;
    - ``parallel_tool_calls``: ``False`` asks for at most one call per response;
    - ``seed`` (OpenAI only), ``metadata`` (Anthropic only: ``user_id``);
    - ``reasoning_effort``: how hard a reasoning model thinks (``"none"``,
      ``"minimal"``, ``"low"``, ``"medium"``, ``"high"``, ``"xhigh"``; each
      provider takes some of them: OpenAI's ``reasoning.effort``);
    - ``thinking_budget``: the tokens a model may spend thinking (Anthropic's
      extended thinking ``budget_tokens``, at least 1,024 there; Gemini's
      ``thinkingBudget``, where 0 turns thinking off and -1 lets the model
      choose); thinking tokens are output tokens, so ``max_tokens`` and the
      budget clamp bound them too;
    - ``extra_headers``: sent with each request (names lower-cased; the repr
      shows names only); they may not replace a header tether sets itself (the
      API key's above all);
    - ``extra_body``: merged into the JSON body last; it may add fields but not
      replace one tether sends (use the field above instead), so the clamp and
      the wire format stay tether's.
    """

    temperature: float | None = attrs.field(default=None, validator=_check_temperature)
    top_p: float | None = attrs.field(default=None, validator=_check_top_p)
    max_tokens: int | None = attrs.field(default=None, validator=_check_max_tokens)
    stop_sequences: Sequence[str] | None = attrs.field(default=None, converter=_to_stops)
    tool_choice: str | None = attrs.field(default=None, validator=_check_tool_choice)
    parallel_tool_calls: bool | None = attrs.field(
        default=None, validator=_check_bool("parallel_tool_calls")
    )
    seed: int | None = attrs.field(default=None, validator=_check_seed)
    reasoning_effort: str | None = attrs.field(default=None, validator=_check_effort)
    thinking_budget: int | None = attrs.field(default=None, validator=_check_budget)
    metadata: Mapping[str, str] | None = attrs.field(default=None, converter=_to_metadata)
    extra_headers: Mapping[str, str] | None = attrs.field(
        default=None, converter=_to_headers, repr=_header_names
    )
    extra_body: Mapping[str, Any] | None = attrs.field(default=None, converter=_to_body)

    def merge(self, over: ModelSettings | None) -> ModelSettings:
        """These settings with every field ``over`` sets taken from ``over``."""
        if over is None or over == _UNSET:
            return self
        if self == _UNSET:
            return over
        fields: dict[str, Any] = {}
        for field in attrs.fields(ModelSettings):
            mine, theirs = getattr(self, field.name), getattr(over, field.name)
            if isinstance(mine, Mapping) and isinstance(theirs, Mapping):
                fields[field.name] = {**mine, **theirs}
            else:
                fields[field.name] = mine if theirs is None else theirs
        return ModelSettings(**fields)

    def given(self) -> dict[str, Any]:
        """The fields that are set, by name."""
        return {
            f.name: getattr(self, f.name)
            for f in attrs.fields(ModelSettings)
            if getattr(self, f.name) is not None
        }

    @property
    def is_empty(self) -> bool:
        return self == _UNSET


_UNSET = ModelSettings()


def check_settings(provider: object, settings: ModelSettings) -> None:
    """``ValueError`` unless ``provider`` honours every field ``settings`` sets.

    A provider says what it honours with ``check_settings(settings)``; one
    that has no such method honours no setting at all.
    """
    if settings.is_empty:
        return
    check = getattr(provider, "check_settings", None)
    if check is None:
        raise ValueError(
            f"the provider {type(provider).__name__} does not say which ModelSettings it "
            f"honours (it has no check_settings method), so it cannot take "
            f"{', '.join(sorted(settings.given()))}"
        )
    check(settings)


def refuse(provider: str, settings: ModelSettings, supported: frozenset[str]) -> None:
    """``ValueError`` naming each set field of ``settings`` outside ``supported``."""
    unsupported = sorted(set(settings.given()) - supported)
    if unsupported:
        raise ValueError(
            f"{provider} cannot honour ModelSettings.{', ModelSettings.'.join(unsupported)}; "
            "leave it unset for this provider"
        )


def refuse_overrides(
    provider: str,
    settings: ModelSettings,
    *,
    body_fields: frozenset[str],
    headers: frozenset[str],
) -> None:
    """``ValueError`` when ``extra_body`` or ``extra_headers`` would replace what tether sends."""
    clash = sorted(set(settings.extra_body or ()) & body_fields)
    if clash:
        raise ValueError(
            f"{provider}: ModelSettings.extra_body may not replace {', '.join(map(repr, clash))}, "
            "which tether sends itself; use the ModelSettings field or the provider's "
            "argument instead"
        )
    taken = sorted(k for k in settings.extra_headers or () if k.lower() in headers)
    if taken:
        raise ValueError(
            f"{provider}: ModelSettings.extra_headers may not replace "
            f"{', '.join(map(repr, taken))}, which tether sets itself (the API key goes in "
            "api_key=)"
        )


def extra_headers(
    provider: str, settings: ModelSettings, own: dict[str, str], reserved: frozenset[str]
) -> dict[str, str]:
    """``own`` headers with ``settings.extra_headers`` added; never replacing a reserved one.

    ``Runtime.start`` refuses such settings already; this is the provider's
    own guard for requests built by hand.
    """
    extra = settings.extra_headers or {}
    taken = [k for k in extra if k.lower() in reserved or k.lower() in own]
    if taken:
        raise InvalidRequest(
            f"{provider}: ModelSettings.extra_headers may not replace {', '.join(taken)}"
        )
    return {**own, **extra}


def add_extra_body(body: dict[str, Any], extra: Mapping[str, Any], provider: str) -> None:
    """Merge ``extra`` into ``body`` last, refusing to replace a field tether wrote."""
    clash = sorted(set(extra) & set(body))
    if clash:
        raise InvalidRequest(
            f"{provider}: ModelSettings.extra_body may not replace {', '.join(clash)}"
        )
    body.update(extra)
