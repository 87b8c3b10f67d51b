"""Parsing the model's raw tool-call arguments before anything else looks at them.

Refusals are ``PolicyError`` with a machine-readable ``reason``. Nothing is coerced.
"""

from __future__ import annotations

import json
import math
from typing import Any

from tether.errors import PolicyError

__all__ = ["MAX_PROPOSAL_BYTES", "parse_arguments"]

MAX_PROPOSAL_BYTES = 4096


def _reject_constant(name: str) -> Any:
    raise PolicyError("non_standard_json", f"non-standard JSON constant {name}")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise PolicyError("duplicate_key", f"duplicate key {key!r}")
        out[key] = value
    return out


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise PolicyError("number_overflow", f"number {text[:40]} is not finite")
    return value


def parse_arguments(raw: str) -> dict[str, Any]:
    """Parse a JSON object of arguments strictly; raises ``PolicyError``."""
    try:
        size = len(raw.encode("utf-8"))
    except UnicodeEncodeError:
        raise PolicyError("not_utf8", "arguments are not encodable as UTF-8") from None
    if size > MAX_PROPOSAL_BYTES:
        raise PolicyError("too_large", f"arguments are {size} bytes; the limit is {MAX_PROPOSAL_BYTES}")
    if not raw.strip():
        raw = "{}"
    try:
        value = json.loads(
            raw, object_pairs_hook=_pairs, parse_constant=_reject_constant, parse_float=_finite
        )
    except PolicyError:
        raise
    except (ValueError, RecursionError) as err:
        raise PolicyError("invalid_json", f"arguments are not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise PolicyError("not_an_object", "arguments must be a JSON object")
    return value
