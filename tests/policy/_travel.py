"""The travel deployment the relay tests share (tests/policy/test_provenance_relay.py and
test_provenance_subagent.py): who asks, the attacker's values, the mail and payment tools as
received, and the rules that let a mail carry a vendor's link or a payment go to an account a
vendor lists, while reviews are anyone's words."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from tether import Effect, TrustedContext, tool
from tether.policy._provenance_declarations import ToolRules
from tether.policy._provenance_rules import rules_from_dict

CTX = TrustedContext(tenant="acme", user="emma")
FRIEND_MAIL = "bob@partner.example"
ATTACKER_IBAN = "US133000000121212121212"
ATTACKER_URL = "www.secure-systems.example/deal"  # no digits: nothing but its class holds it
HOTEL_URL = "www.grand-hotel.example/rooms"


class Outbox:
    """Mail and payments as received; a world adds the tools it reads from."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []

    @tool(effect=Effect.SEND)
    def send_email(
        self,
        recipients: Annotated[list[str], Field(description="E-mail addresses.")],
        subject: Annotated[str, Field(description="Subject.")],
        body: Annotated[str, Field(description="Body.")],
    ) -> str:
        """Send an e-mail."""
        self.received.append(("send_email", {"recipients": recipients, "body": body}))
        return "sent"

    @tool(effect=Effect.PURCHASE)
    def pay_deposit(
        self,
        recipient: Annotated[str, Field(description="IBAN of the hotel.")],
        amount: Annotated[float, Field(description="Amount in EUR.")],
    ) -> str:
        """Pay a hotel's deposit."""
        self.received.append(("pay_deposit", {"recipient": recipient, "amount": amount}))
        return "paid"


def travel_rules(**send_email: Any) -> dict[str, ToolRules]:
    """The rules of the travel tools; ``send_email`` adds to the mail tool's own (``no_relay``)."""
    return rules_from_dict(
        {
            "get_hotels": {"effect": "read"},
            "get_reviews": {"effect": "read"},
            "send_email": {
                "effect": "send",
                "requested_by": ["send", "e-mail", "email", "tell"],
                **send_email,
                "arguments": {
                    "recipients": {"role": "destination", "from": ["user", "directory"]},
                    "subject": {"role": "content"},
                    "body": {"role": "content", "links_from": ["user", "directory", "listing"]},
                },
            },
            "pay_deposit": {
                "effect": "purchase",
                "requested_by": ["pay"],
                "arguments": {
                    "recipient": {"role": "destination", "from": ["user", "listing"]},
                    "amount": {"role": "amount", "bound": ["user"]},
                },
            },
        }
    )
