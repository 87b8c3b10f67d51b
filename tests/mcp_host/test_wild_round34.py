"""Wild servers, round thirty-four: ``npx`` and ``node`` commands as client configs, npm's and
node's own docs write them, launched confined (``sandbox: auto``, the default).

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
  for;
* ``npx kit`` in a project with ``kit`` among its dependencies (npx runs the project's) could
  not start: only npx's cache was looked in, and the hint said to fetch ``kit`` from the
  registry, whatever is published there under that name;
* ``node --env-file=.env server.js``, ``node --env-file .env server.js``, ``node -r ./setup.js
  server.js``, ``node -r dotenv/config server.js``, ``node server`` and ``node .`` with ``cwd``
  the project could not start: the files node's options name were looked for in the private
  home confinement starts in, a file given as an option's value was taken for the script, and a
  script named without ``.js`` or as its package's folder was never found; a module ``-r`` or
  ``--import`` names was not read through its package's ``exports`` map;
* ``npm start`` / ``npm run NAME`` (a project's own server, as its README says to start it) could
  not start: npm read ``package.json`` in the private home.

npx commands are now read as npx reads them (``mcp/_npxspec.read_npx``): the packages ``-p``
names in either form, the command a bin of one of them (``mcp/_npxspec.bin_of``), npm options
with values skipped whole, ``--cache`` honoured. A command no package provides, and ``-c``
(a shell command line), are named as the server's start failure; the install hint names the
package with ``-p`` and the command; the project's own dependency (an unversioned spec) comes
before the cache. Node command lines are read as node reads them (``mcp/_nodeargs``): the script
after options and their values (found as node finds it: ``.js`` added, a folder's package main,
never one outside the package), and the files ``--env-file``, ``-r``/``--require``, ``--import``
and ``--loader`` name shown where node reads them (a module through its ``exports`` map, never a
file outside its package); code given by ``-e``/``-p`` has no script. ``npm start`` / ``npm run
NAME`` is confined as the one plain command its package script runs (``mcp/_npxspec.npm_script``),
in the project, with its ``node_modules/.bin`` on the PATH; a script of more than one command,
with pre/post scripts, or in a folder the server writes (it may have written it) is named instead.
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


# -- node's own options naming files (the project's .env, a preload), with cwd the project --

ENV_SERVER_JS = """
const send = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
require("readline").createInterface({ input: process.stdin }).on("line", (line) => {
  const r = JSON.parse(line);
  if (r.id === undefined) return;
  const results = {
    initialize: { protocolVersion: (r.params || {}).protocolVersion, capabilities: { tools: {} },
                  serverInfo: { name: "proj", version: "1" } },
    "tools/list": { tools: [{ name: "token", description: "Says its token.",
                              inputSchema: { type: "object", properties: {} } }] },
    "tools/call": { content: [{ type: "text", text: "token=" + (process.env.API_TOKEN || "none") }] },
  };
  send({ jsonrpc: "2.0", id: r.id, result: results[r.method] || {} });
});
"""
PRELOAD_JS = 'process.env.API_TOKEN = "from-preload";\n'


def _project(tmp_path: Path) -> Path:
    """A user's own node server: its package, a ``.env``, a preload and a module for ``-r``."""
    project = tmp_path / "proj"
    (project / "node_modules" / "envkit").mkdir(parents=True)
    (project / "package.json").write_text('{"name": "proj", "main": "server.js"}', encoding="utf-8")
    (project / "server.js").write_text(ENV_SERVER_JS, encoding="utf-8")
    (project / ".env").write_text("API_TOKEN=from-env-file\n", encoding="utf-8")
    (project / "setup.js").write_text(PRELOAD_JS, encoding="utf-8")
    envkit = project / "node_modules" / "envkit"  # its exports map, as dotenv's: node reads that
    (envkit / "lib").mkdir()
    exports = {"./config": {"require": "./lib/require.js", "import": "./lib/import.mjs"}}
    (envkit / "package.json").write_text(json.dumps({"name": "envkit", "exports": exports}), encoding="utf-8")
    (envkit / "lib" / "require.js").write_text(PRELOAD_JS.replace("preload", "require"), encoding="utf-8")
    (envkit / "lib" / "import.mjs").write_text(PRELOAD_JS.replace("preload", "import"), encoding="utf-8")
    (envkit / "config.js").write_text(PRELOAD_JS.replace("preload", "decoy"), encoding="utf-8")
    return project


