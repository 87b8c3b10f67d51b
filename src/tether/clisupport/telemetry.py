"""``--otel`` flags of ``tether run`` and ``tether worker``: they set the standard ``OTEL_*``
variables for this process, so the one configuration path (``tether.agents._build.build_agent``,
used wherever an agent file is built) sees the same thing a deployment sets in its environment."""

from __future__ import annotations

import argparse
import os
from typing import Any

__all__ = ["add_otel_flags", "apply_otel_flags"]

DEFAULT_ENDPOINT = "http://localhost:4318"  # the OTLP/HTTP default


def add_otel_flags(parser: Any) -> None:
    g = parser.add_argument_group("OpenTelemetry (or the standard OTEL_* variables)")
    g.add_argument(
        "--otel",
        action="store_true",
        help=f"export spans over OTLP/HTTP as the OTEL_* variables say (endpoint default {DEFAULT_ENDPOINT})",
    )
    g.add_argument(
        "--otel-endpoint", metavar="URL", help="OTLP/HTTP base URL (sets OTEL_EXPORTER_OTLP_ENDPOINT)"
    )
    g.add_argument("--otel-service", metavar="NAME", help="service.name (sets OTEL_SERVICE_NAME)")
    g.add_argument(
        "--otel-capture-content",
        action="store_true",
        help="export message content too (objective, model text, arguments; secrets still redacted)",
    )


def apply_otel_flags(args: argparse.Namespace) -> None:
    """Turn the flags into the standard variables (a flag wins over the environment)."""
    if getattr(args, "otel_endpoint", None):
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = args.otel_endpoint
    elif getattr(args, "otel", False) and not (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = DEFAULT_ENDPOINT
    if getattr(args, "otel", False) or getattr(args, "otel_endpoint", None):
        os.environ.pop("OTEL_SDK_DISABLED", None)
        if os.environ.get("OTEL_TRACES_EXPORTER", "otlp") != "otlp":
            os.environ["OTEL_TRACES_EXPORTER"] = "otlp"
    if getattr(args, "otel_service", None):
        os.environ["OTEL_SERVICE_NAME"] = args.otel_service
    if getattr(args, "otel_capture_content", False):
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
