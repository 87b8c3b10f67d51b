"""HTTP-level faults in the body of an error answer, driven as the other rounds are (an agent
file naming ``model.provider``, ``tether run`` in process, over the SDK transport and plain
httpx2) against real servers on 127.0.0.1 speaking chat completions, the Responses API and
the Anthropic Messages API.

Fixed here: an error answer (401, 503 …) whose body is labelled ``gzip`` or ``deflate`` but sent
plain (a proxy that copies the upstream's ``content-encoding`` onto its own page) lost the
server's message: the run said ``HTTP 401: (empty body)``. Its text is now read as it is. A
``deflate`` body, zlib-wrapped or bare, is inflated. An error body in a coding the client
cannot decode (``br`` without a decoder) was shown as its raw bytes (control characters,
replacement marks); it is now named by its size. A page in another charset (Latin-1) is still
shown. The status decides, as before: the 401 is
final at once and names the key variable, the 503 is retried and the answer after it accepted.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest
from test_faults_heldout import ANSWER, SERVERS, Case, run_case

from tether_testing.fake_server import Reply

pytestmark = [pytest.mark.slow, pytest.mark.spec("L2"), pytest.mark.usefixtures("quick_model_retries")]

MESSAGE = b'{"error": {"type": "authentication_error", "message": "Incorrect API key provided"}}'


def bare_deflate(data: bytes) -> bytes:
    z = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return z.compress(data) + z.flush()


def error(status: int, body: bytes, coding: str, then: bool = False) -> Case:
    reply = Reply(
        status=status, body=body, headers={"content-type": "application/json", "content-encoding": coding}
    )
    replies = [reply, Reply.text(ANSWER)] if then else [reply]
    return Case(f"{status}-{coding}", lambda p, stream: replies, then, modes=("whole",))


# (case, what the run's message says: the server's words, or what stands in for them)
CASES = [
    (error(401, MESSAGE, "gzip"), "Incorrect API key provided"),  # a label on a plain body
    (error(401, MESSAGE, "deflate"), "Incorrect API key provided"),
    (
        error(401, b"<html><title>401 Authorization Required</title></html>", "x-gzip"),
        "401 Authorization Required",
    ),
    (error(401, zlib.compress(MESSAGE), "deflate"), "Incorrect API key provided"),  # RFC 9110's deflate
    (error(401, bare_deflate(MESSAGE), "deflate"), "Incorrect API key provided"),  # deflate sent bare
    (error(401, gzip.compress(MESSAGE), "gzip"), "Incorrect API key provided"),  # as before: gzip read
    (
        error(401, b"<title>Zugriff verweigert f\xfcr diesen Schl\xfcssel</title>", "gzip"),
        "Zugriff verweigert",
    ),
    (error(401, gzip.compress(MESSAGE), "br"), "bytes that are not text"),  # no decoder: not shown
    (error(503, b'{"error": {"message": "upstream busy"}}', "gzip", then=True), ""),  # retried, accepted
]


@pytest.mark.parametrize("transport", ["sdk", "http"])
@pytest.mark.parametrize("provider", sorted(SERVERS))
@pytest.mark.parametrize(("case", "said"), CASES, ids=[f"{n}-{c.name}" for n, (c, _) in enumerate(CASES)])
def test_an_error_body_with_a_wrong_or_odd_coding_keeps_its_message(
    tmp_path: Path, case: Case, said: str, provider: str, transport: str
) -> None:
    code, out, requests, _ = run_case(tmp_path, provider, case, "whole", transport)
    if case.ok:
        assert (code, out["stop_reason"], out["answer"], requests) == (0, "accepted", ANSWER, 2), out
        return
    assert (code, out["stop_reason"], requests) == (7, "model_error", 1), out  # final at once
    message = out["message"]
    assert "HTTP 401" in message and said in message and "(check " in message, message
    assert "empty body" not in message, message
    assert not any(ord(ch) < 32 for ch in message), message


@pytest.mark.parametrize("transport", ["sdk", "http"])
@pytest.mark.parametrize("provider", sorted(SERVERS))
def test_a_413_says_the_request_is_too_large_and_is_not_retried(
    tmp_path: Path, provider: str, transport: str
) -> None:
    """A 413 (a proxy's body limit, an HTML page) is final at once and says what to change (before:
    only "HTTP 413: 413 Request Entity Too Large"); an answer after it is never asked for."""
    page = Reply(status=413, body=b"<html><title>413 Request Entity Too Large</title></html>")
    case = Case("413", lambda p, stream: [page, Reply.text(ANSWER)], False, modes=("whole",))
    code, out, requests, _ = run_case(tmp_path, provider, case, "whole", transport)
    assert (code, out["stop_reason"], requests) == (7, "model_error", 1), out
    assert "HTTP 413: 413 Request Entity Too Large" in out["message"], out
    assert "request is larger than the server or a proxy" in out["message"], out
