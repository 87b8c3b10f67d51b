"""Notifications a server sends, held to what the host can read (one ``NotificationGate`` per
connection, on stdio and on Streamable HTTP's event streams), before the SDK is given them.

A notification costs the server one line to write and the host about half a millisecond of the
event loop (the SDK validates it and starts a task for it): a server writing 20,000
``notifications/tools/list_changed`` (or progress for tokens the host never gave) before an answer
held the host's one event loop for seconds, every other server's call and the model's with it,
and could keep doing so between calls. Now:

* a list-changed notice (tools, prompts, resources) repeated before the server's next answer
  says nothing new and is dropped: the first one already has the host re-list (a re-list's
  answer, or any other, lets the next notice through);
* every other notification passes at ``RATE`` a second (``BURST`` at once); the rest are dropped
  and counted, and the person is told once per connection (``on_flood``). Answers and the
  server's own requests always pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tether.core.ratelimit import TokenBucket

__all__ = ["BURST", "RATE", "NotificationGate"]

RATE = 200.0  # notifications a second a server may send (progress, log messages, …)
BURST = 1000  # and at once
_NOTICES = frozenset(
    f"notifications/{kind}/list_changed" for kind in ("tools", "prompts", "resources", "roots")
)


class NotificationGate:
    """Whether each message a server sent is given to the SDK (module docstring)."""

    def __init__(self, on_flood: Callable[[str], None] | None = None) -> None:
        self._bucket = TokenBucket(RATE, BURST)
        self._noticed: set[str] = set()  # list-changed notices passed since the last answer
        self._on_flood = on_flood
        self.dropped = 0

    def admit(self, method: str | None, notification: bool) -> bool:
        """``method`` of a message (a notification if ``notification``): passed on, or dropped."""
        if not notification:
            if method is None:  # an answer: a notice after it may say something new
                self._noticed.clear()
            return True
        if method in _NOTICES:
            if method not in self._noticed:
                self._noticed.add(method)
                return True
        elif self._bucket.take():
            return True
        self.dropped += 1
        if self.dropped == 1 and self._on_flood is not None:
            self._on_flood(
                f"sends notifications faster than the host reads them (more than {RATE:g} a second, "
                "or the same list-changed notice again before its next answer): the excess is dropped"
            )
        return False

    def admit_json(self, data: bytes) -> bool:
        """``admit`` for a message as JSON text (an event's data); what does not parse passes."""
        if b'"notifications/' not in data:
            if b'"method"' not in data:
                self.admit(None, False)  # (an answer)
            return True
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):
            return True
        if not isinstance(message, dict) or not isinstance(method := message.get("method"), str):
            return True
        return self.admit(method, "id" not in message)
