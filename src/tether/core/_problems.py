"""A pydantic ``ValidationError`` as one line a person reads: each problem's place and message."""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["validation_problems"]


def validation_problems(err: ValidationError, *, top: str = "(top)") -> str:
    """``field.path: message; …`` for each error of ``err``; ``top`` names the place of an error
    about the whole value. Pydantic's ``Value error, `` prefix of a validator's message is dropped."""
    return "; ".join(
        f"{'.'.join(str(x) for x in e['loc']) or top}: {e['msg'].removeprefix('Value error, ')}"
        for e in err.errors(include_url=False)
    )
