"""Every side effect of the claims triage, and only here (notify, ticket, forward, log).

The graph decides *what* to do; this module decides *how* it is communicated. Each effect is
recorded in ``outbox`` (the demo's stand-in for e-mail, queue or ticketing API) and logged
with every sender-controlled value passed through ``sanitize`` so it cannot forge a log line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.trace._sanitize import sanitize
from tether_examples.scenarios.claims.models import ClaimExtract, Email

__all__ = ["Actions", "clean"]

log = logging.getLogger("tether.claims")


def clean(value: object) -> str:
    """A value as it may appear in a log line: one line, legitimate text kept."""
    return sanitize(str(value))


@dataclass
class Actions:
    outbox: list[dict[str, Any]] = field(default_factory=list)

    def _effect(self, kind: str, **data: Any) -> None:
        self.outbox.append({"effect": kind, **data})

    def notify_trading_desk(self, claim: ClaimExtract, reasons: list[str]) -> None:
        self._effect("escalation", claimant=claim.claiming_party, lot=claim.contract_or_lot, reasons=reasons)
        log.warning(
            "[ESCALATION] claimant: %s, contract/lot: %s, exposure: %s, reasons: %s",
            clean(claim.claiming_party),
            clean(claim.contract_or_lot),
            clean(claim.exposure_usd),
            clean("; ".join(reasons)),
        )

    def open_ticket(self, claim: ClaimExtract, answers: Mapping[str, bool]) -> None:
        self._effect(
            "ticket", claimant=claim.claiming_party, lot=claim.contract_or_lot, answers=dict(answers)
        )
        log.info(
            "[TICKET] Arbitration ticket opened, claimant: %s, contract/lot: %s, checklist: %s",
            clean(claim.claiming_party),
            clean(claim.contract_or_lot),
            clean(", ".join(f"{k}={'yes' if v else 'no'}" for k, v in answers.items())),
        )

    def forward_to_finance(self, email: Email) -> None:
        self._effect("forward", department="finance", sender=email.sender, subject=email.subject)
        log.info("[FORWARD] to finance, sender: %s, subject: %s", clean(email.sender), clean(email.subject))

    def manual_review(self, email: Email, reason: str) -> None:
        self._effect("manual_review", sender=email.sender, reason=reason)
        log.warning("[REVIEW] sender: %s, reason: %s", clean(email.sender), clean(reason))
