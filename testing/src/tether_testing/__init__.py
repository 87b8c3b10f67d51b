"""Test infrastructure for tether's own tests and benchmarks, apart from the library.

``FakeChatServer``: a chat-completions server on 127.0.0.1 for the OpenAI-compatible backend
(``python -m tether_testing.fake_server`` runs it as a process, for ``bench/``). A distribution
of its own (``tether-testing``, ``pip install -e testing``), so that the ``tether`` wheel holds
the harness only. The model stand-ins users need for their own tests stay in ``tether.testing``.
"""

from tether_testing.fake_server import CUTS, FakeChatServer, Received, Reply, scripted, tool_loop_responder

__all__ = ["CUTS", "FakeChatServer", "Received", "Reply", "scripted", "tool_loop_responder"]
