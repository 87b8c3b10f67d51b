"""A new user's trial, round 9: agent files run with each ``model.provider`` against loopback
servers of each protocol, with memory, claim checking and a trace folder of their choosing. What
they met:

- an honest answer that reports the read it made ("I called read_order: 742 is open") was sent
  back by the default claim check as a claimed side effect, as if it said "I called the buyer";
- ``memory.subjects: ["order 742"]`` (or a ``disabled`` subject of that shape) passed ``tether
  agent check`` and the run: the store holds no subject of that shape, so nothing was ever
  recalled (or disabled) and nothing said so;
- a ``trace.dir`` that cannot be written (a file in its place) passed ``tether agent check`` and
  made ``tether run`` end "unexpected error: FileExistsError" (exit 7).

Real parts: ``tether`` through ``main``, agent files, tool modules and a memory store on disk, the
loopback servers of each protocol (``tether_testing``).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.cli import main
from tether.core.handoff import claim_check
from tether.memory import MemoryPolicy, MemoryRecord, Source, SqliteMemory
from tether_testing.fake_server import FakeChatServer, Reply, scripted
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


def write_agent(tmp_path: Path, model: dict[str, Any], **spec: Any) -> Path:
    (tmp_path / "tools_round9.py").write_text(TOOLS, encoding="utf-8")
    data = {
        "name": "order-agent",
        "instructions": "Answer from tool results only.",
        "model": model,
        "tools": ["tools_round9:read_order"],
        "trace": {"dir": "traces"},
        **spec,
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def last_json(out: str) -> dict[str, Any]:
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


# -- the claim check and answers that report a read ----------------------------------------------


@pytest.mark.parametrize("provider", sorted(SERVERS))
@pytest.mark.parametrize(
    "answer", ["I called read_order for 742: it is open.", "We called the `read_order` tool; 742 is open."]
)
def test_an_answer_that_reports_its_read_by_the_tools_name_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str, answer: str
) -> None:
    with SERVERS[provider](scripted([Reply.calls(ORDER), Reply.text(answer)])) as server:
        path = write_agent(tmp_path, {"provider": provider, "name": "m-1", "base_url": server.url})
        assert main(["run", "q", "--agent", str(path), "--json"]) == 0
    out = last_json(capsys.readouterr().out)
    assert out["answer"] == answer and out["llm_calls"] == 2  # not sent back


def test_calling_a_person_or_a_side_effecting_tool_is_still_a_claim() -> None:
    verify = claim_check(lambda: {"read_order": "read", "add_note": "write"})
    no_calls = type("State", (), {"calls": ()})()
    for answer in (
        "I called the buyer about 742.",
        "I called add_note on 742.",
        "I called read_order, then I e-mailed the buyer.",
    ):
        assert verify(no_calls, answer) is not None, answer
    assert verify(no_calls, "I called read_order: 742 is open.") is None


# -- memory subjects of a shape the store never holds ----------------------------------------------


@pytest.mark.parametrize("where", ["subjects", "disabled"])
def test_a_memory_subject_the_store_cannot_hold_is_refused_by_check_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    memory = {"db": "memory.db", where: ["order 742"]}
    path = write_agent(tmp_path, {"name": "scripted:steps.yaml"}, memory=memory)
    (tmp_path / "steps.yaml").write_text("- final: Order 742 is open.\n", encoding="utf-8")
    assert main(["agent", "check", str(path)]) == 1
    assert main(["run", "q", "--agent", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count(f"memory.{where}[0]: 'order 742' is not a subject the store holds") == 2
    assert "'order:742'" in err
    assert not (tmp_path / "memory.db").exists()  # nothing was made


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_a_well_formed_subject_is_recalled_into_the_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str
) -> None:
    store = SqliteMemory(tmp_path / "memory.db", policy=MemoryPolicy(approved_sources=frozenset({"erp"})))
    now = datetime.now(UTC)
    record = MemoryRecord(
        kind="semantic", subject="order:742", claim="waiting for part P-17",
        source=Source(system="erp", record="orders/742", observed_at=now), scope="tenant:shop-a",
        confidence="authoritative", valid_until=now + timedelta(days=30), acl=frozenset({"order-read"}),
        retention="while-order-open", purpose="answer order questions", sensitivity="internal",
    )  # fmt: skip
    assert asyncio.run(store.propose(record)).status == "stored"
    memory = {"db": "memory.db", "subjects": ["order:742"], "approved_sources": ["erp"]}
    policy = {"tenant": "shop-a", "roles": ["order-read"]}
    with SERVERS[provider](scripted([Reply.text("It waits for P-17.")])) as server:
        model = {"provider": provider, "name": "m-1", "base_url": server.url}
        path = write_agent(tmp_path, model, memory=memory, policy=policy)
        assert main(["agent", "check", str(path)]) == 0
        assert main(["run", "q", "--agent", str(path), "--json"]) == 0
        assert "waiting for part P-17" in json.dumps(server.bodies()[0])
    assert last_json(capsys.readouterr().out)["answer"] == "It waits for P-17."


# -- a trace folder that cannot be written -----------------------------------------------------------


def test_a_trace_dir_that_cannot_be_written_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "traces").write_text("not a folder\n", encoding="utf-8")
    with FakeChatServer(scripted([Reply.calls(ORDER), Reply.text("Order 742 is open.")])) as server:
        path = write_agent(tmp_path, {"name": "m-1", "base_url": server.url})
        assert main(["agent", "check", str(path)]) == 1
        assert main(["run", "q", "--agent", str(path)]) == 1
        assert server.bodies() == []  # nothing ran
    err = capsys.readouterr().err
    assert err.count(f"trace.dir: {tmp_path / 'traces'} cannot be written") == 2
    assert "is not a folder" in err and "unexpected error" not in err
    assert (tmp_path / "traces").read_text(encoding="utf-8") == "not a folder\n"  # left as it was


def test_a_trace_dir_not_made_yet_is_made_and_the_run_traced_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeChatServer(scripted([Reply.calls(ORDER), Reply.text("Order 742 is open.")])) as server:
        trace = {"dir": "out/deep/traces"}
        path = write_agent(tmp_path, {"name": "m-1", "base_url": server.url}, trace=trace)
        assert main(["agent", "check", str(path)]) == 0
        assert main(["run", "q", "--agent", str(path), "--json"]) == 0
    out = last_json(capsys.readouterr().out)
    assert Path(out["trace"]).parent == tmp_path / "out" / "deep" / "traces"


# -- a hook that cannot take what the run passes it ------------------------------------------------

HOOKS = """
def one(state):
    return None

