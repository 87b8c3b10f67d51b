"""The sandbox with real launch commands, and a hostile server that tries to see the host.

A server confined by default (``sandbox: auto``) starts from a venv console script, with
``python -m`` or a script file, and reads what its launcher needs; it never sees the config
folder, a chmod-600 file next to its script, the pins or another server's credential file;
its roots are read-only unless declared writable; it has no network (not even the host's
loopback services) unless ``network: any``; ``/proc/1/cmdline`` shows no mounts, and the kernel's
list of mounts (``/proc/self/mountinfo``) names no host folder it was given. A confined
server that fails to start says why, with its last stderr lines and the setting to change.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from published_installs import once
from tether.core.stop import Limits
from tether.mcp._sandbox import bwrap_status
from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace

from .conftest import approve, bare_tcp_server, script, write_config

pytestmark = [
    pytest.mark.spec("X4"),
    pytest.mark.slow,
    pytest.mark.skipif(
        bwrap_status(None)[0] is None, reason=f"bwrap does not work here: {bwrap_status(None)[1]}"
    ),
]

PROBER = Path(__file__).with_name("prober_server.py")
EFFECTS = {t: "read" for t in ("read", "write", "listing", "connect", "whereami", "mounts")}


def _secret(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return path


@pytest.fixture
def loopback_service() -> Iterator[int]:
    """A TCP service on the host's 127.0.0.1 that greets whoever connects."""

    def greet(conn: socket.socket) -> None:
        with conn:
            conn.sendall(b"HOST-LOOPBACK-SERVICE")

    with bare_tcp_server(greet) as port:
        yield port


def _server(name: str, command: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "transport": "stdio", "command": command, "effects": EFFECTS, **extra}


@pytest.mark.anyio
async def test_a_hostile_server_next_to_the_config_sees_none_of_the_host(
    tmp_path: Path, loopback_service: int
) -> None:
    script_path = tmp_path / "prober.py"  # the server's script sits next to the config
    shutil.copy(PROBER, script_path)
    secret = _secret(tmp_path / "secret.txt", "NEXT-TO-THE-SCRIPT")
    token = _secret(tmp_path / "creds" / "other.token", "OTHER-SERVERS-TOKEN")
    root = tmp_path / "root"
    root.mkdir()
    (root / "ok.txt").write_text("inside the root", encoding="utf-8")
    prober = _server("p", [sys.executable, str(script_path)], roots=[root.as_uri()])
    other = _server(
        "other", [sys.executable, str(script_path)], credentials={"TOKEN": "file:creds/other.token"}
    )
    config = write_config(tmp_path, [prober, other])
    await approve(config, "p")
    home = "/home/mcp-server"
    run = await run_question(
        config,
        "Q",
        script(
            ("p__read", {"path": str(root / "ok.txt")}),
            ("p__read", {"path": str(secret)}),
            ("p__read", {"path": str(tmp_path / "mcp.yaml")}),
            ("p__read", {"path": str(token)}),
            ("p__read", {"path": str(tmp_path / "pins.db")}),
            ("p__listing", {"path": str(tmp_path)}),
            ("p__listing", {"path": "/"}),
            ("p__listing", {"path": "/opt/mcp"}),
            ("p__listing", {"path": str(Path(sys.base_prefix).resolve().parent)}),
            ("p__write", {"path": str(root / "new.txt")}),
            ("p__write", {"path": f"{home}/cache.txt"}),
            ("p__write", {"path": "/tmp/scratch.txt"}),
            ("p__connect", {"host": "127.0.0.1", "port": loopback_service}),
            ("p__whereami", {}),
            "done",
        ),
        limits=Limits(max_steps=20, llm_calls=24, llm_calls_hard=28),
    )
    ok, *stolen = run.seen("p__read")
    assert "READ:inside the root" in ok
    for attempt in stolen:
        assert attempt.startswith("cannot read") or "cannot read" in attempt, attempt
    text = " ".join(run.seen("p__read"))
    assert "NEXT-TO-THE-SCRIPT" not in text and "OTHER-SERVERS-TOKEN" not in text and "servers:" not in text
    listing, top, launcher, interpreters = run.seen("p__listing")
    # Only the declared root shows at its host path: the script, its folder and the config don't.
    assert "LIST:root\n" in listing and "prober.py" not in listing and "mcp.yaml" not in listing
    # Nothing of the host's own folders: the system's, the private home and /opt/mcp, where the
    # launcher's files show under the names of their role (the script as one file).
    host_top = {p.name for p in Path("/").iterdir()} - {
        "usr",
        "bin",
        "sbin",
        "lib",
        "lib64",
        "etc",
        "dev",
        "proc",
        "tmp",
        "home",
        "opt",
        "lib32",
        "libx32",
    }
    assert not any(f"{name}," in top or f"{name}\n" in top for name in host_top), top
    assert "bin" in launcher and "prober" not in launcher
    assert Path(sys.base_prefix).is_relative_to("/usr") or "cannot list" in interpreters
    into_root, into_home, into_tmp = run.seen("p__write")
    assert "cannot write" in into_root and "Read-only" in into_root
    assert not (root / "new.txt").exists()
    assert "WROTE" in into_home and "WROTE" in into_tmp  # its private home and /tmp are writable
    (connected,) = run.seen("p__connect")
    assert "cannot connect" in connected and "HOST-LOOPBACK-SERVICE" not in connected
    (where,) = run.seen("p__whereami")
    pid1 = where.split("PID1=", 1)[1].splitlines()[0]
    assert "bwrap --args " in pid1 and "--bind" not in pid1 and str(root) not in pid1
    assert f"HOME={home}" in where and f"CWD={root}" in where
    assert "PATH=/opt/mcp/" in where or "PATH=/usr" in where


