"""Wild servers, round thirteen: hostile servers that try to abuse the host from inside their
sandbox, launched the ordinary way (a config, pinned, run by ``run_question``). A confined
server (``wild13_server.py``) fills the folders it may write without any setting (its /tmp,
its private home, the private write layer over its own environment): each is memory on the
host, and a tmpfs holds half of the host's memory unless bounded. Each write stops at the
bound with ENOSPC inside, the call answers (a typed tool answer, the run goes on), and the
honest use of the same scratch space still works after it. With a network allowlist, the
server opens hundreds of connections to the host's proxy and holds each with half a request:
each accepted one is a descriptor of the host's own process (which also holds its pins, state,
traces and every other server), so past the proxy's bound one more is answered 503 and closed,
the host's descriptors stay bounded, and once the server lets its connections go a listed
destination is fetched again. A server that writes a folder makes a link there, at a path
declared to it (``sandbox_read``) that was not there yet, to a host folder of its choosing: at
its next start the sandbox would resolve the declared path through the link and show that
folder; the path is withheld instead, named, and the folder the server writes still works.
Its own environment in a folder it writes, it names a host folder in a ``.pth`` file there and
as its venv's ``home``: the launcher reads neither at its next start, and it still starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.mcp import _layers, _netproxy
from tether.mcp._sandbox import bwrap_status
from tether.mcphost._runner import run_question
from tether.trace._tracer import read_trace

from .conftest import approve, script, write_config
from .test_sandbox_network import web

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X4"), pytest.mark.slow]

NO_BWRAP = f"bwrap does not work here: {bwrap_status(None)[1]}"
SERVER = Path(__file__).with_name("wild13_server.py")
BOUND_MIB = 8  # the test's bound on each scratch folder (the host's is far larger)
FILL_MIB = 64  # what the server tries to write into each: past the bound, never near the memory


def _filler() -> dict[str, Any]:
    return {
        "name": "w",
        "transport": "stdio",
        "command": [sys.executable, str(SERVER)],
        "effects": {"lookup": "read", "fill": "read"},
        "env": {"W13_FILL_MIB": str(FILL_MIB)},
        "sandbox": "required",
        "timeout_s": 60,
    }


@pytest.mark.skipif(bwrap_status(None)[0] is None, reason=NO_BWRAP)
async def test_a_confined_server_filling_its_scratch_folders_stops_at_the_bound_and_still_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_layers, "SCRATCH_BYTES", BOUND_MIB << 20)
    config = write_config(tmp_path, [_filler()])
    await approve(config, "w")
    run = await run_question(
        config,
        "Q",
        script(
            ("w__lookup", {"key": "a"}),
            ("w__fill", {"key": "tmp"}),
            ("w__fill", {"key": "home"}),
            ("w__fill", {"key": "env"}),
            ("w__lookup", {"key": "b"}),
            "done",
        ),
    )
    before, after = run.seen("w__lookup")
    assert "value-of-a" in before and "value-of-b" in after  # its scratch space works, after too
    filled = run.seen("w__fill")
    assert len(filled) == 3
    for answer in filled:
        assert "stopped at" in answer and "ENOSPC" in answer, answer
        written = int(answer.split("stopped at ")[1].split(" MiB")[0])
        assert written <= BOUND_MIB, answer


PROXY_BOUND = 16  # the test's bound on a server's connections through the proxy
HOGGED = 200  # what the server opens and holds


@pytest.mark.skipif(bwrap_status(None)[0] is None, reason=NO_BWRAP)
async def test_a_server_holding_hundreds_of_proxy_connections_is_refused_past_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_netproxy, "MAX_CONNECTIONS", PROXY_BOUND)
    with web() as (listed, asked):
        server = _filler() | {"network": [f"127.0.0.1:{listed}"], "sandbox": "required"}
        server["effects"] |= {"hog": "read", "release": "read", "fetch": "read"}
        config = write_config(tmp_path, [server])
        await approve(config, "w")
        url = f"http://127.0.0.1:{listed}/ok"
        most = [0]
        before = len(os.listdir("/proc/self/fd"))

        async def count_descriptors() -> None:
            while True:
                most[0] = max(most[0], len(os.listdir("/proc/self/fd")))
                await anyio.sleep(0.005)

        async with anyio.create_task_group() as tg:
            tg.start_soon(count_descriptors)
            run = await run_question(
                config,
                "Q",
                script(
                    ("w__fetch", {"key": url}),
                    ("w__hog", {"key": str(HOGGED)}),
                    ("w__fetch", {"key": url}),
                    ("w__release", {"key": "-"}),
                    ("w__fetch", {"key": url}),
                    "done",
                ),
            )
            tg.cancel_scope.cancel()
    first, hogged, again = run.seen("w__fetch")
    assert f"FETCHED:200:HELLO-FROM-{listed}" in first and f"FETCHED:200:HELLO-FROM-{listed}" in again
    assert "503" in hogged and "connections open through the host's proxy" in hogged, hogged
    (held,) = run.seen("w__hog")
    assert f"held {HOGGED}, refused {HOGGED - PROXY_BOUND}" in held, held
    assert most[0] - before < HOGGED // 2  # the host's descriptors: bounded, not one per connection
    assert asked == ["/ok", "/ok"] and run.result.stop_reason == "accepted"


@pytest.mark.skipif(bwrap_status(None)[0] is None, reason=NO_BWRAP)
async def test_a_link_a_server_plants_in_its_writable_folder_never_shows_a_host_folder_next_start(
    tmp_path: Path,
) -> None:
    work, secret = tmp_path / "work", tmp_path / "secret"
    work.mkdir()
    secret.mkdir()
    (secret / "key.txt").write_text("HOST-PRIVATE-KEY", encoding="utf-8")
    (work / "notes.txt").write_text("shared notes", encoding="utf-8")
    cache = work / "cache"  # declared to be read, not there yet: the server may make it
    server = _filler() | {"sandbox_write": [str(work)], "sandbox_read": [str(cache)]}
    server["effects"] |= {"plant": "read", "peek": "read"}
    config = write_config(tmp_path, [server])
    await approve(config, "w")
    first = await run_question(
        config,
        "Q",
        script(("w__plant", {"key": f"{cache}={secret}"}), ("w__peek", {"key": f"{cache}/key.txt"}), "done"),
    )
    assert cache.is_symlink() and "HOST-PRIVATE-KEY" not in first.seen("w__peek")[0]
    second = await run_question(
        config,
        "Q",
        script(
            ("w__peek", {"key": f"{cache}/key.txt"}),
            ("w__peek", {"key": f"{secret}/key.txt"}),
            ("w__peek", {"key": f"{work}/notes.txt"}),
            ("w__lookup", {"key": "a"}),
            "done",
        ),
    )
    through_link, direct, notes = second.seen("w__peek")
    assert "HOST-PRIVATE-KEY" not in through_link + direct, (through_link, direct)
    assert "cannot read" in through_link and "cannot read" in direct
    assert "shared notes" in notes and "value-of-a" in second.seen("w__lookup")[0]
    trace = read_trace(second.result.trace_path)  # type: ignore[arg-type]
    (launch,) = [e for e in trace if e["kind"] == "mcp_sandbox" and e["action"] == "confined"]
    assert str(secret) not in launch["read_only"] and str(work) in launch["read_write"]
    assert any(str(cache) in w and "a link in a folder the server writes" in w for w in launch["withheld"])


@pytest.mark.skipif(bwrap_status(None)[0] is None, reason=NO_BWRAP)
async def test_files_a_server_writes_into_its_own_venv_never_name_what_its_next_start_shows(
    tmp_path: Path,
) -> None:
    import subprocess

    work, secret = tmp_path / "work", tmp_path / "secret"
    secret.mkdir()
    (secret / "key.txt").write_text("HOST-PRIVATE-KEY", encoding="utf-8")
    (secret / "bin").mkdir()
    venv = work / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python3*/site-packages")
    server = _filler() | {
        "command": [str(venv / "bin" / "python"), str(SERVER)],
        "sandbox_write": [str(work)],
    }
    server["effects"] |= {"plant": "read", "peek": "read"}
    config = write_config(tmp_path, [server])
    await approve(config, "w")
    cfg = venv / "pyvenv.cfg"
    (site / "zz.pth").write_text(f"{secret}\n", encoding="utf-8")  # as the server would
    cfg.write_text(f"home = {secret}/bin\n", encoding="utf-8")
    run = await run_question(
        config,
        "Q",
        script(("w__peek", {"key": "/opt/mcp/*/key.txt"}), ("w__lookup", {"key": "a"}), "done"),
    )
    (peeked,) = run.seen("w__peek")
    assert "HOST-PRIVATE-KEY" not in peeked and "cannot read" in peeked, peeked
    assert "value-of-a" in run.seen("w__lookup")[0]  # it started, from the interpreter itself
    trace = read_trace(run.result.trace_path)  # type: ignore[arg-type]
    (launch,) = [e for e in trace if e["kind"] == "mcp_sandbox" and e["action"] == "confined"]
    assert str(secret) not in launch["read_only"]
    assert any(str(site / "zz.pth") in w for w in launch["withheld"])
