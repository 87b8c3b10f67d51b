"""What a tool's function receives, as JSON-like data the policy can judge.

``Tool.received`` validates the call's JSON as the call will run and reads the values pydantic
hands the function. They are read here directly, never through the model's serializers: a
serializer may print a value back in the form it was given (``Base64Str`` re-encodes the account
it decoded, a ``PlainSerializer`` can undo its ``BeforeValidator``) or fail on a value it cannot
print (a validator that builds a domain object), and either way the policy would judge the form
the model wrote instead of the one the tool gets. A field the call left out is left out here
only where the static default its schema states filled it (the policy reads the schema's
defaults itself); what a ``default_factory`` fills is in no schema (one that reads the other
arguments fills it from what the model gave), so that is received, and judged, like any other
argument.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import itertools
import typing
from collections import UserString
from collections.abc import Iterator, Mapping, Sequence, Set
from typing import Any

from pydantic import AliasChoices, AliasPath, BaseModel, RootModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from tether.core._bytes import bytes_text

__all__ = ["as_data"]

_DEPTH = 64


def as_data(value: Any, depth: int = 0) -> Any:
    """``value`` (what pydantic gives the function) as JSON-like data: models and dataclasses as
    objects keyed as the schema names their fields (a root model as its root), containers as
    lists and objects, a secret of any kind as what it holds, bytes as the text they hold
    (``bytes_text``), and anything else by its own text (``str``)."""
    if depth > _DEPTH:
        return _text(value)
    if value is None or (isinstance(value, bool | int | float) and not isinstance(value, enum.Enum)):
        return value
    if isinstance(value, enum.Enum):
        return as_data(value.value, depth + 1)
    if isinstance(value, str):
        return str.__str__(value)  # its characters, whatever a subclass prints
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes_text(bytes(value))
    secret = _secret(value)
    if secret is not _NONE:
        return as_data(secret, depth + 1)
    if isinstance(value, RootModel):
        return as_data(value.root, depth + 1)  # the value its schema describes, not ``{"root": …}``
    if isinstance(value, BaseModel):
        return _model(value, depth)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _dataclass(value, depth)
    if isinstance(value, Mapping):
        return {str(as_data(k, depth + 1)): as_data(v, depth + 1) for k, v in value.items()}
    if isinstance(value, Sequence | Set) and not isinstance(value, UserString):  # a list, a deque…
        return [as_data(v, depth + 1) for v in value]
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, Iterator):
        return _items(value, depth)
    return _text(value)


_ITEMS = 10_000
_NONE = object()


def _secret(value: Any) -> Any:
    """What a secret holds (``SecretStr``, ``SecretBytes``, a ``Secret[...]`` of any type, a type
    of the author's own with ``get_secret_value``): its text prints a mask, the function reads
    the value. ``_NONE`` for anything else."""
    reveal = getattr(type(value), "get_secret_value", None)
    if not callable(reveal):
        return _NONE
    try:
        return reveal(value)
    except Exception:  # its own reader failed: nothing it holds can be told
        return f"<unreadable {type(value).__name__}>"


def _items(values: Iterator[Any], depth: int) -> list[Any]:
    """An iterator's items (``Iterable[...]`` gives the function pydantic's lazy iterator over
    the list the call sent, each item validated as it is drawn): the items the function will
    draw, read from this copy, up to ``_ITEMS``; an item that fails to validate ends them."""
    out: list[Any] = []
    try:
        for item in itertools.islice(values, _ITEMS):
            out.append(as_data(item, depth + 1))
    except Exception:  # the function would meet the same failure there
        out.append(f"<unreadable {type(values).__name__}>")
    return out


def _text(value: Any) -> str:
    """A value of a type of the tool's own, by its text: what it says it holds. One whose text
    cannot be read is judged as text that traces to nothing (a reviewer decides)."""
    try:
        return str(value)
    except Exception:  # its own __str__ failed: nothing it holds can be told
        return f"<unreadable {type(value).__name__}>"


def _model(model: BaseModel, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    given = model.model_fields_set
    for name, info in type(model).model_fields.items():
        value = getattr(model, name, None)
        if name not in given and _authors_default(info, value):
            continue
        out[schema_key(name, info)] = as_data(value, depth + 1)
    for key, value in (model.model_extra or {}).items():  # ``extra="allow"``: kept as received
        out.setdefault(str(key), as_data(value, depth + 1))
    return out


def _authors_default(info: FieldInfo, value: Any) -> bool:
    """Whether a field the call left out holds the static default its schema states (still that
    value): the policy reads those itself. What a ``default_factory`` fills is in no schema (a
    deposit's amount a factory gives is judged against the user's figure like any other), so it
    is received, and judged, unless it holds nothing (an empty list) and reads no argument."""
    if info.default_factory is not None:  # ``list``, ``dict``: nothing in it to judge
        return not info.default_factory_takes_validated_data and _empty(value)
    return info.default is not PydanticUndefined and _equal(value, info.default)


def _empty(value: Any) -> bool:
    return value is None or (
        isinstance(value, Sequence | Set | Mapping) and not isinstance(value, str | bytes) and not value
    )


def _dataclass(value: Any, depth: int) -> dict[str, Any]:
    """A dataclass's fields keyed as its schema names them (a pydantic ``Field`` alias), those the
    author's default fills left out."""
    infos = _field_infos(type(value))
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        item = getattr(value, f.name, None)
        info = infos.get(f.name)
        if info is not None and _authors_default(info, item):
            continue
        if info is None and f.default is not dataclasses.MISSING and _equal(item, f.default):
            continue
        out[schema_key(f.name, info) if info is not None else f.name] = as_data(item, depth + 1)
    return out


def _field_infos(cls: type) -> dict[str, FieldInfo]:
    """What pydantic reads of a dataclass's fields (their aliases and defaults): a pydantic
    dataclass's own, a standard one's from its annotations (``Annotated[str, Field(alias=...)]``,
    ``= Field(...)``). Empty where they cannot be read. Read once per class."""
    own = getattr(cls, "__pydantic_fields__", None)
    if isinstance(own, dict):
        return own
    if cls not in _INFOS:
        if len(_INFOS) >= 256:
            _INFOS.clear()
        _INFOS[cls] = _annotated_infos(cls)
    return _INFOS[cls]


_INFOS: dict[type, dict[str, FieldInfo]] = {}


def _annotated_infos(cls: type) -> dict[str, FieldInfo]:
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
        return {
            f.name: FieldInfo.from_annotated_attribute(
                hints[f.name], PydanticUndefined if f.default is dataclasses.MISSING else f.default
            )
            for f in dataclasses.fields(cls)
        }
    except Exception:  # an annotation that does not resolve: keyed by field name
        return {}


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # a value that cannot be compared is judged
        return False


def schema_key(name: str, info: FieldInfo) -> str:
    """The name the argument schema (validation mode, by alias) gives the field ``name``: a
    validation alias, or of several (``AliasChoices``) the first that is one key, as pydantic
    names the property (an ``AliasPath`` alone names none: the field's alias or name)."""
    alias = info.validation_alias
    if isinstance(alias, str):
        return alias
    for choice in alias.choices if isinstance(alias, AliasChoices) else []:
        if isinstance(choice, str):
            return choice
        if isinstance(choice, AliasPath) and len(choice.path) == 1 and isinstance(choice.path[0], str):
            return choice.path[0]
    return info.alias or name
