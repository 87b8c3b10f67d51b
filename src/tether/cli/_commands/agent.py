"""``tether agent schema``: the agent file's JSON Schema, generated from the models that
validate it (so an editor can check a file as it is written); ``tether agent check FILE``:
validate one file and say what is wrong, by field."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tether.cli._commands._options import add_actions, add_json
from tether.clisupport.output import fail, outcome
from tether.errors import ConfigError


def register(sub: Any) -> None:
    _, verbs = add_actions(
        sub, "agent", dest="verb", metavar="VERB", help="the agent file: its JSON Schema, or check one file"
    )
    schema = verbs.add_parser("schema", help="print the agent file's JSON Schema")
    schema.set_defaults(handler=print_schema)
    check = verbs.add_parser("check", help="validate an agent file (YAML or TOML)")
    check.add_argument("file", type=Path)
    add_json(check)
    check.set_defaults(handler=check_file)


def agent_schema() -> dict[str, Any]:
    """The JSON Schema of an agent file (``AgentSpec``), with a title and a draft."""
    from tether.agents._spec import AgentSpec

    schema = AgentSpec.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "tether agent file", **schema}


def print_schema(args: argparse.Namespace) -> int:
    print(json.dumps(agent_schema(), indent=2, sort_keys=True))
    return 0


def check_file(args: argparse.Namespace) -> int:
    from tether.agents._build import local_tool_names
    from tether.agents._file import load_agent_file
    from tether.agents._models import check_models

    notes: list[str] = []
    try:
        af = load_agent_file(args.file)
        tools = local_tool_names(af)  # imported as a run would: a mistyped path fails here
        check_models(af, absent=notes)  # a stand-in's script parsed, a budget's prices found
    except ConfigError as err:
        return fail("tether agent check", err, as_json=args.json)
    models = [f"{b.provider}:{b.name}" for b in af.spec.model.backends()]
    text = f"{af.path}: valid; models: {', '.join(models)}; tools: {', '.join(tools) or 'none'}"
    text += "".join(f"\nwarning: {note}" for note in notes)
    out = {"file": str(af.path), "models": models, "tools": tools, "sha256": af.sha256, "warnings": notes}
    return outcome(out, text, as_json=args.json)
