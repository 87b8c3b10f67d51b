"""An operator's rolling upgrade, seventh round: from the landed releases ca71041, 483dcef,
6c5eaf9 and d74700e (before ``tether submit``'s intake) to this branch, with round six's
harness (``UPGRADE_FROM``) and by hand.

What did not hold, each fixed here and pinned below:

- clock skew on SQLite: the machine's wall clock stepped forward (NTP, a VM resumed) while a
  worker's effect was under way; a second worker on the same machine read the live owner's
  lease as run out, ignored that its process still ran, and ran the effect a second time (the
  first worker's outcome was then refused, ``lost_ownership``). On this machine the owner's
  process now tells (a reused pid by its start tick); a lease its owner let go of is kept as
  written, so it reads as let go whatever the clocks;
- a SQLite deployment upgraded to a release with another package version (``tether-<version>``
  is its one DBOS application version): the run in flight when the old worker was killed was
  never recovered by the restarted one, a run approved before the upgrade had its resume queued
  for the old version, and ``runs move`` refuses on SQLite: both stood for good. The
  deployment's version (the latest its workers launched with) is now kept across releases.
  The old-and-new harness cannot see this (every commit's metadata says 0.1.0): the test
  installs this tree as 0.1.0 and as 0.2.0;
- a proposal an older release (ca71041, 483dcef) made for a run it paused, its policy record
  cut at 8000 characters (a call whose arguments trace to many values), reviewed in this
  release's console after the upgrade: no declared secret was read from it, and the call's API
  key was shown to every viewer of the tenant (3f3bce6 fixed the writer, not what was stored).
  The reader takes what was written whole before the cut (keys sorted: the secrets first);
- mid-upgrade, a worker of the older release (its ledger lease on its own clock, before
  2eec630) on a machine whose clock runs two minutes behind the database's: this release's
  workers compare leases on the database's clock, read its live call as abandoned and ran the
  effect again. A registered worker's heartbeat (on the database's clock) now says whether it
  lives wherever it runs; its lease only where it has none;
- a payment whose bank crashed after debiting, on a worker of the older release, was recorded
  with the model's argument text (395fbec changed the writer, not what was checkpointed): the
  run resumed on this release proposed the deposit again and the sum already paid skipped the
  record, so the second deposit ran unreviewed. Such records are read as the tool received them.

Played and held (``UPGRADE_FROM=ca71041,483dcef`` and ``6c5eaf9``, ``d74700e``): round six's
old-and-new tests (side by side with a rollback, migrations racing, a SQLite deployment killed
mid write-ahead log, checkpoints both ways); a run paused across two upgrades (483dcef, then
ca71041 killed -9, then this release; PostgreSQL and SQLite; approved on the oldest CLI); eight
``db init`` killed -9 at random moments, then one to the end (the journal whole, no step twice).
d74700e's worker cannot resume any run on a SQLite
deployment (it filters DBOS workflows by attributes, which DBOS refuses there: fixed by
6c2f53f), so a rollback of a SQLite deployment to it strands approved runs: that release's bug.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_rolling_upgrade import _write_version
from test_rolling_upgrade_round6 import NEW_SRC, Mixed, _every_run_once, old_src  # noqa: F401 - the fixture

from tether.errors import ApprovalError
from tether.policy import Approvals
from tether.policy._sqlite_store import SqliteApprovalStore

# -- a wall clock stepped forward on one machine (SQLite) ------------------------------------------

_HOLDER = """
import os, sys, anyio
from datetime import UTC, datetime, timedelta
from tether.policy import Approvals

where, gate, log, mode, skew = sys.argv[1:6]


def store():
    if where.startswith("postgresql"):
        from tether.policy._pg_store import PgApprovalStore
        return PgApprovalStore(where)
    from tether.policy._sqlite_store import SqliteApprovalStore
    return SqliteApprovalStore(where)


async def main():
    clock = lambda: datetime.now(UTC) + timedelta(minutes=float(skew))
    approvals = Approvals(store(), clock=clock)

    async def call():
        if mode == "fail":  # the call fails before any effect; the process lives on
            raise RuntimeError("the payment service said 503")
        with open(log, "a") as f:
            f.write("a\\n")
        print("holding", flush=True)
        while os.path.exists(gate):
            await anyio.sleep(0.05)
        return {"ok": True}

    try:
        out = await approvals.perform("k1", tool="pay", arguments={"n": 1}, call=call)
    except RuntimeError:
        print("holding", flush=True)
        while os.path.exists(gate):
            await anyio.sleep(0.05)
        print("failed", flush=True)
        return
    print("done" if not out.replayed else "replayed", flush=True)


