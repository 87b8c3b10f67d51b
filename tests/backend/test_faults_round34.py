"""Model faults, round thirty-four: held-out shapes driven as the other rounds are (an agent file
naming ``model.provider``, ``tether run`` in process, streamed and whole, over the SDK transport
and plain httpx) against real servers on 127.0.0.1 speaking chat completions, the Responses API
and the Anthropic Messages API.

Fixed here:

- a tool call whose arguments are JSON nested past Python's recursion limit (``[[[…]]]`` two
  thousand deep inside the object, 4 KB, under the gate's size limit; or 200 KB, over it), on
  every protocol, whole and streamed: the gate refused it (``too_deep``, ``too_large``), but the
  run's repetition count read the same text with a plain ``json.loads`` that caught only
  ``ValueError``, and the run crashed, ``unexpected error: RecursionError``, exit 7, no stop
  reason, no trace of the turn (``runners._spend.asked``). An Anthropic run that got past that
  then failed to write the refused call back in the next request (``_anthropic._input``), the run
  ``model_error`` after the call was refused. Both read such arguments as the text that is no
  JSON object they are now: the call refused, its refusal sent back, the model's answer after it
  standing, the run flagged (exit 2), as arguments that are an array or too long already were.

Probed, all already honest; pinned here so they stay so: see ``PINNED``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, Case, Make, case_params, run_case
from test_faults_round4 import SERVERS4
from test_faults_round15 import walk_dicts

from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

A = ("anthropic",)
DEEP_SMALL = '{"order_id": "742", "x": ' + "[" * 1900 + "]" * 1900 + "}"  # under the gate's 4 KB
DEEP_LARGE = '{"order_id": "742", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"


def calls_with(arguments: str) -> Make:
    """A call to ``read_order`` with ``arguments`` as written, then the answer (an Anthropic
    whole answer's input is an object: ``anthropic_input_text`` sends it)."""
    replies = [Reply.calls(("read_order", arguments)), Reply.text(ANSWER)]
    return lambda p, s: None if p in A and not s else replies


def anthropic_input_text(arguments: str) -> Make:
    """Anthropic, whole: the call's ``input`` as the JSON text ``arguments`` (the quirk
    ``test_faults_heldout`` accepts), the fake server not parsing it first."""

    def edit(items: list[Any]) -> list[Any]:
        def fix(d: dict[str, Any]) -> None:
            if d.get("type") == "tool_use":
                d["input"] = arguments

        return walk_dicts(items, fix)

    return lambda p, s: [Reply.calls(ORDER, edit=edit), Reply.text(ANSWER)] if p in A else None


REFUSED = [
    Case("arguments_nested_past_the_recursion_limit", calls_with(DEEP_SMALL), False, ("too_deep",)),
    Case("arguments_nested_past_the_recursion_limit_and_too_long", calls_with(DEEP_LARGE), False,
         ("too_large",)),
    Case("anthropic_input_text_nested_past_the_recursion_limit", anthropic_input_text(DEEP_SMALL), False,
         ("too_deep",), modes=("whole",)),
    Case("anthropic_input_text_nested_past_the_recursion_limit_and_too_long",
         anthropic_input_text(DEEP_LARGE), False, ("too_large",), modes=("whole",)),
]  # fmt: skip


@pytest.mark.parametrize(("case", "provider", "mode", "transport"), case_params(REFUSED))
def test_arguments_nested_past_reading_are_refused_and_the_run_goes_on(
    tmp_path: Path, case: Case, provider: str, mode: str, transport: str
) -> None:
    """The call is refused before it runs, the refusal goes back to the model, whose answer
    after it stands; the run is flagged (exit 2), never an internal error."""
    code, out, requests, _ = run_case(tmp_path, provider, case, mode, transport, servers=SERVERS4)
    assert "unexpected error" not in json.dumps(out) and "Traceback" not in json.dumps(out), out
    assert (code, out["stop_reason"], out["answer"], requests) == (2, "accepted", ANSWER, 2), out
    assert [c["status"] for c in out["calls"]] == ["rejected"], out
    for piece in case.said:
        assert piece in out["message"], out["message"]
