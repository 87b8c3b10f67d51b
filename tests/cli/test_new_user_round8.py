"""A new user's trial, round 8: a team adopting tether with Claude (Anthropic Messages), GPT (OpenAI
Responses) and a local OpenAI-compatible server writes agent files with every provider, fallbacks,
keys in environment variables, thinking and reasoning options, limits and prices, provenance rules,
catalogs, memory and hooks, and runs them against loopback servers of each protocol. What they met:

- ``tether agent check`` said "valid" of a file whose fallback model's key variable was unset for
  the provider's own host, or whose ``policy.catalog_file`` / provenance file was missing or
  malformed — and ``tether run`` then refused it; the run's refusal of the key named neither the
  file nor which model of the chain (``set $ANTHROPIC_API_KEY to use https://api.anthropic.com``);
- ``thinking_budget`` with ``max_output_tokens`` at or under it silently asked every turn without
  thinking, and with a ``temperature`` other than 1 (which the API answers 400 on every call) was
  "valid";
- an Anthropic ``base_url`` ending in ``/v1`` posted to ``/v1/v1/messages``: the 404 said to check
  the model name;
- a fallback chain whose local model answered an error and whose second model could not be
  reached told the user the *local* server could not be reached too;
- a final answer "I e-mailed the buyer" with no call at all was ``accepted`` silently unless the
  file opted in to ``hooks.check_claims``: it is on by default now (``check_claims: false`` opts out).

Also: every YAML agent file under docs/ and examples/ validates against ``tether agent schema``, and
the agent-files guide's complete example passes ``tether agent check`` and runs, given the files it
names.

Real parts: ``tether`` through ``main``, agent files, tool modules and YAML files on disk, the
loopback servers of each protocol (``tether_testing``), traces read back from disk.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tether.cli import main
from tether_testing.fake_server import FakeChatServer, Reply, scripted
from tether_testing.servers import FakeAnthropicServer, FakeResponsesServer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("quick_model_retries")]

ROOT = Path(__file__).resolve().parents[2]
TOOLS = '''
from typing import Annotated
from pydantic import Field
from tether import Effect, tool

@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="Work order id, e.g. '742'.")]) -> dict:
    """Read one work order."""
    return {"order_id": order_id, "status": "open"}

def add_note(
    order_id: Annotated[str, Field(description="Work order id.")],
    text: Annotated[str, Field(description="The note.")],
) -> str:
    """Add a note to a work order."""
    return "noted"

def check_answer(state, answer):
    return None

def build_handoff(state, answer):
    return None
'''
ORDER = ("read_order", '{"order_id": "742"}')
SERVERS = {
    "openai-chat": FakeChatServer,
    "openai-responses": FakeResponsesServer,
    "anthropic": FakeAnthropicServer,
}


def write_agent(tmp_path: Path, model: dict[str, Any], **spec: Any) -> Path:
    (tmp_path / "tools_round8.py").write_text(TOOLS, encoding="utf-8")
    data = {
        "name": "order-agent",
        "instructions": "Answer from tool results only.",
        "model": model,
        "tools": ["tools_round8:read_order"],
        "trace": {"dir": "traces"},
        **spec,
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def last_json(out: str) -> dict[str, Any]:
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


# -- a key not set for the provider's own host: check says so, the run names the model -----------


@pytest.mark.usefixtures("no_keys")
@pytest.mark.parametrize(
    ("provider", "name", "var"),
    [
        ("anthropic", "claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("openai-responses", "gpt-4.1", "OPENAI_API_KEY"),
    ],
)
def test_a_fallback_without_its_key_is_named_by_check_and_by_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str, name: str, var: str
) -> None:
    with FakeChatServer(scripted([Reply.text("742 is open.")])) as local:
        model = {
            "name": "qwen3:8b",
            "base_url": local.url,
            "fallback": [{"provider": provider, "name": name}],
        }
        path = write_agent(tmp_path, model)
        assert main(["agent", "check", str(path), "--json"]) == 0
        checked = last_json(capsys.readouterr().out)
        assert checked["warnings"] == [
            f"model.fallback[0] ({name}): set ${var} to use "
            f"{'https://api.anthropic.com' if provider == 'anthropic' else 'https://api.openai.com/v1'}"
            ": a run refuses the file until it is set"
        ]
        assert main(["run", "q", "--agent", str(path), "--json"]) == 1
        out = last_json(capsys.readouterr().out)
        assert local.received == []  # refused before anything ran
    assert out["error"] == "ConfigError"
    assert out["message"].startswith(f"{path}: model.fallback[0] ({name}): set ${var}")


@pytest.mark.usefixtures("no_keys")
def test_a_key_set_or_a_local_server_gives_no_warning_and_the_run_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAM_CLAUDE_KEY", "sk-ant-round8")
    with FakeChatServer(scripted([Reply.calls(ORDER), Reply.text("742 is open.")])) as local:
        model = {
            "name": "qwen3:8b", "base_url": local.url,  # no key needed for a local server
            "fallback": [
                {"provider": "anthropic", "name": "claude-sonnet-4-5", "api_key_env": "TEAM_CLAUDE_KEY"}
            ],
        }  # fmt: skip
        path = write_agent(tmp_path, model)
        assert main(["agent", "check", str(path), "--json"]) == 0
        assert last_json(capsys.readouterr().out)["warnings"] == []
        assert main(["run", "q", "--agent", str(path), "--json"]) == 0
    out = last_json(capsys.readouterr().out)
    assert out["answer"] == "742 is open." and not out.get("model_fallbacks")


# -- thinking that a file asks for but would never get ---------------------------------------------


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"max_output_tokens": 1024}, "max_output_tokens (1024) must be above thinking_budget (2048)"),
        ({"max_output_tokens": 2048}, "max_output_tokens (2048) must be above thinking_budget (2048)"),
        ({"temperature": 0.2}, "temperature 0.2 with thinking_budget: the API takes only 1"),
    ],
)
def test_thinking_that_could_not_happen_is_refused_by_check_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: dict[str, Any], said: str
) -> None:
    with FakeAnthropicServer(scripted([Reply.text("742 is open.")])) as server:
        model = {"provider": "anthropic", "name": "claude-sonnet-4-5", "base_url": server.url,
                 "thinking_budget": 2048, **extra}  # fmt: skip
        path = write_agent(tmp_path, model)
        assert main(["agent", "check", str(path)]) == 1
        assert f"{path}: model: {said}" in capsys.readouterr().err
        assert main(["run", "q", "--agent", str(path), "--json"]) == 1
        assert said in last_json(capsys.readouterr().out)["message"]
        assert server.received == []


def test_thinking_that_fits_reaches_the_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeAnthropicServer(scripted([Reply.text("742 is open.")] * 2)) as server:
        for extra in ({"max_output_tokens": 3000, "temperature": 1}, {}):
            model = {"provider": "anthropic", "name": "claude-sonnet-4-5", "base_url": server.url,
                     "thinking_budget": 2048, **extra}  # fmt: skip
            path = write_agent(tmp_path, model)
            assert main(["agent", "check", str(path)]) == 0
            assert main(["run", "q", "--agent", str(path), "--json"]) == 0
        bodies = server.bodies()
    capsys.readouterr()
    assert [b["thinking"] for b in bodies] == [{"type": "enabled", "budget_tokens": 2048}] * 2
    assert bodies[0]["max_tokens"] == 3000 and bodies[1]["max_tokens"] > 2048


# -- a base URL that repeats the protocol's path ---------------------------------------------------


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_a_404_at_a_doubled_path_blames_the_base_url_not_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str
) -> None:
    server_cls = SERVERS[provider]
    missing = (
        server_cls.error(404, "Not Found") if provider != "openai-chat" else Reply.error(404, "Not Found")
    )
    with server_cls(scripted([missing, missing])) as server:
        root = server.url.removesuffix("/v1")
        doubled = f"{root}/v1/v1" if provider != "anthropic" else f"{root}/v1"
        path = write_agent(tmp_path, {"provider": provider, "name": "m-1", "base_url": doubled})
        assert main(["run", "q", "--agent", str(path), "--json"]) == 7
        first = last_json(capsys.readouterr().out)["message"]
        # the same 404 at a right URL still says to check the model name
        path = write_agent(tmp_path, {"provider": provider, "name": "m-1", "base_url": server.url})
        assert main(["run", "q", "--agent", str(path), "--json"]) == 7
        second = last_json(capsys.readouterr().out)["message"]
        assert [r.path.startswith("/v1/v1/") for r in server.received] == [True, False]
    assert "base_url repeats /v1" in first and "drop /v1 from the end of base_url" in first
    assert "check the model name" not in first
    assert "check the model name and base_url" in second and "repeats" not in second


# -- a hint for the model whose error shows it -----------------------------------------------------


@pytest.mark.usefixtures("no_keys")
def test_a_fallback_chain_hints_only_at_the_model_that_could_not_be_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeChatServer(scripted([Reply.error(400, "bad request: tools unsupported")])) as local:
        gone = "http://127.0.0.1:9"  # nothing listens on the discard port
        model = {
            "name": "qwen3:8b", "base_url": local.url, "max_retries": 0,
            "fallback": [{"provider": "anthropic", "name": "claude-x", "base_url": gone, "max_retries": 0}],
        }  # fmt: skip
        path = write_agent(tmp_path, model)
        assert main(["run", "q", "--agent", str(path), "--json"]) == 7
    out = last_json(capsys.readouterr().out)
    assert out["stop_reason"] == "model_error"
    assert [h for h in out["hints"] if "could not reach" in h] == [
        f"could not reach the model server at {gone}: is it running there? "
        "(agent file: model.base_url, or --base-url)"
    ]
    assert not any(local.url in h for h in out["hints"])


# -- the files a run reads, read by check ----------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "files", "said"),
    [
        ({"catalog_file": "catalog.yaml"}, {}, "policy.catalog_file: cannot read"),
        ({"catalog_file": "catalog.yaml"}, {"catalog.yaml": "[1, 2]"}, "expected {kind: {id: tenant}}"),
        ({"provenance": {"file": "prov.yaml"}}, {}, "policy.provenance.file prov.yaml"),
        (
            {"provenance": {"file": "prov.yaml"}},
            {"prov.yaml": "trust: {}\n"},
            "policy.provenance: add_note: side-effecting tool without rules",
        ),
    ],
    ids=["catalog-missing", "catalog-malformed", "provenance-missing", "provenance-undeclared"],
)
def test_check_reads_the_catalog_and_provenance_files_a_run_reads(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    policy: dict[str, Any],
    files: dict[str, str],
    said: str,
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    path = write_agent(
        tmp_path,
        {"name": "scripted:steps.yaml"},
        tools=["tools_round8:read_order", {"function": "tools_round8:add_note", "effect": "write"}],
        policy={"tenant": "shop-a", **policy},
    )
    (tmp_path / "steps.yaml").write_text("- final: done\n", encoding="utf-8")
    assert main(["agent", "check", str(path)]) == 1
    assert said in capsys.readouterr().err
    assert main(["run", "q", "--agent", str(path), "--json"]) == 1
    assert said in last_json(capsys.readouterr().out)["message"]


def test_check_passes_good_catalog_and_provenance_files_and_the_run_uses_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "catalog.yaml").write_text("order: {'742': shop-a}\n", encoding="utf-8")
    (tmp_path / "prov.yaml").write_text(
        "tools:\n  add_note:\n    effect: write\n    arguments:\n"
        "      order_id: {role: target, from: [user, tool]}\n      text: {role: content}\n",
        encoding="utf-8",
    )
    (tmp_path / "steps.yaml").write_text(
        '- call: read_order\n  arguments: {order_id: "742"}\n- final: Order 742 is open.\n', encoding="utf-8"
    )
    path = write_agent(
        tmp_path,
        {"name": "scripted:steps.yaml"},
        tools=["tools_round8:read_order", {"function": "tools_round8:add_note", "effect": "write"}],
        policy={"tenant": "shop-a", "catalog_file": "catalog.yaml", "provenance": {"file": "prov.yaml"}},
    )
    assert main(["agent", "check", str(path)]) == 0
    assert main(["run", "q", "--agent", str(path), "--json"]) == 0
    assert last_json(capsys.readouterr().out)["answer"] == "Order 742 is open."


# -- a claimed action without a call does not pass silently ----------------------------------------


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_a_claimed_e_mail_with_no_call_is_sent_back_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str
) -> None:
    replies = [Reply.text("I e-mailed the buyer that 742 is open."), Reply.text("Order 742 is open.")]
    with SERVERS[provider](scripted(replies)) as server:
        path = write_agent(tmp_path, {"provider": provider, "name": "m-1", "base_url": server.url})
        assert main(["run", "q", "--agent", str(path), "--json"]) == 0
        second = json.dumps(server.bodies()[1])
    out = last_json(capsys.readouterr().out)
    assert out["answer"] == "Order 742 is open." and out["llm_calls"] == 2
    assert "no side-effecting call succeeded in this run" in second  # the model was told why


def test_check_claims_false_turns_it_off_and_a_real_side_effect_backs_the_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeChatServer(scripted([Reply.text("I e-mailed the buyer.")])) as server:
        path = write_agent(tmp_path, {"name": "m-1", "base_url": server.url}, hooks={"check_claims": False})
        assert main(["run", "q", "--agent", str(path), "--json"]) == 0
    assert last_json(capsys.readouterr().out)["answer"] == "I e-mailed the buyer."
    note = ("tools_round8:add_note", '{"order_id": "742", "text": "buyer told"}')
    with FakeChatServer(
        scripted([Reply.calls(("add_note", note[1])), Reply.text("I updated 742.")])
    ) as server:
        path = write_agent(
            tmp_path,
            {"name": "m-1", "base_url": server.url},
            tools=[{"function": note[0], "effect": "write", "needs_approval": False}],
        )
        assert main(["run", "q", "--agent", str(path), "--json"]) == 0
    assert last_json(capsys.readouterr().out)["answer"] == "I updated 742."


# -- every agent file the docs and examples show ---------------------------------------------------

FENCE = re.compile(r"^```yaml([^\n]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def shown_agent_files() -> list[tuple[str, str, dict[str, Any]]]:
    """Every YAML agent file in docs/, README.md and examples/ (fenced or on disk): where, text,
    data. An agent file is a mapping with ``model`` or ``instructions``."""
    found = []
    for page in [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            data = yaml.safe_load(m.group(2))
            if isinstance(data, dict) and ({"model", "instructions"} & set(data)):
                line = text.count("\n", 0, m.start()) + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", m.group(2), data))
    for path in sorted([*(ROOT / "examples").rglob("*.yaml"), *(ROOT / "examples").rglob("*.yml")]):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and ({"model", "instructions"} & set(data)):
            found.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"), data))
    return found


def test_every_agent_file_in_docs_and_examples_validates_against_the_printed_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["agent", "schema"]) == 0
    validator = jsonschema.Draft202012Validator(json.loads(capsys.readouterr().out))
    shown = shown_agent_files()
    assert len(shown) >= 5  # the guide's full example, typo.yaml, the tutorials', the mail agent
    assert [(w, list(e.path), e.message) for w, _, d in shown for e in validator.iter_errors(d)] == []


@pytest.mark.usefixtures("no_keys")
def test_the_guides_complete_example_checks_and_runs_given_the_files_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent-files guide's first example names every section; given the files it names (its
    tool module, MCP config, provenance and catalog files), ``tether agent check`` passes it,
    warns of the fallback's unset key, and it runs on a local server."""
    text = (ROOT / "docs/guides/agent-files.md").read_text(encoding="utf-8")
    example = next(m.group(2) for m in FENCE.finditer(text) if "fallback:" in m.group(2))
    (tmp_path / "agent.yaml").write_text(example, encoding="utf-8")
    (tmp_path / "mytools.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "mcp.yaml").write_text("servers: []\n", encoding="utf-8")
    (tmp_path / "catalog.yaml").write_text("order: {'742': shop-a}\n", encoding="utf-8")
    (tmp_path / "provenance.yaml").write_text(
        textwrap.dedent("""\
            tools:
              add_note:
                effect: write
                arguments:
                  order_id: {role: target, from: [user, tool]}
                  text: {role: content}
        """),
        encoding="utf-8",
    )
    data = yaml.safe_load(example)
    data["policy"]["allow"] = [t for t in data["policy"]["allow"] if "__" not in t]  # no MCP server here
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    path = tmp_path / "agent.yaml"
    assert main(["agent", "check", str(path), "--json"]) == 0
    assert [w for w in last_json(capsys.readouterr().out)["warnings"] if "ANTHROPIC_API_KEY" in w]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-round8")
    with FakeChatServer(scripted([Reply.calls(ORDER), Reply.text("742 is open.")])) as local:
        code = main(["run", "Why is 742 open?", "--agent", str(path), "--base-url", local.url, "--json"])
    out = last_json(capsys.readouterr().out)
    assert code == 0, out
    assert out["answer"] == "742 is open." and [c["status"] for c in out["calls"]] == ["ok"]


# -- hooks and subagents: what a run refuses, check refuses ---------------------------------------


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"hooks": {"verify": "tools_round8:check_answr"}}, "hooks.verify: module 'tools_round8' has no"),
        ({"hooks": {"handoff": "tools_round8:nope"}}, "hooks.handoff: module 'tools_round8' has no 'nope'"),
        (
            {"context": {"subagents": [{"name": "res", "description": "d", "instructions": "i",
                                        "tools": ["read_ordr"]}]}},
            "context.subagents[0].tools: 'read_ordr' names no tool of this agent; did you mean read_order?",
        ),
        (
            {"context": {"subagents": [{"name": "res", "description": "d", "instructions": "i",
                                        "model": {"provider": "anthropic", "name": "claude-x",
                                                  "thinking_budget": 2048, "max_output_tokens": 100}}]}},
            "context.subagents[0].model: max_output_tokens (100) must be above thinking_budget (2048)",
        ),
    ],
    ids=["verify", "handoff", "subagent-tool", "subagent-thinking"],
)  # fmt: skip
def test_check_refuses_the_hooks_and_subagents_a_run_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: dict[str, Any], said: str
) -> None:
    (tmp_path / "steps.yaml").write_text("- final: done\n", encoding="utf-8")
    path = write_agent(tmp_path, {"name": "scripted:steps.yaml"}, **spec)
    assert main(["agent", "check", str(path)]) == 1
    assert f"{path}: {said}" in capsys.readouterr().err
    assert main(["run", "q", "--agent", str(path), "--json"]) == 1
    assert said in last_json(capsys.readouterr().out)["message"]


def test_good_hooks_and_a_subagent_with_its_tools_check_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "steps.yaml").write_text(
        '- call: read_order\n  arguments: {order_id: "742"}\n- final: Order 742 is open.\n', encoding="utf-8"
    )
    sub = {"name": "res", "description": "looks orders up", "instructions": "i", "tools": ["read_order"]}
    hooks = {"verify": "tools_round8:check_answer", "resolve_evidence": "trace"}
    path = write_agent(tmp_path, {"name": "scripted:steps.yaml"}, hooks=hooks, context={"subagents": [sub]})
    assert main(["agent", "check", str(path)]) == 0
    assert main(["run", "q", "--agent", str(path), "--json"]) == 0
    assert last_json(capsys.readouterr().out)["answer"] == "Order 742 is open."
