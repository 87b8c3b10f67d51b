"""Benchmark: what connecting to MCP servers costs on top of the servers' own start-up.

    python bench/mcp_startup.py [--repeat 3] [--servers 4]

1. The server alone: the maintenance ERP (``python -m tether_examples.scenarios.maintenance.erp``)
   spawned and driven with hand-written JSON-RPC lines (no SDK in the measuring process):
   its start (spawn until it has answered ``initialize`` and ``tools/list``) and its whole
   session (and until it exits after its stdin closes: the work a review waits for).
2. ``tether mcp review erp`` as a user runs it (a fresh interpreter: import, config, the
   sandbox probe, spawn, handshake, listing, pin check, shutdown), confined (``sandbox:
   auto``, when bwrap works) and unconfined (``sandbox: none``).
3. A host with ``--servers`` ERP servers started together versus one: ``Host.start`` until
   every tool is listed (servers start concurrently, so the ratio stays near 1, not N).
4. Each launcher profile of the sandbox, confined (``sandbox: auto``) over the same server
   unconfined (``sandbox: none``), ``Host.start`` until its tools are listed: ``python -m``,
   a venv console script, ``node <pkg>/dist/index.js``, ``npx -y <pkg>`` and ``uvx <tool>``
   (the last three when node/npx/uv and the package in their cache are there; otherwise the
   profile is reported as skipped, with why). Confined, npx and uvx start from their cached
   install without the registry round trip an unconfined ``npx``/``uvx`` makes.
5. ``python -m`` confined with a network allowlist (``network: ["127.0.0.1:9"]``: the launch
   also makes a network namespace and hands the host its proxy socket, which the host then
   serves) over the same server confined with ``network: none``.

Prints one line per figure (medians of ``--repeat``), then ONE JSON object on the last line.
Targets: review / the server's own session < 2; confined / unconfined <= 1.3 per profile.
No target for 5.: it shows what the allowlist adds to a confined start.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ERP = [sys.executable, "-m", "tether_examples.scenarios.maintenance.erp"]


def _rpc(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


def _answer(proc: subprocess.Popen[bytes], request_id: int) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the server closed its stdout")
        message: dict[str, Any] = json.loads(line)
        if message.get("id") == request_id:
            return message


def server_alone_s() -> tuple[float, float]:
    """(spawn → answered initialize and tools/list, and → exited after its stdin closed):
    the same session a review holds, measured with a minimal client and no SDK."""
    started = time.perf_counter()
    proc = subprocess.Popen(ERP, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None
    try:
        client = {"name": "bench", "version": "0"}
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
        _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        _answer(proc, 1)
        _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools = _answer(proc, 2)["result"]["tools"]
        assert tools, "the ERP lists no tools"
        listed = time.perf_counter() - started
        proc.stdin.close()
        proc.wait(timeout=30)
        return listed, time.perf_counter() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _config(folder: Path, servers: int, mode: str) -> Path:
    path = folder / f"mcp-{servers}-{mode}.yaml"
    entries = [
        {"name": f"erp{i}" if servers > 1 else "erp", "transport": "stdio", "command": ERP, "sandbox": mode}
        for i in range(servers)
    ]
    host = {"pins": "pins.db", "state": "state.db", "trace_dir": "traces", "server_stderr": "log"}
    path.write_text(yaml.safe_dump({"host": host, "servers": entries}), encoding="utf-8")
    return path


def review_s(config: Path) -> float:
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", "import sys, tether.cli; sys.exit(tether.cli.main(sys.argv[1:]))",
         "mcp", "review", "erp", "--config", str(config), "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(f"review failed: {out.stderr[-500:]}")
    return elapsed


def host_start_s(config: Path) -> float:
    import anyio

    from tether.mcp._config import load_config
    from tether.mcphost._build import build_host

    async def go() -> float:
        host = build_host(load_config(config), use_pins=False)
        started = time.perf_counter()
        try:
            await host.start()
            down = [getattr(s, "unavailable_detail", None) or getattr(s, "unavailable", None)
                    for s in host.sources if getattr(s, "unavailable", None)]  # fmt: skip
            assert host.offered(), f"no tools offered: {down}"
            return time.perf_counter() - started
        finally:
            await host.aclose()

    return anyio.run(go)


EVERYTHING = "@modelcontextprotocol/server-everything"


def _profiles(folder: Path) -> dict[str, list[str] | str]:
    """The command of each launcher profile here, or why it is skipped."""
    import shutil

    from tether.mcp._launchers import resolve_launch

    console = folder / "bin" / "erp-server"
    console.parent.mkdir(exist_ok=True)
    console.write_text(
        f"#!{sys.executable}\nimport runpy\nrunpy.run_module('tether_examples.scenarios.maintenance.erp', "
        "run_name='__main__')\n",
        encoding="utf-8",
    )
    console.chmod(0o755)
    out: dict[str, list[str] | str] = {"python -m": ERP, "console script": [str(console)]}
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(Path.home())}
    npx = resolve_launch(["npx", "-y", EVERYTHING], env=env, cwd=folder)
    if shutil.which("npx") is None or npx.problem:
        why = npx.problem or "npx is not installed"
        out["npx"] = out["node"] = f"skipped: {why}"
    else:
        # --offline: unconfined, npx would ask the registry first; confined it never does.
        out["npx"] = ["npx", "--offline", "-y", EVERYTHING]
        out["node"] = npx.host_argv or npx.argv  # node <npx's install>/dist/index.js, as run on the host
    if shutil.which("uvx") is None:
        out["uvx"] = "skipped: uvx is not installed"
    else:
        uvx = resolve_launch(["uvx", "mcp-server-time"], env=env, cwd=folder)
        command = ["uvx", "--offline", "mcp-server-time"]  # the same cached environment both ways
        out["uvx"] = command if uvx.problem is None else f"skipped: {uvx.problem}"
    return out


def _profile_config(folder: Path, name: str, command: list[str], mode: str, network: Any = "none") -> Path:
    path = folder / f"profile-{abs(hash(name))}-{mode}-{abs(hash(str(network)))}.yaml"
    host = {"pins": "pins.db", "state": "state.db", "trace_dir": "traces", "server_stderr": "log"}
    server = {"name": "srv", "transport": "stdio", "command": command, "sandbox": mode, "network": network}
    path.write_text(yaml.safe_dump({"host": host, "servers": [server]}), encoding="utf-8")
    return path


def profile_ratios(folder: Path, repeat: int, wanted: set[str] | None = None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, command in _profiles(folder).items():
        if wanted is not None and name not in wanted:
            continue
        if isinstance(command, str):
            out[name] = {"skipped": command}
            print(f"launcher {name}: {command}")
            continue
        plain_config = _profile_config(folder, name, command, "none")
        boxed_config = _profile_config(folder, name, command, "auto")
        plains, boxes = [], []
        try:
            host_start_s(plain_config)  # once first: caches warm for both
            for _ in range(repeat):
                plains.append(host_start_s(plain_config))
                boxes.append(host_start_s(boxed_config))
        except AssertionError as err:
            out[name] = {"failed": str(err)}
            print(f"launcher {name}: failed ({err})")
            continue
        plain, boxed = statistics.median(plains), statistics.median(boxes)
        out[name] = {
            "unconfined_ms": round(plain * 1000, 1),
            "confined_ms": round(boxed * 1000, 1),
            "confined_over_unconfined": round(boxed / plain, 3),
        }
        print(f"launcher {name}: unconfined {plain * 1000:.0f} ms, confined {boxed * 1000:.0f} ms "
              f"({boxed / plain:.2f}x)")  # fmt: skip
    return out


def allowlist_ratio(folder: Path, repeat: int) -> dict[str, Any]:
    """``python -m`` confined: with a network allowlist over with ``network: none``."""
    none_config = _profile_config(folder, "python -m", ERP, "auto")
    listed_config = _profile_config(folder, "python -m", ERP, "auto", ["127.0.0.1:9"])
    host_start_s(listed_config)  # once first: caches warm for both
    nones, listed = [], []
    for _ in range(repeat):
        nones.append(host_start_s(none_config))
        listed.append(host_start_s(listed_config))
    none, allow = statistics.median(nones), statistics.median(listed)
    print(f"python -m confined: network none {none * 1000:.0f} ms, allowlist {allow * 1000:.0f} ms "
          f"({allow / none:.2f}x)")  # fmt: skip
    return {
        "confined_none_ms": round(none * 1000, 1),
        "confined_allowlist_ms": round(allow * 1000, 1),
        "allowlist_over_none": round(allow / none, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument(
        "--profiles",
        default="all",
        help="launcher profiles to time (4.): all, none or a comma-separated list",
    )
    args = parser.parse_args()
    from tether.mcp._sandbox import bwrap_status

    confined = bwrap_status(None)[0] is not None
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        # Interleaved, so that a busy machine slows every figure alike (medians of each).
        alone, plains, boxes = [], [], []
        for _ in range(args.repeat):
            alone.append(server_alone_s())
            plains.append(review_s(_config(folder, 1, "none")))
            boxes.append(review_s(_config(folder, 1, "auto")))
        start = statistics.median(a for a, _ in alone)
        session = statistics.median(b for _, b in alone)
        plain, boxed = statistics.median(plains), statistics.median(boxes)
        print(f"ERP server alone: tools listed at {start * 1000:.0f} ms, exited at {session * 1000:.0f} ms")
        print(
            f"tether mcp review erp (sandbox none): {plain * 1000:.0f} ms, "
            f"{plain / session:.2f}x the server's own session ({plain / start:.2f}x its start alone)"
        )
        how = "confined with bwrap" if confined else "bwrap unavailable: unconfined, with a warning"
        print(f"tether mcp review erp (sandbox auto, {how}): {boxed * 1000:.0f} ms, {boxed / session:.2f}x")
        n = args.servers
        ones, manys = [], []
        for _ in range(args.repeat):
            ones.append(host_start_s(_config(folder, 1, "none")))
            manys.append(host_start_s(_config(folder, n, "none")))
        one, many = statistics.median(ones), statistics.median(manys)
        print(f"host start, 1 server: {one * 1000:.0f} ms; {n} servers together: {many * 1000:.0f} ms")
        listed = {p for p in args.profiles.split(",") if p and p != "none"}
        wanted = None if args.profiles == "all" else listed
        profiles = profile_ratios(folder, args.repeat, wanted) if confined else {}
        allowlist = allowlist_ratio(folder, args.repeat) if confined else None
    ratios = [p["confined_over_unconfined"] for p in profiles.values() if "confined_over_unconfined" in p]
    print(
        json.dumps(
            {
                "repeat": args.repeat,
                "server_start_ms": round(start * 1000, 1),
                "server_session_ms": round(session * 1000, 1),
                "review_ms": round(plain * 1000, 1),
                "review_over_server_session": round(plain / session, 3),
                "review_over_server_start": round(plain / start, 3),
                "review_confined_ms": round(boxed * 1000, 1),
                "review_confined_over_server_session": round(boxed / session, 3),
                "confined": confined,
                "servers": n,
                "host_start_one_ms": round(one * 1000, 1),
                "host_start_many_ms": round(many * 1000, 1),
                "many_over_one": round(many / one, 3),
                "profiles": profiles,
                "max_confined_over_unconfined": max(ratios) if ratios else None,
                "network_allowlist": allowlist,
            }
        )
    )


if __name__ == "__main__":
    main()
