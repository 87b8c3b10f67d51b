"""A demanding new user, round 6: someone who knows the OpenAI Agents SDK or Pydantic AI follows
the pages and the CLI literally. What they met: Ctrl-C while a plain (sync) tool ran was waited
out and the run then ended ``accepted``, exit 0, on a scripted stand-in (a stop from outside
only bit at the next await that yielded, and none came); a tool whose arguments are described in
its docstring (``Args:``, ``:param x:``, NumPy ``Parameters``, as both of those frameworks read
them) was refused for "no description"; a mistyped key in an agent file was "Extra inputs are not
permitted" with no hint of the key meant; ``tools: [tools.py:read_order]`` (a file for a module)
failed "No module named 'tools.py'"; a tool that raised ended the run with its exception's text
and no line to look at.

Real parts: ``tether`` through ``main`` and as a subprocess receiving a real SIGINT, agent files
and tool modules on disk, SQLite-free scripted runs, traces read back from disk.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from pydantic import Field

from tether import Agent, Host, Policy, TrustedContext, tool
from tether.agents._file import load_agent_file
from tether.cli import main
from tether.errors import ConfigError
from tether.testing import ScriptedModel, call


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


# -- Ctrl-C while a plain tool runs in its thread ------------------------------------------------

SLOW_TOOLS = '''
import os
import signal
import time
from typing import Annotated

from pydantic import Field

from tether import Effect, tool
from tether.runners._interrupt import current_interrupt


@tool(effect=Effect.READ)
def slow_read(order_id: Annotated[str, Field(description="Work order id.")]) -> dict:
    """Read an order slowly: Ctrl-C arrives while this runs in its worker thread."""
    os.kill(os.getpid(), signal.SIGINT)
    interrupt = current_interrupt()
    for _ in range(2000):  # until the signal handler has run on the event loop's thread
        if interrupt is None or interrupt.why is not None:
            break
        time.sleep(0.005)
    return {"order_id": order_id, "status": "open"}
'''


def test_ctrl_c_while_a_plain_tool_runs_ends_the_run_interrupted_not_accepted(tmp_path: Path) -> None:
    path = write_agent(
        tmp_path,
        SLOW_TOOLS,
        "tools_nu6_slow",
        """
        - call: slow_read
          arguments: {order_id: "742"}
        - final: Order 742 is open.
        """,
        tools=["tools_nu6_slow:slow_read"],
    )
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", "run", "Is 742 open?", "--agent", str(path), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    out = last_json(done.stdout)
    assert (done.returncode, out["stop_reason"], out["exit"]) == (130, "interrupted", 130), done.stdout
    assert out["answer"] is None  # the stand-in's final answer was never asked for
    # Ctrl-C no longer waits for the tool's thread (it cannot be stopped): what it returns after
    # the interrupt is discarded, so at most the one observation made before it is traced; the
    # trace ends with the one stop and says so.
    events = [json.loads(x) for x in Path(out["trace"]).read_text(encoding="utf-8").splitlines()]
    assert len([e for e in events if e["kind"] == "tool_observation"]) <= 1
    assert events[-1]["kind"] == "stop" and events[-1]["reason"] == "interrupted"
    assert sum(1 for e in events if e["kind"] == "model_response") == 1


def test_a_run_not_interrupted_still_answers_after_a_plain_tool() -> None:
    """The step's cancellation point costs a run nothing when nothing stops it."""

    @tool
    def read_order(order_id: str) -> dict[str, str]:
        """Read one work order.

        Args:
            order_id: Work order id, e.g. '742'.
        """
        return {"order_id": order_id, "status": "open"}

    host = Host(policy=Policy(allow={"read_order"}))
    host.add_tools(read_order)
    agent = Agent(
        instructions="Answer from tool results only.",
        model=ScriptedModel([call("read_order", order_id="742"), "Order 742 is open."]),
    )
    result = host.run_sync(agent, "Is 742 open?", context=TrustedContext(tenant="shop-a"))
    assert (result.stop_reason, result.answer) == ("accepted", "Order 742 is open.")