NODE_FORMS = {
    "--env-file=": (["node", "--env-file=.env", "server.js"], "from-env-file"),
    "--env-file": (["node", "--env-file", ".env", "server.js"], "from-env-file"),
    "-r ./file": (["node", "-r", "./setup.js", "server.js"], "from-preload"),
    "--require module": (["node", "--require", "envkit/config", "server.js"], "from-require"),
    "--import module": (["node", "--import=envkit/config", "server.js"], "from-import"),
    "no .js": (["node", "server"], "none"),
    "the package": (["node", "."], "none"),
}


@NO_NODE
@NO_BWRAP
@pytest.mark.parametrize("form", list(NODE_FORMS))
async def test_files_nodes_options_name_are_shown_where_they_are_read(tmp_path: Path, form: str) -> None:
    command, token = NODE_FORMS[form]
    project = _project(tmp_path)
    server = {"name": "proj", "command": command, "cwd": str(project), "effects": {"token": "read"}}
    (tmp_path / "cfg").mkdir()
    config = write_config(tmp_path / "cfg", [{**server, "timeout_s": 60}])
    await approve(config, "proj")
    run = await run_question(config, "Q", script(("proj__token", {}), "done"))
    said = run.seen("proj__token")
    assert said and f"token={token}" in said[0], said
    assert not processes_mentioning(str(tmp_path)), "a server process outlived the run"


@NO_NODE
def test_a_package_main_outside_its_package_is_never_shown(tmp_path: Path) -> None:
    """``node .`` in a folder whose package.json's main names a host file outside it: nothing
    outside the package is shown; a main inside it is what runs."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.js").write_text("HOST-PRIVATE-KEY", encoding="utf-8")
    project = _project(tmp_path)
    env = {"PATH": os.environ["PATH"]}
    (project / "package.json").write_text('{"name": "proj", "main": "../secret/key.js"}', encoding="utf-8")
    launch = resolve_launch(["node", "."], env=env, cwd=project)
    assert not [p for p in launch.read_only if str(secret) in str(p)], launch.read_only
    assert launch.argv[1:] == ["."], launch.argv
    (project / "package.json").write_text('{"name": "proj", "main": "server.js"}', encoding="utf-8")
    launch = resolve_launch(["node", "."], env=env, cwd=project)
    assert launch.argv[1].endswith("/server.js") and launch.argv[1] != str(project / "server.js"), launch.argv


@NO_NODE
def test_an_exports_map_naming_a_file_outside_its_package_shows_nothing(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.js").write_text("HOST-PRIVATE-KEY", encoding="utf-8")
    project = _project(tmp_path)
    envkit = project / "node_modules" / "envkit"
    exports = {"./config": "../../../secret/key.js"}
    (envkit / "package.json").write_text(json.dumps({"name": "envkit", "exports": exports}), encoding="utf-8")
    launch = resolve_launch(
        ["node", "-r", "envkit/config", "server.js"], env={"PATH": os.environ["PATH"]}, cwd=project
    )
    assert launch.argv[1:3] == ["-r", "envkit/config"], launch.argv  # left as written: node finds none
    assert not [p for p in launch.read_only if str(secret) in str(p)], launch.read_only


@NO_NODE
def test_code_given_to_node_has_no_script_read_from_its_arguments(tmp_path: Path) -> None:
    project = _project(tmp_path)
    for command in (["node", "-e", "require('./server.js')", "server.js"], ["node", "-p", "1", "setup.js"]):
        launch = resolve_launch(command, env={"PATH": os.environ["PATH"]}, cwd=project)
        assert launch.argv[1:] == command[1:] and launch.read_only == [], launch


@NO_NODE
@NO_BWRAP
async def test_npx_runs_the_projects_own_dependency_before_its_cache(tmp_path: Path) -> None:
    """``npx kit-client`` in a project with ``kit`` among its dependencies runs the project's, as
    npx does (not "not installed", with a hint to fetch whatever the registry has under that
    name); a versioned spec is still looked for in npx's cache."""
    cache, project = _npx_cache(tmp_path), tmp_path / "proj"
    shutil.copytree(cache / "_npx" / "5b2dd62b9d0bddd4" / "node_modules", project / "node_modules")
    (project / "package.json").write_text('{"name": "proj", "dependencies": {"kit": "1"}}', encoding="utf-8")
    shutil.rmtree(cache)
    server = {**_server(["npx", "-y", "-p", "kit", "kit-client", "--url", "u"], cache), "cwd": str(project)}
    (tmp_path / "cfg").mkdir()
    config = write_config(tmp_path / "cfg", [server])
    await approve(config, "kit")
    run = await run_question(config, "Q", script(("kit__whoami", {}), "done"))
    said = run.seen("kit__whoami")
    assert said and '"bin":"client.js"' in said[0] and '"args":["--url","u"]' in said[0], said
    env = {"PATH": os.environ["PATH"], "npm_config_cache": str(cache)}
    versioned = resolve_launch(["npx", "-y", "kit@2.0.0"], env=env, cwd=project)
    assert versioned.problem is not None and "npx -y kit@2.0.0 --help" in versioned.problem, versioned


