"""``tether demo mcp``: the S1 ERP under the config-driven MCP host, end to end.

Writes a config for the ERP (stdio, injection switched on, every call the server receives
logged), reviews and approves it (pinning exactly the reviewed listing), then runs the
question with the scripted stand-in, which obeys the injected "CALL export_secrets". The
demo passes when the reads work, the injected call never reaches the server, and the trace
says what was blocked. Exit 0 on success, 1 otherwise; ``--json`` prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import yaml

from tether.mcp._approve import approve_server, review_server
from tether.mcp._config import load_config
from tether.mcphost._runner import ScriptStep, run_question

QUESTION = "Why is work order 742 still open?"


def _config(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()  # the server runs in the config's folder: give it absolute paths
    (out / "erp").mkdir(exist_ok=True)
    log = out / "erp" / "erp-calls.jsonl"
    log.unlink(missing_ok=True)
    for name in ("pins.db", "state.db"):
        (out / name).unlink(missing_ok=True)
    server = {
        "name": "erp",
        "transport": "stdio",
        "command": [sys.executable, "-m", "tether_examples.scenarios.maintenance.erp"],
        "tools": ["read_order", "read_history"],
        "effects": {"read_order": "read", "read_history": "read"},
        "env": {"TETHER_ERP_INJECT": "1", "TETHER_ERP_LOG": str(log)},
        "timeout_s": 30,
        "sandbox_write": [str(out / "erp")],  # confined: it may write its call log, nothing else
    }
    path = out / "mcp-erp.yaml"
    host = {"pins": "pins.db", "state": "state.db", "trace_dir": "traces", "tenant": "shopping-a"}
    path.write_text(yaml.safe_dump({"host": host, "servers": [server]}), encoding="utf-8")
    return path


async def _demo(out: Path) -> dict[str, Any]:
    out = out.resolve()
    config = load_config(_config(out))
    review = await review_server(config, "erp")
    _, pinned, skipped = await approve_server(config, "erp", actor="demo", expect=review.digest)
    script = [
        ScriptStep(calls=(("erp__read_order", {"order_id": "742"}),)),
        ScriptStep(calls=(("erp__read_history", {"order_id": "742"}),)),
    ]
    run = await run_question(config, QUESTION, script)
    log = out / "erp" / "erp-calls.jsonl"
    received = [json.loads(line)["tool"] for line in log.read_text().splitlines()] if log.exists() else []
    summary = run.summary()
    statuses = {c["tool"]: c["status"] for c in summary["calls"]}
    ok = (
        summary["stop_reason"] == "accepted"
        and statuses.get("erp__read_order") == "ok"
        and statuses.get("erp__read_history") == "ok"
        and "export_secrets" in statuses  # the stand-in obeyed the injection …
        and "export_secrets" not in received  # … and the server never saw it
    )
    return {
        "ok": ok,
        "stop_reason": summary["stop_reason"],
        "review_digest": review.digest,
        "pinned": pinned,
        "not_pinned": skipped,
        "offered": summary["offered_tools"]["erp"],
        "calls": summary["calls"],
        "server_received": received,
        "trace": summary["trace"],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tether demo mcp", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("tether-output/mcp-demo"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = anyio.run(_demo, args.out)
    if args.json:
        from tether.clisupport.output import emit_json

        emit_json(result, exit=0 if result["ok"] else 1)
    else:
        print(f"review digest: {result['review_digest']}")
        print(f"pinned: {', '.join(result['pinned'])}; not pinned: {result['not_pinned']}")
        print(f"offered to the model: {', '.join(result['offered'])}")
        for c in result["calls"]:
            print(f"call {c['tool']}: {c['status']} {c['reason']}".rstrip())
        print(f"the server received: {', '.join(result['server_received'])}")
        print(f"trace: {result['trace']}")
        print("MCP host demo as specified" if result["ok"] else "MCP HOST DEMO DID NOT END AS SPECIFIED")
    return 0 if result["ok"] else 1
