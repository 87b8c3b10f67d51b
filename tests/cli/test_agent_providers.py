"""Agent files choose a provider (``model.provider``, ``tether run --provider``), fall back to
other models (``model.fallback``), and their schema is printed for editors
(``tether agent schema``), and how each model's requests travel (``model.transport: sdk |
http``: the provider's official SDK client or plain httpx2). Each provider runs against its
loopback server."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tether.agents._build import make_model
from tether.agents._file import load_agent_file
from tether.cli import main
from tether.errors import ConfigError
from tether.trace import read_trace
from tether_testing.fake_server import FakeChatServer, Pause, Reply, scripted
from tether_testing.servers import FakeAnthropicServer, FakeResponsesServer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("quick_model_retries")]

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
    (tmp_path / "tools_providers24.py").write_text(TOOLS, encoding="utf-8")
    spec = {
        "name": "order-agent",
        "instructions": "Answer from tool results only.",
        "model": model,
        "tools": ["tools_providers24:read_order"],
        "trace": {"dir": "traces"},
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def last_json(out: str) -> dict[str, Any]:
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_the_file_names_the_provider_and_the_key_reaches_it_by_its_protocol(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    monkeypatch.setenv("TETHER_PROVIDER_KEY", "sk-provider-secret-77")
    with SERVERS[provider](scripted([Reply.calls(ORDER), Reply.text("742 is open.")])) as server:
        model = {
            "provider": provider,
            "name": "m-1",
            "base_url": server.url,
            "api_key_env": "TETHER_PROVIDER_KEY",
        }
        path = write_agent(tmp_path, model)
        code = main(["run", "Why is 742 open?", "--agent", str(path), "--json"])
        headers = server.received[0].headers
    out = last_json(capsys.readouterr().out)
    assert code == 0 and out["stop_reason"] == "accepted" and out["answer"] == "742 is open."
    assert [(c["tool"], c["status"]) for c in out["calls"]] == [("read_order", "ok")]
    # the SDK's own header: Anthropic's x-api-key or a bearer token, as its version sends it
    sent = headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")
    assert sent == "sk-provider-secret-77"
    assert "sk-provider-secret-77" not in Path(out["trace"]).read_text()


def test_provider_on_the_command_line_overrides_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_agent(tmp_path, {"name": "m-1"})  # openai-chat by default
    with FakeAnthropicServer(scripted([Reply.text("742 is open.")])) as server:
        code = main(
            ["run", "q", "--agent", str(path), "--provider", "anthropic", "--base-url", server.url, "--json"]
        )
        assert len(server.bodies()) == 1
    assert code == 0 and last_json(capsys.readouterr().out)["answer"] == "742 is open."


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_an_answer_cut_at_the_token_limit_exits_7_as_truncated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str
) -> None:
    raw = {"openai-chat": "length", "openai-responses": "max_output_tokens", "anthropic": "max_tokens"}[
        provider
    ]
    with SERVERS[provider](scripted([Reply.text("742 is op", finish_reason=raw)])) as server:
        path = write_agent(tmp_path, {"provider": provider, "name": "m-1", "base_url": server.url})
        code = main(["run", "q", "--agent", str(path), "--json"])
    out = last_json(capsys.readouterr().out)
    assert code == 7 and out["exit"] == 7 and out["ok"] is False
    assert out["stop_reason"] == "truncated" and out["error"] == "truncated"
    assert "output-token limit" in out["message"]


def test_a_failing_model_falls_back_to_the_next_and_the_trace_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overloaded = FakeAnthropicServer.error(529, "Overloaded")
    with (
        FakeAnthropicServer(scripted([overloaded] * 3)) as down,
        FakeChatServer(scripted([Reply.calls(ORDER), Reply.text("742 is open.")])) as up,
    ):
        model = {
            "provider": "anthropic", "name": "claude-test", "base_url": down.url, "max_retries": 1,
            "limits": {"llm_calls": 5},
            "fallback": [{"provider": "openai-chat", "name": "local-model", "base_url": up.url}],
        }  # fmt: skip
        path = write_agent(tmp_path, model)
        code = main(["run", "q", "--agent", str(path), "--json"])
        assert len(down.received) == 2 and len(up.received) == 2  # the run stays on the fallback
    out = last_json(capsys.readouterr().out)
    assert code == 0 and out["answer"] == "742 is open."
    responses = [e for e in read_trace(Path(out["trace"])) if e["kind"] == "model_response"]
    assert [r["model"] for r in responses] == ["fake-model", "fake-model"]
    assert responses[0]["fallback_from"][0]["model"] == "claude-test"
    assert "overloaded" in responses[0]["fallback_from"][0]["error"]
    assert "fallback_from" not in responses[1]
    assert out["llm_calls"] == 2  # one budget across the models


def test_when_every_model_fails_the_run_ends_model_error_naming_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        FakeChatServer(scripted([Reply.error(401, "bad key")])) as first,
        FakeResponsesServer(scripted([FakeResponsesServer.error(404, "no such model")])) as second,
    ):
        model = {
            "name": "a", "base_url": first.url,
            "fallback": [{"provider": "openai-responses", "name": "b", "base_url": second.url}],
        }  # fmt: skip
        code = main(["run", "q", "--agent", str(write_agent(tmp_path, model)), "--json"])
    out = last_json(capsys.readouterr().out)
    assert code == 7 and out["stop_reason"] == "model_error"
    assert "a: HTTP 401" in out["message"] and "b: HTTP 404" in out["message"]


def test_agent_schema_validates_a_good_file_and_refuses_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["agent", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    good = {
        "instructions": "x",
        "model": {"provider": "anthropic", "name": "claude-sonnet-4-5", "fallback": [{"name": "gpt-4.1"}]},
    }
    jsonschema.validate(good, schema)
    for bad in (
        {"instructions": "x", "model": {"provider": "gemini", "name": "m"}},
        {"instructions": "x", "model": {"name": "m", "api_key": "sk-1"}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    # every field of the file says what it is (editors show it)
    fields = [(n, f, p) for n, d in schema["$defs"].items() for f, p in d.get("properties", {}).items()]
    fields += [("AgentSpec", f, p) for f, p in schema["properties"].items()]
    assert len(fields) > 80 and [f"{n}.{f}" for n, f, p in fields if not p.get("description")] == []


def test_agent_check_names_the_field_of_a_provider_mismatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_agent(tmp_path, {"provider": "anthropic", "name": "m", "reasoning_effort": "low"})
    assert main(["agent", "check", str(path)]) == 1
    assert "reasoning_effort applies to provider openai-responses only" in capsys.readouterr().err
    path = write_agent(tmp_path, {"provider": "anthropic", "name": "m", "thinking_budget": 2048})
    assert main(["agent", "check", str(path)]) == 0
    assert "anthropic:m" in capsys.readouterr().out


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_a_server_sending_one_byte_at_a_time_is_cut_at_timeout_s_not_at_the_deadline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str
) -> None:
    # Every read gets a byte within 0.1 s, so no read timeout fires; the answer (hundreds of
    # bytes) would take a minute. The call's timeout_s (0.5 s) must end it, well before the run's
    # 60 s deadline. The server never finishes in time, however loaded the machine.
    with SERVERS[provider](scripted([Reply.text("742 is open.", trickle_s=0.1)])) as server:
        model = {
            "provider": provider,
            "name": "m-1",
            "base_url": server.url,
            "timeout_s": 0.5,
            "max_retries": 0,
        }
        path = write_agent(tmp_path, {**model, "limits": {"deadline_s": 60}})
        code = main(["run", "q", "--agent", str(path), "--json"])
    out = last_json(capsys.readouterr().out)
    assert code == 7 and out["stop_reason"] == "model_error"
    assert "did not complete within 0.5s" in out["message"]


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


# Faults as a held-out server might send them; each must end the run with exit 7, a stop
# reason and a message that say what happened, and no traceback.
FILE_FAULTS = {
    "html_502": (Reply(status=502, body=b"<html><title>502 Bad Gateway</title></html>"), "502 Bad Gateway"),
    "unauthorized": (
        Reply(status=401, body=b'{"error": {"type": "authentication_error", "message": "bad key"}}'),
        "_API_KEY",
    ),
    "redirect": (Reply(status=307, body=b"", headers={"location": "http://127.0.0.1:9/x"}), "redirects to"),
    "stall": (
        Reply.text("742 is open.", edit=lambda items: [Pause(4), *items]),
        "did not complete within 1s",
    ),
    "error_in_200": (
        Reply.text(
            "742 is open.", edit=lambda items: [{"error": {"type": "invalid_request_error", "message": "no"}}]
        ),
        "invalid_request_error",
    ),
}


@pytest.mark.spec("L2")
@pytest.mark.parametrize("fault", sorted(FILE_FAULTS))
@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_a_faulty_server_ends_the_run_with_exit_7_saying_why_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str, fault: str
) -> None:
    reply, said = FILE_FAULTS[fault]

    def run_file(replies: list[Reply]) -> int:
        with SERVERS[provider](scripted(replies)) as server:
            model = {"provider": provider, "name": "m-1", "base_url": server.url, "timeout_s": 1}
            return main(
                ["run", "q", "--agent", str(write_agent(tmp_path, {**model, "max_retries": 1})), "--json"]
            )

    code = run_file([reply, reply, Reply.text("742 is open.")])
    captured = capsys.readouterr()
    out = last_json(captured.out)
    assert code == 7 and out["stop_reason"] == "model_error" and said in out["message"]
    assert "Traceback" not in captured.out + captured.err
    trace = read_trace(Path(out["trace"]))
    assert [e["reason"] for e in trace if e["kind"] == "stop"] == ["model_error"]
    assert said in [e for e in trace if e["kind"] == "model_error"][-1]["error"]
    # the same file against the same server answering normally is accepted
    code = run_file([Reply.text("742 is open.")])
    assert code == 0 and last_json(capsys.readouterr().out)["stop_reason"] == "accepted"
