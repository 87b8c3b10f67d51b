"""Pausing a run for approval and resuming it, possibly in another process.

A run whose model proposes calls that need approval stores them as pending proposals, checkpoints
its state in the approval store and stops ``approval_required`` before any call of that turn
runs. ``resume_run`` restores the state and settles the same turn again: approved calls run with
their *stored* arguments (through the effect ledger, never twice), a denied or invalidated one
ends the run ``approval_denied``, a pending one pauses it again. The checkpoint holds the run's
working state only; the agent's configuration and the host's authority are rebuilt by the app.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from typing import Any, Final, Literal

from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from pydantic_core import PydanticSerializationError, to_jsonable_python

from tether.core.messages import AssistantMessage, ToolCall, ToolMessage
from tether.errors import ApprovalError
from tether.runs._values import RunState
from tether.trace._tracer import read_trace

CHECKPOINT_VERSION: Final = 2

# Fields added to ``RunState`` after a release that wrote version 2, with their defaults: stored
# only when not the default, so an older worker (rolling upgrade, rollback; ``extra="forbid"``)
# still reads a checkpoint that does not use them.
_LATER_FIELDS: Final[dict[str, Any]] = {
    "request": None,
    "inherited_observations": [],
    "inherited_calls": [],
    "parent_run": None,
    "handed_down": [],
}


# The checkpoint is the run state as pydantic serialises it by its type hints, with a
# ``version`` beside the fields (version 1 is still read). Fields typed ``Any`` come back in
# their JSON form (string keys, lists for tuples and sets, objects for models and dataclasses,
# ISO strings for datetimes); a value with no JSON form is refused by name
# (``CheckpointError("unserializable_state")``), never dropped quietly.


class CheckpointError(ApprovalError):
    """A checkpoint that cannot be written (``unserializable_state``) or read back
    (``bad_checkpoint``: not JSON, unknown version, or not the run-state schema)."""


@with_config(ConfigDict(extra="forbid"))
@dataclasses.dataclass
class _Checkpoint(RunState):
    """What is stored: every field of the run state, and the format's version."""

    version: Literal[2] = 2


@functools.cache
def _adapters() -> tuple[TypeAdapter[RunState], TypeAdapter[_Checkpoint]]:
    # Pydantic resolves RunState's forward reference to MemoryRecord in this frame (imported
    # here: tether.memory imports the run machinery).
    from tether.memory import MemoryRecord  # noqa: F401

    return TypeAdapter(RunState), TypeAdapter(_Checkpoint)


def _json_form(value: Any) -> Any:
    return to_jsonable_python(value, inf_nan_mode="constants")


def _encode(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=_json_form)
    text.encode("utf-8")  # a lone surrogate cannot be stored as text: fail here, by name
    return text


def _culprit(value: Any, path: str) -> str:
    """Where in ``value`` the first part without a JSON form sits (called only on failure)."""
    if isinstance(value, dict):
        children: list[tuple[str, Any]] = [(f"{path}[{k!r}]", v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = [(f"{path}.{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value)]
    else:
        return path
    for where, child in children:
        try:
            _encode(child)
        except (PydanticSerializationError, TypeError, ValueError, UnicodeEncodeError):
            return _culprit(child, where)
    return path


def state_to_json(s: RunState) -> str:
    """The checkpoint of a run's working state, as JSON text. Raises ``CheckpointError``
    (``unserializable_state``) when a value has no JSON form."""
    fields = _adapters()[0].dump_python(s, mode="python")
    for name, default in _LATER_FIELDS.items():
        if fields.get(name, default) == default:
            fields.pop(name, None)
    try:
        return _encode({"version": CHECKPOINT_VERSION, **fields})
    except (PydanticSerializationError, TypeError, ValueError, UnicodeEncodeError) as err:
        where = _culprit(s, "state")
        raise CheckpointError(
            "unserializable_state", f"cannot checkpoint {where}: {type(err).__name__}: {err}"
        ) from None


def checkpoint_tenant(state: str) -> str | None:
    """The tenant of the run a stored checkpoint holds (``None`` if its state does not say, or
    names it as anything but text: a JSON ``null`` is no tenant named ``None``)."""
    try:
        tenant = json.loads(state)["context"]["tenant"]
    except (ValueError, KeyError, TypeError):
        return None
    return tenant if isinstance(tenant, str) else None


def checkpoint_parent(state: str) -> str | None:
    """The run that started the run a stored checkpoint holds (``RunState.parent_run``), if any."""
    try:
        parent = json.loads(state).get("parent_run")
    except (ValueError, AttributeError):
        return None
    return parent if isinstance(parent, str) else None


def state_from_json(text: str) -> RunState:
    """Rebuild a ``RunState`` from ``state_to_json`` (version 2, or the older version 1); the
    deadline clock restarts on resume. Raises ``CheckpointError`` (``bad_checkpoint``)."""
    adapter = _adapters()[1]
    try:
        doc = adapter.validate_json(text, strict=True)
    except ValidationError as err:
        doc = _validate_older(adapter, text, err)
    state = RunState(**{f.name: getattr(doc, f.name) for f in dataclasses.fields(RunState)})
    state.started = time.monotonic()
    return state


def _validate_older(adapter: TypeAdapter[_Checkpoint], text: str, err: ValidationError) -> _Checkpoint:
    try:
        data = json.loads(text)
    except ValueError:
        raise CheckpointError("bad_checkpoint", "the checkpoint is not JSON") from None
    version = data.get("version") if isinstance(data, dict) else None
    if version == CHECKPOINT_VERSION:
        raise CheckpointError("bad_checkpoint", f"the checkpoint does not fit the run state: {err}") from None
    if version != 1:
        raise CheckpointError("bad_checkpoint", f"checkpoint version {version!r} is not supported")
    # Version 1 held the same fields without the monotonic start (reset on resume anyway).
    upgraded = {**data, "version": CHECKPOINT_VERSION, "started": 0.0}
    try:
        return adapter.validate_json(json.dumps(upgraded), strict=True)
    except ValidationError as err1:
        raise CheckpointError("bad_checkpoint", f"the version 1 checkpoint does not fit: {err1}") from None


# -- resuming ----------------------------------------------------------------------------------


def restore_trace(tracer: Any, path: Any) -> None:
    """Load the events already written for this run so the tracer continues their numbering."""
    if path is None or not path.exists():
        return
    tracer.restore(read_trace(path))  # after every event written, of kinds this release knows or not


def pending_calls(state: RunState) -> list[ToolCall]:
    """The tool calls of the turn a checkpoint stopped at (the last assistant message)."""
    for m in reversed(state.trajectory):
        if isinstance(m, AssistantMessage):
            answered = {x.tool_call_id for x in state.trajectory if isinstance(x, ToolMessage)}
            return [c for c in m.tool_calls if c.id not in answered]
    return []
