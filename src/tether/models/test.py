"""Moved to ``tether.testing``; this module only re-exports the stand-ins for old imports."""

from tether.testing.models import (
    FunctionModel,
    ModelFunction,
    ScriptedModel,
    Turn,
    call,
    estimate_tokens,
    final,
    injected_calls,
    tool_results,
)

__all__ = [
    "FunctionModel",
    "ModelFunction",
    "ScriptedModel",
    "Turn",
    "call",
    "estimate_tokens",
    "final",
    "injected_calls",
    "tool_results",
]
