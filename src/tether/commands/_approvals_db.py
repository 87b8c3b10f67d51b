"""Where the CLI's approval store lives, and how run outcomes map to exit codes."""

from __future__ import annotations

import os
from pathlib import Path

EXIT_CODES = {
    "accepted": 0,
    "policy_denied": 2,
    "approval_denied": 2,
    "invalid_handoff": 3,
    "max_steps": 4,
    "budget": 4,
    "deadline": 4,
    "repetition": 4,
    "approval_required": 5,
    "dependency_unavailable": 6,
    "model_error": 7,
    "internal_error": 7,
}


def default_db() -> Path:
    return Path(os.environ.get("TETHER_OUT", "tether-output")) / "approvals.db"
