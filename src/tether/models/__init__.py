"""Model backends: the ``Model`` protocol, deterministic stand-ins, the OpenAI-compatible backend."""

from tether.models.base import Model, ModelRequest, ModelResponse
from tether.models.openai import OpenAICompatible, RetryPolicy
from tether.models.pricing import Price
from tether.models.test import FunctionModel, ScriptedModel, call, final, injected_calls

__all__ = [
    "FunctionModel",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "OpenAICompatible",
    "Price",
    "RetryPolicy",
    "ScriptedModel",
    "call",
    "final",
    "injected_calls",
]
