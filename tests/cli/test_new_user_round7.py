"""A demanding new user, round 7: someone who knows the OpenAI Agents SDK, Pydantic AI or
LangGraph follows the pages and the CLI literally. What they met: a tool that returned a dict
whose keys JSON cannot sort or write (``{1: ..., "total": ...}``, a tuple key) or that holds
itself ended the run ``internal_error`` saying the tool "raised" — after its side effect had run;
a tool with a positional-only argument (``def f(x, /)``) was accepted and then crashed on every
call, blamed on a line of anyio; a tool that called a library which raised named the library's
line in site-packages, not the user's; ``tether agent check`` said "valid" of a file whose
scripted stand-in did not exist or did not parse, or whose cost budget had no price, which
``tether run`` then refused; and ``trace.results: true`` in the file kept no result of a call
made after ``tether resume``.

Real parts: ``tether`` through ``main``, agent files, tool modules and scripts on disk, a SQLite
approval store, traces and result files read back from disk.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from pydantic import Field

from tether import Agent, Host, Policy, ToolContext, TrustedContext, tool
from tether.cli import main
from tether.core._imports import raised_at
from tether.testing import FunctionModel, ScriptedModel, call


def write_agent(tmp_path: Path, tools_src: str, module: str, steps: str, **spec: Any) -> Path:
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(tools_src), encoding="utf-8")
    (tmp_path / "steps.yaml").write_text(textwrap.dedent(steps), encoding="utf-8")
    data = {
        "name": "order-agent",
        "instructions": "Answer from tool results only.",
        "model": {"name": "scripted:steps.yaml"},
        "trace": {"dir": "traces"},
        **spec,
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def last_json(out: str) -> dict[str, Any]:
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def body_of(message: str) -> Any:
    return json.loads(message[message.index("{") : message.rindex("}") + 1])


# -- a result JSON cannot write as it is ----------------------------------------------------------


def test_a_result_with_keys_json_cannot_sort_or_write_reaches_the_model(tmp_path: Path) -> None:
    @tool
    def count_orders(shop: Annotated[str, Field(description="Shop id.")]) -> dict:
        """Count open orders per line, with a total."""
        return {1: 4, 2: 1, "total": 5, (3, "b"): "pair", 2.5: "half", None: "none"}

    @tool
    def read_order(order_id: Annotated[str, Field(description="Order id.")]) -> dict:
        """Read one work order (its links point back at it)."""
        order: dict[str, Any] = {"order_id": order_id, "lines": [1, 2]}
        order["parent"] = order
        order["lines"].append(order["lines"])
        return order

    @tool
    def plain(order_id: Annotated[str, Field(description="Order id.")]) -> dict:
        """A result JSON holds as it is: written as before."""
        return {"b": 1, "a": [order_id]}

    host = Host(policy=Policy(allow={"count_orders", "read_order", "plain"}), trace_dir=tmp_path / "t")
    host.add_tools(count_orders, read_order, plain)
    seen: list[str] = []
    turns = [call("count_orders", shop="a"), call("read_order", order_id="742"), call("plain", order_id="9")]

    def answer(request: Any) -> Any:
        seen[:] = [m.content for m in request.messages if type(m).__name__ == "ToolMessage"]
        return turns[len(seen)] if len(seen) < len(turns) else "done"

    agent = Agent(instructions="Answer from tool results only.", model=FunctionModel(answer))
    result = host.run_sync(agent, "How many?", context=TrustedContext(tenant="shop-a"))
    assert result.stop_reason == "accepted", result.detail
    assert [c.status for c in result.calls] == ["ok", "ok", "ok"]
    assert body_of(seen[0]) == {"1": 4, "2": 1, "total": 5, "(3, 'b')": "pair", "2.5": "half", "null": "none"}
    assert body_of(seen[1]) == {"order_id": "742", "lines": [1, 2, "[...]"], "parent": "{...}"}
    assert '{"a": ["9"], "b": 1}' in seen[2]


WRITE_TOOLS = '''
from typing import Annotated

from pydantic import Field

from tether import Effect, tool


@tool(effect=Effect.WRITE)
def stamp(order_id: Annotated[str, Field(description="Work order id.")]) -> dict:
    """Stamp a work order."""
    with open("stamped.txt", "a", encoding="utf-8") as f:
        f.write(order_id + "\\n")
    return {1: "first line", "order_id": order_id}
'''


def test_a_side_effect_whose_result_has_mixed_keys_is_recorded_once_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_agent(
        tmp_path,
        WRITE_TOOLS,
        "tools_nu7_stamp",
        """
        - call: stamp
          arguments: {order_id: "742"}
        - final: Stamped.
        """,
        tools=["tools_nu7_stamp:stamp"],
        policy={"tenant": "shop-a", "approvals_db": "approvals.db"},
    )
    db = str(tmp_path / "approvals.db")
    assert main(["run", "Stamp 742", "--agent", str(path), "--json"]) == 5
    paused = last_json(capsys.readouterr().out)
    proposal = paused["detail"].split()[-1]
    assert main(["approvals", "approve", proposal, "--db", db, "--json"]) == 0
    assert main(["resume", paused["run_id"], "--db", db, "--json"]) == 0
    done = last_json(capsys.readouterr().out)
    assert done["stop_reason"] == "accepted", done["detail"]
    assert (tmp_path / "stamped.txt").read_text(encoding="utf-8") == "742\n"


# -- positional-only arguments ----------------------------------------------------------------------


def test_a_positional_only_argument_is_passed_by_position() -> None:
    got: list[Any] = []

    @tool
    def read_order(order_id: str, /, limit: int = 3) -> dict:
        """Read one work order.

        Args:
            order_id: Work order id.
            limit: How many lines.
        """
        got.append((order_id, limit))
        return {"order_id": order_id, "limit": limit}

    @tool
    def whoami(ctx: ToolContext, order_id: str, /) -> dict:
        """Who reads the order.

        Args:
            order_id: Work order id.
        """
        got.append((ctx.tenant, order_id))
        return {"tenant": ctx.tenant}

    class Desk:
        @tool
        def lines(self, order_id: str, /) -> dict:
            """Lines of an order.

            Args:
                order_id: Work order id.
            """
            got.append(("desk", order_id))
            return {"lines": 2}

    assert "ctx" not in whoami.spec.parameters["properties"]
    host = Host(policy=Policy(allow={"read_order", "whoami", "lines"}))
    host.add_tools(read_order, whoami, Desk().lines)
    model = ScriptedModel(
        [
            call("read_order", order_id="742"),
            call("read_order", order_id="743", limit=5),
            call("whoami", order_id="744"),
            call("lines", order_id="745"),
            "done",
        ]
    )
    agent = Agent(instructions="Answer from tool results only.", model=model)
    result = host.run_sync(agent, "Read", context=TrustedContext(tenant="shop-a"))
    assert result.stop_reason == "accepted", result.detail
    assert got == [("742", 3), ("743", 5), ("shop-a", "744"), ("desk", "745")]


# -- the line of the user's code, not a library's ---------------------------------------------------

LIBRARY_TOOLS = '''
from typing import Annotated

import yaml
from pydantic import Field

from tether import Effect, tool


@tool(effect=Effect.READ)
def read_settings(text: Annotated[str, Field(description="Settings as YAML.")]) -> dict:
    """Parse settings."""
    return yaml.safe_load(text)
'''


def test_a_library_that_raises_inside_a_tool_names_the_tools_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_agent(
        tmp_path,
        LIBRARY_TOOLS,
        "tools_nu7_library",
        """
        - call: read_settings
          arguments: {text: "a: ["}
        - final: never
        """,
        tools=["tools_nu7_library:read_settings"],
    )
    assert main(["run", "Parse", "--agent", str(path), "--json"]) == 7
    out = last_json(capsys.readouterr().out)
    module = tmp_path / "tools_nu7_library.py"
    line = module.read_text(encoding="utf-8").splitlines().index("    return yaml.safe_load(text)") + 1
    assert out["detail"].endswith(f"(at {module}:{line})"), out["detail"]
    assert "site-packages" not in out["detail"]


def test_an_error_with_only_installed_lines_still_names_the_innermost() -> None:
    source = textwrap.dedent(
        """
        def boom():
            raise ValueError('x')

        def run():
            try:
                boom()
            except ValueError as err:
                return err
        """
    )
    fake = "/opt/app/lib/python3.11/site-packages/somelib/core.py"
    space: dict[str, Any] = {}
    exec(compile(source, fake, "exec"), space)
    err = space["run"]()
    assert raised_at(err) == f" (at {fake}:3)"


# -- tether agent check reads what a run reads -------------------------------------------------------

READ_TOOLS = '''
from typing import Annotated

from pydantic import Field

from tether import Effect, tool


@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="Work order id.")]) -> dict:
    """Read one work order."""
    return {"order_id": order_id, "status": "open"}
'''


@pytest.mark.parametrize(
    ("model", "script", "expected"),
    [
        (
            {"name": "scripted:steps.yaml"},
            "- call: read_order\n  argumnts: {order_id: '1'}\n",
            "a script step is",
        ),
        ({"name": "scripted:steps.yaml"}, "- call: [\n", "not valid YAML"),
        ({"name": "gpt-unknown-9", "limits": {"max_cost_usd": 1.0}}, None, "needs a price for gpt-unknown-9"),
    ],
)
def test_agent_check_refuses_what_a_run_would_refuse(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    model: dict[str, Any],
    script: str | None,
    expected: str,
) -> None:
    path = write_agent(
        tmp_path, READ_TOOLS, "tools_nu7_check", "- final: ok\n", tools=["tools_nu7_check:read_order"]
    )
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["model"] = model
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    if script is not None:
        (tmp_path / "steps.yaml").write_text(script, encoding="utf-8")
    assert main(["agent", "check", str(path)]) == 1
    assert expected in capsys.readouterr().err
    assert main(["run", "Is 742 open?", "--agent", str(path)]) == 1  # a run refuses the same file
    assert expected in capsys.readouterr().err


def test_agent_check_warns_of_a_script_not_there_yet_and_a_run_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_agent(
        tmp_path, READ_TOOLS, "tools_nu7_absent", "- final: ok\n", tools=["tools_nu7_absent:read_order"]
    )
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["model"] = {"name": "scripted:later.yaml"}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["agent", "check", str(path), "--json"]) == 0
    out = last_json(capsys.readouterr().out)
    assert out["warnings"] == [
        f"model script {tmp_path / 'later.yaml'} does not exist yet: a run refuses the file until it does"
    ]
    assert main(["run", "Is 742 open?", "--agent", str(path)]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_agent_check_still_passes_a_good_stand_in_and_a_priced_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = "- call: read_order\n  arguments: {order_id: '742'}\n- final: ok\n"
    path = write_agent(tmp_path, READ_TOOLS, "tools_nu7_good", steps, tools=["tools_nu7_good:read_order"])
    assert main(["agent", "check", str(path)]) == 0
    said = capsys.readouterr().out
    assert "valid" in said and "warning" not in said
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["model"] = {
        "name": "local-model",
        "base_url": "http://127.0.0.1:9/v1",
        "prices": {"local-model": {"input": 0, "output": 0}},
        "limits": {"max_cost_usd": 1.0},
    }
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["agent", "check", str(path)]) == 0


# -- trace.results survives tether resume ----------------------------------------------------------

NOTE_TOOLS = '''
from typing import Annotated

from pydantic import Field

from tether import Effect, tool


@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="Work order id.")]) -> dict:
    """Read one work order."""
    return {"order_id": order_id, "status": "open"}


@tool(effect=Effect.WRITE)
def add_note(
    order_id: Annotated[str, Field(description="Work order id.")],
    text: Annotated[str, Field(description="The note.")],
) -> dict:
    """Add a note."""
    return {"order_id": order_id, "noted": text}
'''


def test_trace_results_in_the_file_keeps_the_results_of_a_resumed_run_once_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_agent(
        tmp_path,
        NOTE_TOOLS,
        "tools_nu7_notes",
        """
        - call: read_order
          arguments: {order_id: "742"}
        - call: add_note
          arguments: {order_id: "742", text: "Waiting for P-17."}
        - final: Noted.
        """,
        tools=["tools_nu7_notes:read_order", "tools_nu7_notes:add_note"],
        policy={"tenant": "shop-a", "approvals_db": "approvals.db"},
        trace={"dir": "traces", "results": True},
    )
    db = str(tmp_path / "approvals.db")
    assert main(["run", "Note 742", "--agent", str(path), "--json"]) == 5
    paused = last_json(capsys.readouterr().out)
    proposal = paused["detail"].split()[-1]
    assert main(["approvals", "approve", proposal, "--db", db, "--json"]) == 0
    assert main(["resume", paused["run_id"], "--db", db, "--json"]) == 0
    done = last_json(capsys.readouterr().out)
    assert done["stop_reason"] == "accepted"
    kept = [json.loads(x) for x in Path(done["results_file"]).read_text(encoding="utf-8").splitlines()]
    assert [k["tool"] for k in kept] == ["read_order", "add_note"]
    assert json.loads(kept[1]["text"]) == {"order_id": "742", "noted": "Waiting for P-17."}


# -- tether mcp review ends with the command that pins what it showed ------------------------------


def test_mcp_review_ends_with_the_approve_command_and_that_command_pins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    config = tmp_path / "mcp.yaml"
    server = {
        "name": "erp",
        "command": ["{python}", "-m", "tether_examples.scenarios.maintenance.erp"],
        "effects": {"read_order": "read"},
        "sandbox": "none",
    }
    host = {"pins": str(tmp_path / "pins.db"), "state": str(tmp_path / "state.db"), "trace_dir": "traces"}
    config.write_text(yaml.safe_dump({"host": host, "servers": [server]}), encoding="utf-8")
    assert main(["mcp", "review", "erp", "--config", str(config)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    digest = next(line.split()[2] for line in out if line.startswith("review digest: "))
    last = out[-1]
    assert last.startswith("to pin exactly this listing: tether mcp approve erp --config ")
    argv = shlex.split(last.split(": ", 1)[1])
    assert argv[-2:] == ["--expect", digest]
    assert main(argv[1:]) == 0
    assert "pinned   erp__read_order" in capsys.readouterr().out
