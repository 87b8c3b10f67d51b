"""Test infrastructure for tether's own tests and benchmarks, apart from the library.

``FakeChatServer``: a chat-completions server on 127.0.0.1 for the OpenAI-compatible backend
(``python -m tether_testing.fake_server`` runs it as a process, for ``bench/``), and the same
for the Anthropic Messages API and the OpenAI Responses API (``FakeAnthropicServer``,
``FakeResponsesServer``, answering the same ``Reply``). A distribution
of its own (``tether-testing``, ``pip install -e testing``), so that the ``tether`` wheel holds
the harness only. The model stand-ins users need for their own tests stay in ``tether.testing``.
"""

from tether_testing.fake_server import CUTS, FakeChatServer, Received, Reply, scripted, tool_loop_responder
from tether_testing.servers import FakeAnthropicServer, FakeResponsesServer

__all__ = [
    "CUTS",
    "FakeAnthropicServer",
    "FakeChatServer",
    "FakeResponsesServer",
    "Received",
    "Reply",
    "scripted",
    "tool_loop_responder",
]
