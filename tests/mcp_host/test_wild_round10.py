"""Wild servers, round ten: schemas with no reference whose checks still cost the schema's size
times the value's (``wild10_server.py``, on the official SDK, next to the honest stdio server of
round four). 1 500 ``anyOf`` alternatives against 1 000 empty objects took 34 s of the event
loop (the whole host frozen), 200 000 of them hours; alternatives that each fail on a note of
4 MiB wrote it into 1 500 messages. Now every check's work is counted against a budget that
grows with the value (``tether.core._work``: past it the check is ``UnusableSchema``, named),
and results are checked in a worker thread: the costly ones are contained and named, the
legitimate ones (the same schemas, values that fit) served, as is the honest server."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tether.core._schema import SchemaViolation, UnusableSchema, compile_schema, validate
from tether.core._work import WORK_PER_NODE, WORK_STEPS, budget
from tether.core.stop import StopReason
from tether.mcphost._runner import ScriptStep, run_question

from .conftest import approve, honest_server, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

TOO_MUCH = "steps of work"


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pins approving the honest server ``ok`` and ``wild10_server.py`` as ``x``."""
    import anyio

    folder = tmp_path_factory.mktemp("w10pins")
    config = write_config(folder, [w10("x"), honest_server(20)])

    async def go() -> None:
        await approve(config, "ok")
        await approve(config, "x")

    anyio.run(go)
    return folder / "pins.db"


def w10(name: str, **extra: Any) -> dict[str, Any]:
    """``wild10_server.py``, unconfined (launched faster), every tool a read."""
    return {
        "name": name,
        "command": [sys.executable, str(Path(__file__).with_name("wild10_server.py"))],
        "mode": "legacy",
        "effects": dict.fromkeys(("lookup", "many", "shout", "pick"), "read"),
        "timeout_s": 60,
        "sandbox": "none",
        **extra,
    }


def _rejected(run: Any) -> list[str]:
    """Why each result was refused for its output schema, in order."""
    return [
        str(e.data.get("why"))
        for e in run.result.events
        if str(e.kind) == "mcp_result_rejected" and e.data.get("reason") == "output_schema"
    ]


async def test_checks_that_multiply_schema_by_value_are_refused_named_and_fitting_values_served(
    tmp_path: Path, pins: Path
) -> None:
    """``many`` answers 1 000 empty objects under 1 500 alternatives each (34 s of the event
    loop before), ``shout`` a note of 4 MiB under 1 500 alternatives of other types (each
    failure built a 4 MiB message), and the model is led to send ``pick`` 350 objects, each tried
    against 1 500 alternatives (seconds of the event loop in the intake): each
    check now stops at its budget, named, and the call fails alone. The same tools with values
    that fit their schemas are served, as are ``lookup`` and the honest server."""
    config = write_config(tmp_path, [w10("x"), honest_server(20)], pins_from=pins)
    calls = [
        ("x__many", {"key": "fit"}),
        ("x__many", {"key": "flood"}),
        ("x__shout", {"key": "fit"}),
        ("x__shout", {"key": "loud"}),
        ("x__pick", {"keys": [{"k7": "a"}, {"k9": "b"}]}),
        ("x__pick", {"keys": [{"z": 1}] * 350}),  # under the intake's 4 KiB
        ("x__lookup", {"key": "e"}),
        ("ok__lookup", {"key": "f"}),
    ]
    run = await run_question(config, "Q", script(*calls, "done"))
    fit, flood = run.seen("x__many")
    assert "value-of-fit" in fit and "invalid_output" not in fit
    assert "invalid_output" in flood  # before: 34 s of the event loop, then a plain mismatch
    short, loud = run.seen("x__shout")
    assert "value-of-fit" in short and "invalid_output" not in short
    assert "invalid_output" in loud and "NNNN" not in loud
    assert [TOO_MUCH in why for why in _rejected(run)] == [True, True]  # named: too much work
    picked, refused = run.seen("x__pick")
    assert "picked-k7,k9" in picked
    assert TOO_MUCH in refused and "picked" not in refused  # refused before it is sent
    assert "value-of-e" in run.seen("x__lookup")[0] and "value-of-f" in run.seen("ok__lookup")[0]
    assert run.result.stop_reason is StopReason.ACCEPTED


