"""Wild servers, round fourteen: hostile servers that try to abuse the host from inside their
sandbox, launched the ordinary way (a config, pinned, run by ``run_question``). A server whose
own launcher files lie in a folder it may write (``sandbox_write``) changes, between two starts,
what its launcher reads on the host to decide what its next start shows. Its venv there, it
repoints the venv's ``bin/python`` link to ``X/bin/python`` of a host folder ``X`` of its choosing
(the venv's ``home`` is already never read there): the launcher never follows that link to a
folder that is no Python installation, names it as withheld, and ``X`` is never shown. Its Node
package there, it replaces the ``node_modules`` above the package (hoisted, as a workspace keeps
it) by a link to a host folder: the link is withheld and named, and neither the folder's files
nor a module planted in it reach the server. Its npx package in a npm cache it writes, it
rewrites the package's ``bin`` to a host file outside the package: that file is never shown (a
bin outside its package is not npm's; the package counts as not installed). A console script
of its venv there, it rewrites its ``#!`` line to ``X/bin/python``: withheld, named, never shown.
Before anything is planted, each server starts confined from that folder and serves."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.mcp._sandbox import bwrap_status
from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace

from .conftest import approve, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X4"), pytest.mark.slow]

NO_BWRAP = f"bwrap does not work here: {bwrap_status(None)[1]}"
SERVER = Path(__file__).with_name("wild13_server.py")


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret"
    (secret / "bin").mkdir(parents=True)
    (secret / "key.txt").write_text("HOST-PRIVATE-KEY", encoding="utf-8")
    shutil.copy(Path(sys.executable).resolve(), secret / "bin" / "python")  # X/bin/python: a file
    return secret


def _launch(run: Any) -> dict[str, Any]:
    trace = read_trace(run.result.trace_path)
    (launch,) = [e for e in trace if e["kind"] == "mcp_sandbox" and e["action"] == "confined"]
    return launch


@pytest.mark.skipif(bwrap_status(None)[0] is None, reason=NO_BWRAP)
async def test_a_venv_python_link_a_server_repoints_never_shows_the_host_folder_it_names(
    tmp_path: Path,
) -> None:
    work, secret = tmp_path / "work", _secret(tmp_path)
    venv = work / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    server = {
        "name": "w",
        "transport": "stdio",
        "command": [str(python), str(SERVER)],
        "effects": {"lookup": "read", "peek": "read"},
        "sandbox": "required",
        "sandbox_write": [str(work)],
        "timeout_s": 60,
    }
    config = write_config(tmp_path, [server])
    await approve(config, "w")
    honest = await run_question(config, "Q", script(("w__lookup", {"key": "a"}), "done"))
    assert "value-of-a" in honest.seen("w__lookup")[0]  # the venv as made: it starts and serves
    assert str(venv) in _launch(honest)["read_only"]

    for link in venv.glob("bin/python*"):  # as the server would, from inside the folder it writes
        link.unlink()
        link.symlink_to(secret / "bin" / "python")
    run = await run_question(
        config,
        "Q",
        script(("w__peek", {"key": "/opt/mcp/*/key.txt"}), ("w__lookup", {"key": "b"}), "done"),
    )
    launch = _launch(run)
    assert str(secret) not in launch["read_only"], launch["read_only"]
    assert any(str(python) in w and "a link in a folder the server writes" in w for w in launch["withheld"])
    assert all("HOST-PRIVATE-KEY" not in answer for answer in run.seen("w__peek"))


SERVER_JS = """
const fs = require("fs");
const answer = require("helper");
const send = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
const peek = (p) => { try { return fs.readFileSync(p, "utf8"); } catch (e) { return "cannot read"; } };
require("readline").createInterface({ input: process.stdin }).on("line", (line) => {
  const r = JSON.parse(line);
  if (r.id === undefined) return;
  const key = { type: "object", properties: { key: { type: "string" } } };
  const tools = [{ name: "lookup", description: "Looks up.", inputSchema: key },
                 { name: "peek", description: "Reads a file.", inputSchema: key }];
  const args = (r.params || {}).arguments || {};
  const text = (r.params || {}).name === "peek" ? peek(args.key) : answer(args.key);
  const results = {
    initialize: { protocolVersion: (r.params || {}).protocolVersion, capabilities: { tools: {} },
                  serverInfo: { name: "n", version: "1" } },
    "tools/list": { tools },
    "tools/call": { content: [{ type: "text", text }] },
  };
  send({ jsonrpc: "2.0", id: r.id, result: results[r.method] || {} });
});
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.skipif(bwrap_status(None)[0] is None, reason=NO_BWRAP)
async def test_a_node_modules_link_a_server_plants_never_shows_the_host_folder_it_names(
    tmp_path: Path,
) -> None:
    work, secret = tmp_path / "work", _secret(tmp_path)
    package = work / "srv"
    helper = work / "node_modules" / "helper"  # hoisted above the package, as a workspace does
    helper.mkdir(parents=True)
    package.mkdir()
    (helper / "index.js").write_text("module.exports = (k) => `value-of-${k}`;", encoding="utf-8")
    (package / "package.json").write_text('{"name": "srv", "version": "1.0.0"}', encoding="utf-8")
    (package / "server.js").write_text(SERVER_JS, encoding="utf-8")
    (secret / "helper").mkdir()
    (secret / "helper" / "index.js").write_text("module.exports = (k) => `planted-${k}`;", encoding="utf-8")
    server = {
        "name": "n",
        "transport": "stdio",
        "command": ["node", str(package / "server.js")],
        "effects": {"lookup": "read", "peek": "read"},
        "sandbox": "required",
        "sandbox_write": [str(work)],
        "timeout_s": 60,
    }
    (tmp_path / "cfg").mkdir()
    config = write_config(tmp_path / "cfg", [server])
    await approve(config, "n")
    honest = await run_question(config, "Q", script(("n__lookup", {"key": "a"}), "done"))
    assert "value-of-a" in honest.seen("n__lookup")[0]  # its package and modules: it serves

    shutil.rmtree(work / "node_modules")  # as the server would, from inside the folder it writes
    (work / "node_modules").symlink_to(secret)
    run = await run_question(
        config,
        "Q",
        script(
            ("n__peek", {"key": "/opt/mcp/app/node_modules/key.txt"}), ("n__lookup", {"key": "b"}), "done"
        ),
    )
    answers = [*run.seen("n__peek"), *run.seen("n__lookup")]
    assert all("HOST-PRIVATE-KEY" not in a and "planted-" not in a for a in answers), answers
    launch = _launch(run)
    assert str(secret) not in launch["read_only"], launch["read_only"]
    assert any(
        str(work / "node_modules") in w and "a link in a folder the server writes" in w
        for w in launch["withheld"]
    ), launch["withheld"]


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed")
@pytest.mark.skipif(bwrap_status(None)[0] is None, reason=NO_BWRAP)
async def test_an_npx_package_json_a_server_rewrites_never_names_a_host_file_to_run(tmp_path: Path) -> None:
    work, secret = tmp_path / "work", _secret(tmp_path)
    installed = work / ".npm" / "_npx" / "0123abcd"  # as npx installs a package: its own folder
    package = installed / "node_modules" / "srv"
    (installed / "node_modules" / "helper").mkdir(parents=True)
    (installed / "node_modules" / "helper" / "index.js").write_text(
        "module.exports = (k) => `value-of-${k}`;", encoding="utf-8"
    )
    package.mkdir()
    (package / "server.js").write_text("#!/usr/bin/env node\n" + SERVER_JS, encoding="utf-8")
    manifest = {"name": "srv", "version": "1.0.0", "bin": {"srv": "server.js"}}
    (package / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    (installed / "package.json").write_text(json.dumps({"_npx": {"packages": ["srv"]}}), encoding="utf-8")
    server = {
        "name": "n",
        "transport": "stdio",
        "command": ["npx", "srv"],
        "env": {"npm_config_cache": str(work / ".npm")},
        "effects": {"lookup": "read", "peek": "read"},
        "sandbox": "required",
        "sandbox_write": [str(work)],
        "timeout_s": 60,
    }
    (tmp_path / "cfg").mkdir()
    config = write_config(tmp_path / "cfg", [server])
    await approve(config, "n")
    honest = await run_question(config, "Q", script(("n__lookup", {"key": "a"}), "done"))
    assert "value-of-a" in honest.seen("n__lookup")[0]  # as npx installed it: it serves

    manifest["bin"] = {"srv": os.path.relpath(secret / "key.txt", package)}  # as the server would
    (package / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    run = await run_question(config, "Q", script(("n__peek", {"key": "/opt/mcp/app/key.txt"}), "done"))
    assert all("HOST-PRIVATE-KEY" not in a for a in run.seen("n__peek"))
    trace = read_trace(run.result.trace_path)  # type: ignore[arg-type]
    launches = [e for e in trace if e["kind"] == "mcp_sandbox"]
    shown = [p for e in launches for p in e.get("read_only", [])]
    assert launches and not [p for p in shown if str(secret) in p], shown  # not even one file of it


@pytest.mark.skipif(bwrap_status(None)[0] is None, reason=NO_BWRAP)
async def test_a_console_script_line_a_server_rewrites_never_shows_the_host_folder_it_names(
    tmp_path: Path,
) -> None:
    work, secret = tmp_path / "work", _secret(tmp_path)
    venv = work / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    console = venv / "bin" / "w14-server"  # a console script of the venv, as pip writes one
    shutil.copy(SERVER, work / "srv.py")  # its code in the folder it writes, shown there
    body = f"import runpy\nrunpy.run_path({str(work / 'srv.py')!r}, run_name='__main__')\n"
    console.write_text(f"#!{venv / 'bin' / 'python'}\n{body}", encoding="utf-8")
    console.chmod(0o755)
    server = {
        "name": "w",
        "transport": "stdio",
        "command": [str(console)],
        "effects": {"lookup": "read", "peek": "read"},
        "sandbox": "required",
        "sandbox_write": [str(work)],
        "timeout_s": 60,
    }
    config = write_config(tmp_path, [server])
    await approve(config, "w")
    honest = await run_question(config, "Q", script(("w__lookup", {"key": "a"}), "done"))
    assert "value-of-a" in honest.seen("w__lookup")[0]  # its venv's interpreter: it serves

    console.write_text(f"#!{secret / 'bin' / 'python'}\n{body}", encoding="utf-8")  # as the server would
    run = await run_question(config, "Q", script(("w__peek", {"key": "/opt/mcp/*/key.txt"}), "done"))
    launch = _launch(run)
    assert str(secret) not in launch["read_only"], launch["read_only"]
    assert any(str(console) in w and "a folder the server writes" in w for w in launch["withheld"])
    assert all("HOST-PRIVATE-KEY" not in answer for answer in run.seen("w__peek"))