# -- argument descriptions from the docstring ----------------------------------------------------


def test_google_style_args_describe_the_arguments_and_leave_the_description() -> None:
    @tool
    async def fetch_page(url: str, retries: int = 3) -> str:
        """Fetch one page.

        Only pages of the shop's own site.

        Args:
            url: The page's URL,
                absolute.
            retries (int): How many times to try.

        Returns:
            The page's text.
        """
        return url

    props = fetch_page.spec.parameters["properties"]
    assert props["url"]["description"] == "The page's URL, absolute."
    assert props["retries"] == {"default": 3, "description": "How many times to try.", "type": "integer"}
    assert fetch_page.spec.parameters["required"] == ["url"]
    assert fetch_page.spec.description == (
        "Fetch one page.\n\nOnly pages of the shop's own site.\n\nReturns:\n    The page's text."
    )


def test_sphinx_and_numpy_styles_describe_the_arguments_too() -> None:
    @tool
    def sphinx(order_id: str, limit: int) -> str:
        """Read notes.

        :param order_id: Work order id.
        :param int limit: How many notes,
            newest first.
        :returns: the notes
        """
        return order_id

    @tool
    def numpy(order_id: str, limit: int = 5) -> str:
        """Read notes.

        Parameters
        ----------
        order_id : str
            Work order id.
        limit : int, optional
            How many notes.

        Returns
        -------
        str
        """
        return order_id

    for t, limit in ((sphinx, "How many notes, newest first."), (numpy, "How many notes.")):
        props = t.spec.parameters["properties"]
        assert (props["order_id"]["description"], props["limit"]["description"]) == ("Work order id.", limit)
        assert t.spec.description.startswith("Read notes.")
        assert "order_id" not in t.spec.description


def test_a_field_description_wins_and_an_undocumented_argument_is_still_refused() -> None:
    @tool
    def read(order_id: Annotated[str, Field(description="From the Field.")], note: str) -> str:
        """Read.

        Args:
            order_id: From the docstring.
            note: A note.
        """
        return order_id

    props = read.spec.parameters["properties"]
    assert (props["order_id"]["description"], props["note"]["description"]) == ("From the Field.", "A note.")

    with pytest.raises(TypeError, match=r"argument 'limit' has no description .*docstring's Args:"):

        @tool
        def partly(order_id: str, limit: int) -> str:
            """Read.

            Args:
                order_id: Work order id.
            """
            return order_id


DOC_TOOLS = '''
def read_order(order_id: str) -> dict:
    """Read one work order.

    Args:
        order_id: Work order id, e.g. '742'.
    """
    return {"order_id": order_id, "status": "open"}
'''


def test_a_plain_function_documented_in_its_docstring_runs_from_an_agent_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_agent(
        tmp_path,
        DOC_TOOLS,
        "tools_nu6_doc",
        """
        - call: read_order
          arguments: {order_id: "742"}
        - final: Order 742 is open.
        """,
        tools=[{"function": "tools_nu6_doc:read_order", "effect": "read"}],
    )
    assert main(["agent", "check", str(path)]) == 0
    capsys.readouterr()
    assert main(["run", "Is 742 open?", "--agent", str(path), "--json"]) == 0
    out = last_json(capsys.readouterr().out)
    assert (out["stop_reason"], out["answer"]) == ("accepted", "Order 742 is open.")


# -- a mistyped key names the key meant ----------------------------------------------------------


