"""Test doubles shipped with tether, for tests, demos and scripts: model stand-ins
(``ScriptedModel``, ``FunctionModel``) and helpers to write them (``call``, ``final``,
``tool_results``, ``injected_calls``, ``estimate_tokens``). The harness uses some itself, so they
stay in the library; the local chat-completions server for backend tests is ``tether_testing``.
"""

from tether.testing._models import (
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
