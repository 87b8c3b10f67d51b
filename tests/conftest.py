"""Suite-wide settings."""

from __future__ import annotations

import os

# Every tracer built during the tests checks each event against its kind's declared payload
# (names, required fields, types) and raises on a mismatch (tether/trace/events.py).
os.environ["TETHER_TRACE_STRICT"] = "1"
