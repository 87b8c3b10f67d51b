"""Benchmark: what capability pinning costs per MCP tool call (the S1 ERP over stdio).

    python bench/mcp_host.py [--calls 40] [--mode auto|legacy]

One ERP server, approved once; the same ``erp__read_order`` call is made ``--calls`` times
with ``recheck: each_call`` (the listing is re-checked against the pins before every call)
and with ``recheck: on_change`` (only after list_changed), through the host's gate and
``Host.execute``. Prints one line per figure, then ONE JSON object on the last line with the
median call latency of each, their ratio, and the pin check of one listing on its own.
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
import yaml

from tether.mcp._approve import approve_server
from tether.mcp._config import load_config
from tether.mcp._hosting import mcp_sources
from tether.mcp._pinning import check_listing
from tether.mcphost._build import build_host
from tether.tools._contract import ToolContext


def _config(folder: Path, mode: str, recheck: str) -> Any:
    path = folder / f"{recheck}.yaml"
    server = {
        "name": "erp",
        "transport": "stdio",
        "command": [sys.executable, "-m", "tether_examples.scenarios.maintenance.erp"],
        "mode": mode,
        "tools": ["read_order"],
        "effects": {"read_order": "read"},
        "recheck": recheck,
    }
    path.write_text(yaml.safe_dump({"host": {"pins": "pins.db", "state": "state.db"}, "servers": [server]}))
    return load_config(path)


async def _latencies(config: Any, calls: int) -> tuple[list[float], float]:
    host = build_host(config)
    await host.start()
    try:
        spec = next(s for s in host.offered() if s.name == "erp__read_order")
        ctx = ToolContext("bench", "shopping-a", frozenset(), None, "c")
        out = []
        for _ in range(calls):
            started = time.perf_counter()
            obs, crash = await host._run_tool(spec, {"order_id": "742"}, ctx)
            out.append(time.perf_counter() - started)
            assert crash is None and not obs.is_error, obs.text
        source = mcp_sources(host)[0]
        definitions = list(source.listing.live.values())
        pins = await source.pins.pins("erp")  # type: ignore[union-attr]
        started = time.perf_counter()
        for _ in range(1000):
            check_listing(definitions, pins, source.endpoint())
        check_s = (time.perf_counter() - started) / 1000
        return out, check_s
    finally:
        await host.aclose()


async def main(calls: int, mode: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        each = _config(folder, mode, "each_call")
        await approve_server(each, "erp", actor="bench")
        each_lat, check_s = await _latencies(each, calls)
        on_change_lat, _ = await _latencies(_config(folder, mode, "on_change"), calls)
    each_ms = statistics.median(each_lat) * 1000
    change_ms = statistics.median(on_change_lat) * 1000
    return {
        "mode": mode,
        "calls": calls,
        "each_call_median_ms": round(each_ms, 3),
        "on_change_median_ms": round(change_ms, 3),
        "each_call_over_on_change": round(each_ms / change_ms, 3),
        "each_call_p90_ms": round(statistics.quantiles(each_lat, n=10)[-1] * 1000, 3),
        "on_change_p90_ms": round(statistics.quantiles(on_change_lat, n=10)[-1] * 1000, 3),
        "pin_check_of_one_listing_us": round(check_s * 1e6, 2),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--mode", choices=("auto", "legacy"), default="auto")
    args = parser.parse_args()
    figures = anyio.run(main, args.calls, args.mode)
    for key, value in figures.items():
        print(f"{key}: {value}")
    print(json.dumps(figures, sort_keys=True))
