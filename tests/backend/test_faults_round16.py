"""A sixteenth round: fallback chains and budgets under faults, driven as the others are (an
agent file naming ``model.provider`` and ``model.fallback``, ``tether run`` in process) against
real servers on 127.0.0.1 speaking each protocol, providers mixed in one chain.

A primary whose key the server refuses (401) while its fallback answers: the run is answered
by the fallback (as documented: a 401 moves to the next model) and the command's summary says
so — ``model_fallbacks`` lists the model left, its error and the model moved to, with a fix
naming the key variable, and the terminal view prints it as a warning (before: the switch was
in the trace's ``model_response`` only; the summary said ``accepted``, exit 0, nothing about the
refused key, so a misconfigured key stayed hidden behind the backup; ``clisupport.output``).

``--no-stream`` ("whole responses, even if the agent file asks for a stream") holds for every
model of ``model.fallback`` (before: for the primary only, so a run that fell back streamed
after all, from a server the operator had just said cannot; ``agents._file.with_overrides``).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from test_faults_heldout import ANSWER, ORDER, SERVERS, write_agent

from tether.cli import main
from tether_testing.fake_server import FakeChatServer, Reply, scripted
from tether_testing.servers import FakeAnthropicServer, FakeResponsesServer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("quick_model_retries")]

KEY = "TETHER_ROUND16_KEY"


def run_cli(tmp_path: Path, model: dict[str, Any], *extra: str) -> tuple[int, str]:
    """``tether run --agent`` with ``model`` and ``extra`` options: exit code, standard output."""
    out = io.StringIO()
    path = str(write_agent(tmp_path, model))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", "Why is 742 open?", "--agent", path, *extra])
    return code, out.getvalue()


def summary(text: str) -> dict[str, Any]:
    return json.loads(text.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("fallback", ["anthropic", "openai-responses"])
def test_a_refused_key_on_the_primary_is_said_when_the_fallback_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fallback: str
) -> None:
    monkeypatch.setenv(KEY, "sk-wrong-round16")
    for view in ("--json", None):
        with (
            FakeChatServer(scripted([Reply.error(401, "invalid api key")])) as primary,
            SERVERS[fallback](scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as backup,
        ):
            model = {
                "name": "primary-m", "base_url": primary.url, "api_key_env": KEY,
                "fallback": [{"provider": fallback, "name": "backup-m", "base_url": backup.url}],
            }  # fmt: skip
            code, text = run_cli(tmp_path, model, *([view] if view else []))
            assert len(primary.received) == 1 and len(backup.received) == 2  # 401: not retried
        if view:
            out = summary(text)
            assert (code, out["stop_reason"], out["answer"]) == (0, "accepted", ANSWER)
            [moved] = out["model_fallbacks"]
            assert (moved["model"], moved["to"]) == ("primary-m", "backup-m")
            assert "HTTP 401" in moved["error"] and f"${KEY} holds a key the server refused" in moved["fix"]
            assert "sk-wrong-round16" not in text
        else:
            assert code == 0 and f"answer: {ANSWER}" in text
            assert "warning: model primary-m failed, the run moved to backup-m: " in text
            assert f"fix: ${KEY} holds a key" in text


def test_a_run_that_never_falls_back_lists_no_switch_and_an_unset_key_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeChatServer(scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as only:
        code, text = run_cli(tmp_path, {"name": "m-1", "base_url": only.url}, "--json")
    assert code == 0 and "model_fallbacks" not in summary(text)
    monkeypatch.delenv(KEY, raising=False)
    with (
        FakeAnthropicServer(scripted([FakeAnthropicServer.error(403, "forbidden")])) as primary,
        FakeChatServer(scripted([Reply.text(ANSWER)])) as backup,
    ):
        model = {
            "provider": "anthropic", "name": "claude-r16", "base_url": primary.url, "api_key_env": KEY,
            "fallback": [{"name": "local-r16", "base_url": backup.url}],
        }  # fmt: skip
        code, text = run_cli(tmp_path, model, "--json")
    [moved] = summary(text)["model_fallbacks"]
    assert code == 0 and f"${KEY} is not set" in moved["fix"]


@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_no_stream_on_the_command_line_holds_for_the_fallback_models(tmp_path: Path, provider: str) -> None:
    """The primary (Responses) is unavailable (404, final); the fallback's file entry asks for a
    stream. With ``--no-stream`` it is asked for whole responses; without, it streams as filed."""
    for extra, streamed in (("--no-stream", False), (None, True)):
        with (
            FakeResponsesServer(scripted([FakeResponsesServer.error(404, "no such model")])) as primary,
            SERVERS[provider](scripted([Reply.calls(ORDER), Reply.text(ANSWER)])) as backup,
        ):
            filed = {"provider": provider, "name": "b-1", "base_url": backup.url, "streaming": True}
            model = {
                "provider": "openai-responses",
                "name": "gone",
                "base_url": primary.url,
                "fallback": [filed],
            }
            code, text = run_cli(tmp_path, model, "--json", *([extra] if extra else []))
            asked = [bool(body.get("stream")) for body in backup.bodies()]
        out = summary(text)
        assert (code, out["answer"]) == (0, ANSWER)
        assert asked == [streamed, streamed], (extra, asked)
