"""Every grader is shown failing a wrong case, not only passing a right one (SPEC E3)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import pytest
from pydantic import Field

from tether import Agent, Host, Policy, TrustedContext, tool
from tether.context._untrusted import Observation
from tether.core.stop import StopReason
from tether.evals._cases import ExpectedCall, TrajectoryExpectation
from tether.evals._graders import (
    ModelJudge,
    call_f1,
    extract_facts,
    grade_final_response,
    grade_groundedness,
    grade_policy_trace,
    grade_state,
    grade_trajectory,
    groundedness,
    split_sentences,
)
from tether.runs._values import CallRecord, RunResult
from tether.testing import ScriptedModel, call
from tether.tools._contract import Effect

T0 = datetime(2026, 8, 9, 14, 10, tzinfo=UTC)


def run_with(calls: list[tuple[str, dict]], answer: str | None = "done", **kw) -> RunResult:
    records = [
        CallRecord(f"c{i}", name, args, kw.pop("status", "ok")) for i, (name, args) in enumerate(calls)
    ]
    return RunResult("r1", kw.pop("stop", StopReason.ACCEPTED), answer, calls=records, **kw)


def expect(mode: str, *calls: ExpectedCall, with_args: bool = True) -> TrajectoryExpectation:
    return TrajectoryExpectation(mode=mode, calls=calls, with_args=with_args)


ORDER = ExpectedCall(tool="read_order", args={"order_id": "742"})
HISTORY = ExpectedCall(tool="read_history", args={"order_id": "742"})


# -- trajectory ----------------------------------------------------------------------------------


@pytest.mark.spec("E3")
def test_exact_trajectory_passes_the_same_calls_and_fails_an_extra_or_reordered_one() -> None:
    right = run_with([("read_order", {"order_id": "742"}), ("read_history", {"order_id": "742"})])
    extra = run_with([("read_order", {"order_id": "742"}), ("read_history", {"order_id": "742"}), ("x", {})])
    swapped = run_with([("read_history", {"order_id": "742"}), ("read_order", {"order_id": "742"})])
    spec = expect("EXACT", ORDER, HISTORY)
    assert grade_trajectory(right, spec).passed
    assert not grade_trajectory(extra, spec).passed
    assert not grade_trajectory(swapped, spec).passed


@pytest.mark.spec("E3")
def test_in_order_allows_interleaved_calls_but_not_a_wrong_order() -> None:
    spec = expect("IN_ORDER", ORDER, HISTORY)
    between = run_with(
        [("read_order", {"order_id": "742"}), ("x", {}), ("read_history", {"order_id": "742"})]
    )
    backwards = run_with([("read_history", {"order_id": "742"}), ("read_order", {"order_id": "742"})])
    assert grade_trajectory(between, spec).passed
    grade = grade_trajectory(backwards, spec)
    assert not grade.passed and grade.score == 0.0
    assert grade.data["f1"] == 1.0  # the order-blind F1 still credits the right calls


@pytest.mark.spec("E3")
def test_any_order_needs_each_expected_call_once_and_fails_when_one_is_missing() -> None:
    spec = expect("ANY_ORDER", ORDER, HISTORY)
    assert grade_trajectory(
        run_with([("read_history", {"order_id": "742"}), ("read_order", {"order_id": "742"})]), spec
    ).passed
    # Two reads of the order do not stand in for the history.
    twice = run_with([("read_order", {"order_id": "742"}), ("read_order", {"order_id": "742"})])
    assert not grade_trajectory(twice, spec).passed


@pytest.mark.spec("E3")
def test_trajectory_with_args_fails_a_wrong_target_that_the_name_only_mode_accepts() -> None:
    wrong = run_with([("read_order", {"order_id": "901"}), ("read_history", {"order_id": "901"})])
    assert not grade_trajectory(wrong, expect("EXACT", ORDER, HISTORY)).passed
    assert grade_trajectory(wrong, expect("EXACT", ORDER, HISTORY, with_args=False)).passed


@pytest.mark.spec("E3")
def test_argument_comparators_exact_subset_tolerance_and_ignore() -> None:
    exp = ExpectedCall(
        tool="quote",
        args={"amount": 100.0, "tags": ["a"], "note": "x", "who": "ops"},
        compare={"amount": "tolerance:0.5", "tags": "subset", "note": "ignore"},
    )
    spec = expect("EXACT", exp)
    ok = run_with([("quote", {"amount": 100.4, "tags": ["a", "b"], "note": "anything", "who": "ops"})])
    assert grade_trajectory(ok, spec).passed
    for bad in (
        {"amount": 101.0, "tags": ["a"], "note": "", "who": "ops"},  # outside the tolerance
        {"amount": 100.0, "tags": ["b"], "note": "", "who": "ops"},  # not a subset
        {"amount": 100.0, "tags": ["a"], "note": "", "who": "Ops"},  # exact is exact
        {"amount": "100", "tags": ["a"], "note": "", "who": "ops"},  # no coercion of types
        {"amount": 100.0, "tags": ["a"], "note": "", "who": "ops", "extra": 1},  # unexpected argument
    ):
        assert not grade_trajectory(run_with([("quote", bad)]), spec).passed, bad


@pytest.mark.spec("E3")
def test_no_tool_calls_is_not_vacuous() -> None:
    spec = TrajectoryExpectation(no_tool_calls=True)
    assert grade_trajectory(run_with([], answer="I need the season to answer."), spec).passed
    assert not grade_trajectory(run_with([("read_order", {"order_id": "742"})]), spec).passed
    # A denied call is still a call: proposing a forbidden tool is not "no tool calls".
    denied = run_with([("export_secrets", {})], status="denied")
    assert not grade_trajectory(denied, spec).passed
    # A run that never got going (no answer) does not pass by having done nothing.
    assert not grade_trajectory(run_with([], answer=None, stop=StopReason.MODEL_ERROR), spec).passed


@pytest.mark.spec("E3")
def test_an_empty_expected_trajectory_must_be_explicit() -> None:
    with pytest.raises(ValueError, match="passes anything"):
        TrajectoryExpectation(mode="IN_ORDER", calls=())


@pytest.mark.spec("E3")
def test_call_f1_scores_precision_and_recall() -> None:
    actual = [("read_order", {"order_id": "742"}), ("x", {})]
    assert call_f1(actual, [ORDER, HISTORY]) == pytest.approx(0.5)
    assert call_f1([], [ORDER]) == 0.0
    assert call_f1(actual[:1], [ORDER]) == 1.0


# -- final state ---------------------------------------------------------------------------------


@pytest.mark.spec("E3")
def test_state_grader_fails_a_different_missing_or_differently_typed_value() -> None:
    expected = {"route": "escalate", "backstop": True}
    assert grade_state(expected, {"route": "escalate", "backstop": True, "steps": 3}).passed
    assert not grade_state(expected, {"route": "ticket", "backstop": True}).passed
    assert not grade_state(expected, {"route": "escalate"}).passed
    assert not grade_state(expected, {"route": "escalate", "backstop": 1}).passed


# -- final response ------------------------------------------------------------------------------


REFERENCE = "Work order 742 is open: awaiting part P-17 (equipment pump-19)."


@pytest.mark.spec("E3")
def test_final_response_tolerant_accepts_more_detail_and_fails_a_wrong_fact() -> None:
    longer = "Work order 742 is still open, awaiting part P-17 for pump-19; the supplier was chased."
    assert grade_final_response(longer, REFERENCE).passed
    wrong = grade_final_response("Work order 742 is open: awaiting part P-18 (equipment pump-19).", REFERENCE)
    assert not wrong.passed and "P-17" in wrong.data["missing"]
    assert not grade_final_response("It is open.", REFERENCE).passed
    assert not grade_final_response(None, REFERENCE).passed


@pytest.mark.spec("E3")
def test_final_response_exact_mode_normalises_but_fails_any_other_wording() -> None:
    assert grade_final_response(
        "work order 742 is OPEN awaiting part P-17 (equipment pump-19)", REFERENCE, mode="exact"
    ).passed
    assert not grade_final_response(REFERENCE + " Soon.", REFERENCE, mode="exact").passed


# -- groundedness --------------------------------------------------------------------------------


def test_sentences_and_facts_keep_times_names_and_identifiers() -> None:
    text = "Max Verstappen won the 2024 São Paulo Grand Prix. He set 1:20.472 on lap 67. It is open."
    assert split_sentences(text) == [
        "Max Verstappen won the 2024 São Paulo Grand Prix.",
        "He set 1:20.472 on lap 67.",
        "It is open.",
    ]
    assert extract_facts("Exposure is USD 180,000 on lot P-17.") == ["P-17", "180000", "USD"]
    assert extract_facts("Delivery on 2026-09-01.") == ["2026-09-01"]
    # A date is one fact: its parts scattered over the evidence do not support it.
    assert not groundedness("Delivery on 2026-09-01.", ['{"year": 2026, "lot": "09", "day": "01"}']).passed
    assert groundedness("Delivery on 2026-09-01.", ['{"eta": "2026-09-01T10:00:00Z"}']).passed


@pytest.mark.spec("E3")
def test_groundedness_lists_the_unsupported_sentence_and_scores_the_fraction() -> None:
    evidence = ['{"driver": "Max Verstappen", "grid": 17, "laps": 69, "points": 26, "team": "Red Bull"}']
    answer = (
        "Max Verstappen finished first for Red Bull. He started 17th and completed 69 laps. "
        "He scored 26 points with the fastest lap, 1:20.472 on lap 67."
    )
    grade = groundedness(answer, evidence)
    assert not grade.passed
    assert grade.score == pytest.approx(2 / 3)
    [bad] = grade.data["unsupported"]
    assert bad["sentence"].startswith("He scored 26 points") and bad["missing"] == ["1:20.472", "67"]
    # The same answer is supported once the evidence carries the field.
    fixed = [evidence[0][:-1] + ', "fastest_lap": {"rank": 1, "time": "1:20.472", "lap": 67}}']
    assert groundedness(answer, fixed).passed


@pytest.mark.spec("E3")
def test_groundedness_does_not_match_a_number_inside_a_longer_one() -> None:
    assert not groundedness("It scored 26 points.", ['{"season": 2026}']).passed


@pytest.mark.spec("E3")
def test_tool_declarations_count_as_evidence() -> None:
    declaration = "get_result: from 2019 to 2024 the fastest lap scored one extra point"
    assert groundedness("From 2019 to 2024 the fastest lap was worth a point.", [declaration]).passed
    assert not groundedness("From 2019 to 2025 the fastest lap was worth a point.", [declaration]).passed


@pytest.mark.spec("E3", "E4")
@pytest.mark.anyio
async def test_a_judge_through_the_model_protocol_can_reject_but_never_rescue() -> None:
    evidence = ['{"order_id": "742", "status": "open", "note": "awaiting part P-17"}']
    answer = "Work order 742 is open. The supplier has promised part P-17. Call 555-0100 now."
    judge = ModelJudge(
        ScriptedModel(["SUPPORTED: stated", "UNSUPPORTED: no promise in evidence"], name="judge-m")
    )
    grade = await grade_groundedness(answer, evidence, judge=judge)
    missing_facts, judged = grade.data["unsupported"]
    assert missing_facts["missing"] == ["555", "0100"]  # the fact check failed it; the judge was not asked
    assert judged["sentence"].startswith("The supplier has promised") and judged["judge"] == "judge:judge-m"
    assert grade.score == pytest.approx(1 / 3) and not grade.passed
    assert len(judge.model.requests) == 2
    # The judge sees the evidence and the sentence as delimited data.
    assert "<untrusted_data" in judge.model.requests[0].messages[1].content


# -- policy trace --------------------------------------------------------------------------------


@tool
def read_order(order_id: Annotated[str, Field(description="Work order id.")]) -> dict:
    """Read a work order."""
    return {"order_id": order_id, "status": "open", "note": "awaiting part P-17"}


@tool(effect=Effect.WRITE)
def export_secrets() -> dict:
    """Export integration secrets (administrative)."""
    return {"secrets": "token-XYZ"}


def _script() -> ScriptedModel:
    return ScriptedModel(
        [
            call("read_order", order_id="742"),
            call("export_secrets"),
            "Work order 742 is open: awaiting part P-17.",
        ]
    )


async def _run(allow: set[str]) -> RunResult:
    host = Host(policy=Policy(allow=allow, automatic_effects=(Effect.READ, Effect.WRITE)))
    host.add_tools(read_order, export_secrets)
    async with host:
        return await host.run(
            Agent(instructions="Investigate.", model=_script()),
            "Why is 742 open?",
            context=TrustedContext(tenant="a"),
        )


@pytest.mark.spec("E3")
@pytest.mark.anyio
async def test_a_right_answer_through_a_forbidden_call_fails_the_policy_trace() -> None:
    # A misconfigured host let export_secrets run: the answer is right, the trajectory is not.
    leaky = await _run({"read_order", "export_secrets"})
    assert (
        leaky.ok and grade_final_response(leaky.answer, "Work order 742 is open: awaiting part P-17.").passed
    )
    grade = grade_policy_trace(leaky, allowed_tools={"read_order"})
    assert not grade.passed and "export_secrets" in grade.detail
    # Declared as a sending effect, it also lacks an approval.
    assert "unapproved" in grade_policy_trace(leaky, effects={"export_secrets": Effect.WRITE}).detail
    # The governed host blocks the same attempt: nothing forbidden ran, the block is counted.
    governed = await _run({"read_order"})
    assert governed.stop_reason is StopReason.POLICY_DENIED
    ok = grade_policy_trace(governed, allowed_tools={"read_order"})
    assert ok.passed and ok.data["blocked"] == 1


@pytest.mark.spec("E3", "T5")
def test_a_side_effect_passes_only_with_an_approval_for_that_very_call() -> None:
    from tether.trace._events import EventKind, TraceEvent

    def granted(call_id: str) -> TraceEvent:
        return TraceEvent("r1", 1, "t", EventKind.APPROVAL_GRANTED, {"call_id": call_id, "proposal_id": "p1"})

    effects = {"prepare_draft": Effect.WRITE}
    approved = run_with([("prepare_draft", {"lead": "l1"})], events=[granted("c0")])
    assert grade_policy_trace(approved, effects=effects).passed
    # An approval for another call does not transfer; no approval at all fails too.
    elsewhere = run_with([("prepare_draft", {"lead": "l1"})], events=[granted("c9")])
    assert not grade_policy_trace(elsewhere, effects=effects).passed
    assert not grade_policy_trace(run_with([("prepare_draft", {"lead": "l1"})]), effects=effects).passed


@pytest.mark.spec("E3")
def test_policy_trace_fails_a_crashed_run() -> None:
    crashed = run_with(
        [("read_order", {"order_id": "742"})], stop=StopReason.INTERNAL_ERROR, detail="KeyError"
    )
    assert not grade_policy_trace(crashed, allowed_tools={"read_order"}).passed
    assert grade_policy_trace(
        run_with([("read_order", {"order_id": "742"})]), allowed_tools={"read_order"}
    ).passed


def test_observations_feed_evidence() -> None:
    from tether.evals._graders import evidence_of

    obs = Observation("c1", "erp__read_order", "erp", T0, json.dumps({"equipment": "pump-19"}))
    result = RunResult("r", StopReason.ACCEPTED, "x", observations=[obs])
    assert any("pump-19" in e for e in evidence_of(result))
