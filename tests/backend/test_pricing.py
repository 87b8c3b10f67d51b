"""Prices per model: lookup, cost of a call, and strict loading of a price table (SPEC E5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.core.messages import Usage
from tether.errors import ConfigError
from tether.models._pricing import DEFAULT_PRICES, Price, load_prices, price_for


@pytest.mark.spec("E5")
def test_a_model_is_priced_by_exact_name_then_longest_prefix() -> None:
    table = {"gpt-4o": Price(2.5, 10.0), "gpt-4o-mini": Price(0.15, 0.6)}
    assert price_for("gpt-4o-mini-2024-07-18", table) == Price(0.15, 0.6)
    assert price_for("gpt-4o-2024-08-06", table) == Price(2.5, 10.0)
    assert price_for("llama3", table) is None
    assert price_for("deepseek-chat", DEFAULT_PRICES) is not None


@pytest.mark.spec("E5")
def test_cached_prompt_tokens_are_billed_at_the_cached_rate() -> None:
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=500_000, cached_tokens=400_000)
    assert Price(2.0, 8.0, 0.5).cost(usage) == pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 0.5 * 8.0)
    assert Price(2.0, 8.0).cost(usage) == pytest.approx(1.0 * 2.0 + 0.5 * 8.0)  # no cached rate: full price


def test_a_price_table_file_is_loaded_strictly(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"local-model": {"input": 0.1, "output": 0.2, "cached_input": 0.01}}))
    assert load_prices(path) == {"local-model": Price(0.1, 0.2, 0.01)}

    for bad, message in (
        ({"m": {"input": "0.1", "output": 1}}, "input must be a non-negative number, got '0.1'"),
        ({"m": {"input": True, "output": 1}}, "input must be a non-negative number, got True"),
        ({"m": {"input": -1, "output": 1}}, "input must be a non-negative number, got -1"),
        ({"m": {"input": 1}}, "input and output are required"),
        ({"m": {"input": 1, "output": 1, "discount": 0.5}}, "expected keys input, output"),
        (["not", "a", "table"], "must be a JSON object"),
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=message):
            load_prices(path)
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read price table"):
        load_prices(path)
