"""Typed output (docs/guides/typed-output.md): ``Agent(output_type=T, output_mode=...)``.

With ``output_type=str`` (the default) none of this exists: no output tool,
no check, nothing on the round's path.

**Tool mode** (the default, every provider). The model gets one more tool,
``final_result``, whose input schema is ``T``'s (a non-object ``T`` is
wrapped: ``{"result": <value>}``). In a tool round the ``final_result``
calls are considered first, in the model's order:

- a call whose arguments validate is the round's candidate: its typed value
  is ``Candidate.output``, its JSON text ``Candidate.text``; it is judged like
  any candidate, and the run ends ``answered`` with ``RunResult.output`` the
  value. Its ``tool_use`` is answered (``"final result received"``), so the
  transcript stays valid for a next turn.
- a call that does not validate is answered with one is_error result listing
  every problem (outcome ``model_error``); with no valid call the round is
  ``continue``.
- the first valid call wins; a later ``final_result`` in the same response
  is answered "not used", and the response's other tool calls are not run
  (answered "not run"): the answer is given, and a tool may have side effects.
- each ``final_result`` call that is checked counts toward ``max_tool_calls``;
  past it, the call is denied and the run ends ``max_tool_calls``. It is not
  a tool call to ``tool_call`` policies and not subject to repeat detection
  (the same bad arguments get the same problems back).

A text answer without ``final_result`` is not an answer: the model is asked
(a user message, :data:`OUTPUT_NUDGE`) to call it, and the round is
``continue`` with reason ``output_nudge`` (a step, so a model that never calls
it ends at ``max_steps``).

**Native mode** uses the provider's structured-output mode: the request
carries an :class:`~tether.providers.OutputFormat` (OpenAI's
``response_format: json_schema``, Anthropic's ``output_config.format``), no
output tool is offered, and a text
answer is parsed as JSON and validated; an invalid one is sent back as a
user message listing the problems (``continue``, reason ``output_invalid``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import attrs

from tether.actors import OUTPUT_TOOL, OutputSchema, ToolError, ToolSpec
from tether.providers import Message, OutputFormat, TextBlock, ToolResultBlock, ToolUseBlock

from ._events import ToolOutcome
from ._limits import Termination
from ._state import Decision, RunState

OutputMode = Literal["tool", "native"]

#: What a round with a valid ``final_result`` returns to the Run (judge it, then answer).
OUTPUT_GIVEN = Decision("continue", "final_result")

OUTPUT_NUDGE = (
    f"Give your answer by calling the {OUTPUT_TOOL} tool with it; a plain text answer "
    "is not accepted."
)
OUTPUT_RECEIVED = "final result received"
OUTPUT_LATER = f"not used: an earlier {OUTPUT_TOOL} call in this response was accepted"
OUTPUT_FIRST = f"not run: the final result was given in this response ({OUTPUT_TOOL})"

_DESCRIPTION = (
    "Give your final answer. Call this exactly once, when you have the answer, with the answer "
    "as its arguments; it ends your turn."
)


async def _never(**_: Any) -> None:  # pragma: no cover - the run answers final_result itself
    raise AssertionError(f"{OUTPUT_TOOL} is answered by the run itself")


@attrs.frozen(kw_only=True, eq=False)
class TypedOutput:
    """An agent's typed output: its schema, its mode, and what the run offers for it."""

    schema: OutputSchema
    mode: OutputMode
    #: The ``final_result`` tool (tool mode), never executed: the run answers it.
    tool: ToolSpec | None
    #: The native response format (native mode).
    format: OutputFormat | None

    @classmethod
    def of(cls, output_type: Any, mode: object) -> TypedOutput | None:
        """``None`` for ``str``; raises ``TypeError``/``ValueError`` for what cannot work."""
        if mode not in ("tool", "native"):
            raise ValueError(f"Agent.output_mode must be 'tool' or 'native', got {mode!r}")
        if output_type is str:
            if mode == "native":
                raise ValueError("Agent(output_mode='native') needs an output_type other than str")
            return None
        schema = OutputSchema.of(output_type)
        if mode == "native":
            strict = _strict_ok(schema.schema)
            fmt = OutputFormat(name=OUTPUT_TOOL, schema=schema.schema, strict=strict)
            return cls(schema=schema, mode="native", tool=None, format=fmt)
        spec = ToolSpec(
            name=OUTPUT_TOOL,
            description=_DESCRIPTION,
            input_schema=schema.schema,
            fn=_never,
            is_async=True,
            terminal=True,
        )
        return cls(schema=schema, mode="tool", tool=spec, format=None)

    # ------------------------------------------------------------- tool mode

    def check_calls(
        self, calls: Sequence[ToolUseBlock], state: RunState, budget: int | None
    ) -> tuple[dict[str, tuple[ToolOutcome, str, int]], bool, bool]:
        """Check the response's ``final_result`` calls in order (see the module docstring).

        Returns each output call's ``(outcome, content, attempts)``, whether one
        was accepted (its value is then the round's candidate) and whether the
        tool-call budget stopped one.
        """
        settled: dict[str, tuple[ToolOutcome, str, int]] = {}
        won = budget_hit = False
        meter = state.usage
        for call in calls:
            if call.name != OUTPUT_TOOL:
                continue
            if won:
                settled[call.id] = ("denied", OUTPUT_LATER, 0)
            elif budget is not None and meter.tool_calls >= budget:
                budget_hit = True
                why = f"not run: the run's tool call budget ({budget}) is spent"
                settled[call.id] = ("denied", why, 0)
            else:
                meter.tool_calls += 1
                try:
                    value = self.schema.validate(call.input)
                except ToolError as exc:
                    settled[call.id] = ("model_error", f"{exc}. Call {OUTPUT_TOOL} again.", 1)
                    continue
                won = True
                state.candidate, state.candidate_value = self.schema.text(value), value
                settled[call.id] = ("ok", OUTPUT_RECEIVED, 1)
        return settled, won, budget_hit

    # ------------------------------------------------------------ text answers

    def text_answer(self, state: RunState) -> Decision | None:
        """A text answer: ``None`` when it is the round's candidate, else the ``continue``."""
        if self.mode == "tool":
            state.candidate = None
            state.messages.append(Message.user(OUTPUT_NUDGE))
            return Decision("continue", "output_nudge")
        try:
            state.candidate_value = self.schema.parse(state.candidate or "")
        except ToolError as exc:
            state.candidate = None
            state.messages.append(Message.user(f"{exc}. Answer again with the corrected JSON."))
            return Decision("continue", "output_invalid")
        return None

    def result(self, state: RunState, termination: Termination) -> Any:
        """``RunResult.output``: the typed value of the answer (or the last candidate)."""
        if termination in (Termination.ANSWERED, Termination.QUALITY_EXHAUSTED):
            return state.candidate_value
        return None