def two(state, answer):
    return None

def flexible(state, *rest, strict=False):
    return None
"""


@pytest.mark.parametrize(
    ("hook", "ref", "wanted"),
    [
        ("verify", "hooks_round9:one", "(state, answer)"),
        ("handoff", "hooks_round9:one", "(state, answer)"),
        ("remember", "hooks_round9:two", "(state)"),
        ("resolve_evidence", "hooks_round9:one", "(ref, state)"),
    ],
)
def test_a_hook_with_the_wrong_signature_is_refused_before_the_run_not_after_its_effects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hook: str, ref: str, wanted: str
) -> None:
    (tmp_path / "hooks_round9.py").write_text(HOOKS, encoding="utf-8")
    with FakeChatServer(scripted([Reply.calls(ORDER), Reply.text("Order 742 is open.")])) as server:
        path = write_agent(tmp_path, {"name": "m-1", "base_url": server.url}, hooks={hook: ref})
        assert main(["agent", "check", str(path)]) == 1
        assert main(["run", "q", "--agent", str(path)]) == 1
        assert server.bodies() == []  # refused before anything ran
    err = capsys.readouterr().err
    assert err.count(f"hooks.{hook}: {ref} takes (") == 2 and f"the run calls it with {wanted}" in err
    assert "unexpected error" not in err


def test_hooks_that_take_what_the_run_passes_check_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "hooks_round9.py").write_text(HOOKS, encoding="utf-8")
    hooks = {"verify": "hooks_round9:flexible", "handoff": "hooks_round9:two", "remember": "hooks_round9:one"}
    with FakeChatServer(scripted([Reply.calls(ORDER), Reply.text("Order 742 is open.")])) as server:
        path = write_agent(tmp_path, {"name": "m-1", "base_url": server.url}, hooks=hooks)
        assert main(["agent", "check", str(path)]) == 0
        assert main(["run", "q", "--agent", str(path), "--json"]) == 0
    assert last_json(capsys.readouterr().out)["answer"] == "Order 742 is open."


# -- a store file a run could not open ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "spec"),
    [
        ("memory.db", {"memory": {"db": "store"}}),
        ("policy.approvals_db", {"policy": {"approvals_db": "store"}}),
    ],
)
@pytest.mark.parametrize("store", ["folder", "text"])
def test_check_refuses_a_store_file_the_run_refuses_and_leaves_it_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, spec: dict[str, Any], store: str
) -> None:
    if store == "folder":
        (tmp_path / "store").mkdir()
    else:
        (tmp_path / "store").write_text("my notes\n" * 200, encoding="utf-8")
    (tmp_path / "steps.yaml").write_text("- final: Order 742 is open.\n", encoding="utf-8")
    path = write_agent(tmp_path, {"name": "scripted:steps.yaml"}, **spec)
    assert main(["agent", "check", str(path)]) == 1
    assert main(["run", "q", "--agent", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{where}: {tmp_path / 'store'} is " in err and "not a SQLite database file" in err
    if store == "text":
        assert (tmp_path / "store").read_text(encoding="utf-8") == "my notes\n" * 200


def test_check_passes_store_files_not_made_yet_and_makes_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "steps.yaml").write_text("- final: Order 742 is open.\n", encoding="utf-8")
    spec = {"memory": {"db": "state/memory.db"}, "policy": {"approvals_db": "approvals.db"}}
    path = write_agent(tmp_path, {"name": "scripted:steps.yaml"}, **spec)
    assert main(["agent", "check", str(path)]) == 0
    assert not (tmp_path / "state").exists() and not (tmp_path / "approvals.db").exists()
    assert main(["run", "q", "--agent", str(path)]) == 0
    assert main(["agent", "check", str(path)]) == 0  # the stores the run made check too
