"""One memo of a run's provenance index (``RunIndex``) for both rules that read one.

The provenance rules kept theirs by the number of observations, the reference rule by its own
observations and calls: a call that reached its tool and left no observation (it crashed), or
the calls a child run inherits, changed what the run wrote, and one rule or the other went on
judging with the index built before. Each rule now sees the write at once AND still reuses its
index while the run has not grown.
"""

from __future__ import annotations

from typing import Any

import pytest

from tether.core.types import CallRecord
from tether.policy._provenance_labels import TrustConfig
from tether.policy._provenance_rules import ProvenanceRules
from tether.policy._references import ReferenceRule, References

IBAN = "DE89370400440532013000"


class _Run:
    """A run state as the rules read it (held weakly, as a ``RunState`` is)."""

    def __init__(self) -> None:
        self.objective = "keep a note"
        self.observations: list[Any] = []
        self.calls: list[CallRecord] = []
        self.inherited_calls: list[CallRecord] = []


def _rules() -> list[Any]:
    config = TrustConfig()
    return [ProvenanceRules({}, config), ReferenceRule(References(config), {})]


def _written(rule: Any, state: Any) -> list[str]:
    return [w.text for w in rule._index(state).writes]


@pytest.mark.parametrize("rule", _rules(), ids=["provenance", "references"])
@pytest.mark.parametrize("kind", ["calls", "inherited_calls"])
def test_a_write_with_no_observation_of_its_own_reaches_the_index_at_once(rule: Any, kind: str) -> None:
    state = _Run()
    before = rule._index(state)
    assert _written(rule, state) == [] and rule._index(state) is before  # unchanged run: reused
    getattr(state, kind).append(CallRecord("c1", "save_note", {"text": f"pay {IBAN}"}, "crashed"))
    assert any(IBAN.lower() in text.lower() for text in _written(rule, state))
    assert rule._index(state) is rule._index(state)  # kept again until the run grows
