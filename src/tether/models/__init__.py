"""Model backends: the ``Model`` protocol and one backend per protocol — ``OpenAICompatible``
(chat completions), ``OpenAIResponses`` (the OpenAI Responses API), ``AnthropicMessages`` (the
Anthropic Messages API) — and ``FallbackModel`` over several. The SDK-based backends import
their SDK on first use. The deterministic stand-ins (``ScriptedModel``, ``FunctionModel``) are
test doubles: they live in ``tether.testing``."""

from tether.models._anthropic import AnthropicMessages
from tether.models._base import Model, ModelRequest, ModelResponse
from tether.models._fallback import FallbackModel
from tether.models._openai import OpenAICompatible
from tether.models._pricing import Price
from tether.models._responses import OpenAIResponses
from tether.models._retrying import RetryPolicy

__all__ = [
    "AnthropicMessages",
    "FallbackModel",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "OpenAICompatible",
    "OpenAIResponses",
    "Price",
    "RetryPolicy",
]
