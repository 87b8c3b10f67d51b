"""Prices per model, and the cost of one call's usage.

Prices are USD per million tokens: ``input`` for uncached prompt tokens, ``cached_input`` for
prompt tokens the provider served from its prefix cache, ``output`` for completion tokens
(reasoning tokens are billed as output), ``cache_write`` for prompt tokens the provider wrote to
its cache (Anthropic bills them apart; ``Usage.extra["cache_write_tokens"]``). The built-in
table is a starting point — providers change prices — so every backend takes its own table
(``prices=``) or a JSON file (``load_prices``). A model found in no table costs 0.0 and is
reported as unpriced, so a cost budget cannot silently pass for a model nobody priced (see
``OpenAICompatible``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tether.core.messages import Usage
from tether.errors import ConfigError

__all__ = ["DEFAULT_PRICES", "Price", "load_prices", "price_for"]


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cached_input: float | None = None  # None: cached tokens cost the same as input
    cache_write: float | None = None  # None: tokens written to the cache cost the same as input

    def cost(self, usage: Usage) -> float:
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        written = min(int(usage.extra.get("cache_write_tokens", 0) or 0), usage.prompt_tokens - cached)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        write_rate = self.input if self.cache_write is None else self.cache_write
        fresh = usage.prompt_tokens - cached - written
        prompt = fresh * self.input + cached * cached_rate + written * write_rate
        return (prompt + usage.completion_tokens * self.output) / 1_000_000


# Published list prices at the time of writing; override with your own table.
DEFAULT_PRICES: Mapping[str, Price] = {
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "o4-mini": Price(1.10, 4.40, 0.275),
    "deepseek-chat": Price(0.27, 1.10, 0.07),
    "deepseek-reasoner": Price(0.55, 2.19, 0.14),
    # Anthropic: cache reads 0.1x input, 5-minute cache writes 1.25x input
    "claude-opus-4-5": Price(5.00, 25.00, 0.50, 6.25),
    "claude-opus-4": Price(15.00, 75.00, 1.50, 18.75),
    "claude-sonnet-4": Price(3.00, 15.00, 0.30, 3.75),
    "claude-haiku-4-5": Price(1.00, 5.00, 0.10, 1.25),
}


def price_for(model: str, table: Mapping[str, Price]) -> Price | None:
    """Exact name first, then the longest table key the name starts with (``gpt-4o-2024-08-06``)."""
    if model in table:
        return table[model]
    best = max((k for k in table if model.startswith(k)), key=len, default=None)
    return table[best] if best is not None else None


def load_prices(path: str | Path) -> dict[str, Price]:
    """Read ``{"model": {"input": 2.5, "output": 10, "cached_input": 1.25, "cache_write": 3.1}, ...}``
    (``cached_input`` and ``cache_write`` optional); raises ``ConfigError``."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot read price table {path}: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"price table {path} must be a JSON object of model -> prices")
    table: dict[str, Price] = {}
    for model, entry in raw.items():
        if not isinstance(entry, dict) or set(entry) - {"input", "output", "cached_input", "cache_write"}:
            raise ConfigError(f"price of {model!r}: expected keys input, output[, cached_input, cache_write]")
        if "input" not in entry or "output" not in entry:
            raise ConfigError(f"price of {model!r}: input and output are required")
        for key, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"price of {model!r}: {key} must be a non-negative number, got {value!r}")
        table[model] = Price(
            float(entry["input"]), float(entry["output"]), entry.get("cached_input"), entry.get("cache_write")
        )
    return table
