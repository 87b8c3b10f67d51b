"""Benchmark: strict proposal intake, and approve+execute cycles on SQLite (a temporary file).

    python bench/approvals.py [--rounds 5] [--intake 2000] [--cycles 200]

Prints one line per figure, then ONE JSON object on the last line with ``intake_per_s`` and
``approve_execute_per_s`` (medians over the rounds) and the spread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from tether.host import Host
from tether.policy import (
    Approvals,
    Policy,
    Reviewer,
    SqliteApprovalStore,
    TrustedContext,
    propose,
)
from tether.runners._desk import ProposalDesk
from tether_examples.scenarios.leads.drafts import DraftBook, catalog

CTX = TrustedContext(tenant="org-alpha")
REVIEWER = Reviewer("bench", tenants=frozenset({"org-alpha"}))
RAW = json.dumps(
    {
        "tool": "prepare_draft",
        "arguments": {"lead_id": "lead-alpha", "body": "Synthetic follow-up text. " * 20},
    }
)
REJECTED = [
    RAW.replace('"lead-alpha"', '"lead-beta"'),  # cross-tenant
    RAW[:-1] + ', "tool": "x"}',  # duplicate key
    RAW.replace('"lead-alpha"', "NaN"),  # non-standard JSON
]


def intake_round(n: int) -> tuple[float, float]:
    book = DraftBook()
    tools = [book.prepare_draft]
    policy = Policy(allow={"prepare_draft"}, catalog=catalog())
    t0 = time.perf_counter()
    for _ in range(n):
        propose(CTX, RAW, tools=tools, policy=policy)
    accepted = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    refused = 0
    for i in range(n):
        try:
            propose(CTX, REJECTED[i % len(REJECTED)], tools=tools, policy=policy)
        except Exception:
            refused += 1
    assert refused == n
    return accepted, n / (time.perf_counter() - t0)


async def cycle_round(n: int, db: Path) -> tuple[float, float]:
    book = DraftBook()
    store = SqliteApprovalStore(db)
    host = Host(
        policy=Policy(allow={"prepare_draft"}, catalog=catalog()),
        approvals=Approvals(store, reconcilers={"prepare_draft": book.lookup}),
    )
    host.add_tools(book.prepare_draft)
    await host.start()
    desk = ProposalDesk(host)
    ids = [(await desk.propose(CTX, RAW)).id for _ in range(n)]
    t0 = time.perf_counter()
    for pid in ids:
        await desk.approve(REVIEWER, pid)
        await desk.execute(CTX, pid)
    cycles = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for pid in ids:
        assert (await desk.execute(CTX, pid)).replayed
    replays = n / (time.perf_counter() - t0)
    assert len(book.drafts) == n
    await host.aclose()
    store.close()
    return cycles, replays


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--intake", type=int, default=2000, help="proposals per intake round")
    parser.add_argument("--cycles", type=int, default=200, help="approve+execute cycles per round")
    args = parser.parse_args()
    intake, refusals, cycles, replays = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        for r in range(args.rounds):
            a, b = intake_round(args.intake)
            intake.append(a)
            refusals.append(b)
            c, d = anyio.run(cycle_round, args.cycles, Path(tmp) / f"approvals-{r}.db")
            cycles.append(c)
            replays.append(d)

    def spread(xs: list[float]) -> dict[str, float]:
        return {"min": round(min(xs), 1), "median": round(statistics.median(xs), 1), "max": round(max(xs), 1)}

    result: dict[str, Any] = {
        "intake_per_s": round(statistics.median(intake), 1),
        "intake_refusals_per_s": round(statistics.median(refusals), 1),
        "approve_execute_per_s": round(statistics.median(cycles), 1),
        "replay_per_s": round(statistics.median(replays), 1),
        "spread": {
            "intake_per_s": spread(intake),
            "approve_execute_per_s": spread(cycles),
        },
        "rounds": args.rounds,
        "intake_n": args.intake,
        "cycles_n": args.cycles,
        "proposal_bytes": len(RAW.encode()),
        "store": "sqlite (WAL, temporary file)",
        "python": sys.version.split()[0],
    }
    print(f"intake (valid proposal, {result['proposal_bytes']} B): {result['intake_per_s']:.0f}/s")
    print(f"intake (refused proposals): {result['intake_refusals_per_s']:.0f}/s")
    print(f"approve+execute on SQLite: {result['approve_execute_per_s']:.0f}/s")
    print(f"replayed execute (ledger hit): {result['replay_per_s']:.0f}/s")
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
