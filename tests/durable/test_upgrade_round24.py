"""An operator's rolling upgrade, twenty-fourth round: knowing, in the middle of it, which versions
are present on the deployment.

What did not hold, fixed here and pinned below:

- nothing said which application versions a deployment still had work or workers for. ``tether
  db check`` told the migrations only, and ``tether runs workers`` each worker's version but not
  the runs a version holds: an operator could not tell when the old version's last run had
  finished (safe to stop its last worker) or that runs were queued for a version no worker
  serves any more. There was no ``tether db status`` (exit 2, "invalid choice"). It now says
  what ``db check`` says and, per application version present, its workers alive (PostgreSQL;
  ``None`` on SQLite, whose workers register nowhere) and its runs queued and in flight.

Played on PostgreSQL with the release before (``UPGRADE_FROM``, as round 19) serving agent
version A beside today's worker serving version B, and on a SQLite deployment.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_rolling_upgrade import Operator, _write_version, deployed
from test_rolling_upgrade_round6 import NEW_SRC, Mixed, _env, _every_run_once, old_tree
from test_rolling_upgrade_round19 import OLD_COMMITS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=OLD_COMMITS)
def old_src(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return old_tree(str(request.param), tmp_path_factory)


@pytest.fixture
def mixed(pg_url: str, tmp_path: Path, capsys: Any, old_src: Path) -> Iterator[Mixed]:
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    op = Mixed(pg_url, tmp_path, capsys, old_src)
    op.old_cli("db", "init", "--db", pg_url)  # the deployment as the older release set it up
    try:
        yield op
    finally:
        op.stop()


def _status(op: Operator) -> dict[str, Any]:
    """Today's ``tether db status --json``, in a process of its own, as an operator types it."""
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", "db", "status", "--db", op.url, "--json"],
        env=_env(NEW_SRC), capture_output=True, cwd=op.folder, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout.decode()[-2000:], done.stderr.decode()[-2000:])
    out: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return out


def _present(out: dict[str, Any]) -> dict[str, tuple[Any, int, int]]:
    return {v["version"]: (v["workers"], v["queued"], v["in_flight"]) for v in out["versions"]}


def _alive(op: Operator) -> dict[str, str]:
    """executor id -> version of the workers alive, as ``tether runs workers`` lists them."""
    return {
        w["executor_id"]: w["app_version"] for w in op.runs("workers")["workers"] if w["state"] == "alive"
    }


def test_db_status_names_each_version_present_during_a_rolling_upgrade(mixed: Mixed) -> None:
    """The older release's worker serves agent version A and holds a run in flight; today's
    ``db init`` migrates, today's worker serves version B. ``db status`` lists both versions, A
    with its worker and its run in flight, B with its worker; once A's run is done and its worker
    drained, only B is present. Normal upgrade still works: every run finishes once."""
    op = mixed
    folder = op.agent.parent
    op.start_on("o1", op.old)
    (folder / "gate-A").write_text("")  # A's run holds inside its first tool call
    r1 = op.old_submit()
    op.until("the old run in flight", lambda: r1 in {r[0] for r in op.lines("reads.log")})
    op.cli("db", "init", "--db", op.url)
    _write_version(folder, "B")
    op.start_on("n1", NEW_SRC)
    alive = _alive(op)
    old_v, new_v = alive[f"o1-{op.suffix}"], alive[f"n1-{op.suffix}"]
    assert old_v != new_v, alive
    out = _status(op)
    assert out["ok"] and out["pending"] == [] and out["release"], out
    present = _present(out)
    assert present[old_v] == (1, 0, 1), out
    assert present[new_v] == (1, 0, 0), out
    (folder / "gate-A").unlink()
    op.until("the old run to end", lambda: op.status(r1) != ["running"])
    r2 = op.submit()  # bound to the newest live version: B
    op.until("the new run to pause", lambda: op.status(r2) == ["paused"])
    op.approve(r2)
    op.until("the new run to finish", lambda: op.status(r2) == ["finished"])
    assert op.signal("o1", signal.SIGTERM) == 0
    present = _present(_status(op))
    assert old_v not in present and present[new_v] == (1, 0, 0), present
    assert "Traceback" not in (op.folder / "o1.log").read_text()


def test_db_status_on_sqlite_counts_a_versions_runs_and_says_workers_are_not_registered(
    tmp_path: Path, capsys: Any
) -> None:
    """A SQLite deployment: no version present before any run; a run in flight counts under the
    deployment's one version, its workers ``None`` (they register nowhere), and the text says so."""
    op = deployed(tmp_path, capsys, lambda folder: _write_version(folder, "A"))
    try:
        out = _status(op)
        assert out["versions"] == [] and out["target"].startswith("SQLite deployment"), out
        (op.agent.parent / "gate-A").write_text("")
        op.start("w1")
        rid = op.submit()
        op.until("the run in flight", lambda: rid in {r[0] for r in op.lines("reads.log")})
        [v] = _status(op)["versions"]
        assert (v["workers"], v["queued"], v["in_flight"], v["this_release"]) == (None, 0, 1, True), v
        (op.agent.parent / "gate-A").unlink()
        op.until("the run to pause", lambda: op.status(rid) == ["paused"])
        op.approve(rid)
        op.until("the run to finish", lambda: op.status(rid) == ["finished"])
        assert _status(op)["versions"] == []
        _every_run_once(op, [rid])
    finally:
        op.stop()
