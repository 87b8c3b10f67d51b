"""``review`` and ``approve`` a configured server: what a person sees before pinning. A flagged
tool, or one whose name cannot be namespaced safely, is left unpinned unless accepted by name.
"""

from __future__ import annotations

import contextlib
import copy
import getpass
import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.errors import ApprovalError, TetherError, ToolError
from tether.mcp._config import McpConfig
from tether.mcp._hosting import build_source
from tether.mcp._pinning import PinStore, ToolCheck, bad_tool_name
from tether.mcp._shown import hide_secrets

if TYPE_CHECKING:
    from tether.mcp._review import Finding

__all__ = ["ServerReview", "ToolReview", "approve_server", "review_server"]


@dataclass(frozen=True)
class ToolReview:
    check: ToolCheck
    findings: list[Finding]

    @property
    def flagged(self) -> bool:
        return bool(self.findings)

    def to_json(self) -> dict[str, Any]:
        c = self.check
        return {
            "tool": c.tool,
            "status": c.status,
            "why": c.why,
            "sha256": c.sha256,
            "pinned_sha256": c.pinned_sha256,
            "definition": c.definition,
            "findings": [{"kind": f.kind, "where": f.where, "detail": f.detail} for f in self.findings],
        }


@dataclass(frozen=True)
class ServerReview:
    server: str
    launch: dict[str, Any]
    tools: list[ToolReview] = field(default_factory=list)
    instructions: str | None = None  # the server's own instructions: shown here, never sent to a model
    instruction_findings: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. running unconfined
    protocol: str | None = None
    invalid: dict[str, str] = field(default_factory=dict)  # listed tools left out as invalid -> why
    unused: tuple[str, ...] = ()  # what the server declares that no run uses (prompts, resources, …)

    def summary(self) -> list[str]:
        """One screen about the server: what runs, how confined, what is flagged and why."""
        launch = self.launch
        where = launch.get("command") or launch.get("url")
        lines = [f"server {self.server} ({launch.get('transport')}, protocol {self.protocol}): {where}"]
        if launch.get("transport") == "stdio":
            if launch.get("confined"):
                rw = ", ".join(launch.get("read_write") or []) or "nothing"
                net = {
                    "any": "the host's network, loopback included (network: any: no allowlist)",
                    "allowlist": "network only to "
                    + ", ".join(launch.get("network_allow") or [])
                    + ", through the host's proxy",
                }.get(str(launch.get("network")), "no network")
                reads = len(launch.get("read_only") or [])
                lines.append(
                    f"  sandbox: confined, {launch.get('launcher')} launcher (reads {reads} paths besides "
                    f"the system's; writes: {rw}; {net})"
                )
                lines += [f"  withheld from it: {w}" for w in launch.get("withheld") or []]
            else:
                lines.append(f"  sandbox: {launch.get('sandbox', 'none')}, NOT confined")
        lines += [f"  WARNING: {w}" for w in self.warnings]
        by_status = Counter(t.check.status for t in self.tools)
        counts = ", ".join(f"{n} {status}" for status, n in sorted(by_status.items())) or "none"
        lines.append(f"  tools: {len(self.tools)} listed ({counts})")
        if self.unused:
            lines.append(
                f"  also declared, never used by tether (no run sees them): {', '.join(self.unused)}"
            )
        for t in self.tools:
            if t.flagged:
                lines.append(f"  FLAGGED {t.check.tool}: {', '.join(sorted({f.kind for f in t.findings}))}")
        for name, why in self.invalid.items():
            lines.append(f"  INVALID {name}: {why}: never offered (the server's other tools are)")
        if self.instructions:
            kinds = ", ".join(sorted({f.kind for f in self.instruction_findings})) or "nothing flagged"
            size = len(self.instructions)
            lines.append(f"  instructions ({size} characters, never sent to the model): {kinds}")
        clean = [t.check.tool for t in self.tools if not t.flagged]
        lines.append(f"  unflagged: {', '.join(clean) or 'none'}")
        return lines

    @property
    def digest(self) -> str:
        """One sha256 over every listed tool's digest: what the person reviewed, as a whole."""
        listing = sorted((t.check.tool, t.check.sha256) for t in self.tools)
        return hashlib.sha256(json.dumps(listing).encode("utf-8")).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "launch": self.launch,
            "review_digest": self.digest,
            "protocol": self.protocol,
            "warnings": list(self.warnings),
            "instructions": self.instructions,
            "instruction_findings": [
                {"kind": f.kind, "where": f.where, "detail": f.detail} for f in self.instruction_findings
            ],
            "tools": [t.to_json() for t in self.tools],
            "invalid_tools": dict(self.invalid),
            "unused_features": list(self.unused),
            "summary": self.summary(),
        }


