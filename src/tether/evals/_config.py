"""The comparison's configuration, fixed before the run (SPEC E2): cost model, decision rule,
and the pre-mortem's failure modes. Loaded once, fingerprinted, recorded in the report."""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml
from pydantic import Field, ValidationError

from tether.core._problems import validation_problems
from tether.core.messages import Usage
from tether.evals._cases import CaseFileError, _Strict

__all__ = ["CompareConfig", "CostModel", "DecisionRule", "FailureMode", "load_config"]


class CostModel(_Strict):
    usd_per_1k_prompt_tokens: float = Field(default=0.003, ge=0)
    usd_per_1k_completion_tokens: float = Field(default=0.015, ge=0)
    usd_per_tool_call: float = Field(default=0.0002, ge=0)

    def estimate(self, usage: Usage, tool_calls: int, reported_usd: float = 0.0) -> float:
        """A backend-reported cost wins; otherwise tokens and calls are priced."""
        if reported_usd > 0:
            return reported_usd + tool_calls * self.usd_per_tool_call
        return (
            usage.prompt_tokens / 1000 * self.usd_per_1k_prompt_tokens
            + usage.completion_tokens / 1000 * self.usd_per_1k_completion_tokens
            + tool_calls * self.usd_per_tool_call
        )


class DecisionRule(_Strict):
    max_cost_ratio: float = Field(default=4.0, gt=0)
    min_holdout_gain: float = 0.0
    gates: tuple[str, ...] = ("forbidden_calls_executed", "approvals_bypassed")
    restrict_when_worse_on_tags: bool = True


class FailureMode(_Strict):
    failure: str
    trigger: str
    tags: tuple[str, ...]
    detection: tuple[str, ...]
    containment: tuple[str, ...]


class CompareConfig(_Strict):
    """``designs``: what runs (default: every design of the scenario); the decision compares
    ``candidate`` with ``baseline``; other designs are reported beside them."""

    designs: tuple[str, ...] = ()
    baseline: str = "workflow"
    candidate: str = "agent"
    cost: CostModel = CostModel()
    rule: DecisionRule = DecisionRule()
    premortem: tuple[FailureMode, ...] = ()
    source: str = ""
    digest: str = ""


def load_config(path: str | Path) -> CompareConfig:
    """Load a comparison config (YAML). Raises ``CaseFileError`` naming the problem."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        data = yaml.safe_load(raw.decode("utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise CaseFileError(f"{path}: cannot load comparison config: {err}") from None
    if not isinstance(data, dict):
        raise CaseFileError(f"{path}: a comparison config is a mapping")
    try:
        return CompareConfig.model_validate(
            {**data, "source": str(path), "digest": hashlib.sha256(raw).hexdigest()}
        )
    except ValidationError as err:
        raise CaseFileError(f"{path}: {validation_problems(err, model=CompareConfig)}") from None
