"""An operator's rolling upgrade, second round: what the previous landed release (f5a85b6) wrote or
exported that today's workers must continue, reproduced by hand as test_rolling_upgrade.py does.

Played for real first (f5a85b6's workers and clients, then today's, overlapping on PostgreSQL;
kill -9, drain, rollback): runs, approvals, effects and listings held across both versions, but
with OpenTelemetry export on, a run begun on a worker of one version and resumed on the other
was split across two traces — today's code derived a run's trace from another seed.
"""

from __future__ import annotations

import hashlib
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from test_rolling_upgrade import Operator, operator  # noqa: F401 - the fixture, shared

from tether_testing.loopback import Quiet, serving

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

pytestmark = pytest.mark.slow


def old_run_trace(run_id: str) -> tuple[bytes, bytes]:
    """(trace id, parent span id) of a run's spans as f5a85b6's workers exported them (and every
    release since the layout refactor, 4ef2ab4)."""
    digest = hashlib.sha256(f"tether.runs._values:{run_id}".encode()).digest()
    return digest[:16], digest[16:24]


@pytest.fixture
def spans() -> Iterator[tuple[str, list[Any]]]:
    """An OTLP/HTTP receiver on 127.0.0.1, and the spans posted to it."""
    got: list[Any] = []

    class Receiver(Quiet):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces":
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                got.extend(s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

    with serving(Receiver) as url:
        yield url, got


def test_a_run_paused_on_a_worker_of_the_previous_release_keeps_its_trace_when_resumed_on_todays(
    operator: Operator,  # noqa: F811
    spans: tuple[str, list[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Old and new workers overlap in a rolling upgrade (and again in a rollback): a run may
    begin on one version and resume on the other. Both parts must be in the trace the run
    began, the one the previous release derived from the run id; today's worker exports both
    parts of a run under it."""
    op = operator
    endpoint, got = spans
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)  # the standard variables
    monkeypatch.setenv("OTEL_SERVICE_NAME", "upgrade-agent")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    op.start("w1")
    run_id = op.submit()
    op.until("the run to pause", lambda: op.status(run_id) == ["paused"])
    op.approve(run_id)
    op.until("the run to finish", lambda: op.status(run_id) == ["finished"])
    assert op.signal("w1", signal.SIGTERM) == 0  # its exporter flushes on the way out
    roots = [s for s in got if s.name == "invoke_agent upgrade-agent"]
    assert len(roots) == 2  # the part that paused, the part that resumed
    trace_id, parent = old_run_trace(run_id)
    assert {s.trace_id for s in got} == {trace_id}  # every span in the trace an old worker began
    assert {s.parent_span_id for s in roots} == {parent}
