"""The one path of a tool call, whichever runner proposed it, and the host's authority it
consults (policy, approvals, effect ledger, tool sources)."""

__all__: list[str] = []
