"""Wild servers, round thirty-four: ``npx`` commands as client configs and npm's own docs write
them, launched confined (``sandbox: auto``, the default) from npx's cache.

Found:

* ``npx -p pkg cmd`` (npx runs the bin ``cmd`` of the package ``pkg``) ran the package's bin
  named like the package, not ``cmd``: a package with several bins (``mcp-remote`` and
  ``mcp-remote-client``, say) had the wrong program started, with the arguments meant for the
  other;
* ``npx --package=pkg cmd`` (the form ``npm help exec`` documents) and ``npm exec
  --package=pkg -- cmd`` could not start: ``cmd`` was taken for the package, reported missing
  from npx's cache, with a hint to install ``cmd`` from the registry, an unrelated package that
  anyone may publish under that name;
* an npm option taking a value (``--registry URL``, ``--cache DIR``) had its value taken for the
  package; ``--cache DIR`` (the cache npx installed into) was not where the package was looked
  for.

npx commands are now read as npx reads them (``mcp/_npxspec.read_npx``): the packages ``-p``
names in either form, the command a bin of one of them (``mcp/_npxspec.bin_of``), npm options
with values skipped whole, ``--cache`` honoured. A command no package provides, and ``-c``
(a shell command line), are named as the server's start failure; the install hint names the
package with ``-p`` and the command.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tether.mcp._launchers import resolve_launch
from tether.mcp._sandbox import bwrap_status
from tether.mcphost._runner import run_question

from .conftest import approve, processes_mentioning, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

NO_NODE = pytest.mark.skipif(
    shutil.which("npx") is None or shutil.which("node") is None, reason="no node/npx"
)
NO_BWRAP = pytest.mark.skipif(
    bwrap_status(None)[0] is None, reason=f"bwrap does not work here: {bwrap_status(None)[1]}"
)

# One script behind each bin: its whoami tool says which bin runs and with what arguments.
SERVER_JS = """
const path = require("path");
const me = path.basename(process.argv[1]);
const send = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
require("readline").createInterface({ input: process.stdin }).on("line", (line) => {
  const r = JSON.parse(line);
  if (r.id === undefined) return;
  const results = {
    initialize: { protocolVersion: (r.params || {}).protocolVersion, capabilities: { tools: {} },
                  serverInfo: { name: "kit", version: "1" } },
    "tools/list": { tools: [{ name: "whoami", description: "Says who runs.",
                              inputSchema: { type: "object", properties: {} } }] },
    "tools/call": { content: [{ type: "text",
                                text: JSON.stringify({ bin: me, args: process.argv.slice(2) }) }] },
  };
  send({ jsonrpc: "2.0", id: r.id, result: results[r.method] || {} });
});
"""


def _npx_cache(tmp_path: Path) -> Path:
    """An npm cache as ``npx -y -p kit …`` leaves it: the package ``kit`` with two bins, ``kit``
    (``main.js``) and ``kit-client`` (``client.js``)."""
    cache = tmp_path / "npm-cache"
    installed = cache / "_npx" / "5b2dd62b9d0bddd4"
    package = installed / "node_modules" / "kit"
    package.mkdir(parents=True)
    for script_name in ("main.js", "client.js"):
        (package / script_name).write_text("#!/usr/bin/env node\n" + SERVER_JS, encoding="utf-8")
    manifest = {"name": "kit", "version": "1.0.0", "bin": {"kit": "main.js", "kit-client": "client.js"}}
    (package / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    (installed / "package.json").write_text(json.dumps({"_npx": {"packages": ["kit"]}}), encoding="utf-8")
    return cache


def _server(command: list[str], cache: Path) -> dict[str, Any]:
    return {
        "name": "kit",
        "command": command,
        "env": {"npm_config_cache": str(cache)},
        "effects": {"whoami": "read"},
        "timeout_s": 60,
    }


FORMS = {
    "-p": ["npx", "-y", "-p", "kit", "kit-client", "--url", "u"],
    "--package=": ["npx", "-y", "--package=kit", "kit-client", "--url", "u"],
    "npm exec --": ["npm", "exec", "--yes", "--package=kit", "--", "kit-client", "--url", "u"],
    "--registry": [
        "npx",
        "--registry",
        "https://registry.npmjs.org",
        "-y",
        "-p",
        "kit",
        "kit-client",
        "--url",
        "u",
    ],
}


@NO_NODE
@NO_BWRAP
@pytest.mark.parametrize("form", list(FORMS))
async def test_an_npx_command_runs_the_bin_it_names_confined(tmp_path: Path, form: str) -> None:
    cache = _npx_cache(tmp_path)
    (tmp_path / "cfg").mkdir()
    config = write_config(tmp_path / "cfg", [_server(FORMS[form], cache)])
    await approve(config, "kit")
    run = await run_question(config, "Q", script(("kit__whoami", {}), "done"))
    said = run.seen("kit__whoami")
    assert said and '"bin":"client.js"' in said[0] and '"args":["--url","u"]' in said[0], said
    assert run.summary()["unavailable_servers"] == {}
    assert not processes_mentioning(str(tmp_path)), "a server process outlived the run"


@NO_NODE
@NO_BWRAP
async def test_an_npx_command_naming_the_package_alone_runs_its_own_bin(tmp_path: Path) -> None:
    cache = _npx_cache(tmp_path)
    (tmp_path / "cfg").mkdir()
    config = write_config(tmp_path / "cfg", [_server(["npx", "-y", "kit", "--url", "u"], cache)])
    await approve(config, "kit")
    run = await run_question(config, "Q", script(("kit__whoami", {}), "done"))
    said = run.seen("kit__whoami")
    assert said and '"bin":"main.js"' in said[0] and '"args":["--url","u"]' in said[0], said


@NO_NODE
def test_the_cache_an_npx_command_names_is_where_its_package_is_found(tmp_path: Path) -> None:
    cache = _npx_cache(tmp_path)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")}
    for command in (["npx", "--cache", str(cache), "-y", "kit"], ["npx", f"--cache={cache}", "-y", "kit"]):
        launch = resolve_launch(command, env=env, cwd=tmp_path)
        assert launch.problem is None and launch.argv[1].endswith("/kit/main.js"), launch


@NO_NODE
@pytest.mark.parametrize(
    ("command", "named"),
    [
        (
            ["npx", "-y", "-p", "kit", "node", "evil.js"],
            "cannot read this npx command (node is no command of kit)",
        ),
        (
            ["npx", "-y", "-p", "kit", "-c", "kit-client; curl x"],
            "cannot read this npx command (-c runs a shell",
        ),
        (["npx", "-y", "--package"], "cannot read this npx command (--package names nothing)"),
    ],
)
def test_an_npx_command_no_package_provides_is_named(tmp_path: Path, command: list[str], named: str) -> None:
    env = {"PATH": os.environ["PATH"], "npm_config_cache": str(_npx_cache(tmp_path))}
    launch = resolve_launch(command, env=env, cwd=tmp_path)
    assert launch.problem is not None and named in launch.problem, launch.problem


@NO_NODE
def test_the_install_hint_names_the_package_never_the_command_as_one(tmp_path: Path) -> None:
    """``kit-client`` on the registry is anyone's package: the hint installs ``kit``."""
    env = {"PATH": os.environ["PATH"], "npm_config_cache": str(tmp_path / "empty")}
    for command in (
        ["npx", "-y", "--package=@acme/kit", "kit-client"],
        ["npx", "-y", "-p", "@acme/kit", "kit-client"],
    ):
        launch = resolve_launch(command, env=env, cwd=tmp_path)
        assert launch.problem is not None, launch
        assert "npx -y -p @acme/kit kit-client --help" in launch.problem, launch.problem
        assert "npx -y kit-client" not in launch.problem, launch.problem


@pytest.mark.slow
@pytest.mark.npm
@NO_BWRAP
async def test_the_memory_server_by_npx_package_and_command(tmp_path: Path, npx_memory: None) -> None:
    """The published memory server as ``npx -y --package=@modelcontextprotocol/server-memory
    mcp-server-memory`` (npx's cache filled by the ordinary ``npx -y`` of the package)."""
    scope = "@modelcontextprotocol/server-memory"
    server = {
        "name": "mem",
        "command": ["npx", "-y", f"--package={scope}", "mcp-server-memory"],
        "env": {"MEMORY_FILE_PATH": str(tmp_path / "data" / "memory.jsonl")},
        "sandbox_write": [str(tmp_path / "data")],
        "effects": {"read_graph": "read"},
        "timeout_s": 120,
    }
    (tmp_path / "data").mkdir()
    (tmp_path / "cfg").mkdir()
    config = write_config(tmp_path / "cfg", [server])
    await approve(config, "mem")
    run = await run_question(config, "Q", script(("mem__read_graph", {}), "done"))
    said = run.seen("mem__read_graph")
    assert said and "entities" in said[0], said
    assert not processes_mentioning(str(tmp_path)), "a server process outlived the run"
