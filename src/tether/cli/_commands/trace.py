"""``tether trace stats RUN``: per-run figures from a trace (requests, tokens, prefix reuse)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tether.cli._commands._options import add_actions, add_json
from tether.clisupport.output import fail, outcome
from tether.errors import ConfigError


def register(sub: Any) -> None:
    _, actions = add_actions(sub, "trace", dest="trace_command", help="inspect run traces")
    s = actions.add_parser(
        "stats",
        help="per-run figures: requests, tokens, prefix reuse, compressions",
        description="Figures of one run from its trace. RUN is a run id (looked up in --dir) "
        "or the path of a .jsonl trace. prefix_reuse is the share of the previous request that "
        "is a byte-identical prefix of the next (the cache-hit potential).",
    )
    s.add_argument("run", metavar="RUN")
    folder = Path("tether-output/traces")
    s.add_argument("--dir", type=Path, default=folder, help="trace folder (default ./tether-output/traces)")
    add_json(s)
    s.set_defaults(handler=stats)


def stats(args: argparse.Namespace) -> int:
    from tether.trace._stats import stats_for

    try:
        figures = stats_for(args.run, args.dir)
    except (ConfigError, OSError, ValueError) as err:
        return fail("tether trace stats", err, as_json=args.json)
    return outcome(figures, "\n".join(f"{key}: {value}" for key, value in figures.items()), as_json=args.json)
