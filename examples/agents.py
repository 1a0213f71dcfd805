"""An agent for ``tether run``: offline by default, real with ``--provider``.

    tether run examples/agents.py:agent "What is 2 + 3?"
    tether run examples/agents.py:agent "What is 2 + 3?" --provider openai --model gpt-4.1-mini
    tether run examples/agents.py:agent "What is 2 + 3?" --provider openai \\
        --base-url http://127.0.0.1:11434/v1 --model llama3.1
"""

from __future__ import annotations

import tether
from tether.providers import Reply, ScriptedProvider, ToolCall


@tether.tool
async def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


@tether.tool
async def multiply(a: float, b: float) -> float:
    """Multiply two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a * b


agent = tether.Agent(
    name="calculator",
    instructions="Answer arithmetic questions. Use the tools for every operation.",
    provider=ScriptedProvider(
        [
            Reply(
                text="Let me compute.",
                tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3})],
            ),
            Reply(text="2 + 3 = 5."),
        ]
    ),
    tools=[add, multiply],
    judge=tether.RuleJudge({"gives_a_number": lambda c: any(ch.isdigit() for ch in c.text)}),
    limits=tether.Limits(max_steps=6, max_total_tokens=20_000, timeout_s=60),
)
