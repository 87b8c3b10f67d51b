"""The deterministic backstop (SPEC P2): objective rules applied in code to extracted fields.

A persuaded model can say "no escalation"; it cannot change this function. Only objective
figures live here (a number against a threshold); judging whether contamination is really
reported, negations included, stays with the model.
"""

from __future__ import annotations

from tether_examples.scenarios.claims.models import ClaimExtract

__all__ = ["ESCALATION_THRESHOLD_USD", "deterministic_triggers"]

ESCALATION_THRESHOLD_USD = 50_000.0


def deterministic_triggers(claim: ClaimExtract) -> list[str]:
    """Reasons that force escalation whatever the model concluded (empty when none)."""
    triggers = []
    if claim.exposure_usd is not None and claim.exposure_usd >= ESCALATION_THRESHOLD_USD:
        triggers.append(
            f"exposure USD {claim.exposure_usd:,.0f} >= USD {ESCALATION_THRESHOLD_USD:,.0f} (backstop)"
        )
    return triggers
