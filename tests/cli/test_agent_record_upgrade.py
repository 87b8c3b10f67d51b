"""The agent a run records (``tether.agents._record``) is read by the release that resumes it,
which in a rolling upgrade may be the previous one: the recorded spec names only what differs
from the defaults, as a file that does not name a field, so a field a newer release added (and a
run does not use) is no field an older release refuses. Loaded back, it is the same spec.
``test_rolling_upgrade_round13`` plays it with the previous release's own ``tether resume``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from test_new_user_round5 import docs_agent_files

from tether.agents._file import parse_agent
from tether.agents._record import load_record, record_run

SPECS = docs_agent_files()


def _defaults_named(spec: Any, data: Any, where: str = "") -> list[str]:
    """The fields of ``data`` (the recorded mapping) that hold their model's default."""
    found = []
    for name, field in type(spec).model_fields.items():
        if name not in data:
            continue
        value = getattr(spec, name)
        if not field.is_required() and value == field.get_default(call_default_factory=True):
            found.append(f"{where}{name}")
        elif isinstance(value, BaseModel) and isinstance(data[name], dict):
            found += _defaults_named(value, data[name], f"{where}{name}.")
    return found


def test_the_pages_give_agent_files_to_record() -> None:
    assert len(SPECS) >= 5


@pytest.mark.parametrize(("page", "data"), SPECS, ids=[f"{p}-{i}" for i, (p, _) in enumerate(SPECS)])
def test_a_recorded_agent_names_no_default_and_loads_as_it_was(tmp_path: Path, page: str, data: Any) -> None:
    af = parse_agent(data, base_dir=tmp_path, text=json.dumps(data))
    db = tmp_path / "approvals.db"
    recorded = json.loads(record_run(db, "run-1", af).read_text(encoding="utf-8"))["spec"]
    assert _defaults_named(af.spec, recorded) == []
    assert "model" in recorded or "model" not in data  # what the file names is kept
    assert load_record(db, "run-1").spec == af.spec
