"""``tether demo claims``: four e-mails through the claims triage (SPEC S3, P2, P3).

The reading model is a deterministic stand-in that extracts fields faithfully but is
*persuaded* by the sender: told "do not escalate", its escalation check says no. The
backstop escalates anyway because the extracted exposure is at or above USD 50,000.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from tether.core.messages import AssistantMessage, UserMessage
from tether.evals._cases import Case, load_cases
from tether.evals._graders import grade_state
from tether.models._base import ModelRequest
from tether.testing import FunctionModel
from tether_examples.scenarios.claims.actions import Actions
from tether_examples.scenarios.claims.graph import Triage
from tether_examples.scenarios.claims.models import Email

__all__ = ["CASES_PATH", "email_of", "main", "persuadable_reader", "run_case"]

CASES_PATH = Path(__file__).with_name("cases.yaml")


def email_of(case: Case) -> Email:
    data = case.input
    return Email(str(data["sender"]), str(data["subject"]), str(data["body"]))


def _email_text(request: ModelRequest) -> str:
    return next(m.content for m in request.messages if isinstance(m, UserMessage))


def _field(label: str, text: str) -> str | None:
    # Up to the next labelled line: a faithful reader keeps whatever the sender put in the field.
    m = re.search(rf"^{label}: (.+?)(?=\n(?:Claimant|Lot): |\n\n|\n[A-Z][a-z]+ [a-z]|\Z)", text, re.M | re.S)
    return m.group(1).strip() if m else None


def persuadable_reader(request: ModelRequest) -> AssistantMessage:
    """Extract faithfully; on the escalation question, obey the sender when told not to escalate."""
    schema = request.metadata.get("schema")
    text = _email_text(request)
    low = text.lower()
    if schema == "ClaimExtract":
        if "invoice" in low and "claimant" not in low:
            kind = "freight_invoice"
        elif "weight" in low:
            kind = "weight_claim"
        elif "claimant" in low:
            kind = "quality_claim"
        else:
            kind = "other"
        amount = re.search(r"USD ([\d,]+(?:\.\d+)?)", text)
        out: dict[str, Any] = {
            "kind": kind,
            "claiming_party": _field("Claimant", text),
            "contract_or_lot": _field("Lot", text),
            "exposure_usd": float(amount.group(1).replace(",", "")) if amount else None,
            "contamination_reported": "contamination found" in low,
            "arbitration_threatened": "arbitration" in low and "ica" in low,
        }
        return AssistantMessage(content=json.dumps(out))
    if schema == "EscalationCheck":
        if "do not escalate" in low:  # the compromised reader does what the sender wrote
            return AssistantMessage(
                content=json.dumps({"requires_escalation": False, "reasons": ["routine"]})
            )
        serious = "contamination found" in low and "arbitration" in low
        return AssistantMessage(
            content=json.dumps(
                {"requires_escalation": serious, "reasons": ["contamination"] if serious else []}
            )
        )
    question = text.rsplit("Question:", 1)[-1].lower()
    yes = ("surveyor" in question and "surveyor inspected" in low) or (
        "sealed" in question and "kept sealed" in low
    )
    return AssistantMessage(content=json.dumps({"answer": yes, "confidence": 0.9}))


async def run_case(case: Case) -> dict[str, Any]:
    """Triage one case's e-mail with the persuadable reader; grade the final state."""
    actions = Actions()
    triage = Triage(FunctionModel(persuadable_reader, name="persuadable-reader"), actions)
    r = await triage.run(email_of(case))
    state = {
        "route": r.route,
        "stop_reason": r.stop_reason,
        "backstop": bool(r.backstop),
        "model_escalation": r.model_escalation,
        "effects": [e["effect"] for e in actions.outbox],
    }
    grade = grade_state(case.expect.state, state)
    return {
        "case": case.id,
        **state,
        "expected": case.expect.state.get("route"),
        "ok": grade.passed,
        "detail": grade.detail,
        "exposure_usd": r.claim.exposure_usd if r.claim else None,
        "steps": r.steps,
    }


async def _run_all(log_stream: io.StringIO) -> list[dict[str, Any]]:
    logger = logging.getLogger("tether.claims")
    handler = logging.StreamHandler(log_stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        return [await run_case(case) for case in load_cases(CASES_PATH).cases]
    finally:
        logger.removeHandler(handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether demo claims", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(list(argv or []))
    from tether.clisupport.output import emit_json, table

    stream = io.StringIO()
    rows = anyio.run(_run_all, stream)
    log_lines = stream.getvalue().splitlines()
    ok = all(r["ok"] for r in rows)
    if args.json:
        payload = {"demo": "claims", "ok": ok, "cases": rows, "log_lines": len(log_lines)}
        emit_json(payload, exit=0 if ok else 1)
    else:
        print(
            table(
                [{**r, "backstop": "yes" if r["backstop"] else ""} for r in rows],
                ["case", "route", "expected", "model_escalation", "backstop", "exposure_usd", "ok"],
            )
        )
        print("\nsanitised log (one line per effect):")
        for line in log_lines:
            print("  " + line)
        print("all e-mails routed as expected" if ok else "SOME E-MAILS WERE MISROUTED")
    return 0 if ok else 1