@pytest.mark.anyio
async def test_the_kernels_list_of_mounts_inside_names_no_host_folder(tmp_path: Path) -> None:
    import tether
    from tether.mcp._sandbox import overlay_status

    if (why := overlay_status()) is not None:
        pytest.skip(f"private layers are unavailable here, so mounts name their host folders: {why}")
    script_path = tmp_path / "prober.py"  # next to the config, as a careless user would put it
    shutil.copy(PROBER, script_path)
    config = write_config(tmp_path, [_server("p", [sys.executable, str(script_path)])])
    await approve(config, "p")
    run = await run_question(config, "Q", script(("p__mounts", {}), ("p__whereami", {}), "done"))
    (mounts,) = run.seen("p__mounts")
    # Legitimate: the server runs from its launcher's files, read where they show inside.
    assert "MOUNTS:" in mounts and " /opt/mcp/" in mounts and "unreadable" not in mounts
    (where,) = run.seen("p__whereami")
    assert "PATH=/opt/mcp/" in where
    # Attack: nothing in them names the config folder, the tether checkout, the interpreter's
    # installation or the venv (sys.prefix), though each of them is what the server runs from.
    checkout = Path(tether.__file__).resolve().parents[2]
    hidden = {tmp_path.resolve(), checkout, Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    for host in hidden:
        if not host.is_relative_to("/usr"):
            assert str(host) not in mounts, (host, mounts)


@pytest.mark.anyio
async def test_declared_writable_roots_and_network_any_are_given(
    tmp_path: Path, loopback_service: int
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    server = _server(
        "p", [sys.executable, str(PROBER)], roots=[root.as_uri()], roots_writable=True, network="any"
    )
    config = write_config(tmp_path, [server])
    await approve(config, "p")
    run = await run_question(
        config,
        "Q",
        script(
            ("p__write", {"path": str(root / "new.txt")}),
            ("p__connect", {"host": "127.0.0.1", "port": loopback_service}),
            "done",
        ),
    )
    assert "WROTE" in run.seen("p__write")[0] and (root / "new.txt").exists()
    assert "CONNECTED:HOST-LOOPBACK-SERVICE" in run.seen("p__connect")[0]


def _package(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(PROBER, lib / "prober_server.py")
    return lib


@pytest.mark.anyio
async def test_a_venv_console_script_and_python_m_start_confined(tmp_path: Path) -> None:
    """As pip or uv install one: ``#!<venv>/bin/python`` (whose interpreter lives outside /usr
    here, in pyenv), a module on the server's PYTHONPATH; a secret beside the script stays hidden."""
    lib = _package(tmp_path)
    bin_dir = tmp_path / "tools" / "bin"
    bin_dir.mkdir(parents=True)
    console = bin_dir / "prober-server"
    console.write_text(
        f"#!{sys.executable}\nimport sys\nfrom prober_server import main\nif __name__ == '__main__':\n"
        "    sys.exit(main())\n",
        encoding="utf-8",
    )
    console.chmod(0o755)
    beside = _secret(bin_dir / "secret.txt", "BESIDE-THE-CONSOLE-SCRIPT")
    conf = tmp_path / "conf"
    conf.mkdir()
    env = {"PYTHONPATH": str(lib)}
    servers = [
        _server("console", [str(console)], env=env),
        _server("module", [sys.executable, "-m", "prober_server"], env=env),
    ]
    config = write_config(conf, servers)
    for name in ("console", "module"):
        await approve(config, name)
    run = await run_question(
        config,
        "Q",
        script(
            ("console__read", {"path": str(beside)}),
            ("console__whereami", {}),
            ("module__read", {"path": str(beside)}),
            "done",
        ),
    )
    for seen in (run.seen("console__read"), run.seen("module__read")):
        assert "cannot read" in seen[0] and "BESIDE" not in seen[0]
    assert "PID1=" in run.seen("console__whereami")[0]
    assert not run.summary()["unavailable_servers"]
    trace = read_trace(run.result.trace_path)  # type: ignore[arg-type]
    confined = {e["server"]: e for e in trace if e["kind"] == "mcp_sandbox"}
    assert {n: e["action"] for n, e in confined.items()} == {"console": "confined", "module": "confined"}
    assert confined["console"]["launcher"] == "python" and str(lib) in confined["module"]["read_only"]
    assert str(bin_dir) not in confined["console"]["read_only"]  # the script's file, not its folder


@pytest.mark.anyio
async def test_a_confined_start_failure_names_its_cause_and_the_setting_to_change(tmp_path: Path) -> None:
    """The server needs a file outside what it was given: the user reads the server's own error
    and which setting to change; with that setting, it starts."""
    needed = tmp_path / "data" / "needed.txt"
    needed.parent.mkdir()
    needed.write_text("x", encoding="utf-8")
    conf = tmp_path / "conf"
    conf.mkdir()
    failing = _server("p", [sys.executable, str(PROBER)], env={"PROBER_REQUIRE": str(needed)})
    config = write_config(conf, [failing])
    from tether.errors import DependencyUnavailable
    from tether.mcp._approve import approve_server

    with pytest.raises(DependencyUnavailable) as caught:
        await approve_server(config, "p", actor="tester")
    message = str(caught.value)
    assert "TaskGroup" not in message
    assert "FileNotFoundError" in message  # the server's own last words
    assert "sandbox may be the cause" in message and "sandbox_read" in message
    fixed = write_config(conf, [{**failing, "sandbox_read": [str(needed.parent)]}])
    _, pinned, _ = await approve_server(fixed, "p", actor="tester")
    assert "read" in pinned


def test_the_launch_profiles_show_what_each_needs_and_never_the_config_folder(tmp_path: Path) -> None:
    from tether.mcp._sandbox import plan_confinement

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "server.py").write_text("print('x')\n", encoding="utf-8")
    plan = plan_confinement(
        "auto",
        [sys.executable, "server.py"],
        roots=[],
        cwd=str(conf),
        read=[str(conf)],  # a declared read path holding the config folder is withheld too
        env={"PATH": os.environ["PATH"]},
        protected=[conf],
    )
    assert plan.confinement is not None and plan.confinement.profile == "python"
    shown = plan.confinement.read_only
    assert str(conf / "server.py") in shown and str(conf) not in shown
    assert any(str(conf) in w for w in plan.confinement.withheld)
    assert str(Path(sys.base_prefix).resolve()) in shown or sys.base_prefix.startswith("/usr")


@pytest.fixture(scope="module")
def uvx_fetch(tmp_path_factory: pytest.TempPathFactory) -> str:
    """mcp-server-fetch in uv's cache (``uvx mcp-server-fetch --help`` run once per session:
    tests/published_installs.py)."""
    once(tmp_path_factory, "uvx-fetch")
    uvx = shutil.which("uvx")
    assert uvx is not None
    return uvx


@pytest.fixture(scope="module")
def uvx_tool(tmp_path_factory: pytest.TempPathFactory) -> str:
    """mcp-server-time in uv's cache, as a user's first ``uvx mcp-server-time`` leaves it (run
    once per session: tests/published_installs.py)."""
    once(tmp_path_factory, "uvx-time")
    uvx = shutil.which("uvx")
    assert uvx is not None
    return uvx


@pytest.mark.anyio
async def test_a_uvx_server_starts_confined_offline(tmp_path: Path, uvx_tool: str) -> None:
    server = {"name": "time", "transport": "stdio", "command": [uvx_tool, "mcp-server-time"],
              "effects": {"get_current_time": "read"}, "tools": ["get_current_time"]}  # fmt: skip
    config = write_config(tmp_path, [server])
    await approve(config, "time")
    run = await run_question(
        config, "Q", script(("time__get_current_time", {"timezone": "Europe/Paris"}), "done")
    )
    assert "Europe/Paris" in run.seen("time__get_current_time")[0]
    trace = read_trace(run.result.trace_path)  # type: ignore[arg-type]
    (confined,) = [e for e in trace if e["kind"] == "mcp_sandbox"]
    assert (
        confined["action"] == "confined" and confined["launcher"] == "uvx" and confined["network"] == "none"
    )


def test_finding_what_a_python_server_imports_runs_none_of_its_code(tmp_path: Path) -> None:
    """A package's .pth file runs code whenever its interpreter starts: the host reads the
    environment's files instead of asking the interpreter, so that code runs only confined.
    A .pth path line (an editable install) is still followed."""
    import subprocess
    import venv

    from tether.mcp._launchers import resolve_launch

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    site = next(env_dir.glob("lib/python3*/site-packages"))
    marker = tmp_path / "ran-on-the-host"
    (site / "evil.pth").write_text(f"import os; open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    editable = tmp_path / "src"
    editable.mkdir()
    (site / "editable.pth").write_text(f"{editable}\n", encoding="utf-8")
    python = str(env_dir / "bin" / "python")
    launch = resolve_launch([python, "-m", "server"], env={"PATH": os.environ["PATH"]}, cwd=tmp_path)
    assert not marker.exists()
    assert editable in launch.read_only and env_dir in launch.read_only
    subprocess.run([python, "-c", "pass"], check=True)  # the same interpreter, run: the code runs
    assert marker.exists()


def _destinations(options: tuple[str, ...]) -> list[str]:
    """Where each of bwrap's mount operations puts something inside."""
    takes_two = {"--ro-bind", "--bind", "--ro-bind-try", "--bind-try", "--symlink", "--ro-bind-data"}
    out, i = [], 0
    while i < len(options):
        op = options[i]
        if op in takes_two:
            out.append(options[i + 2])
            i += 3
        elif op in ("--tmpfs", "--dir", "--proc", "--dev", "--chdir"):
            out.append(options[i + 1])
            i += 2
        else:
            i += 1
    return out


def test_a_venv_with_editable_installs_shows_inside_under_neutral_names_only(tmp_path: Path) -> None:
    """A venv (its interpreter elsewhere), an editable install (.pth), a PYTHONPATH folder and a
    console script: inside, every mount lands in a system folder, /opt/mcp, the private home or
    /tmp, or a declared root; no host path is on the command line, in pyvenv.cfg or a .pth file."""
    import venv

    from tether.mcp._sandbox import plan_confinement

    env_dir = tmp_path / "secret-project" / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    site = next(env_dir.glob("lib/python3*/site-packages"))
    editable = tmp_path / "secret-project" / "src"
    editable.mkdir()
    (site / "editable.pth").write_text(f"{editable}\n", encoding="utf-8")
    extra = tmp_path / "extra-lib"
    extra.mkdir()
    console = env_dir / "bin" / "serve"
    console.write_text(f"#!{env_dir / 'bin' / 'python'}\nimport prober_server\n", encoding="utf-8")
    console.chmod(0o755)
    root = tmp_path / "data"
    root.mkdir()
    plan = plan_confinement(
        "auto",
        [str(console), "--flag"],
        roots=[root.as_uri()],
        cwd=str(tmp_path),
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(extra)},
    )
    assert plan.confinement is not None and plan.env is not None
    exact = {"/tmp", "/home/mcp-server", "/proc", "/dev", "/lib", "/lib64", "/bin", "/sbin", str(root)}
    under = ("/usr", "/etc/", "/opt/mcp/", "/dev/")
    for dest in _destinations(plan.options):
        assert dest in exact or dest.startswith(under), dest
    from tether.mcp._sandbox import ARGS_FD

    inside_argv = plan.argv[plan.argv.index(ARGS_FD) + 1 :]
    assert inside_argv[0].startswith("/opt/mcp/") and inside_argv[-1] == "--flag"
    assert not any(str(tmp_path) in a for a in inside_argv)
    assert str(tmp_path) not in plan.env["PYTHONPATH"] and plan.env["PYTHONPATH"].startswith("/opt/mcp/")
    generated = b"".join(plan.data).decode("utf-8")
    assert "/opt/mcp/" in generated and str(tmp_path) not in generated and "secret-project" not in generated
    # What is shown is still named to the person, by its host path.
    assert str(editable) in plan.confinement.read_only and str(extra) in plan.confinement.read_only


@pytest.fixture
def web_page() -> Iterator[str]:
    """An HTML page served on the host's loopback."""
    import http.server

    page = (
        b"<html><head><title>Notes</title></head><body><article><h1>Quarterly notes</h1>"
        + (b"<p>The harbour crane was inspected and passed every check this quarter.</p>" * 5)
        + b"</article></body></html>"
    )

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/notes.html"
    finally:
        server.shutdown()


@pytest.mark.anyio
async def test_mcp_server_fetch_works_confined_without_sandbox_write(
    tmp_path: Path, web_page: str, uvx_fetch: str
) -> None:
    """mcp-server-fetch writes into its own package folder on first use (readabilipy installs its
    node project there): its environment gets a private write layer, so it works with network
    access alone; the host's copy of the environment is left as it was."""
    uvx = uvx_fetch
    from tether.mcp._sandbox import overlay_status

    if (why := overlay_status()) is not None:
        pytest.skip(f"private write layers do not work here: {why}")
    command = [uvx, "mcp-server-fetch", "--ignore-robots-txt", "--allow-private-ips"]
    server = {"name": "web", "transport": "stdio", "command": command, "network": "any",
              "effects": {"fetch": "read"}, "timeout_s": 120}  # fmt: skip
    config = write_config(tmp_path, [server])
    await approve(config, "web", accept_flagged={"fetch"})  # its description is model-addressed
    run = await run_question(config, "Q", script(("web__fetch", {"url": web_page}), "done"))
    (seen,) = run.seen("web__fetch")
    assert "harbour crane was inspected" in seen, seen
    trace = read_trace(run.result.trace_path)  # type: ignore[arg-type]
    (confined,) = [e for e in trace if e["kind"] == "mcp_sandbox"]
    assert confined["action"] == "confined" and not confined["read_write"]
    env_dir = next(Path(p) for p in confined["read_only"] if (Path(p) / "pyvenv.cfg").is_file())
    assert not list(env_dir.glob("lib/python3*/site-packages/readabilipy/javascript/node_modules"))
