"""Scenario S3's structured values: what the model must extract from an e-mail.

Strict pydantic models at the boundary: the model's JSON either fits them exactly (no extra
keys, no coercion of strings into numbers) or the triage routes the e-mail to a person.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["BinaryAnswer", "ClaimExtract", "Email", "EscalationCheck", "TriageResult"]

ClaimKind = Literal["quality_claim", "weight_claim", "freight_invoice", "other"]
Route = Literal["escalate", "ticket", "finance", "manual_review"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


@dataclass(frozen=True)
class Email:
    """An inbound e-mail: everything in it is untrusted, the sender included."""

    sender: str
    subject: str
    body: str


class ClaimExtract(_Strict):
    """The structured claim. ``exposure_usd`` is the maximum potential exposure in US dollars."""

    kind: ClaimKind
    claiming_party: str | None = None
    contract_or_lot: str | None = None
    claim_type: str | None = None
    exposure_usd: float | None = Field(default=None, ge=0)
    contamination_reported: bool = False
    arbitration_threatened: bool = False

    @field_validator("exposure_usd")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("exposure must be a finite number")
        return v


class EscalationCheck(_Strict):
    requires_escalation: bool
    reasons: tuple[str, ...] = ()


class BinaryAnswer(_Strict):
    answer: bool
    confidence: float = Field(ge=0, le=1)


@dataclass
class TriageResult:
    """How one e-mail was routed, and why. ``stop_reason`` is ``accepted`` or why it stopped."""

    route: Route
    stop_reason: str
    claim: ClaimExtract | None = None
    model_escalation: bool | None = None
    backstop: list[str] = field(default_factory=list)
    answers: dict[str, bool] = field(default_factory=dict)
    steps: int = 0
    path: list[str] = field(default_factory=list)
    detail: str = ""