anyio.run(main)
"""


class Holder:
    """Worker A: another process on this machine, inside the effect of ``k1`` until the gate goes."""

    def __init__(self, folder: Path, where: str = "", mode: str = "hold", skew: float = 0.0) -> None:
        self.where = where or str(folder / "approvals.db")
        self.gate, self.log = folder / "gate", folder / "effects.log"
        self.gate.write_text("")
        self.log.write_text("")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        cmd = [sys.executable, "-c", _HOLDER, self.where, str(self.gate), str(self.log), mode, str(skew)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line == b"holding", (line, self.proc.stderr.read().decode()[-2000:] if line == b"" else "")

    def effects(self) -> list[str]:
        return self.log.read_text().split()

    def finish(self) -> tuple[int, str]:
        self.gate.unlink(missing_ok=True)
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, (out.decode() + err.decode()[-2000:]).strip()


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Holder]:
    held = Holder(tmp_path)
    try:
        yield held
    finally:
        if held.proc.poll() is None:
            held.proc.kill()
            held.proc.wait(30)


def _ahead(minutes: float) -> Any:
    return lambda: datetime.now(UTC) + timedelta(minutes=minutes)


def _store(where: str) -> Any:
    if where.startswith("postgresql"):
        from tether.policy._pg_store import PgApprovalStore

        return PgApprovalStore(where)
    return SqliteApprovalStore(where)


def _perform_on_b(holder: Holder, minutes: float) -> Any:
    """Worker B on the same machine and file, reading the clock ``minutes`` later than A wrote
    its lease; the tool's reconciler finds no trace of the call (it cannot see one under way)."""
    store = _store(holder.where)
    b = Approvals(store, {"pay": lambda key: None}, clock=_ahead(minutes), wait_s=1.0)

    async def call() -> dict[str, Any]:
        with holder.log.open("a") as f:
            f.write("b\n")
        return {"ok": True}

    try:
        return anyio.run(lambda: b.perform("k1", tool="pay", arguments={"n": 1}, call=call))
    finally:
        store.close()


def test_a_clock_stepped_forward_does_not_let_a_second_worker_repeat_a_live_effect(holder: Holder) -> None:
    """The lease A wrote (30 s and the 60 s margin) reads as run out five minutes later. On this
    machine A's process tells whether A is gone: it runs, so B waits for A's outcome and never
    runs the effect (it ran it again, and A's outcome was then refused: lost_ownership)."""
    with pytest.raises(ApprovalError) as caught:
        _perform_on_b(holder, minutes=5)
    assert caught.value.reason == "in_progress"
    assert holder.effects() == ["a"]
    assert holder.finish() == (0, "done")  # A records its outcome
    # The legitimate flow: once A's outcome is recorded, B gets it replayed, nothing run again.
    out = _perform_on_b(holder, minutes=5)
    assert out.replayed and out.result == {"ok": True} and holder.effects() == ["a"]


def test_a_killed_worker_on_the_same_machine_is_still_taken_over_at_once(holder: Holder) -> None:
    """What the rule must keep: A killed (-9) mid-call, its pid gone, is dead whatever its lease
    says; the next worker asks the tool and, never happened, runs the effect once."""
    holder.proc.send_signal(signal.SIGKILL)
    assert holder.proc.wait(30) == -signal.SIGKILL
    out = _perform_on_b(holder, minutes=0)  # the lease has 90 s to go
    assert not out.replayed and out.attempts == 2 and holder.effects() == ["a", "b"]


