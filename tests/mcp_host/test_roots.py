"""X4: roots are answered only for servers that declare them; changes are validated and announced."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.errors import ConfigError
from tether.mcp._hosting import mcp_sources
from tether.mcphost._build import build_host
from tether.tools._contract import ToolContext

from .conftest import approve_all, web_server, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X4")]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_roots_are_listed_changed_and_validated(tmp_path: Path, http_url: str, mode: str) -> None:
    first, second = f"file://{tmp_path}/one", f"file://{tmp_path}/two"
    effects = {"show_roots": "read"}
    with_roots = web_server("r", http_url, mode=mode, effects=effects, roots=[first])
    without = web_server("n", http_url, mode=mode, effects=effects)
    config = write_config(tmp_path, [with_roots, without])
    await approve_all(config)
    host = build_host(config)
    await host.start()
    tracer, _ = host.new_tracer("roots-test")
    try:
        await host.trace_launches(tracer)
        specs = {s.name: s for s in host.offered()}
        ctx = ToolContext("roots-test", "default", frozenset(), None, "c1")
        obs, _ = await host._run_tool(specs["r__show_roots"], {}, ctx)
        assert obs.text == f"roots: {first}"
        refused, _ = await host._run_tool(specs["n__show_roots"], {}, ctx)
        assert refused.is_error and first not in refused.text  # no roots declared: nothing answered

        source = next(s for s in mcp_sources(host) if s.name == "r")
        with pytest.raises(ConfigError, match="traversal"):
            await source.set_roots([f"file://{tmp_path}/../etc"])
        assert source.roots.roots == [first]  # a bad change changes nothing
        assert await source.set_roots([second]) is True
        obs, _ = await host._run_tool(specs["r__show_roots"], {}, ctx)
        assert obs.text == f"roots: {second}"
        announced = [
            e.data for e in tracer.events if str(e.kind) == "mcp_roots" and e.data["action"] != "list"
        ]
        # list_changed exists only on legacy connections (2026-07-28 removed it).
        assert [a["action"] for a in announced] == (["list_changed_sent"] if mode == "legacy" else [])
    finally:
        tracer.close()
        await host.aclose()
