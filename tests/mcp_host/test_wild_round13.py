"""Wild servers, round thirteen: hostile servers that try to abuse the host from inside their
sandbox, launched the ordinary way (a config, pinned, run by ``run_question``). A confined
server (``wild13_server.py``) fills the folders it may write without any setting (its /tmp,
its private home, the private write layer over its own environment): each is memory on the
host, and a tmpfs holds half of the host's memory unless bounded. Each write stops at the
bound with ENOSPC inside, the call answers (a typed tool answer, the run goes on), and the
honest use of the same scratch space still works after it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tether.mcp import _layers
from tether.mcp._sandbox import bwrap_status
from tether.mcphost._runner import run_question

from .conftest import approve, script, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X4"), pytest.mark.slow]

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


@pytest.mark.skipif(
    bwrap_status(None)[0] is None, reason=f"bwrap does not work here: {bwrap_status(None)[1]}"
)
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