def add_user_text(messages: list[Message], text: str) -> None:
    """Append ``text`` as a user turn; after a turn of tool results, inside that turn.

    A typed candidate's ``final_result`` is answered by a user turn of tool
    results; the judge's feedback joins it, so the roles keep alternating.
    """
    last = messages[-1] if messages else None
    if last is not None and last.role == "user" and isinstance(last.content[-1], ToolResultBlock):
        messages[-1] = Message(role="user", content=(*last.content, TextBlock(text=text)))
    else:
        messages.append(Message.user(text))


def _strict_ok(schema: Any) -> bool:
    """Whether OpenAI's strict mode takes ``schema``.

    Strict mode wants every object closed with every key required, a type on
    every value (``Any`` has none), items on every array, and no ``default``
    or ``uniqueItems``.
    """
    if not isinstance(schema, dict) or "default" in schema or "uniqueItems" in schema:
        return False
    if "anyOf" in schema:
        return all(_strict_ok(member) for member in schema["anyOf"])
    kind = schema.get("type")
    if kind is None:
        return False
    if kind == "object":
        props = schema.get("properties")
        if not isinstance(props, dict) or schema.get("additionalProperties") is not False:
            return False  # a dict[str, X] has open keys
        return set(schema.get("required", ())) == set(props) and all(
            _strict_ok(value) for value in props.values()
        )
    if kind == "array":
        return _strict_ok(schema.get("items"))
    return True
