"""AgentDojo's tools as a tether ``ToolSource``, with declared effects and trust.

Each suite has a declaration file (``suites/<suite>.yaml``): the effect of every tool, the
trust class and naming fields of every result source, the role and sources of every
argument of every tool with an effect, which curated directory the host supplies and which
identities are the user's own. A suite tool missing from its declaration, or an undeclared
argument of a tool with an effect, is a configuration error: nothing runs undeclared.

Requires the optional extra ``tether[agentdojo]``; this module imports ``agentdojo`` lazily
so ``tether`` itself never depends on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tether.errors import ConfigError, ToolInputError
from tether.policy._provenance_labels import TrustConfig
from tether.policy._provenance_rules import ToolRules, check_declarations, rules_from_dict
from tether.tools._contract import Effect, ToolContext, ToolOutput, ToolSpec

__all__ = ["DIRECTORIES", "SELVES", "AgentDojoTools", "SuiteDeclaration", "load_declaration", "suite_specs"]

SUITES_DIR = Path(__file__).parent / "suites"
_TOP_KEYS = {"suite", "directory", "self", "trust", "tools"}


@dataclass(frozen=True)
class SuiteDeclaration:
    """A suite's reviewed contract: effects, trust per source, rules per argument."""

    suite: str
    directory: str
    own: str
    effects: Mapping[str, Effect]
    trust: TrustConfig
    rules: Mapping[str, ToolRules]


def load_declaration(suite: str, path: Path | None = None) -> SuiteDeclaration:
    """Read ``suites/<suite>.yaml`` (or ``path``). Raises ``ConfigError`` for a malformed file."""
    path = path or SUITES_DIR / f"{suite}.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read declaration {path}: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a declaration is a mapping")
    unknown = {k for k in data if k not in _TOP_KEYS and not str(k).startswith("_")}
    if unknown:
        raise ConfigError(f"{path}: unknown keys {sorted(unknown)}")
    tools = data.get("tools") or {}
    try:
        effects = {name: Effect(spec.get("effect", "")) for name, spec in tools.items()}
        rules = rules_from_dict(tools)
        trust = TrustConfig.from_dict(data.get("trust") or {})
    except (ValueError, AttributeError) as err:
        raise ConfigError(f"{path}: {err}") from None
    directory = str(data.get("directory", "none"))
    if directory not in DIRECTORIES:
        raise ConfigError(f"{path}: unknown directory {directory!r}; known: {sorted(DIRECTORIES)}")
    own = str(data.get("self", "none"))
    if own not in SELVES:
        raise ConfigError(f"{path}: unknown self {own!r}; known: {sorted(SELVES)}")
    return SuiteDeclaration(str(data.get("suite", suite)), directory, own, effects, trust, rules)


# -- curated host context, read from the environment before the run ------------------------
# A directory is what the deployment itself vouches for, never whoever wrote to the user: the
# account and the people it wrote to, the accounts it paid, the workspace's members. Each
# entry vouches for one kind of destination (a mailbox for a mailbox, a channel for a channel),
# so a channel whose name its creator chose (an outsider, maybe) vouches for no link or mailbox.


def _contacts(env: Any) -> dict[str, list[str]]:
    inbox = env.inbox
    mine = inbox.account_email.lower()
    written_to = {
        address
        for mail in inbox.initial_emails
        if mail.sender.lower() == mine
        for address in (*mail.recipients, *mail.cc, *mail.bcc)
    }
    return {"mailbox": [inbox.account_email, *sorted(written_to)]}


def _payees(env: Any) -> dict[str, list[str]]:
    account = env.bank_account
    # Outgoing payments name the account as "me" or by its IBAN.
    paid = [t.recipient for t in account.transactions if t.sender in ("me", account.iban)]
    return {"account": [*paid, *(t.recipient for t in account.scheduled_transactions)]}


def _members(env: Any) -> dict[str, list[str]]:
    return {"member": list(env.slack.users), "channel": list(env.slack.channels)}