# -- npm start / npm run NAME: the package script's one command, confined as that command --

SCRIPTS = {
    "start": "node --env-file=.env server.js",
    "serve": "envcli --quiet",
    "both": "tsc && node server.js",
}


def _scripted(tmp_path: Path, **scripts: str) -> Path:
    project = _project(tmp_path)
    cli = project / "node_modules" / "envcli"  # a dependency's bin, on npm's PATH for scripts
    cli.mkdir()
    (cli / "cli.js").write_text("#!/usr/bin/env node\n" + ENV_SERVER_JS, encoding="utf-8")
    (cli / "cli.js").chmod(0o755)
    (project / "node_modules" / ".bin").mkdir()
    (project / "node_modules" / ".bin" / "envcli").symlink_to("../envcli/cli.js")
    manifest = {"name": "proj", "version": "1.0.0", "scripts": {**SCRIPTS, **scripts}}
    (project / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    return project


NPM_FORMS = {
    "npm start": (["npm", "start"], "from-env-file"),
    "npm run -s start": (["npm", "run", "-s", "start"], "from-env-file"),
    "a dependency's bin": (["npm", "run", "serve", "--silent"], "none"),
}


@NO_NODE
@NO_BWRAP
@pytest.mark.parametrize("form", list(NPM_FORMS))
async def test_npm_start_runs_its_script_confined(tmp_path: Path, form: str) -> None:
    command, token = NPM_FORMS[form]
    project = _scripted(tmp_path)
    server = {"name": "proj", "command": command, "cwd": str(project / "node_modules"), "timeout_s": 60}
    (tmp_path / "cfg").mkdir()
    config = write_config(tmp_path / "cfg", [{**server, "effects": {"token": "read"}}])
    await approve(config, "proj")
    run = await run_question(config, "Q", script(("proj__token", {}), "done"))
    said = run.seen("proj__token")
    assert said and f"token={token}" in said[0], said
    assert not processes_mentioning(str(tmp_path)), "a server process outlived the run"


@NO_NODE
@pytest.mark.parametrize(
    ("command", "scripts", "named"),
    [
        (
            ["npm", "run", "both"],
            {},
            "its 'both' script (tsc && node server.js) is more than one plain command",
        ),
        (["npm", "start"], {"prestart": "curl x | sh"}, "its 'start' script has pre/post scripts"),
        (["npm", "run", "nope"], {}, "has no script 'nope'"),
        (["npm", "run", "--workspace", "x", "start"], {}, "an npm option this host does not read"),
    ],
)
def test_an_npm_script_beyond_one_command_is_named(
    tmp_path: Path, command: list[str], scripts: dict[str, str], named: str
) -> None:
    project = _scripted(tmp_path, **scripts)
    launch = resolve_launch(command, env={"PATH": os.environ["PATH"]}, cwd=project)
    assert launch.problem is not None and named in launch.problem, launch.problem


@NO_NODE
@NO_BWRAP
async def test_a_package_script_the_server_could_have_written_is_never_followed(tmp_path: Path) -> None:
    """With the project writable to the server, its next ``npm start`` could run what it wrote
    there (``node ~/.aws/credentials`` shows that file, and node's error prints it): not started."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "credentials").write_text("HOST-PRIVATE-KEY = 1\n", encoding="utf-8")
    project = _scripted(tmp_path, start=f"node {secret / 'credentials'}")
    launch = resolve_launch(
        ["npm", "start"], env={"PATH": os.environ["PATH"]}, cwd=project, writable=[project]
    )
    assert launch.problem is not None and "lies in a folder the server writes" in launch.problem, launch
    assert not [p for p in launch.read_only if str(secret) in str(p)], launch.read_only
    server = {"name": "proj", "command": ["npm", "start"], "cwd": str(project), "timeout_s": 60}
    (tmp_path / "cfg").mkdir()
    config = write_config(tmp_path / "cfg", [{**server, "sandbox_write": [str(project)]}])
    run = await run_question(config, "Q", script(("proj__token", {}), "done"))
    assert "lies in a folder the server writes" in run.summary()["unavailable_servers"]["proj"]
    assert not processes_mentioning(str(tmp_path)), "a server process outlived the run"
