"""A pydantic ``ValidationError`` as one line a person reads: each problem's place and message."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

__all__ = ["validation_problems"]

_KINDS = {str: "a string", int: "a number", float: "a number", bool: "a boolean", list: "a list"}


def validation_problems(err: ValidationError, *, top: str = "(top)") -> str:
    """``field.path: message; …`` for each error of ``err``; ``top`` names the place of an error
    about the whole value. Pydantic's ``Value error, `` prefix of a validator's message is dropped,
    and a section given as a scalar says what it got, not the name of a class the reader never
    wrote (``model: Input should be a valid dictionary of fields, not a string ('gpt-4o')``)."""
    return "; ".join(
        f"{'.'.join(str(x) for x in e['loc']) or top}: {_message(e)}" for e in err.errors(include_url=False)
    )


def _message(e: Any) -> str:
    if e["type"] != "model_type":
        return str(e["msg"]).removeprefix("Value error, ")
    value = e.get("input")
    kind = _KINDS.get(type(value), "null" if value is None else type(value).__name__)
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
    return f"Input should be a valid dictionary of fields, not {kind} ({shown})"