def test_an_owner_under_a_reused_pid_or_one_that_let_go_is_gone(tmp_path: Path) -> None:
    """Another process under a dead owner's pid (its start tick differs) is not the owner; an
    entry its owner let go of (a call that failed: its lease set to its last update, as every
    release writes it) is free though the owner lives on; an owner of a release that wrote no
    start tick is judged by its pid alone."""
    from tether.policy._ledger import _HOST, _owner, _started, owner_dead
    from tether.policy._store import LedgerEntry, LedgerStatus

    now = datetime.now(UTC)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        tick = _started(sleeper.pid)
        assert tick, "this machine has no /proc to read a start tick from"

        def entry(owner: str, lease: timedelta, *, let_go: bool = False) -> LedgerEntry:
            """Claimed with a lease of 90 s (or let go of, its lease set to its update) ``lease``
            from ``now``."""
            updated = now + lease - (timedelta(0) if let_go else timedelta(seconds=90))
            return LedgerEntry("k", "pay", "h", LedgerStatus.INTENT, owner, 1, updated, updated, now + lease)

        live = f"{_HOST}:{sleeper.pid}:abcdef123456"
        assert not owner_dead(entry(f"{live}.{tick}", timedelta(minutes=-5)), now)  # its clock said gone
        assert owner_dead(entry(f"{live}.{int(tick) + 1}", timedelta(minutes=5)), now)  # a reused pid
        assert not owner_dead(entry(live, timedelta(minutes=-5)), now)  # an older release's owner
        assert owner_dead(entry(f"{live}.{tick}", timedelta(seconds=60), let_go=True), now)  # let go
        # Another machine's owner: only its lease tells, as before.
        assert owner_dead(entry(f"elsewhere:{sleeper.pid}:x", timedelta(seconds=-1)), now)
        assert not owner_dead(entry(f"elsewhere:{sleeper.pid}:x", timedelta(seconds=90)), now)
        # This process's own entry keeps its lease (a leftover of its own is taken back in time).
        assert not owner_dead(entry(_owner(), timedelta(seconds=90)), now)
        assert owner_dead(entry(_owner(), timedelta(seconds=-1)), now)
    finally:
        sleeper.kill()
        sleeper.wait(30)


def test_a_live_worker_that_let_go_of_a_failed_call_is_taken_over_whatever_its_clock(
    pg_url: str, tmp_path: Path
) -> None:
    """On PostgreSQL too, a worker on this machine whose call failed lets go of it (its lease
    set to its last update) and lives on. Its clock runs two minutes behind the database's:
    the let-go lease was moved onto the database's clock, two minutes past the update, so it
    read as held by a live process and the next worker waited on it (``in_progress``). It is
    kept as written, and the next worker reconciles and runs the effect once."""
    a = Holder(tmp_path, pg_url, mode="fail", skew=-2)
    try:
        out = _perform_on_b(a, minutes=0)
        assert not out.replayed and out.attempts == 2 and a.effects() == ["b"]
        assert a.finish() == (0, "failed")
    finally:
        if a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait(30)


def test_a_call_let_go_by_a_worker_whose_clock_runs_ahead_can_be_resolved_by_a_person_at_once(
    pg_url: str, tmp_path: Path
) -> None:
    """What keeping a let-go lease as written must not break: written by a worker whose clock
    runs two minutes ahead of the database's, it lies past the database's now; a person
    resolving the failed call (``tether approvals resolve``) reads it as let go, not held (it
    was told ``not_waiting``), and resolves it at once."""
    from tether.policy import Reviewer

    a = Holder(tmp_path, pg_url, mode="fail", skew=2)
    store = _store(pg_url)
    try:
        approvals = Approvals(store)
        done = anyio.run(lambda: approvals.resolve(Reviewer.for_all_tenants("ops"), "k1", happened=False))
        assert done.status.value == "done" and a.effects() == []
        assert a.finish() == (0, "failed")
    finally:
        store.close()
        if a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait(30)


# -- tether's own version changes (a release installed over the last) on a SQLite deployment ---------


def _release(folder: Path, version: str) -> Path:
    """This tree as a release installed with ``version`` (its distribution's metadata says so:
    what ``pip install`` of the next release leaves), on a PYTHONPATH of its own."""
    folder.mkdir()
    (folder / "tether").symlink_to(NEW_SRC / "tether")
    meta = folder / f"tether-{version}.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tether\nVersion: {version}\n")
    return folder


@pytest.mark.slow
def test_a_sqlite_deployment_upgraded_to_a_new_tether_version_resumes_its_paused_and_queued_runs(
    tmp_path: Path, capsys: Any
) -> None:
    """A SQLite deployment runs every run on one DBOS application version, tether's own
    (``tether-<version>``). A release installed over the last changes it: a run paused before
    the upgrade had its resume enqueued for the old version, which no worker serves any more
    (and ``runs move`` refuses on SQLite: one version), so the approved run stood queued for
    good; a run submitted before and queued likewise."""
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    url = f"sqlite:///{tmp_path / 'deployment'}"
    op = Mixed(url, tmp_path, capsys, _release(tmp_path / "release-old", "0.1.0"))
    new = _release(tmp_path / "release-new", "0.2.0")
    op.old_cli("db", "init", "--db", url)
    try:
        op.start_on("s1", op.old)
        r1 = op.old_submit()
        op.until("the run to pause", lambda: op.status(r1) == ["paused"])
        (tmp_path / "agent" / "gate-A").write_text("")
        r2 = op.old_submit()
        op.until("the second run in flight", lambda: r2 in {r[0] for r in op.lines("reads.log")})
        assert op.signal("s1", signal.SIGKILL) == -signal.SIGKILL  # mid-call
        (tmp_path / "agent" / "gate-A").unlink()
        op.old_approve(r1)
        op.start_on("s1", new)  # the new release installed, the worker restarted with its id
        op.until("the runs to go on", lambda: op.status(r1, r2) == ["finished", "paused"])
        r3 = op.submit()
        op.until("a new run to pause", lambda: op.status(r3) == ["paused"])
        op.approve(r2)
        op.approve(r3)
        op.until("every run to finish", lambda: op.status(r2, r3) == ["finished", "finished"])
        _every_run_once(op, [r1, r2, r3])
    finally:
        op.stop()


