"""A pydantic ``ValidationError`` as one line a person reads: each problem's place and message."""

from __future__ import annotations

import difflib
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

__all__ = ["validation_problems"]

_KINDS = {str: "a string", int: "a number", float: "a number", bool: "a boolean", list: "a list"}


def validation_problems(
    err: ValidationError, *, top: str = "(top)", model: type[BaseModel] | None = None
) -> str:
    """``field.path: message; …`` for each error of ``err``; ``top`` names the place of an error
    about the whole value. Pydantic's ``Value error, `` prefix of a validator's message is dropped,
    and a section given as a scalar says what it got, not the name of a class the reader never
    wrote (``model: Input should be a valid dictionary of fields, not a string ('gpt-4o')``).
    Given the ``model`` validated, a key it does not know names the closest one it does
    (``modle: Extra inputs are not permitted (did you mean model?)``)."""
    return "; ".join(
        f"{'.'.join(str(x) for x in e['loc']) or top}: {_message(e, model)}"
        for e in err.errors(include_url=False)
    )


def _fields_at(model: Any, loc: tuple[Any, ...]) -> list[str]:
    """The field names (and aliases) of the model found at ``loc`` from ``model``; [] where the
    path leads to no model."""
    here: Any = model
    for step in loc:
        origin, args = get_origin(here), get_args(here)
        if origin in (Union, types.UnionType):
            here = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
            origin, args = get_origin(here), get_args(here)
        if isinstance(step, int) and origin in (list, tuple, set, frozenset) and args:
            here = args[0]
        elif isinstance(here, type) and issubclass(here, BaseModel) and step in here.model_fields:
            here = here.model_fields[step].annotation
        elif origin is dict and len(args) == 2:
            here = args[1]
        else:
            return []
    if get_origin(here) in (Union, types.UnionType):
        here = next((a for a in get_args(here) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    if not (isinstance(here, type) and issubclass(here, BaseModel)):
        return []
    return [n for name, f in here.model_fields.items() for n in (name, f.alias) if n]


def _message(e: Any, model: type[BaseModel] | None = None) -> str:
    if e["type"] == "extra_forbidden" and model is not None and e["loc"]:
        key = str(e["loc"][-1])
        close = difflib.get_close_matches(key, _fields_at(model, tuple(e["loc"][:-1])), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return str(e["msg"]) + hint
    if e["type"] != "model_type":
        return str(e["msg"]).removeprefix("Value error, ")
    value = e.get("input")
    kind = _KINDS.get(type(value), "null" if value is None else type(value).__name__)
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
    return f"Input should be a valid dictionary of fields, not {kind} ({shown})"
