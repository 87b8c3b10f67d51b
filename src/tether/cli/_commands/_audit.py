"""The console's audit log as the command line writes it: a decision taken at a terminal is
recorded where the console's are (``cli:<person>``), when there is a console users database."""

from __future__ import annotations

from typing import Any


class CliAudit:
    """A ``DecisionAudit`` over the default users database (``tether users``): each entry opens
    it, appends and closes; with no database there (or no console extra) nothing is kept but the
    approval store's own history of the decision."""

    def audit(self, actor: str, action: str, **fields: str) -> None:
        """``UserStore.audit``'s entry (its fields and defaults), from ``client`` ``cli``."""
        self._write("audit", actor, action, **fields)

    def refused(self, actor: str, action: str, err: Exception, **fields: str) -> None:
        self._write("refused", actor, action, err, **fields)

    def _write(self, method: str, *args: Any, **fields: str) -> None:
        from tether.cli._commands.users import default_users_db

        path = default_users_db()
        if not path.exists():
            return
        try:
            from tether.console._users import UserStore
        except ImportError:  # no console extra: the approval store's history still has it
            return
        store = UserStore(path)
        try:
            getattr(store, method)(*args, client="cli", **fields)
        finally:
            store.close()


def cli_actor(who: str) -> str:
    """How the audit log names a person acting at this terminal."""
    return f"cli:{who}"