def _own_address(env: Any) -> dict[str, list[str]]:
    return {"mailbox": [env.user.email]}


DIRECTORIES: dict[str, Callable[[Any], dict[str, list[str]]]] = {
    "contacts": _contacts,
    "payees": _payees,
    "members": _members,
    "own_address": _own_address,
    "none": lambda env: {},
}

# The user's own identities: records they authored may name things by their words.
SELVES: dict[str, Callable[[Any], list[str]]] = {
    "account": lambda env: ["me", env.bank_account.iban],
    "account_email": lambda env: [env.inbox.account_email],
    "user_email": lambda env: [env.user.email],
    "none": lambda env: [],
}


# -- the tool source -----------------------------------------------------------------------


_SPECS: dict[int, tuple[SuiteDeclaration, tuple[ToolSpec, ...]]] = {}


def suite_specs(
    suite_name: str, declaration: SuiteDeclaration, functions: tuple[Any, ...]
) -> tuple[ToolSpec, ...]:
    """The suite's tools as ``ToolSpec``s with their declared effects. Raises ``ConfigError``
    for a tool without an effect or an argument of a tool with an effect left undeclared."""
    cached = _SPECS.get(id(declaration))
    if cached is not None and cached[0] is declaration:
        return cached[1]
    missing = [f.name for f in functions if f.name not in declaration.effects]
    if missing:
        raise ConfigError(f"suite {suite_name}: tools without a declared effect: {missing}")
    specs: list[ToolSpec] = []
    for f in functions:
        schema = f.parameters.model_json_schema()
        schema.pop("title", None)
        specs.append(
            ToolSpec(
                name=f.name,
                description=f.description,
                parameters=schema,
                effect=declaration.effects[f.name],
                source=suite_name,
                remote_name=f.name,
                max_result_chars=200_000,
            )
        )
    try:
        check_declarations(declaration.rules, specs)
    except ValueError as err:
        raise ConfigError(f"suite {suite_name}: {err}") from None
    _SPECS[id(declaration)] = (declaration, tuple(specs))
    return tuple(specs)


def _jsonable(value: Any) -> Any:
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


class AgentDojoTools:
    """One suite's functions over one environment, as a ``ToolSource``. Calls mutate ``env``
    exactly as AgentDojo's own runtime does, so its utility and security checks apply."""

    def __init__(self, suite: Any, env: Any, declaration: SuiteDeclaration) -> None:
        from agentdojo.functions_runtime import FunctionsRuntime

        self.name = suite.name
        self.suite = suite
        self.env = env
        self.declaration = declaration
        self.runtime = FunctionsRuntime(suite.tools)
        self.executed: list[tuple[str, dict[str, Any]]] = []
        self.call_ids: list[str] = []  # the call id of each executed call, in order
        self.after_call: Callable[[str, str], None] | None = None  # (call id, tool), once it ran

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def list_tools(self) -> list[ToolSpec]:
        return list(suite_specs(self.name, self.declaration, tuple(self.suite.tools)))

    def validate(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        from pydantic import ValidationError

        function = self.runtime.functions.get(name)
        if function is None:
            raise ToolInputError(f"no tool named {name!r}")
        try:
            function.parameters.model_validate(arguments)
        except ValidationError as err:
            raise ToolInputError(
                f"invalid arguments for {name}: {err.errors(include_url=False)[0]['msg']}",
                hint="call again with arguments that match the tool's schema",
            ) from None
        return arguments

    async def call(self, spec: ToolSpec, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        from agentdojo.agent_pipeline.tool_execution import tool_result_to_str

        name = spec.remote_name or spec.name
        result, error = self.runtime.run_function(self.env, name, arguments)
        self.executed.append((name, dict(arguments)))
        self.call_ids.append(context.call_id)
        if self.after_call is not None:
            self.after_call(context.call_id, name)
        if error is not None:
            raise ToolInputError(error)
        return ToolOutput(text=tool_result_to_str(result), data=_jsonable(result))
