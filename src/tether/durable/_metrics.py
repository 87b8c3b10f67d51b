"""OpenTelemetry metrics of a durable worker (``tether[otel]``): off, and free, until
``configure(meter_provider)`` (``tether worker`` does it when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set).

Instruments: ``tether.durable.queue.depth``, ``tether.durable.runs.in_flight``,
``tether.durable.run.duration`` [``op``, ``stop_reason``], ``tether.durable.step.duration``
[``kind``: model | turn], ``tether.durable.escalations`` [``tool``].
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


class _Instruments:
    def __init__(self, provider: Any, queue_depth: Callable[[], int] | None) -> None:
        meter = provider.get_meter("tether.durable")
        self.in_flight = meter.create_up_down_counter("tether.durable.runs.in_flight", unit="{run}")
        self.run_duration = meter.create_histogram("tether.durable.run.duration", unit="s")
        self.step_duration = meter.create_histogram("tether.durable.step.duration", unit="s")
        self.escalations = meter.create_counter("tether.durable.escalations", unit="{effect}")
        if queue_depth is not None:
            from opentelemetry.metrics import Observation

            def observe(_options: Any) -> list[Any]:
                try:
                    return [Observation(queue_depth())]
                except Exception:  # the database is away: no reading this time
                    return []

            meter.create_observable_gauge("tether.durable.queue.depth", callbacks=[observe], unit="{run}")


_on: _Instruments | None = None


def configure(provider: Any, *, queue_depth: Callable[[], int] | None = None) -> None:
    """Record into ``provider`` (an OpenTelemetry ``MeterProvider``); ``None`` turns it off.
    ``queue_depth`` counts the queued runs when a reading is taken."""
    global _on
    _on = _Instruments(provider, queue_depth) if provider is not None else None


def configure_from_env(queue_depth: Callable[[], int] | None = None) -> Any:
    """With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set: an OTLP/HTTP exporting provider (to shut down
    at exit), else None."""
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    provider = MeterProvider(metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())])
    configure(provider, queue_depth=queue_depth)
    return provider


def run_started() -> None:
    if _on is not None:
        _on.in_flight.add(1)


def run_ended(seconds: float, op: str, stop_reason: str) -> None:
    if _on is not None:
        _on.in_flight.add(-1)
        _on.run_duration.record(seconds, {"op": op, "stop_reason": stop_reason or "none"})


def step_done(kind: str, seconds: float) -> None:
    if _on is not None:
        _on.step_duration.record(seconds, {"kind": kind})


def escalated(tool: str) -> None:
    if _on is not None:
        _on.escalations.add(1, {"tool": tool})
