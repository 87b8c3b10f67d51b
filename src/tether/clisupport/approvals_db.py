"""Where the CLI's approval store lives, and how run outcomes map to exit codes."""

from __future__ import annotations

import os
from pathlib import Path

from tether.clisupport.output import EXIT_CODES  # one table for every command

__all__ = ["EXIT_CODES", "default_db"]


def default_db() -> Path:
    return Path(os.environ.get("TETHER_OUT", "tether-output")) / "approvals.db"
