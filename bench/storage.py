"""Benchmark: the cost of keeping SQLite off the event loop (tether.sql._database.Database).

    python bench/storage.py [--rounds 3] [--ops 300]

For the approval store on a temporary file, each round measures the store's transactions run
on the loop's own thread (``Database.run``, as a store with a sync face did) vs the store's
async methods (each transaction in a worker thread):

- ``submit+decide``: store a proposal, then approve it (two write transactions);
- ``perform``: one effect through the ledger (``Approvals.perform``): claim (intent), the
  call, finish (outcome), and the proposal's "executed" event. The sync variant is the same
  store on the same file with every transaction on the loop's thread;
- the longest stall of a task that ticks every millisecond meanwhile (the ops yield to it
  between each other): how long every other run in the process can be kept waiting by one
  operation on the database.

Both at ``synchronous=NORMAL`` (tether's default: a commit survives a process crash) and
``FULL`` (also a power cut, at one fsync per commit). Prints one line per figure, then ONE
JSON object on the last line (medians over the rounds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from tether.policy import Approvals, ProposalStatus, SqliteApprovalStore
from tether.policy._store import NewProposal
from tether.sql._database import Synchronous

PENDING = frozenset({ProposalStatus.PENDING})
NEW = NewProposal("org-alpha", "send", '{"to":"x"}', "sha256:x", "write", "bench")


def open_store(path: Path, synchronous: Synchronous) -> SqliteApprovalStore:
    return SqliteApprovalStore(path, synchronous=synchronous)


def on_the_loop(store: SqliteApprovalStore) -> SqliteApprovalStore:
    """``store`` with each transaction run on the loop's own thread (``Database.run``), as a store
    with a sync face did: the variant the async store is measured against."""
    db = store.db

    async def write(fn: Any, /, *args: Any, **kw: Any) -> Any:
        return db.run(fn, *args, **kw)

    async def read(fn: Any, /, *args: Any, **kw: Any) -> Any:
        return db.snapshot(fn, *args, **kw)

    db.write, db.read = write, read  # type: ignore[method-assign]
    return store


async def submit_decide(store: SqliteApprovalStore, i: int) -> None:
    now = datetime.now(UTC)
    p = await store.add_proposal(NEW, now=now)
    await store.decide(
        p.id, ProposalStatus.APPROVED, allowed_from=PENDING, actor="r", audited_as="r", reason="", now=now
    )


async def sent() -> dict[str, Any]:
    return {"text": "sent", "is_error": False}


def make_perform(approvals: Approvals, pid: str) -> Callable[[SqliteApprovalStore, int], Awaitable[None]]:
    async def perform(_: SqliteApprovalStore, i: int) -> None:
        key = f"perform-{i}-{time.perf_counter_ns()}"
        await approvals.perform(key, tool="send", arguments={"to": "x"}, call=sent, proposal_id=pid)

    return perform


async def timed(
    store: SqliteApprovalStore, op: Callable[[SqliteApprovalStore, int], Awaitable[None]], n: int
) -> tuple[float, float]:
    """ops/s of ``n`` ops in sequence, and the longest gap seen by a 1 ms ticker meanwhile (ms)."""
    stalls: list[float] = []
    stop = anyio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await anyio.sleep(0.001)
            now = time.perf_counter()
            stalls.append(now - last)
            last = now

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await anyio.sleep(0.005)
        t0 = time.perf_counter()
        for i in range(n):
            await op(store, i)
            await anyio.lowlevel.checkpoint()  # let the ticker in: a stall is one op, not the batch
        elapsed = time.perf_counter() - t0
        stop.set()
    return n / elapsed, max(stalls, default=0.0) * 1000


async def one_round(tmp: Path, r: int, n: int, synchronous: Synchronous) -> dict[str, tuple[float, float]]:
    path = tmp / f"bench-{synchronous}-{r}.db"
    store, inline = open_store(path, synchronous), on_the_loop(open_store(path, synchronous))
    pid = (await store.add_proposal(NEW, now=datetime.now(UTC))).id
    for i in range(n):  # warm up: the WAL file grows to its working size before anything is timed
        await submit_decide(inline, i)
    out = {
        "submit_decide_sync": await timed(inline, submit_decide, n),
        "submit_decide_async": await timed(store, submit_decide, n),
        "perform_sync": await timed(inline, make_perform(Approvals(inline), pid), n),
        "perform_async": await timed(store, make_perform(Approvals(store), pid), n),
    }
    store.close()
    inline.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", type=int, default=300, help="operations per figure per round")
    args = parser.parse_args()
    result: dict[str, Any] = {"rounds": args.rounds, "ops": args.ops, "python": sys.version.split()[0]}
    with tempfile.TemporaryDirectory(prefix="tether-bench-storage-") as tmp:
        for synchronous in ("NORMAL", "FULL"):
            rounds = [anyio.run(one_round, Path(tmp), r, args.ops, synchronous) for r in range(args.rounds)]
            figures: dict[str, Any] = {}
            for name in rounds[0]:
                figures[f"{name}_per_s"] = round(statistics.median(x[name][0] for x in rounds), 1)
                figures[f"{name}_max_stall_ms"] = round(statistics.median(x[name][1] for x in rounds), 2)
            for op in ("submit_decide", "perform"):
                figures[f"{op}_async_over_sync"] = round(
                    figures[f"{op}_async_per_s"] / figures[f"{op}_sync_per_s"], 3
                )
            result[synchronous.lower()] = figures
            for op in ("submit_decide", "perform"):
                print(
                    f"{synchronous:6} {op:13}: sync {figures[f'{op}_sync_per_s']:7.0f}/s"
                    f" (loop stalls up to {figures[f'{op}_sync_max_stall_ms']:.1f} ms),"
                    f" async {figures[f'{op}_async_per_s']:7.0f}/s"
                    f" (stalls up to {figures[f'{op}_async_max_stall_ms']:.1f} ms),"
                    f" ratio {figures[f'{op}_async_over_sync']:.2f}"
                )
    result["store"] = "SqliteApprovalStore on a temporary file (WAL); one writer, ops in sequence"
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
