"""Model backends: the ``Model`` protocol and deterministic stand-ins."""

from tether.models.base import Model, ModelRequest, ModelResponse
from tether.models.test import FunctionModel, ScriptedModel, call, final, injected_calls

__all__ = [
    "FunctionModel",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ScriptedModel",
    "call",
    "final",
    "injected_calls",
]
