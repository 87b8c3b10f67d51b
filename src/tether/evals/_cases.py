"""Case sets as data (SPEC E1): a case file (YAML or JSON) is ``{scenario, description?,
cases: [...]}``. The generic parts are strict (unknown keys are an error); ``environment`` is
validated by the scenario that reads it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tether.core._names import repeated
from tether.core._problems import validation_problems
from tether.errors import ConfigError

__all__ = [
    "Case",
    "CaseContext",
    "CaseFileError",
    "CaseSet",
    "Expectation",
    "ExpectedCall",
    "TrajectoryExpectation",
    "load_cases",
]

MatchMode = Literal["EXACT", "IN_ORDER", "ANY_ORDER"]


class CaseFileError(ConfigError):
    """A case file that cannot be used: unreadable, malformed, or failing the case schema."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExpectedCall(_Strict):
    """One expected tool call. ``compare`` names a comparator per argument:
    ``exact`` (default), ``subset``, ``ignore`` or ``tolerance:<number>``."""

    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    compare: dict[str, str] = Field(default_factory=dict)


class TrajectoryExpectation(_Strict):
    """Expected calls and how to match them; no calls only with ``no_tool_calls``."""

    mode: MatchMode = "IN_ORDER"
    calls: tuple[ExpectedCall, ...] = ()
    no_tool_calls: bool = False
    with_args: bool = True

    @model_validator(mode="after")
    def _not_vacuous(self) -> TrajectoryExpectation:
        if self.no_tool_calls and self.calls:
            raise ValueError("no_tool_calls with expected calls is contradictory")
        if not self.no_tool_calls and not self.calls:
            raise ValueError("an empty trajectory passes anything: list calls or set no_tool_calls: true")
        return self


class Expectation(_Strict):
    """The expected final state. ``stop_reason`` lists acceptable stop reasons, either for
    every design or per design (``{workflow: [...], agent: [...]}``)."""

    stop_reason: tuple[str, ...] | dict[str, tuple[str, ...]] = ("accepted",)
    answer_contains: tuple[str, ...] = ()
    answer_excludes: tuple[str, ...] = ()
    reference: str | None = None
    reference_mode: Literal["exact", "tolerant"] = "tolerant"
    grounded_min: float = Field(default=1.0, ge=0.0, le=1.0)
    trajectory: dict[str, TrajectoryExpectation] = Field(default_factory=dict)
    allowed_tools: tuple[str, ...] | None = None
    events: dict[str, tuple[str, ...]] = Field(default_factory=dict)  # trace kinds expected in order
    state: dict[str, Any] = Field(default_factory=dict)  # scenario-reported final state, key by key

    def stop_reasons(self, design: str) -> tuple[str, ...]:
        if isinstance(self.stop_reason, dict):
            if design not in self.stop_reason:
                raise CaseFileError(f"no expected stop_reason for design {design!r}")
            return self.stop_reason[design]
        return self.stop_reason


class CaseContext(_Strict):
    tenant: str = Field(min_length=1)
    roles: tuple[str, ...] = ()
    user: str | None = None


class Case(_Strict):
    id: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    description: str = ""
    input: dict[str, Any]
    context: CaseContext
    environment: dict[str, Any] = Field(default_factory=dict)
    expect: Expectation
    tags: tuple[str, ...] = ()
    holdout: bool = False


class CaseSet(_Strict):
    """A scenario's cases. ``digest`` fingerprints the file so a report shows which set ran."""

    scenario: str
    description: str = ""
    cases: tuple[Case, ...]
    source: str = ""
    digest: str = ""

    @model_validator(mode="after")
    def _unique(self) -> CaseSet:
        if dup := repeated(case.id for case in self.cases):
            raise ValueError(f"duplicate case id {', '.join(map(repr, dup))}")
        if not self.cases:
            raise ValueError("a case set needs at least one case")
        return self

    def tags(self) -> list[str]:
        return sorted({t for c in self.cases for t in c.tags})

    def select(self, *, holdout: bool | None = None, tags: Iterable[str] = ()) -> list[Case]:
        wanted = set(tags)
        return [
            c
            for c in self.cases
            if (holdout is None or c.holdout == holdout) and (not wanted or wanted & set(c.tags))
        ]


def _parse(text: str, path: Path) -> Any:
    if path.suffix in (".yaml", ".yml"):
        return yaml.safe_load(text)
    if path.suffix == ".json":
        return json.loads(text)
    raise CaseFileError(f"{path}: case files are .yaml, .yml or .json")


def load_cases(path: str | Path, *, data: Mapping[str, Any] | None = None) -> CaseSet:
    """Load and validate a case file. Raises ``CaseFileError`` naming the file and the problem."""
    path = Path(path)
    if data is None:
        try:
            raw = path.read_bytes()
        except OSError as err:
            raise CaseFileError(f"{path}: cannot read case file: {err}") from None
        try:
            parsed = _parse(raw.decode("utf-8"), path)
        except (UnicodeDecodeError, ValueError, yaml.YAMLError) as err:
            raise CaseFileError(f"{path}: not valid {path.suffix[1:].upper()}: {err}") from None
        digest = hashlib.sha256(raw).hexdigest()
    else:
        parsed = dict(data)
        digest = hashlib.sha256(json.dumps(parsed, sort_keys=True, default=str).encode()).hexdigest()
    if not isinstance(parsed, dict):
        raise CaseFileError(f"{path}: a case file is a mapping with 'scenario' and 'cases'")
    # Top-level "x-…" keys hold YAML anchors shared by cases.
    parsed = {k: v for k, v in parsed.items() if not str(k).startswith("x-")}
    try:
        return CaseSet.model_validate({**parsed, "source": str(path), "digest": digest})
    except ValidationError as err:
        raise CaseFileError(f"{path}: {validation_problems(err, model=CaseSet)}") from None
