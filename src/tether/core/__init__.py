"""The vocabulary every package shares: value types (``types``), chat messages
(``messages``), stop reasons and limits (``stop``), handoffs (``handoff``), rate limits
(``ratelimit``); the JSON Schema engine and the look-alike check. It imports nothing of
tether's but ``tether.errors``."""

__all__: list[str] = []
