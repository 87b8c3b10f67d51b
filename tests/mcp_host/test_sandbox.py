"""Confined stdio servers (bubblewrap): a server reads inside its roots and nothing else; where
bwrap cannot run, ``auto`` warns in the review, the CLI output and the trace, and ``required``
refuses to start the server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.cli import main
from tether.mcp._sandbox import bwrap_status
from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace

from .conftest import approve, script, stdio_server, write_config

pytestmark = [pytest.mark.spec("X4"), pytest.mark.slow]  # server launches, confined

EFFECTS = {"read_file": "read", "lookup": "read"}
NO_BWRAP = "/nonexistent/bwrap"


def _bwrap_works() -> bool:
    return bwrap_status(None)[0] is not None


@pytest.mark.anyio
@pytest.mark.skipif(not _bwrap_works(), reason=f"bwrap does not work here: {bwrap_status(None)[1]}")
async def test_a_confined_server_reads_inside_its_root_and_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "ok.txt").write_text("hello from the root", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("TOP SECRET", encoding="utf-8")
    config = write_config(tmp_path, [stdio_server("h", effects=EFFECTS, roots=[root.as_uri()])])
    await approve(config, "h")
    run = await run_question(
        config,
        "Q",
        script(
            ("h__read_file", {"path": str(root / "ok.txt")}),
            ("h__read_file", {"path": "ok.txt"}),  # relative: it starts in its root
            ("h__read_file", {"path": "/etc/passwd"}),
            ("h__read_file", {"path": f"{root}/../secret.txt"}),
            ("h__read_file", {"path": str(tmp_path / "secret.txt")}),
            ("h__read_file", {"path": "../secret.txt"}),
            ("h__read_file", {"path": str(Path.home() / ".ssh" / "id_rsa")}),
            ("h__lookup", {"key": "a"}),
            "done",
        ),
    )
    ok, relative, *escapes = run.seen("h__read_file")
    assert "hello from the root" in ok and "hello from the root" in relative
    for attempt in escapes:
        assert "cannot read" in attempt and "root:x:" not in attempt and "TOP SECRET" not in attempt
    assert "value-of-a" in run.seen("h__lookup")[0]
    # The answer quoting a path beyond the roots is flagged for whoever reads the trace.
    flagged = [o.meta.get("paths_outside_roots") for o in run.result.observations if o.tool == "h__read_file"]
    assert flagged[0] is None and flagged[2] == ["/etc/passwd"]
    trace = read_trace(run.result.trace_path)  # type: ignore[arg-type]
    confined = [e for e in trace if e["kind"] == "mcp_sandbox"]
    assert confined[0]["action"] == "confined" and confined[0]["read_write"] == []
    assert str(root) in confined[0]["read_only"]  # roots are read-only unless declared writable
    assert confined[0]["network"] == "none" and confined[0]["launcher"] == "python"


def test_without_a_working_bwrap_auto_warns_everywhere_and_required_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import anyio

    loose = stdio_server("loose", effects=EFFECTS)  # sandbox: auto (the default)
    strict = stdio_server("strict", effects=EFFECTS, sandbox="required")
    config = write_config(tmp_path, [loose, strict], bwrap=NO_BWRAP)
    path = str(tmp_path / "mcp.yaml")
    # Review: the warning is in the one-screen summary.
    assert main(["mcp", "review", "loose", "--config", path]) == 0
    summary = capsys.readouterr().out.split("== summary")[1]
    assert "sandbox: auto, NOT confined" in summary
    warning = f"WARNING: running UNCONFINED (reads anything the user can): {NO_BWRAP} is not installed"
    assert warning in summary
    # required: the server is never started, so it cannot even be reviewed.
    assert main(["mcp", "review", "strict", "--config", path]) == 1
    assert "sandbox required but unavailable" in capsys.readouterr().err
    anyio.run(approve, config, "loose")
    capsys.readouterr()
    code = main(
        ["mcp", "run", "Q", "--config", path, "--json",
         "--call", "loose__read_file", '{"path": "/etc/hostname"}',
         "--call", "loose__lookup", '{"key": "b"}']
    )  # fmt: skip
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and out["stop_reason"] == "accepted"
    assert any(n.startswith("warning: server loose: running UNCONFINED") for n in out["mcp_notes"])
    assert out["unavailable_servers"]["strict"] == (
        "MCP server strict could not be started: sandbox required but unavailable: "
        f"{NO_BWRAP} is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    )
    trace = read_trace(Path(out["trace"]))
    sandbox = {e["server"]: e["action"] for e in trace if e["kind"] == "mcp_sandbox"}
    assert sandbox == {"loose": "unconfined", "strict": "refused"}


def test_the_layer_launcher_shows_a_folder_whose_name_is_shell_syntax_and_runs_none_of_it(
    tmp_path: Path,
) -> None:
    import subprocess

    from tether.mcp._layers import layered, overlay_status

    if (why := overlay_status()) is not None:
        pytest.skip(f"no private layers here: {why}")
    folder = tmp_path / 'it\'s a "dir"; touch pwned1 $(touch pwned2) `touch pwned3` & x'
    folder.mkdir()
    (folder / "app.txt").write_text("hello", encoding="utf-8")
    writable = tmp_path / "env"
    writable.mkdir()
    (writable / "kept.txt").write_text("host copy", encoding="utf-8")
    inside = "cat /mnt/s0/app.txt && echo changed > /mnt/m0/kept.txt && cat /mnt/m0/kept.txt"
    done = subprocess.run(
        layered(["/bin/sh", "-c", inside], [writable], [folder]),
        capture_output=True, text=True, timeout=30, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hellochanged\n"  # the folder is shown, its private layer writable …
    assert (writable / "kept.txt").read_text(encoding="utf-8") == "host copy"  # … the host's copy kept
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([folder.name, "env"])  # nothing ran
