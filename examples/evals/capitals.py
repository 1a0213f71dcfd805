"""Two versions of a small offline agent for the eval examples (docs/guides/evals.md).

Both answer "What is the capital of X?" from a table through the ScriptedProvider,
so ``tether eval`` runs without a key or a network::

    tether eval examples/evals/capitals.jsonl --agent examples/evals/capitals.py:agent \\
        --judge exact --out v1.json --html v1.html
    tether eval examples/evals/capitals.jsonl --agent examples/evals/capitals.py:agent_v2 \\
        --judge exact --baseline v1.json

``agent_v2`` is a "refactor" that regressed: it answers some countries with their
largest city instead of the capital.
"""

from __future__ import annotations

import re

import tether
from tether.providers import ModelRequest, Price, ProviderContext, Reply, ScriptedProvider

CAPITALS = {
    "Albania": "Tirana", "Argentina": "Buenos Aires", "Australia": "Canberra",
    "Austria": "Vienna", "Belgium": "Brussels", "Bolivia": "Sucre", "Brazil": "Brasília",
    "Bulgaria": "Sofia", "Canada": "Ottawa", "Chile": "Santiago", "China": "Beijing",
    "Colombia": "Bogotá", "Croatia": "Zagreb", "Cuba": "Havana", "Denmark": "Copenhagen",
    "Egypt": "Cairo", "Estonia": "Tallinn", "Finland": "Helsinki", "France": "Paris",
    "Germany": "Berlin", "Greece": "Athens", "Hungary": "Budapest", "Iceland": "Reykjavík",
    "India": "New Delhi", "Indonesia": "Jakarta", "Ireland": "Dublin", "Italy": "Rome",
    "Japan": "Tokyo", "Kenya": "Nairobi", "Latvia": "Riga", "Lithuania": "Vilnius",
    "Mexico": "Mexico City", "Morocco": "Rabat", "Netherlands": "Amsterdam",
    "New Zealand": "Wellington", "Nigeria": "Abuja", "Norway": "Oslo", "Peru": "Lima",
    "Poland": "Warsaw", "Portugal": "Lisbon", "Romania": "Bucharest", "Spain": "Madrid",
    "Sweden": "Stockholm", "Switzerland": "Bern", "Tanzania": "Dodoma", "Thailand": "Bangkok",
    "Turkey": "Ankara", "Ukraine": "Kyiv", "United States": "Washington, D.C.",
    "Vietnam": "Hanoi",
}  # fmt: skip

#: What agent_v2 gets wrong: the largest city, not the capital.
LARGEST = {
    "Australia": "Sydney", "Brazil": "São Paulo", "Canada": "Toronto", "Morocco": "Casablanca",
    "Nigeria": "Lagos", "Switzerland": "Zurich", "Turkey": "Istanbul",
}  # fmt: skip

QUESTION = re.compile(r"capital of (.+?)\?", re.IGNORECASE)
#: $3 / $15 per million tokens, so the eval has a spend to show.
PRICE = Price(input=3.0, output=15.0)


def _answer(table: dict[str, str]):  # type: ignore[no-untyped-def]
    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        question = next((m.text for m in reversed(request.messages) if m.role == "user"), "")
        match = QUESTION.search(question)
        country = match.group(1).strip() if match else ""
        return Reply(text=table.get(country, "I don't know."))

    return script


def _agent(table: dict[str, str], name: str) -> tether.Agent:
    return tether.Agent(
        name=name,
        instructions="Answer with the name of the city only.",
        provider=ScriptedProvider(_answer(table), latency_s=0.01, cost_per_mtok=PRICE),
    )


agent = _agent(CAPITALS, "capitals")
agent_v2 = _agent({**CAPITALS, **LARGEST}, "capitals-v2")
