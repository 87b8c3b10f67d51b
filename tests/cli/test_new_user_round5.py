"""A demanding new user, round 5: someone who knows the OpenAI Agents SDK or Pydantic AI follows
the pages and the CLI literally. What they met: the JSON Schema ``tether agent schema`` prints
refused the short form of ``tools:`` every page uses (``- mytools:read_order``); a command that
needs an optional extra (``tether runs``, ``tether db``, ``tether resume --db sqlite:///…``,
``tether approvals --db postgresql://…``) failed as an "unexpected error", exit 7, instead of
naming the extra; ``Limits.max_tokens_hard`` / ``max_cost_usd_hard`` and ``@tool``'s
``secret_arguments``, ``description``, ``max_result_chars`` and ``blocking`` had no agent-file field;
a mistyped tool name in ``policy.allow``, ``deny`` or ``effects`` passed ``tether agent check``
and then allowed, denied or declared nothing.

Real parts: ``tether`` through ``main``, agent files and tool modules on disk, SQLite stores and
traces, a JSON Schema validator, the docs' own agent files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tether.agents._build import build_agent
from tether.agents._file import load_agent_file
from tether.agents._spec import LimitsSpec, ToolRef
from tether.cli import main
from tether.core.stop import Limits
from tether.tools._contract import ToolOptions

ROOT = Path(__file__).resolve().parents[2]

TOOLS = '''
from typing import Annotated

from pydantic import Field

from tether import Effect, tool


@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="Work order id, e.g. '742'.")]) -> dict:
    """Read one work order."""
    return {"order_id": order_id, "status": "open"}


def call_erp(
    order_id: Annotated[str, Field(description="Work order id.")],
    api_token: Annotated[str, Field(description="The ERP token to use.")],
) -> dict:
    """Ask the ERP about an order with a token."""
    with open(__file__ + ".calls", "a", encoding="utf-8") as f:
        f.write(f"{order_id} {api_token}\\n")
    return {"order_id": order_id, "token_ok": api_token.startswith("tok-")}
'''


def last_json(out: str) -> dict[str, Any]:
    lines = out.strip().splitlines()
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def agent_file(tmp_path: Path, module: str, **spec: Any) -> Path:
    (tmp_path / f"{module}.py").write_text(TOOLS, encoding="utf-8")
    data = {
        "name": "order-agent",
        "instructions": "Answer from tool results only.",
        "model": {"name": "scripted:steps.yaml"},
        "tools": [f"{module}:read_order"],
        "policy": {"tenant": "shop-a"},
        "trace": {"dir": "traces"},
        **spec,
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def steps(tmp_path: Path, text: str) -> None:
    (tmp_path / "steps.yaml").write_text(textwrap.dedent(text), encoding="utf-8")


# -- the JSON Schema accepts what the loader accepts ---------------------------------------------

FENCE = re.compile(r"^```yaml([^\n]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def docs_agent_files() -> list[tuple[str, dict[str, Any]]]:
    """Every YAML agent file the pages show (a mapping with ``model``), by page and line."""
    found = []
    for page in [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            data = yaml.safe_load(m.group(2))
            if isinstance(data, dict) and "model" in data and "instructions" in data:
                line = text.count("\n", 0, m.start()) + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", data))
    return found


def test_the_printed_schema_accepts_every_agent_file_the_pages_show(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["agent", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    validator = jsonschema.Draft202012Validator(schema)
    shown = docs_agent_files()
    assert len(shown) >= 4  # the tutorial's, the guide's, the provenance guide's …
    problems = [
        (where, list(e.path), e.message) for where, data in shown for e in validator.iter_errors(data)
    ]
    assert problems == []
    # The short form is an import path, as the loader says: a dotted path is refused by both.
    bad = {"instructions": "x", "model": {"name": "m"}, "tools": ["mytools.read_order"]}
    assert not validator.is_valid(bad)
    assert validator.is_valid({**bad, "tools": ["mytools:read_order", {"function": "m:f", "effect": "read"}]})


# -- a missing extra is named, exit 1, not an internal error -------------------------------------


@pytest.mark.parametrize(
    ("argv", "module", "extra"),
    [
        (["runs", "list", "--db", "sqlite:///{tmp}/deployment"], "dbos", "durable"),
        (["db", "init", "--db", "sqlite:///{tmp}/deployment"], "dbos", "durable"),
        (["resume", "20261201T181857-9e6c003c", "--db", "sqlite:///{tmp}/deployment"], "dbos", "durable"),
        (["approvals", "list", "--db", "postgresql://127.0.0.1:9/x"], "psycopg", "postgres"),
    ],
    ids=["runs-list", "db-init", "resume", "approvals-list"],
)
def test_a_command_whose_extra_is_not_installed_names_the_extra(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    module: str,
    extra: str,
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as in a venv without the extra: the import fails
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]  # sqlite:////abs/path
    assert main([*argv, "--json"]) == 1  # a configuration error: nothing ran
    captured = capsys.readouterr()
    out = last_json(captured.out)
    assert out["error"] == "missing_extra" and out["exit"] == 1 and out["ok"] is False
    assert f"pip install 'tether[{extra}]'" in out["message"] and repr(module) in out["message"]
    assert "unexpected error" not in captured.err and f"tether[{extra}]" in captured.err
    assert not (tmp_path / "deployment").exists()  # nothing was created either


# -- every Python option has its agent-file field ------------------------------------------------


def test_every_limit_of_the_python_api_has_an_agent_file_field() -> None:
    fields = {f.name for f in dataclasses.fields(Limits)}
    assert fields - set(LimitsSpec.model_fields) == set()


def test_the_hard_ceilings_reach_the_agent_and_a_hard_cost_needs_a_price(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    limits = {"max_tokens": 1000, "max_tokens_hard": 1500, "max_cost_usd": 0.5, "max_cost_usd_hard": 0.75}
    model = {"name": "m-1", "base_url": "http://127.0.0.1:9/v1", "prices": {"m-1": {"input": 1, "output": 2}}}
    path = agent_file(tmp_path, "tools_nu5a", model={**model, "limits": limits})
    built = build_agent(load_agent_file(path))
    assert (built.agent.limits.max_tokens_hard, built.agent.limits.max_cost_usd_hard) == (1500, 0.75)
    # A ceiling below its budget is refused by agent check, named by field.
    path = agent_file(tmp_path, "tools_nu5a", model={**model, "limits": {**limits, "max_tokens_hard": 10}})
    assert main(["agent", "check", str(path)]) == 1
    assert "agent.yaml: model.limits: max_tokens_hard must be >= max_tokens" in capsys.readouterr().err
    # A cost ceiling, like a cost budget, needs the model's price.
    unpriced = {"name": "m-1", "base_url": "http://127.0.0.1:9/v1", "limits": {"max_cost_usd_hard": 0.75}}
    path = agent_file(tmp_path, "tools_nu5a", model=unpriced)
    assert main(["run", "x", "--agent", str(path), "--json"]) == 1
    assert (
        "model.limits.max_cost_usd_hard needs a price for m-1"
        in last_json(capsys.readouterr().out)["message"]
    )


def test_every_tool_option_but_idempotent_has_an_agent_file_field() -> None:
    # idempotent is read only by an MCP call's retry; a local tool's contract ignores it.
    options = set(ToolOptions.__annotations__) - {"idempotent"}
    assert options - set(ToolRef.model_fields) == set()


def test_secret_arguments_declared_in_the_file_are_masked_and_the_tool_still_gets_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps(
        tmp_path,
        """
        - call: call_erp
          arguments: {order_id: "742", api_token: "tok-7f3a9c1e5b2d"}
        - final: done
        """,
    )
    tools = [
        {
            "function": "tools_nu5b:call_erp",
            "effect": "read",
            "secret_arguments": ["api_token"],
            "description": "Ask the ERP about one work order.",
            "max_result_chars": 500,
            "blocking": False,
        }
    ]
    path = agent_file(tmp_path, "tools_nu5b", tools=tools)
    built = build_agent(load_agent_file(path))
    spec = built.host.local.get("call_erp").spec
    assert spec.secret_arguments == {"api_token"} and spec.max_result_chars == 500
    assert spec.description == "Ask the ERP about one work order."
    assert main(["run", "Ask the ERP about 742.", "--agent", str(path), "--json"]) == 0
    out = last_json(capsys.readouterr().out)
    assert (tmp_path / "tools_nu5b.py.calls").read_text() == "742 tok-7f3a9c1e5b2d\n"  # the tool got it
    trace = Path(out["trace"]).read_text(encoding="utf-8")
    assert "tok-7f3a9c1e5b2d" not in trace and "7f3a9c1e" not in trace  # the trace never holds it
    assert '\\"order_id\\": \\"742\\", \\"api_token\\": \\"[REDACTED]\\"' in trace  # the rest is kept
    # A secret the file names that the tool does not have is refused, named.
    bad = agent_file(tmp_path, "tools_nu5b", tools=[{**tools[0], "secret_arguments": ["token"]}])
    assert main(["agent", "check", str(bad)]) == 1
    assert "secret argument 'token' is not one of its arguments" in capsys.readouterr().err


# -- a policy entry that names no tool is an error, before anything runs ---------------------------


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        (
            {"allow": ["read_ordr"]},
            "policy.allow: 'read_ordr' names no tool of this agent; did you mean read_order?",
        ),
        (
            {"deny": ["call_erpp"]},
            "policy.deny: 'call_erpp' names no tool of this agent; did you mean call_erp?",
        ),
        ({"effects": {"call_ep": "read"}}, "policy.effects: 'call_ep' names no tool of this agent"),
    ],
    ids=["allow", "deny", "effects"],
)
def test_a_mistyped_tool_name_in_the_policy_is_refused_by_check_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: dict[str, Any], said: str
) -> None:
    steps(tmp_path, "- call: read_order\n  arguments: {order_id: '742'}\n- final: open\n")
    tools = ["tools_nu5c:read_order", "tools_nu5c:call_erp"]
    path = agent_file(tmp_path, "tools_nu5c", tools=tools, policy={"tenant": "shop-a", **policy})
    assert main(["agent", "check", str(path)]) == 1
    assert said in capsys.readouterr().err
    assert main(["run", "Is 742 open?", "--agent", str(path), "--json"]) == 1
    assert said in last_json(capsys.readouterr().out)["message"]
    assert not (tmp_path / "traces").exists()  # nothing ran
    # Spelt right, the same file checks and runs.
    right = {k: ["read_order"] if k != "effects" else {"call_erp": "read"} for k in policy}
    path = agent_file(tmp_path, "tools_nu5c", tools=tools, policy={"tenant": "shop-a", **right})
    assert main(["agent", "check", str(path)]) == 0
    assert main(["run", "Is 742 open?", "--agent", str(path), "--json"]) in (0, 2)
    capsys.readouterr()


def test_an_mcp_tool_is_allowed_by_its_offered_name_and_a_bare_one_is_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = {"name": "erp", "transport": "stdio", "command": ["{python}", "-c", "pass"]}
    mcp = {"servers": [server]}
    path = agent_file(tmp_path, "tools_nu5d", mcp=mcp, policy={"allow": ["read_order", "erp__read_history"]})
    assert main(["agent", "check", str(path)]) == 0  # checked without starting the server
    capsys.readouterr()
    path = agent_file(tmp_path, "tools_nu5d", mcp=mcp, policy={"allow": ["read_order", "read_history"]})
    assert main(["agent", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "policy.allow: 'read_history' names no tool of this agent" in err
    assert "an MCP tool is named <server>__<tool>: servers erp" in err


# -- a section written as a scalar says what it got, not a class name ----------------------------


@pytest.mark.parametrize(
    ("section", "said"),
    [
        (
            {"model": "openai:gpt-4o"},
            "model: Input should be a valid dictionary of fields, not a string ('openai:gpt-4o')",
        ),
        (
            {"policy": ["read_order"]},
            "policy: Input should be a valid dictionary of fields, not a list (['read_order'])",
        ),
    ],
    ids=["model", "policy"],
)
def test_a_section_given_as_a_scalar_says_what_it_got(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: dict[str, Any], said: str
) -> None:
    path = agent_file(tmp_path, "tools_nu5e", **section)
    assert main(["agent", "check", str(path), "--json"]) == 1
    out = last_json(capsys.readouterr().out)
    assert said in out["message"] and "instance of" not in out["message"]


# -- a reader that leaves (tether … | head) is no internal error ---------------------------------


def tether_into_closed_pipe(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tether ARGV | true``: stdout is a pipe whose reader has already gone."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "tether.cli", *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            timeout=120,
        )
    finally:
        os.close(write)


def test_a_command_whose_reader_has_gone_finishes_and_exits_with_its_own_code(tmp_path: Path) -> None:
    steps(
        tmp_path,
        """
        - call: read_order
          arguments: {order_id: "742"}
        - call: call_erp
          arguments: {order_id: "742", api_token: "tok-1"}
        - final: done
        """,
    )
    tools = ["tools_nu5f:read_order", "tools_nu5f:call_erp"]
    path = agent_file(tmp_path, "tools_nu5f", tools=tools, policy={"approvals_db": "approvals.db"})
    for argv, code in (
        (["run", "Is 742 open?", "--agent", str(path)], 5),  # paused for approval, as without the pipe
        (["run", "Is 742 open?", "--agent", str(path), "--json"], 5),
        (["agent", "schema"], 0),
        (["approvals", "list", "--db", str(tmp_path / "approvals.db")], 0),
    ):
        done = tether_into_closed_pipe(argv, tmp_path)
        assert (done.returncode, done.stderr) == (code, ""), argv
    # The runs really ran to their pause: their traces end with the stop, their proposals wait.
    traces = sorted((tmp_path / "traces").glob("*.jsonl"))
    assert len(traces) == 2
    for trace in traces:
        assert json.loads(trace.read_text(encoding="utf-8").splitlines()[-1])["kind"] == "stop"
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", "approvals", "list", "--db", "approvals.db", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert json.loads(done.stdout.splitlines()[-1])["count"] == 2  # with a reader, the output is whole


# -- Agent(model="gpt-4o"), as other frameworks take it, is refused where it is written ----------


@pytest.mark.parametrize("model", ["openai:gpt-4o", "gpt-4o", None])
def test_an_agent_given_a_model_name_is_refused_at_once_with_what_to_write(model: Any) -> None:
    from tether import Agent, ConfigError

    with pytest.raises(ConfigError) as err:
        Agent(instructions="Answer.", model=model)
    assert f"Agent(model={model!r})" in str(err.value)
    assert "tether.models.OpenAICompatible('gpt-4o'" in str(err.value)


def test_an_agent_with_a_model_object_still_runs(tmp_path: Path) -> None:
    from tether import Agent, Host, Policy, TrustedContext
    from tether.testing import ScriptedModel

    agent = Agent(instructions="Answer.", model=ScriptedModel(["Order 742 is open."]))
    host = Host(policy=Policy(), trace_dir=tmp_path / "traces")
    result = host.run_sync(agent, "Is 742 open?", context=TrustedContext(tenant="shop-a"))
    assert (result.stop_reason, result.answer) == ("accepted", "Order 742 is open.")


# -- cost_usd 0.0 of a model nobody priced is not "free" -------------------------------------------


def test_a_run_on_an_unpriced_model_says_its_cost_was_not_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether_testing.fake_server import FakeChatServer, Reply, scripted

    replies = [Reply.calls(("read_order", '{"order_id": "742"}')), Reply.text("742 is open.")]
    with FakeChatServer(scripted(replies * 4)) as server:
        model = {"provider": "openai-chat", "name": "m-local-1", "base_url": server.url}
        path = agent_file(tmp_path, "tools_nu5g", model=model)
        assert main(["run", "Is 742 open?", "--agent", str(path)]) == 0
        said = capsys.readouterr().out
        assert "cost_usd: 0.0  (not counted: m-local-1 has no price; add model.prices)" in said
        assert main(["run", "Is 742 open?", "--agent", str(path), "--json"]) == 0
        out = last_json(capsys.readouterr().out)
        assert (out["cost_usd"], out["unpriced"]) == (0.0, True)
        # Priced (a local model at 0), the figure stands alone.
        free = {**model, "prices": {"m-local-1": {"input": 0, "output": 0}}}
        path = agent_file(tmp_path, "tools_nu5g", model=free)
        assert main(["run", "Is 742 open?", "--agent", str(path)]) == 0
        said = capsys.readouterr().out
        assert "cost_usd: 0.0\n" in said and "not counted" not in said
        assert main(["run", "Is 742 open?", "--agent", str(path), "--json"]) == 0
        assert last_json(capsys.readouterr().out)["unpriced"] is False
