"""The console (``tether serve``): people decide approvals, answer questions, pin MCP servers and
read runs in a browser, over the same stores the host and the CLI use. Needs ``tether[console]``."""

from tether.console._app import create_app
from tether.console._sources import ConsoleSources, deployment_sources, sqlite_sources
from tether.console._users import Principal, UserStore

__all__ = ["ConsoleSources", "Principal", "UserStore", "create_app", "deployment_sources", "sqlite_sources"]