def test_a_mistyped_key_in_an_agent_file_names_the_key_meant(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        textwrap.dedent(
            """
            name: x
            instructions: hi
            modle: {name: "scripted:steps.yaml"}
            model: {name: "scripted:steps.yaml", limts: {max_steps: 3}}
            tools: [{function: "m:f", efect: read}]
            polcy: {tenant: a}
            """
        ),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as err:
        load_agent_file(path)
    text = str(err.value)
    assert "modle: Extra inputs are not permitted (did you mean model?)" in text
    assert "model.limts: Extra inputs are not permitted (did you mean limits?)" in text
    assert "tools.0.efect: Extra inputs are not permitted (did you mean effect?)" in text
    assert "polcy: Extra inputs are not permitted (did you mean policy?)" in text
    # A key like none of the known ones gets no guess.
    path.write_text('name: x\ninstructions: hi\nmodel: {name: "scripted:s.yaml"}\nzzz: 1\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"zzz: Extra inputs are not permitted$"):
        load_agent_file(path)


def test_a_mistyped_key_in_an_mcp_config_names_the_key_meant(tmp_path: Path) -> None:
    from tether.mcp._config import load_config

    path = tmp_path / "mcp.yaml"
    path.write_text("servers: []\nhots: {}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"hots: Extra inputs are not permitted \(did you mean host\?\)"):
        load_config(path)


# -- a tool named by its file --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "meant"),
    [
        ("tools_nu6_file.py:read_order", "tools_nu6_file:read_order"),
        ("./tools_nu6_file.py:read_order", "tools_nu6_file:read_order"),
        (".\\tools_nu6_file.py:read_order", "tools_nu6_file:read_order"),
        ("pkg/tools_nu6_file.py:read_order", "pkg.tools_nu6_file:read_order"),
    ],
)
def test_a_tool_named_by_its_file_says_which_module_to_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ref: str, meant: str
) -> None:
    path = write_agent(tmp_path, DOC_TOOLS, "tools_nu6_file", "- final: ok\n", tools=[ref])
    assert main(["agent", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"name the module, not its file: {meant}" in err
    assert "Traceback" not in err
    if "/" not in meant and "." not in meant.partition(":")[0]:  # what it suggests is what works
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data["tools"] = [meant]
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        assert main(["agent", "check", str(path)]) == 0


# -- a tool that raises says where -----------------------------------------------------------------

BOOM_TOOLS = '''
from typing import Annotated

from pydantic import Field

from tether import Effect, tool


@tool(effect=Effect.READ)
def read_order(order_id: Annotated[str, Field(description="Work order id.")]) -> dict:
    """Read one work order."""
    orders = {"742": {"status": "open"}}
    return orders[order_id]
'''


def test_a_tool_that_raises_names_the_line_of_the_users_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_agent(
        tmp_path,
        BOOM_TOOLS,
        "tools_nu6_boom",
        """
        - call: read_order
          arguments: {order_id: "999"}
        - final: never
        """,
        tools=["tools_nu6_boom:read_order"],
    )
    assert main(["run", "Is 999 open?", "--agent", str(path), "--json"]) == 7
    out = last_json(capsys.readouterr().out)
    module = tmp_path / "tools_nu6_boom.py"
    line = module.read_text(encoding="utf-8").splitlines().index("    return orders[order_id]") + 1
    where = f"(at {module}:{line})"
    assert out["stop_reason"] == "internal_error"
    assert out["detail"] == f"tool read_order raised KeyError: '999' {where}"
    events = [json.loads(x) for x in Path(out["trace"]).read_text(encoding="utf-8").splitlines()]
    crashed = [e for e in events if e["kind"] == "tool_crashed"]
    assert [c["error"] for c in crashed] == [f"KeyError: '999' {where}"]


# -- a URL taken from $OPENAI_BASE_URL is named as such --------------------------------------------


def test_an_unreachable_url_from_the_environment_is_named_as_coming_from_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    path = write_agent(
        tmp_path,
        DOC_TOOLS,
        "tools_nu6_env",
        "- final: ok\n",
        model={"name": "gpt-4o-mini", "max_retries": 0},
    )
    assert main(["run", "hi", "--agent", str(path), "--json"]) == 7
    hints = last_json(capsys.readouterr().out)["hints"]
    assert (
        f"could not reach the model server at {url}: is it running there? (from $OPENAI_BASE_URL; "
        in hints[0]
    )
    # Given in the file, it is not said to come from the environment.
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["model"]["base_url"] = url
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["run", "hi", "--agent", str(path), "--json"]) == 7
    hints = last_json(capsys.readouterr().out)["hints"]
    assert "from $OPENAI_BASE_URL" not in hints[0] and url in hints[0]


# -- a dataclass result reaches the model as its fields, not its repr ----------------------------


def test_a_dataclass_enum_or_set_result_is_sent_as_json_not_as_its_repr(tmp_path: Path) -> None:
    import dataclasses
    import datetime
    import enum

    class Status(enum.Enum):
        OPEN = "open"

    @dataclasses.dataclass
    class Order:
        order_id: str
        status: Status
        due: datetime.date
        tags: set[str]

    @tool
    def read_order(order_id: str) -> Order:
        """Read one work order.

        Args:
            order_id: Work order id, e.g. '742'.
        """
        return Order(order_id, Status.OPEN, datetime.date(2026, 12, 1), {"urgent", "erp"})

    host = Host(policy=Policy(allow={"read_order"}), trace_dir=tmp_path / "traces")
    host.add_tools(read_order)
    seen: list[str] = []

    def answer(request: Any) -> Any:
        seen.extend(m.content for m in request.messages if type(m).__name__ == "ToolMessage")
        return "done" if seen else call("read_order", order_id="742")

    from tether.testing import FunctionModel

    agent = Agent(instructions="Answer from tool results only.", model=FunctionModel(answer))
    result = host.run_sync(agent, "Is 742 open?", context=TrustedContext(tenant="shop-a"))
    assert result.stop_reason == "accepted"
    assert len(seen) == 1
    body = json.loads(seen[0][seen[0].index("{") : seen[0].rindex("}") + 1])
    assert body == {"order_id": "742", "status": "open", "due": "2026-12-01", "tags": ["erp", "urgent"]}


def test_a_return_type_local_to_a_function_is_no_error_and_an_argument_type_that_is_says_which() -> None:
    class Local:  # under ``from __future__ import annotations`` its name resolves nowhere
        pass

    @tool
    def make(order_id: str) -> Local:
        """Make one.

        Args:
            order_id: Work order id.
        """
        return Local()

    assert make.spec.parameters["properties"]["order_id"]["description"] == "Work order id."

    with pytest.raises(
        TypeError, match=r"tool take: the type of argument 'thing' \('Local'\) does not resolve"
    ):

        @tool
        def take(thing: Local) -> str:
            """Take one.

            Args:
                thing: The thing.
            """
            return "taken"


# -- api_key= as the official SDKs take it -------------------------------------------------------


@pytest.mark.parametrize("backend", ["OpenAICompatible", "OpenAIResponses", "AnthropicMessages"])
def test_a_key_given_in_code_is_a_config_error_naming_the_variable_to_use(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tether.models

    cls = getattr(tether.models, backend)
    with pytest.raises(
        ConfigError, match=r"api_key is not taken: .*api_key_env='MY_KEY' \(default \$[A-Z_]+\)"
    ):
        cls("m-1", api_key="sk-secret-123", transport="http")
    # The variable named is what works (a local server: no key needed at all).
    monkeypatch.setenv("MY_KEY", "sk-secret-123")
    model = cls("m-1", api_key_env="MY_KEY", base_url="http://127.0.0.1:9/v1", transport="http")
    assert model.api_key_env == "MY_KEY" and "sk-secret-123" not in repr(model)


# -- run_sync inside a running loop (a notebook) -------------------------------------------------


def test_run_sync_inside_a_running_loop_says_to_await_run_and_awaiting_it_works() -> None:
    import asyncio

    host = Host(policy=Policy())
    agent = Agent(instructions="Answer.", model=ScriptedModel(["Order 742 is open."]))
    context = TrustedContext(tenant="shop-a")

    async def notebook_cell() -> str | None:
        with pytest.raises(ConfigError, match=r"one is already running here .*await host.run\(\.\.\.\)"):
            host.run_sync(agent, "Is 742 open?", context=context)
        with pytest.raises(ConfigError, match=r"already running"):
            host.resume_sync(agent, "20261201T000000-00000000")
        result = await host.run(agent, "Is 742 open?", context=context)  # what it says works
        await host.aclose()
        return result.answer

    assert asyncio.run(notebook_cell()) == "Order 742 is open."
