"""Model backends: the ``Model`` protocol and the OpenAI-compatible backend. The deterministic
stand-ins (``ScriptedModel``, ``FunctionModel``) are test doubles: they live in ``tether.testing``."""

from tether.models.base import Model, ModelRequest, ModelResponse
from tether.models.openai import OpenAICompatible, RetryPolicy
from tether.models.pricing import Price

__all__ = [
    "Model",
    "ModelRequest",
    "ModelResponse",
    "OpenAICompatible",
    "Price",
    "RetryPolicy",
]
