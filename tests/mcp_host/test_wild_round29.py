"""Wild servers, round twenty-nine: servers launched the ordinary way (``python server.py``, a
script run by its ``#!`` line, a relative command with a ``cwd``, a URL), a stdio server written
by hand (``wild29_server.py``) and a Streamable HTTP one (``wild29_web.py``), each beside the
honest stdio server (``wild4_server.py``), checked to serve.

Contained already (checked here): start-up lines on stdout before ``initialize`` (npm's
warnings, a banner), ``\\r\\n`` line endings, a protocol version the host does not know (named,
the server not started), ``initialize`` without ``serverInfo`` or ``capabilities`` (named),
results whose ``content`` is missing, a string, an object or null (that call fails, named), tool
names with dots, slashes, spaces, letters outside ASCII or 300 characters (made safe, blocked
until approved), input schemas that are no JSON Schema (blocked), a tool announced mid-session
under another server's namespaced name (blocked as new, never offered), no secret of the host's
environment in the server's, and over HTTP answers as JSON or as an event stream call by call
(an event's JSON over several ``data:`` lines, a ``Content-Type`` in capitals), a redirect to
another origin not followed (the configured key never sent there), and an HTML page named.

Found:

* a server logging as structured loggers do, to stdout (pino's ``{"level": 30, "msg": …,
  "id": 0}``), failed the request whose id its log line named: the start, when it logged a
  banner, or the call it logged. An object naming no ``jsonrpc``, ``result`` or ``error`` object
  is now no answer (dropped as any other line that is not JSON-RPC); an answer without
  ``"jsonrpc"`` still fails its call at once;
* a server ending its messages with a lone ``\\r`` (never ``\\n``) was never read: its start
  waited out the connect timeout and was said to be slow. A message with no newline after it is
  read once whole with a few blanks or a ``\\r`` after it too;
* a launch the system refuses was named in its bare words, naming the script even where its
  interpreter was missing: ``FileNotFoundError: … run.sh`` for a script saved with Windows line
  endings (its ``#!`` line looks for ``/bin/sh\\r``) or one whose ``#!`` interpreter does not
  exist, ``PermissionError`` for one not executable, ``Exec format error`` for one with no ``#!``
  line, ``FileNotFoundError`` naming a ``cwd`` that does not exist. Each is now said as what to
  change (``mcp/_runnable.py``), before the launch where it can be known, confined or not (a
  confined one blamed the sandbox);
* an HTTP body typed JSON that is no JSON-RPC message (a string, a page, an object without
  ``"jsonrpc": "2.0"``) was named by the SDK in a many-line dump of validation errors; it is now
  one line, as on stdio ("the server's answer is not valid JSON-RPC").
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.core.stop import Limits, StopReason
from tether.errors import DependencyUnavailable
from tether.mcp._framing import whole
from tether.mcphost._runner import run_question
from tether_testing.loopback import serving

from .conftest import approve, honest_server, script, write_config
from .wild29_web import app

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2")]

HERE = Path(__file__).parent
SERVER = HERE / "wild29_server.py"


def _entry(*mode: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "x",
        "command": [sys.executable, str(SERVER), *mode],
        "mode": "legacy",
        "effects": {"lookup": "read"},
        "timeout_s": 60,
        "sandbox": "none",
        **extra,
    }


def _value(said: str, key: str) -> bool:
    return said.startswith('<untrusted_data source="x"') and f"\nvalue-of-{key}\n</untrusted_data>" in said


def _failed(said: str, why: str) -> bool:
    return said.startswith('<untrusted_data source="x"') and 'error="upstream_error"' in said and why in said


async def _run(tmp_path: Path, entry: dict[str, Any], keys: list[str], approved: bool = True) -> Any:
    """The run calling ``x__lookup`` with each key, then ``ok__lookup``: ``ok`` served, the run
    done; no call waits out its timeout (60 s)."""
    config = write_config(tmp_path, [entry, honest_server()])
    if approved:
        await approve(config, "x")
    await approve(config, "ok")
    steps = [("x__lookup", {"key": k}) for k in keys]
    with anyio.fail_after(50):
        run = await run_question(
            config, "Q", script(*steps, ("ok__lookup", {"key": "z"}), "done"), limits=Limits(max_steps=30)
        )
    assert "value-of-z" in run.seen("ok__lookup")[-1] and run.result.stop_reason is StopReason.ACCEPTED
    return run


# -- found: a structured logger on stdout ---------------------------------------------------------


async def test_a_server_logging_json_lines_to_stdout_starts_and_serves(tmp_path: Path) -> None:
    """``jsonlog`` logs ``{"level": 30, "msg": …, "id": N}`` at its start (naming the id of
    ``initialize``) and before each answer (naming the call's id): it starts, each call gets its
    own answer (before: the start failed, "not valid JSON-RPC"); an answer without
    ``"jsonrpc"`` (``sloppy``) still fails its call at once, and the next is served."""
    run = await _run(tmp_path, _entry("jsonlog"), ["a", "sloppy", "b"])
    said = run.seen("x__lookup")
    assert _value(said[0], "a") and _value(said[2], "b")
    assert _failed(said[1], "not valid JSON-RPC")
    assert not run.summary()["unavailable_servers"]


def test_a_message_is_whole_with_blanks_after_it() -> None:
    """Output with no newline yet is a whole message with a ``\\r`` or blanks after it (a few:
    the check runs at every chunk), not before it is whole."""
    message = b'{"jsonrpc": "2.0", "id": 1, "result": {}}'
    assert all(whole(message + tail) for tail in (b"", b"\r", b" \t\r", b" " * 16))
    assert not whole(message[:-1] + b"\r") and not whole(b"\r") and not whole(message + b" " * 17)


async def test_a_server_ending_its_lines_with_a_lone_cr_starts_and_serves(tmp_path: Path) -> None:
    """``cr`` ends each message with ``\\r`` and never ``\\n``: each is read once whole (before:
    the start waited out its connect timeout, then was said to be slow to start)."""
    said = (await _run(tmp_path, _entry("cr"), ["a", "b"])).seen("x__lookup")
    assert _value(said[0], "a") and _value(said[1], "b")


# -- found: a launch the system refuses ----------------------------------------------------------

BODY = SERVER.read_text(encoding="utf-8")
LAUNCHES = {
    "windows": (f"#!{sys.executable}\r\n" + BODY.replace("\n", "\r\n"), 0o755, "has Windows line endings"),
    "noexec": (f"#!{sys.executable}\n" + BODY, 0o644, "is not executable: chmod +x it"),
    "nointerp": (
        "#!/nonexistent/bin/python3\n" + BODY,
        0o755,
        "names /nonexistent/bin/python3 on its #! line",
    ),
    "noshebang": (BODY, 0o755, "it has no #! line naming its interpreter"),
}


def _script(folder: Path, text: str, mode: int, name: str = "server.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(text.encode("utf-8"))
    path.chmod(mode)
    return path


@pytest.mark.parametrize("case", list(LAUNCHES))
async def test_a_script_the_system_cannot_run_is_named_with_what_to_change(tmp_path: Path, case: str) -> None:
    """A server script run as itself (``command: ./server.py``) that the system refuses is named
    with the cause and what to change (before: ``FileNotFoundError`` naming the script for a
    Windows line ending or a missing interpreter, ``PermissionError``, ``Exec format error``);
    the run goes on with the other server; the same script written right starts."""
    text, mode, why = LAUNCHES[case]
    _script(tmp_path / "srv", text, mode)
    entry = {**_entry(), "command": ["./server.py"], "cwd": "srv"}
    (tmp_path / "a").mkdir()
    with pytest.raises(DependencyUnavailable, match="could not be started") as caught:
        await approve(write_config(tmp_path / "a", [{**entry, "cwd": str(tmp_path / "srv")}]), "x")
    assert why in str(caught.value) and "Errno" not in str(caught.value)
    run = await _run(tmp_path, entry, ["a"], approved=False)
    assert "its server 'x' is unavailable" in run.seen("x__lookup")[0]
    assert why in run.summary()["unavailable_servers"]["x"]
    _script(tmp_path / "srv", f"#!{sys.executable}\n" + BODY, 0o755)
    (tmp_path / "b").mkdir()
    assert _value(
        (await _run(tmp_path / "b", {**entry, "cwd": str(tmp_path / "srv")}, ["a"])).seen("x__lookup")[0], "a"
    )


async def test_a_shell_wrapper_with_windows_line_endings_is_named_confined_or_not(tmp_path: Path) -> None:
    """``run.sh`` (``exec python server.py``) saved with ``\\r\\n``: named as such, unconfined
    and confined (before: ``FileNotFoundError`` naming ``run.sh``; confined, the sandbox was
    blamed)."""
    wrapper = f"#!/bin/sh\r\nexec {sys.executable} {SERVER}\r\n"
    run_sh = _script(tmp_path / "srv", wrapper, 0o755, "run.sh")
    for i, sandbox in enumerate(("none", "auto")):
        (tmp_path / str(i)).mkdir()
        config = write_config(tmp_path / str(i), [{**_entry(), "command": [str(run_sh)], "sandbox": sandbox}])
        with pytest.raises(DependencyUnavailable) as caught:
            await approve(config, "x")
        assert f"{str(run_sh)!r} has Windows line endings" in str(caught.value)
        assert "sandbox may be the cause" not in str(caught.value)


async def test_a_cwd_that_does_not_exist_is_named(tmp_path: Path) -> None:
    """A ``cwd`` naming no folder: the message names it (before: ``FileNotFoundError`` with the
    folder's path and nothing else)."""
    config = write_config(tmp_path, [_entry(cwd=str(tmp_path / "gone"))])
    with pytest.raises(DependencyUnavailable) as caught:
        await approve(config, "x")
    assert f"the server's cwd {tmp_path / 'gone'} is not a folder that exists" in str(caught.value)


# -- found: an HTTP body that is no JSON-RPC -----------------------------------------------------


async def test_http_answers_as_json_or_events_by_call_and_bodies_that_are_no_json_rpc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One server answering some calls as JSON and others as event streams (an event's JSON over
    several ``data:`` lines, after a comment), JSON typed in capitals: each read. A body typed
    JSON that is no JSON-RPC message fails its call in one line, as on stdio (before: the SDK's
    many-line validation dump); a redirect to another origin is not followed, the key in the
    server's headers never sent there; an HTML page is named; the next call is served."""
    monkeypatch.setenv("W29_KEY", "w29-key-value")
    elsewhere: list[str] = []
    with serving(app(elsewhere)) as other, serving(app([], elsewhere=f"{other}/mcp")) as base:
        entry = {
            "name": "x",
            "url": f"{base}/mcp",
            "mode": "legacy",
            "effects": {"lookup": "read"},
            "timeout_s": 60,
            "headers": {"X-Api-Key": "${W29_KEY}"},
        }
        keys = ["sse", "plain", "split", "casing", "scalar", "notjson", "nojsonrpc", "away", "page", "last"]
        said = (await _run(tmp_path, entry, keys)).seen("x__lookup")
    assert [_value(said[keys.index(k)], k) for k in ("sse", "plain", "split", "casing", "last")] == [True] * 5
    for key, why in (
        ("scalar", "no JSON-RPC 2.0 message"),
        ("notjson", "not JSON"),
        ("nojsonrpc", "no JSON-RPC 2.0 message"),
    ):
        at = said[keys.index(key)]
        assert (
            _failed(at, f"the server's answer is not valid JSON-RPC ({why})") and "validation error" not in at
        )
    assert _failed(said[keys.index("away")], "not followed") and not elsewhere
    assert _failed(said[keys.index("page")], "text/html")


# -- held ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["banner", "crlf"])
async def test_start_up_lines_and_crlf_endings_on_stdout_are_no_obstacle(tmp_path: Path, mode: str) -> None:
    """npm's warnings and a banner before ``initialize``, or every line ended ``\\r\\n``: the
    server starts and serves."""
    said = (await _run(tmp_path, _entry(mode), ["a", "b"])).seen("x__lookup")
    assert _value(said[0], "a") and _value(said[1], "b")


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("oldproto", "Unsupported protocol version from the server: 2024-01-01"),
        ("future", "Unsupported protocol version from the server: 2099-01-01"),
        ("noinfo", "serverInfo: Field required"),
        ("nullcaps", "capabilities: Input should be a valid dictionary"),
    ],
)
async def test_an_unusable_initialize_answer_is_named_and_the_run_goes_on(
    tmp_path: Path, mode: str, why: str
) -> None:
    """A protocol version the host does not speak, or ``initialize`` without what MCP requires:
    the server is not started, named; the run goes on with the other server."""
    run = await _run(tmp_path, _entry(mode), ["a"], approved=False)
    assert "its server 'x' is unavailable" in run.seen("x__lookup")[0]
    assert why in run.summary()["unavailable_servers"]["x"]


