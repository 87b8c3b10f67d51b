"""A run paused by a release whose agent-file factory lived at another import path still
resumes: the checkpoint keeps the name it was written with, and the one resolver
(``tether.runners._scope.current_app``) maps it to where the factory lives now."""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path

import pytest
import yaml

from tether.cli import main
from tether.runners._scope import RENAMED_APPS, current_app, rebuild

TOOLS = '''
from typing import Annotated

from pydantic import Field

from tether import Effect, tool


@tool(effect=Effect.WRITE)
def add_note(text: Annotated[str, Field(description="The note.")]) -> str:
    """Add a note."""
    with open(__file__ + ".notes", "a", encoding="utf-8") as f:
        f.write(text + "\\n")
    return "noted"
'''

OLD = "tether.agentrecord:rebuild"  # what checkpoints of agent-file runs named before the move


def test_a_checkpoint_naming_the_old_factory_path_resumes_and_runs_its_effect_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tools_moved.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "steps.yaml").write_text(
        textwrap.dedent(
            """
            - call: add_note
              arguments: {text: first}
            - final: done
            """
        ),
        encoding="utf-8",
    )
    db = tmp_path / "approvals.db"
    spec = {
        "name": "notes",
        "instructions": "Do what is asked.",
        "model": {"name": "scripted:steps.yaml"},
        "tools": ["tools_moved:add_note"],
        "policy": {"tenant": "shop-a", "approvals_db": str(db)},
        "trace": {"dir": "traces"},
    }
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    assert main(["run", "Note it.", "--agent", str(tmp_path / "agent.yaml"), "--json"]) == 5
    paused = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    [proposal] = paused["pending_proposals"]

    # The file as the earlier release wrote it: the checkpoint names the old module path.
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE run_checkpoints SET app = ? WHERE run_id = ?", (OLD, paused["run_id"]))
    with sqlite3.connect(db) as conn:
        [(app,)] = conn.execute("SELECT app FROM run_checkpoints WHERE run_id = ?", (paused["run_id"],))
    assert app == OLD

    assert main(["approvals", "approve", proposal, "--db", str(db), "--reviewer", "ana"]) == 0
    assert main(["resume", paused["run_id"], "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["stop_reason"] == "accepted"
    assert (tmp_path / "tools_moved.py.notes").read_text(encoding="utf-8") == "first\n"


def test_only_the_recorded_renames_are_mapped_and_an_unknown_factory_is_still_refused(tmp_path: Path) -> None:
    assert current_app(OLD) == RENAMED_APPS[OLD]
    assert current_app("myapp.factory:build") == "myapp.factory:build"  # the user's own, untouched
    from tether.errors import ConfigError

    with pytest.raises(ConfigError, match=r"cannot load the run's factory 'tether\.nowhere:rebuild'"):
        rebuild("tether.nowhere:rebuild", tmp_path / "approvals.db", "run-1")