# -- a proposal an earlier release recorded, reviewed in this release's console ----------------------

SECRET = "sk_live_R9d2Kq7ZmW4xP8vTg3"

_PROPOSE = """
import sys
from tether.policy import Approvals, SqliteApprovalStore
from tether.policy._intake import Proposal
from tether.sql._database import blocking

path, many, secret = sys.argv[1], int(sys.argv[2]), sys.argv[3]
recipients = [f"customer-{i:03d}@partner-{i:03d}.example" for i in range(many)]
composed = ["nowhere: not in the run's inputs (composed by the model)"]
provenance = {"to": [{"value": r, "origins": composed} for r in recipients]}
why = {"masked_arguments": ["api_key"], "tool": "send_invoice", "provenance": provenance,
       "problems": [{"argument": "to", "problem": "untrusted_origin"}]}
approvals = Approvals(SqliteApprovalStore(path))
arguments = {"to": recipients, "api_key": secret, "amount": 120}
stored = blocking(approvals.submit, Proposal.of("send_invoice", arguments, "acme", effect="write"),
                  proposed_by="desk:billing")
blocking(approvals.record_policy, stored.id, "provenance", "untrusted_origin", why)
print(stored.id)
"""


def _proposed_on(src: Path, path: Path, recipients: int) -> str:
    """A proposal and the policy's record of why it asks, written by the release at ``src``."""
    done = subprocess.run(
        [sys.executable, "-c", _PROPOSE, str(path), str(recipients), SECRET],
        capture_output=True, env={**os.environ, "PYTHONPATH": str(src)}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout.decode().split()[-1]


def test_a_proposal_an_older_release_recorded_at_length_hides_its_secret_in_this_console(
    tmp_path: Path,
    old_src: Path,  # noqa: F811
) -> None:
    """A run paused on a worker of the older release asks approval for a call whose arguments
    trace to 80 values; that release cut the policy's record at 8000 characters (3f3bce6 made
    new records whole JSON, but those already stored stay cut). After the upgrade this release's
    console read no declared secret from it and showed the call's API key to every viewer of
    the tenant (page, API, queue). It reads the part written whole: the declared secrets."""
    from tether.console import sqlite_sources
    from tether.console._approvals import proposal_view, queue
    from tether.console._users import Principal

    db = tmp_path / "approvals.db"
    old_long = _proposed_on(old_src, db, 80)
    old_short, new_long = _proposed_on(old_src, db, 2), _proposed_on(NEW_SRC, db, 80)
    sources = sqlite_sources(users_db=tmp_path / "users.db", approvals_db=db, trace_dir=None)
    viewer = Principal("vic", {"acme": "viewer"})

    async def shown() -> list[dict[str, Any]]:
        return [await proposal_view(sources, viewer, pid) for pid in (old_long, old_short, new_long)]

    try:
        views = anyio.run(shown)
        listed = anyio.run(lambda: queue(sources, viewer))
    finally:
        sources.approvals.store.close()  # type: ignore[union-attr]
    for view in views:
        assert SECRET not in json.dumps(view) and SECRET[:12] not in json.dumps(view)
        assert view["masked_arguments"] == ["api_key"]
        # The legitimate use: the rule that asked, and the other arguments, are shown.
        assert view["rule"]["name"] == "provenance"
        assert "customer-000@partner-000.example" in json.dumps(view["arguments"])
    assert SECRET not in json.dumps(listed, default=str)


def test_a_policy_record_cut_anywhere_reads_what_was_written_whole_before_the_cut() -> None:
    from tether.policy._record import policy_record, read_policy_record

    why = {"masked_arguments": ["api_key", "token"], "provenance": {"to": ["x" * 40] * 300}, "rule": "r"}
    text = json.dumps(why, ensure_ascii=False, sort_keys=True, default=str)
    inside = text.index('"provenance"')
    for cut in (inside - 2, inside + 3, inside + 14, inside + 200, 8000):
        assert read_policy_record(text[:cut]) == {"masked_arguments": ["api_key", "token"], "cut": True}
    assert read_policy_record(text[:5]) is None and read_policy_record("no record") is None
    assert read_policy_record("[1, 2]") is None
    # Whole records, as this release writes them (cut lists marked by the writer), read as they are.
    assert read_policy_record(text) == why
    assert read_policy_record(policy_record(why))["masked_arguments"] == ["api_key", "token"]  # type: ignore[index]


# -- an older worker on another machine whose clock runs behind the database's -----------------------

_OTHER_MACHINE = """
import os, socket, sys, threading, time
socket.gethostname = lambda: "host-b"  # this process plays a worker on another machine
import anyio, psycopg
from datetime import UTC, datetime, timedelta
from tether.policy import Approvals
from tether.policy._pg_store import PgApprovalStore
from tether.sql._postgres import PgUrl

url, gate, log = sys.argv[1:4]
pg = PgUrl.parse(url)


def beat():  # the worker's heartbeat, on the database's clock, as `tether worker` keeps it
    with psycopg.connect(pg.conninfo, autocommit=True) as conn:
        conn.execute(f"SET search_path = {pg.schema}")
        conn.execute(
            "INSERT INTO tether_workers (executor_id, host, pid, heartbeat_at)"
            " VALUES ('b1', 'host-b', %s, now())", (os.getpid(),))
        while os.path.exists(gate):
            conn.execute("UPDATE tether_workers SET heartbeat_at = now() WHERE executor_id = 'b1'"
                         " AND recovered_at IS NULL")
            time.sleep(0.1)


async def main():
    threading.Thread(target=beat, daemon=True).start()
    behind = lambda: datetime.now(UTC) - timedelta(minutes=2)  # its clock: two minutes slow
    approvals = Approvals(PgApprovalStore(url), clock=behind)

    async def call():
        with open(log, "a") as f:
            f.write("a\\n")
        print("holding", flush=True)
        while os.path.exists(gate):
            await anyio.sleep(0.05)
        return {"ok": True}

    out = await approvals.perform("k1", tool="pay", arguments={"n": 1}, call=call)
    print("done" if not out.replayed else "replayed", flush=True)


anyio.run(main)
"""


@pytest.mark.slow
def test_an_older_worker_on_another_machine_whose_clock_runs_behind_keeps_its_effect(
    pg_url: str,
    tmp_path: Path,
    old_src: Path,  # noqa: F811
) -> None:
    """Mid-upgrade, a worker of the older release (before 2eec630: its lease on its own clock)
    runs on a machine whose clock is two minutes slow. Its lease (the call's 30 s and the 60 s
    margin) is already past on the database's clock, which this release compares it with: a
    worker of this release read the live worker's call as abandoned, asked the tool (which
    cannot see a call under way) and ran the effect again. A registered worker's heartbeat, on
    the database's clock, now says whether it lives; its lease only where it has none."""
    import psycopg

    from tether.sql._postgres import PgUrl

    init = subprocess.run(
        [sys.executable, "-m", "tether.cli", "db", "init", "--db", pg_url, "--json"],
        capture_output=True, env={**os.environ, "PYTHONPATH": str(NEW_SRC)}, timeout=120,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr.decode()[-2000:]
    gate, log = tmp_path / "gate", tmp_path / "effects.log"
    gate.write_text("")
    cmd = [sys.executable, "-c", _OTHER_MACHINE, pg_url, str(gate), str(log)]
    env = {**os.environ, "PYTHONPATH": str(old_src)}
    a = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert a.stdout is not None and a.stdout.readline().strip() == b"holding", a.stderr
        pg = PgUrl.parse(pg_url)

        def perform_on_b() -> Any:
            store = _store(pg_url)
            store.worker_dead_after_s = 15.0  # as a durable worker of this release sets it
            b = Approvals(store, {"pay": lambda key: None}, wait_s=1.0)

            async def call() -> dict[str, Any]:
                with log.open("a") as f:
                    f.write("b\n")
                return {"ok": True}

            try:
                return anyio.run(lambda: b.perform("k1", tool="pay", arguments={"n": 1}, call=call))
            finally:
                store.close()

        with pytest.raises(ApprovalError) as caught:
            perform_on_b()
        assert caught.value.reason == "in_progress" and log.read_text().split() == ["a"]
        # The legitimate flow: the worker dies; a survivor declares it so (recovered): the next
        # worker reconciles at once and, never happened, runs the effect once.
        a.kill()
        a.wait(30)
        with psycopg.connect(pg.conninfo, autocommit=True) as conn:
            conn.execute(f"SET search_path = {pg.schema}")
            conn.execute("UPDATE tether_workers SET recovered_at = now(), recovered_by = 'w2'")
        out = perform_on_b()
        assert not out.replayed and out.attempts == 2 and log.read_text().split() == ["a", "b"]
    finally:
        gate.unlink(missing_ok=True)
        if a.poll() is None:
            a.kill()
            a.wait(30)


# -- a crashed payment an older release checkpointed ------------------------------------------------

IBAN = "DE89370400440532013000"
PAY_RULES = {
    "pay_deposit": {
        "effect": "purchase",
        "requested_by": ["pay", "wire"],
        "arguments": {
            "recipient": {"role": "destination", "from": ["user"]},
            "amount": {"role": "amount", "bound": ["user"], "cumulative": True},
        },
    }
}


def test_a_payment_that_crashed_before_the_upgrade_still_counts_towards_the_bound(
    old_src: Path,  # noqa: F811
) -> None:
    """A run on a worker of the older release paid a deposit whose bank then crashed (the
    money gone, the call recorded ``crashed``); that release recorded the call with the model's
    argument text, not the arguments the tool received (395fbec changed the writer). The run,
    resumed on this release after the upgrade, proposed the deposit again: the sum already paid
    skipped a record that is no mapping, so the second deposit ran unreviewed. Records of that
    form are read as the tool received them."""
    from test_rolling_upgrade_round6 import _ROUND_TRIP

    from tether.core.messages import AssistantMessage, ToolCall, UserMessage
    from tether.core.types import CallRecord, Effect, ProposedCall, ToolSpec
    from tether.policy._provenance_labels import TrustConfig
    from tether.policy._provenance_rules import ProvenanceRules, rules_from_dict
    from tether.policy._trusted import TrustedContext
    from tether.runs._checkpoint import state_from_json, state_to_json
    from tether.runs._values import RunState

    request = f"Pay the 200.00 EUR deposit to {IBAN}."
    first = ToolCall("c1", "pay_deposit", json.dumps({"recipient": IBAN, "amount": 200.0}))
    again = ToolCall("c2", "pay_deposit", json.dumps({"recipient": IBAN, "amount": 200.0}))
    ctx = TrustedContext(tenant="acme", user="emma")

    def resumed(record: CallRecord | None) -> Any:
        """The run as this release reads it back from the older release's checkpoint."""
        state = RunState(
            "r1", request, ctx, 0.0, datetime(2026, 12, 3, tzinfo=UTC),
            trajectory=[UserMessage(request), AssistantMessage(None, (first,)),
                        AssistantMessage(None, (again,))],
            calls=[record] if record is not None else [],
        )  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-c", _ROUND_TRIP], input=state_to_json(state).encode(), capture_output=True,
            env={**os.environ, "PYTHONPATH": str(old_src)}, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        return state_from_json(done.stdout.decode())

    rules = ProvenanceRules(rules_from_dict(PAY_RULES), TrustConfig())
    schema = {"type": "object", "properties": {"recipient": {"type": "string"}, "amount": {"type": "number"}}}
    spec = ToolSpec("pay_deposit", "", schema, Effect.PURCHASE)

    def verdict(state: Any) -> str:
        decision = rules.check(ProposedCall("c2", spec, {"recipient": IBAN, "amount": 200.0}, state), ctx)
        return "allow" if decision is None else decision.verdict

    as_before = CallRecord("c1", "pay_deposit", first.arguments, "crashed", "ConnectionResetError")
    assert isinstance(resumed(as_before).calls[0].arguments, str)  # the model's text, kept as it was
    assert verdict(resumed(as_before)) != "allow"  # 200 paid, 200 more: over the bound, reviewed
    # As this release records it (the arguments the tool received): the same.
    received = CallRecord("c1", "pay_deposit", json.loads(first.arguments), "crashed", "ConnectionResetError")
    assert verdict(resumed(received)) != "allow"
    # The legitimate flow: nothing paid before, the deposit runs unreviewed.
    assert verdict(resumed(None)) == "allow"
