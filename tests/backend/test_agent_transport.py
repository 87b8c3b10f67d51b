"""An agent file chooses how each model's requests travel (``model.transport: sdk | http``): the
provider's official SDK client or plain httpx2, each against its protocol's loopback server;
anything else is refused by name before a run starts. SPEC L2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.agents._build import make_model
from tether.agents._file import load_agent_file
from tether.cli import main
from tether.errors import ConfigError
from tether_testing.fake_server import FakeChatServer, Reply, scripted
from tether_testing.servers import FakeAnthropicServer, FakeResponsesServer

pytestmark = pytest.mark.slow

TOOLS = '''
from typing import Annotated
from pydantic import Field
from tether import Effect, tool

@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="Work order id, e.g. '742'.")]) -> dict:
    """Read one work order."""
    return {"order_id": order_id, "status": "open"}
'''
ORDER = ("read_order", '{"order_id": "742"}')
SERVERS = {
    "openai-chat": FakeChatServer,
    "openai-responses": FakeResponsesServer,
    "anthropic": FakeAnthropicServer,
}


def write_agent(tmp_path: Path, model: dict[str, Any]) -> Path:
    (tmp_path / "tools_transport24.py").write_text(TOOLS, encoding="utf-8")
    spec = {
        "name": "order-agent",
        "instructions": "Answer from tool results only.",
        "model": model,
        "tools": ["tools_transport24:read_order"],
        "trace": {"dir": "traces"},
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


@pytest.mark.spec("L2")
@pytest.mark.parametrize("transport", ["sdk", "http"])
@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_a_file_choosing_a_transport_runs_a_tool_round_trip_over_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str, transport: str
) -> None:
    with SERVERS[provider](scripted([Reply.calls(ORDER), Reply.text("742 is open.")])) as server:
        model = {"provider": provider, "name": "m-1", "base_url": server.url, "transport": transport}
        path = write_agent(tmp_path, model)
        assert make_model(load_agent_file(path)).transport == transport
        code = main(["run", "Why is 742 open?", "--agent", str(path), "--json"])
        received = list(server.received)
        second = server.bodies()[1]
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and out["stop_reason"] == "accepted" and out["answer"] == "742 is open."
    assert [(c["tool"], c["status"]) for c in out["calls"]] == [("read_order", "ok")]
    assert '"status": "open"' in str(second)  # the tool's result went back to the model
    # The official SDK client announces itself in headers of its own; plain httpx2 sends none.
    assert len(received) == 2
    assert [("x-stainless-lang" in r.headers) for r in received] == [transport == "sdk"] * 2


def test_each_provider_keeps_its_default_transport_when_the_file_names_none(tmp_path: Path) -> None:
    defaults = {}
    for provider in SERVERS:
        path = write_agent(tmp_path, {"provider": provider, "name": "m-1", "base_url": "http://127.0.0.1:9"})
        defaults[provider] = make_model(load_agent_file(path)).transport
    assert defaults == {"openai-chat": "http", "openai-responses": "sdk", "anthropic": "sdk"}


@pytest.mark.spec("L2")
def test_a_bad_transport_is_a_typed_error_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_agent(tmp_path, {"provider": "anthropic", "name": "m", "transport": "grpc"})
    with pytest.raises(ConfigError, match=r"model\.transport"):
        load_agent_file(path)
    assert main(["agent", "check", str(path)]) == 1
    assert "transport" in capsys.readouterr().err
    path = write_agent(tmp_path, {"name": "scripted:steps.yaml", "transport": "http"})
    with pytest.raises(ConfigError, match="transport applies to a provider's API"):
        load_agent_file(path)
    # the legitimate file next to them loads
    path = write_agent(tmp_path, {"provider": "anthropic", "name": "m", "transport": "http"})
    assert load_agent_file(path).spec.model.transport == "http"


def test_the_sdk_transport_without_its_sdk_installed_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)  # as if the extra were not installed
    path = write_agent(tmp_path, {"provider": "anthropic", "name": "m", "base_url": "http://127.0.0.1:9"})
    with pytest.raises(ConfigError, match=r"needs the anthropic SDK: pip install 'tether\[anthropic\]'"):
        make_model(load_agent_file(path))
    path = write_agent(
        tmp_path,
        {"provider": "anthropic", "name": "m", "base_url": "http://127.0.0.1:9", "transport": "http"},
    )
    assert make_model(load_agent_file(path)).transport == "http"
