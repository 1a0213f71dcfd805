"""The price table and its look-up."""

from __future__ import annotations

import pytest

from tether.providers import Price, TokenUsage, price_for
from tether.providers._prices import price_table


@pytest.mark.parametrize(
    ("model", "input_", "output"),
    [
        ("claude-sonnet-4-5", 3.0, 15.0),
        ("claude-sonnet-4-5-20250929", 3.0, 15.0),
        ("claude-opus-4-1-20250805", 15.0, 75.0),
        ("claude-opus-4-20250514", 15.0, 75.0),
        ("claude-opus-4-5-20251101", 5.0, 25.0),
        ("claude-haiku-4-5-20251001", 1.0, 5.0),
        ("claude-3-5-haiku-latest", 0.8, 4.0),
        ("claude-3-5-haiku-20241022", 0.8, 4.0),
        ("claude-sonnet-4-5@20250929", 3.0, 15.0),
        ("gpt-4o", 2.5, 10.0),
        ("gpt-4o-2024-08-06", 2.5, 10.0),
        ("gpt-4o-mini-2024-07-18", 0.15, 0.6),
        ("gpt-4.1-nano-2025-04-14", 0.1, 0.4),
        ("o4-mini-2025-04-16", 1.1, 4.4),
        ("GPT-5-mini", 0.25, 2.0),
        ("gemini-2.5-flash", 0.3, 2.5),
        ("gemini-2.5-pro", 1.25, 10.0),
        ("Gemini-2.0-flash", 0.1, 0.4),
    ],
)
def test_known_models(model: str, input_: float, output: float) -> None:
    """Known models, dated or any case, get their input and output prices."""
    price = price_for(model)
    assert price is not None
    assert (price.input, price.output) == (input_, output)


@pytest.mark.parametrize(
    "model",
    [
        "my-local-llama",
        "claude-opus-4-9",  # a new model is not priced as an old one
        "gpt-4o-audio-preview",
        "gpt-4o-mini-tts",
        "claude",
        "",
    ],
)
def test_unknown_models_cost_none_never_zero(model: str) -> None:
    """Unknown models have no price (None), never a zero one."""
    assert price_for(model) is None


def test_cache_prices_and_cost() -> None:
    """Cache read and write prices are kept and counted in cost(); missing ones stay None."""
    price = price_for("claude-sonnet-4-5")
    assert price == Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    usage = TokenUsage(
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_read_tokens=1_000_000,
        cache_write_tokens=1_000_000,
    )
    assert price.cost(usage) == pytest.approx(3.0 + 15.0 + 0.3 + 3.75)
    openai = price_for("gpt-4.1")
    assert openai is not None
    assert openai.cache_read == 0.5
    assert openai.cache_write is None


def test_table_loaded_once_and_valid() -> None:
    """The price table is loaded once, keyed lower-case, with positive prices, output >= input."""
    table = price_table()
    assert table is price_table()
    assert len(table) >= 20
    for model, price in table.items():
        assert model == model.lower()
        assert price.input > 0
        assert price.output >= price.input, model
