"""What each policy rule name in a decision means: the target of a decision's "rule" link."""

from __future__ import annotations

__all__ = ["RULES"]

RULES: dict[str, str] = {
    "allowlist": "The tool is not on the host's list of allowed tools (or is explicitly denied). "
    "The call never reaches the tool or its server.",
    "tenant_scope": "The call's target (an order, a lead, a record) must exist in the trusted catalog and "
    "belong to the run's tenant; a missing, unknown or foreign target is refused.",
    "egress": "A tool that sends data out must declare its destination argument, and the destination "
    "must be on the egress allowlist.",
    "effect": "A side-effecting tool (write, send, purchase, delete) needs a person's approval before it "
    "runs, unless its effect is listed as automatic.",
    "provenance": "Each argument is traced to where it came from (the user's request, trusted host "
    "context, a labelled tool result, or nowhere). Values from untrusted sources, links from "
    "untrusted text, confidential data leaving, or a side effect anchored to nothing the user "
    "asked for need approval or are refused.",
    "approval": "A proposal a reviewer approved: the stored arguments run, at most once.",
    "policy": "No rule objected: the call was allowed.",
    "harness_tool": "A context tool run by the host itself (to-do list, skills, tool search).",
}
