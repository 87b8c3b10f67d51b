"""``PgTraceIndex``: trace events of every run on PostgreSQL, readable from any machine.

A ``TraceSink`` whose background thread inserts events in batches, keyed by (run, seq) so an
event written twice is stored once. ``flush`` and ``close`` wait until what was written is
stored. The local JSONL file stays the first record of a run.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Collection
from typing import Any

from sqlalchemy import Connection, select, text

from tether.sql._database import Database
from tether.sql._tables import trace_events as T
from tether.sql._tables import upsert_for
from tether.trace._events import TraceEvent

__all__ = ["PgTraceIndex"]

_BATCH = 200
_LINGER_S = 0.05  # how long a batch waits for more events after its first
_INSERT = upsert_for("postgresql", T).on_conflict_do_nothing(index_elements=["run_id", "seq"])


def _events(conn: Connection, run_id: str, kind: str | None) -> list[dict[str, Any]]:
    query = select(T.c.data).where(T.c.run_id == run_id).order_by(T.c.seq)
    if kind is not None:
        query = query.where(T.c.kind == kind)
    return list(conn.scalars(query))


def _heads(conn: Connection, limit: int, tenants: list[str] | None) -> list[dict[str, Any]]:
    rows = conn.execute(
        text(
            """WITH recent AS (
               SELECT run_id, ts AS first_ts FROM trace_events WHERE seq = 1
                 AND (CAST(:every AS boolean) OR data->>'tenant' = ANY(CAST(:tenants AS text[])))
               ORDER BY ts DESC, run_id DESC LIMIT :limit)
           SELECT r.run_id,
                  (SELECT count(*) FROM trace_events s WHERE s.run_id = r.run_id),
                  r.first_ts,
                  EXISTS (SELECT 1 FROM trace_events s WHERE s.run_id = r.run_id
                          AND s.kind = 'run_resumed'),
                  (SELECT data FROM trace_events s WHERE s.run_id = r.run_id
                     AND s.kind IN ('run_started', 'run_resumed') ORDER BY s.seq LIMIT 1),
                  (SELECT data FROM trace_events s WHERE s.run_id = r.run_id
                     AND s.kind = 'stop' ORDER BY s.seq DESC LIMIT 1),
                  (SELECT count(DISTINCT COALESCE(s.data->'tenant', 'null'::jsonb)) FROM trace_events s
                     WHERE s.run_id = r.run_id AND s.kind IN ('run_started', 'run_resumed'))
           FROM recent r ORDER BY r.first_ts DESC, r.run_id DESC"""
        ),
        {"limit": limit, "every": tenants is None, "tenants": tenants or []},
    ).all()
    keys = ("run_id", "events", "first_ts", "resumed", "start", "stop", "tenants")
    return [
        dict(zip(keys, (r[0], int(r[1]), r[2], bool(r[3]), r[4], r[5], int(r[6])), strict=True)) for r in rows
    ]


class PgTraceIndex:
    """A trace sink on PostgreSQL, and the reader of what it stored."""

    def __init__(self, db: str | Database) -> None:
        self._owns = not isinstance(db, Database)
        self.db = db if isinstance(db, Database) else Database.postgresql(db)
        self.db.migrate("traces")
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.errors: list[str] = []  # write failures (the run goes on; its JSONL file has the events)

    def write(self, event: TraceEvent) -> None:
        data = json.dumps(event.to_json(), ensure_ascii=False, default=str)
        self._queue.put((event.run_id, event.seq, event.ts, str(event.kind), data))
        self._start()

    def close(self) -> None:
        """Flush only: the index outlives each run's tracer."""
        self.flush()

    def flush(self, timeout_s: float = 30.0) -> None:
        if self._thread is None:
            return
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout_s)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._drain, name="tether-trace-index", daemon=True)
                self._thread.start()

    def _drain(self) -> None:
        while True:
            batch = self._next_batch()
            rows = [
                {"run_id": x[0], "seq": x[1], "ts": x[2], "kind": x[3], "data": json.loads(x[4])}
                for x in batch
                if isinstance(x, tuple)
            ]
            if rows:
                try:
                    self.db.run(Connection.execute, _INSERT, rows)
                except Exception as err:  # a lost trace batch must not stop the runs
                    self.errors.append(f"{type(err).__name__}: {err}")
            for x in batch:
                if isinstance(x, threading.Event):
                    x.set()

    def _next_batch(self) -> list[Any]:
        """The events (and flush requests) to store in one transaction: the first waiting one and
        those within ``_LINGER_S`` of it, up to ``_BATCH``; a flush request ends the batch."""
        batch: list[Any] = [self._queue.get()]
        until = time.monotonic() + _LINGER_S
        while len(batch) < _BATCH and not isinstance(batch[-1], threading.Event):
            try:
                batch.append(self._queue.get(timeout=max(0.0, until - time.monotonic())))
            except queue.Empty:
                break
        return batch

    def events(self, run_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        """The stored events of one run (each as its JSONL line), in order."""
        return self.db.snapshot(_events, run_id, kind)

    def runs(self, limit: int = 500, tenants: Collection[str] | None = None) -> list[dict[str, Any]]:
        """The ``limit`` most recent runs (of ``tenants``, as their first event names them;
        ``None``: every run), newest first: ``run_id``, ``events`` (how many), ``first_ts``,
        ``resumed``, its first start and last stop event (or None), and ``tenants`` (how many
        its starts name)."""
        return self.db.snapshot(_heads, limit, None if tenants is None else sorted(tenants))

    def shutdown(self) -> None:
        self.flush()
        if self._owns:
            self.db.close()