async def test_results_without_a_content_list_fail_their_call_alone(tmp_path: Path) -> None:
    """``content`` missing, a string, one block or null: that call fails, named; the next is
    served."""
    keys = ["empty", "strcontent", "dictcontent", "nullcontent", "a"]
    said = (await _run(tmp_path, _entry(), keys)).seen("x__lookup")
    assert all(_failed(s, "CallToolResult: content") for s in said[:4]) and _value(said[4], "a")


async def test_odd_names_bad_schemas_and_a_tool_announced_under_another_servers_name(tmp_path: Path) -> None:
    """Names a provider refuses are made safe and held for review; schemas that are no JSON
    Schema are refused or flagged; ``ok__lookup`` announced mid-session (``x__ok__lookup``) and
    ``lookup.`` are blocked as new at the next listing, never called; ``ok__lookup`` is still
    ``ok``'s."""
    config = write_config(tmp_path / "n" if (tmp_path / "n").mkdir() is None else tmp_path, [_entry("names")])
    pinned, skipped = await approve(config, "x")
    assert pinned == ["look.up", "lookup"] and len(skipped) == 5
    assert all("outside [A-Za-z0-9_.-] or is longer than 128" in why for why in skipped.values())
    config = write_config(
        tmp_path / "s" if (tmp_path / "s").mkdir() is None else tmp_path, [_entry("badschema")]
    )
    pinned, skipped = await approve(config, "x")
    assert (
        pinned == ["lookup"]
        and "invalid_schema" in skipped["bad0"]
        and "invalid definition" in skipped["bad1"]
    )
    entry = _entry("grow", effects={"lookup": "read", "ok__lookup": "read", "lookup.": "read"})
    config = write_config(tmp_path, [entry, honest_server()])
    await approve(config, "x")
    await approve(config, "ok")
    steps = [("x__lookup", {"key": k}) for k in "ab"] + [
        ("x__ok__lookup", {"key": "q"}),
        ("ok__lookup", {"key": "z"}),
    ]
    with anyio.fail_after(50):
        run = await run_question(config, "Q", script(*steps, "done"), limits=Limits(max_steps=30))
    assert (
        _value(run.seen("x__lookup")[1], "b")
        and "unknown tool 'x__ok__lookup'" in run.seen("x__ok__lookup")[0]
    )
    assert "value-of-z" in run.seen("ok__lookup")[0]
    blocked = {b["tool"]: b for b in run.summary()["blocked"] if b["kind"] == "mcp_capability_blocked"}
    assert "could impersonate another server's namespaced tool" in blocked["x__ok__lookup"]["why"]
    assert len(blocked) == 2 and all(b["status"] == "new" for b in blocked.values())


async def test_the_server_environment_holds_none_of_the_hosts_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokens, keys and a database URL in the host's environment stay there: the server sees a
    few plain variables and its launch marks."""
    for name in (
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "DATABASE_URL",
        "OPENAI_API_KEY",
        "MY_SERVICE_PASSWORD",
    ):
        monkeypatch.setenv(name, "s3cr3t")
    said = (await _run(tmp_path, _entry("env"), ["a"])).seen("x__lookup")[0]
    names = set(said.split("\n")[1].split())
    assert "PATH" in names and not names & {
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "DATABASE_URL",
        "OPENAI_API_KEY",
    }
    assert "MY_SERVICE_PASSWORD" not in names and "s3cr3t" not in said