async def test_a_costly_result_is_checked_off_the_event_loop_while_the_honest_server_serves(
    tmp_path: Path, pins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two calls in one turn: ``x__many`` (the costly result) and the honest server's
    ``lookup``. The costly check is held until the honest call has been served: checked in the
    event loop (as before), it would hold the loop and the honest call could never finish (the
    wait gives up after 30 s); checked in a worker thread, the honest call is served while it
    waits, and the costly result is still refused, named."""
    from tether.mcp import _calling, _results

    started, served = threading.Event(), threading.Event()
    waited: list[bool] = []
    real_check, real_checked = _results.output_failure, _calling.checked_output

    def held_check(result: Any, definition: Any) -> str | None:
        if definition.get("name") == "many":
            started.set()
            waited.append(served.wait(30))
        return real_check(result, definition)

    async def honest_after_start(result: Any, definition: Any) -> str | None:
        import anyio

        if definition.get("name") == "lookup":
            while not started.is_set():  # the honest answer is taken once the costly check runs
                await anyio.sleep(0.01)
            why = await real_checked(result, definition)
            served.set()
            return why
        return await real_checked(result, definition)

    monkeypatch.setattr(_results, "output_failure", held_check)
    monkeypatch.setattr(_calling, "checked_output", honest_after_start)
    config = write_config(tmp_path, [w10("x"), honest_server(20)], pins_from=pins)
    both = ScriptStep(calls=(("x__many", {"key": "flood"}), ("ok__lookup", {"key": "g"})))
    run = await run_question(config, "Q", [both, ScriptStep(final="done")])
    assert waited == [True]  # before: False, the loop held by the check for the whole wait
    assert "value-of-g" in run.seen("ok__lookup")[0]
    assert "invalid_output" in run.seen("x__many")[0] and TOO_MUCH in _rejected(run)[0]


def test_the_work_budget_refuses_multiplying_checks_and_keeps_honest_ones_as_they_were() -> None:
    """Unit level: the budget grows with the value, so an honest schema checks a large value
    (50 000 records, a union of three kinds) as before, invalid items still found; the same
    alternatives that multiply with the value are refused at the budget; a small schema is
    never counted (the argument hot path is unchanged)."""
    record = {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1}, "size": {"type": "integer"}},
        "required": ["name", "size"],
    }
    union = {"anyOf": [record, {"type": "string", "format": "date"}, {"type": "null"}]}
    listing = {"type": "object", "properties": {"entries": {"type": "array", "items": union}}}
    entries: list[Any] = [{"name": f"f{n}", "size": n} for n in range(50_000)]
    validate(listing, {"entries": [*entries, "2026-01-02", None]})
    with pytest.raises(SchemaViolation):
        validate(listing, {"entries": [*entries, {"name": "", "size": 1}]})
    from .wild10_server import MANY

    with pytest.raises(UnusableSchema, match=TOO_MUCH):
        validate(MANY, {"items": [{} for _ in range(1000)]})
    validate(MANY, {"items": [{"k1499": 1}, {"k0": 2}]})
    small = compile_schema({"type": "object", "properties": {"a": {"type": "array"}}}, intake=True)
    assert small._counted is None
    assert budget(10) == WORK_STEPS + 10 * WORK_PER_NODE


def test_review_compiles_schemas_with_the_hosts_engine_in_their_own_dialect() -> None:
    """Review checked every schema against the 2020-12 meta-schema, so a server written against
    draft-07 (``items`` as a list: a tuple) had that tool flagged ``invalid_schema`` and left
    unpinned, though the host checks its calls fine. Now review compiles each schema as the
    host will use it: the draft-07 tuple passes review and a call; the same list under 2020-12
    is flagged, and a reference outside the schema stays ``remote_ref`` alone."""
    from tether.core._schema import check_arguments
    from tether.mcp._review import scan_definition

    pair = {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"pair": pair},
    }
    tool = {"name": "pair", "description": "Reads a pair.", "inputSchema": draft7}
    assert scan_definition(tool) == []  # before: invalid_schema
    assert check_arguments(draft7, {"pair": ["a", 1]}) == {"pair": ["a", 1]}
    modern = {k: v for k, v in draft7.items() if k != "$schema"}
    assert [f.kind for f in scan_definition({**tool, "inputSchema": modern})] == ["invalid_schema"]
    remote = {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}
    assert [f.kind for f in scan_definition({**tool, "outputSchema": remote})] == ["remote_ref"]