async def review_server(config: McpConfig, name: str, *, pins: Any = None) -> ServerReview:
    """Connect to one server and review its tools against ``pins`` (default: the config's pin
    file). Raises ``ConfigError``, ``DependencyUnavailable`` (a failed start says the server's last
    stderr lines, its credentials in them hidden: ``_secrets_hidden``)."""
    server = config.server(name)
    with _pins_for(config, pins) as pins:
        source, secrets = build_source(server, config, pins=pins)
        try:
            await source.start()
            checks = await source.refresh()
        except TetherError as err:  # a failed start quotes the server's stderr: for a person
            raise _secrets_hidden(err, secrets) from None
        finally:
            await source.close()
        from tether.mcp._review import Finding, ToolNames, main_script, scan_definition, scan_text, strings

        elsewhere = [
            (s.name, tool) for s in config.servers if s.name != name for tool in await pins.pins(s.name)
        ]
        # Other servers' tools, namespaced and plain (its own are siblings: only calling one is flagged).
        others = {f"{server}__{tool}" for server, tool in elsewhere} | {tool for _, tool in elsewhere}
        names = ToolNames(others, [c.tool for c in checks])  # built once: a listing may be huge
        script = main_script(text for c in checks for _, text in strings(c.definition, ""))
        reviews = []
        for c in checks:
            findings = scan_definition(c.definition, names, script=script)
            if (bad := bad_tool_name(c.tool)) is not None:
                findings.insert(0, Finding(c.tool, "tool_reference", "name", bad))
            reviews.append(ToolReview(c, findings))
        instructions = source.instructions or None
        found = (
            scan_text("(instructions)", "instructions", instructions, names, script=script)
            if instructions
            else []
        )
        return ServerReview(
            name,
            source.describe(),
            reviews,
            instructions=instructions,
            instruction_findings=found,
            warnings=list(source.warnings),
            protocol=source.protocol_version,
            invalid=dict(source.listing.invalid),
            unused=source.unused,
        )


@contextlib.contextmanager
def _pins_for(config: McpConfig, pins: Any) -> Iterator[Any]:
    """``pins``, or else the config's pin file, opened for the block and closed after it."""
    if pins is not None:
        yield pins
        return
    with contextlib.closing(PinStore(config.path(config.host.pins))) as own:
        yield own


def _secrets_hidden(err: TetherError, secrets: set[str]) -> TetherError:
    """``err`` as a reviewer (the console's admin, the audit log) is shown it: the server's own
    credentials and the config's expanded ones hidden (``hide_secrets``), the same error class."""
    text = hide_secrets(str(err), secrets)
    hint = getattr(err, "hint", None)
    shown_hint = hide_secrets(hint, secrets) if isinstance(hint, str) else hint
    if text == str(err) and shown_hint == hint:
        return err
    shown = copy.copy(err)
    shown.args = (text,)
    if isinstance(shown, ToolError):
        shown.message, shown.hint = text, shown_hint
    return shown


async def approve_server(
    config: McpConfig,
    name: str,
    *,
    actor: str | None = None,
    accept_flagged: set[str] | frozenset[str] = frozenset(),
    only: set[str] | None = None,
    expect: str | None = None,
    pins: Any = None,
) -> tuple[ServerReview, list[str], dict[str, str]]:
    """Pin the server's current definitions: (review, pinned tools, skipped tool → why).
    ``expect``: the digest the person reviewed; anything else listed now pins nothing
    (``ApprovalError``)."""
    review = await review_server(config, name, pins=pins)
    if expect is not None and review.digest != expect:
        raise ApprovalError(
            "listing_changed",
            f"server {name} lists different tools than the reviewed ones (digest {review.digest[:12]}…, "
            f"expected {expect[:12]}…): review again",
        )
    actor = actor or getpass.getuser()
    to_pin: list[ToolCheck] = []
    skipped: dict[str, str] = {}
    allowed = config.server(name).tools
    skipped.update(review.invalid)
    for tr in review.tools:
        tool = tr.check.tool
        if (only is not None and tool not in only) or tool in review.invalid:
            continue
        if allowed is not None and tool not in allowed:
            skipped[tool] = "not in the config's tools for this server (never offered)"
        elif (bad := bad_tool_name(tool)) is not None:
            skipped[tool] = bad
        elif tr.check.why == "listed more than once":
            skipped[tool] = tr.check.why
        elif tr.flagged and tool not in accept_flagged:
            kinds = sorted({f.kind for f in tr.findings})
            skipped[tool] = "flagged (" + ", ".join(kinds) + "): accept it by name to pin it"
        elif tr.check.status != "pinned":
            to_pin.append(tr.check)
    with _pins_for(config, pins) as pins:
        source, _ = build_source(config.server(name), config, pins=None)
        pinned: list[str] = await pins.approve(name, to_pin, endpoint=source.endpoint(), actor=actor)
    return review, pinned, skipped
