"""The public surface of tether, pinned (STYLE habit 12; issue 23, item 4).

A user meets tether through ``tether`` and the public modules below; every other module is an
implementation module (a ``_name`` in its path). Adding a public name or a public module is a
decision: make it here, in the same commit. Each pinned name must resolve, and a name exported
twice (the root and its package) must be the same object.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import tether

PUBLIC_MODULES = ["tether.agents", "tether.chokepoint", "tether.cli", "tether.clisupport",
 "tether.clisupport.approvals_db", "tether.clisupport.output", "tether.clisupport.scenarios",
 "tether.clisupport.telemetry", "tether.console", "tether.context", "tether.core",
 "tether.core.handoff", "tether.core.messages", "tether.core.ratelimit", "tether.core.stop",
 "tether.core.types", "tether.durable", "tether.errors", "tether.evals", "tether.host",
 "tether.mcp", "tether.mcphost", "tether.memory", "tether.models", "tether.policy",
 "tether.runners", "tether.runs", "tether.sql", "tether.stores", "tether.testing", "tether.tools",
 "tether.trace"]

EXPORTS: dict[str, list[str]] = {"tether": ["Agent", "AgentNode", "ApprovalError", "Approvals", "ConfigError",
            "DependencyUnavailable", "DictCatalog", "Effect", "HandoffError", "Host", "Limits",
            "ModelError", "NotFoundError", "Permissions", "Policy", "PolicyError", "ProposalDesk",
            "Reviewer", "RunError", "RunResult", "RunState", "Step", "StopReason", "Target",
            "TetherError", "Tool", "ToolContext", "ToolError", "ToolInputError", "TrustedContext",
            "UpstreamError", "Workflow", "tool"],
 "tether.agents": [],
 "tether.chokepoint": [],
 "tether.cli": ["build_parser", "main"],
 "tether.clisupport.approvals_db": ["EXIT_CODES", "default_db"],
 "tether.clisupport.scenarios": ["GROUP", "INSTALL_HINT", "ScenarioPlugin", "ScenarioUnavailable",
                                 "installed", "resolve", "scenario_with"],
 "tether.clisupport.telemetry": ["add_otel_flags", "apply_otel_flags"],
 "tether.console": ["ConsoleSources", "Principal", "UserStore", "create_app", "deployment_sources",
                    "sqlite_sources"],
 "tether.context": ["COMPRESSED", "CallLimit", "Composed", "Composer", "CompressionConfig",
                    "ContextConfig", "ContextEngine", "ContextIntegrityError", "ContextOverflow",
                    "FrozenStore", "LargeOutputStore", "ModelSummarizer", "Observation",
                    "PrefixMeter", "Skill", "SkillError", "SkillLibrary", "StatusConfig",
                    "Subagent", "SubtaskResult", "TokenAccount", "ToolSearchConfig",
                    "chars_estimator", "check_pairing", "choose_status_strategy",
                    "pairing_problems", "request_bytes", "run_subtask", "wrap_untrusted"],
 "tether.core": [],
 "tether.core.handoff": ["Artifact", "CallCitation", "DoneItem", "EvidenceRef", "HANDOFF_VERSION",
                         "Handoff", "HandoffGrants", "MAX_HANDOFF_BYTES", "artifact_for",
                         "claim_check", "done_from_trace", "evidence_from_trace",
                         "resolve_from_trace", "validate_handoff"],
 "tether.core.messages": ["AssistantMessage", "Message", "SystemMessage", "ToolCall", "ToolMessage",
                          "Usage", "UserMessage", "message_from_wire", "to_wire"],
 "tether.core.ratelimit": ["TokenBucket", "shared_bucket"],
 "tether.core.stop": ["Limits", "RepetitionDetector", "StopReason", "call_signature",
                      "cancel_after"],
 "tether.core.types": ["CallRecord", "Decision", "Effect", "GateOutcome", "Observation",
                       "ProposedCall", "StopReason", "Target", "ToolCall", "ToolContext",
                       "ToolOutput", "ToolSpec", "Trust", "Verdict", "secret_arguments",
                       "wrap_untrusted"],
 "tether.durable": ["APP_VERSION", "DurableClient", "DurableSteps", "QUEUE", "ReplayDiverged",
                    "RunView", "WORKFLOW", "Worker", "WorkerConfig", "register_app", "stores_for"],
 "tether.errors": ["ApprovalError", "ConfigError", "DependencyUnavailable", "HandoffError",
                   "MemoryPolicyError", "ModelError", "NotFoundError", "PolicyError", "RunError",
                   "TetherError", "ToolError", "ToolInputError", "UpstreamError"],
 "tether.evals": ["Case", "CaseFileError", "CaseRun", "CaseSet", "CompareConfig", "Comparison",
                  "EvalScenario", "Execution", "Expectation", "ExpectedCall", "Grade", "Judge",
                  "ModelJudge", "TrajectoryExpectation", "grade_execution", "grade_final_response",
                  "grade_groundedness", "grade_policy_trace", "grade_state", "grade_trajectory",
                  "groundedness", "load_cases", "load_config", "run_comparison"],
 "tether.host": ["GateOutcome", "Host"],
 "tether.mcp": ["Answer", "ConsoleResponder", "ElicitationGate", "McpConfig", "McpServerSource",
                "PinStore", "Responder", "RootsGate", "SamplingGate", "SamplingPrompt",
                "ScriptedResponder", "ServerConfig", "ServerReview", "approve_server",
                "clean_result_text", "load_config", "review_server"],
 "tether.mcphost": ["ScriptStep", "build_host", "resume_pause", "run_question"],
 "tether.memory": ["Confidence", "DEFAULT_MAX_CLAIM_CHARS", "MemoryEvent", "MemoryKind",
                   "MemoryPolicy", "MemoryRecord", "MemoryStore", "ReadResult", "Recalled",
                   "RejectReason", "Rejection", "Sensitivity", "Source", "SqliteMemory",
                   "WriteResult", "WriteStatus", "check_proposal"],
 "tether.models": ["AnthropicMessages", "FallbackModel", "Model", "ModelRequest", "ModelResponse",
                   "OpenAICompatible", "OpenAIResponses", "Price", "RetryPolicy"],
 "tether.policy": ["ALL_TENANTS", "Allowlist", "ApprovalStore", "Approvals", "ArgumentRule",
                   "Catalog", "Decision", "DictCatalog", "EffectApproval", "EffectOutcome",
                   "Egress", "LedgerStatus", "MAX_DEPTH", "MAX_PROPOSAL_BYTES",
                   "MemoryApprovalStore", "Permissions", "Policy", "Proposal", "ProposalStatus",
                   "ProposedCall", "ProvenanceIndex", "ProvenancePolicy", "ProvenanceRules",
                   "Review", "Reviewer", "Rule", "SourceTrust", "SqliteApprovalStore",
                   "StoredProposal", "TargetOwnership", "ToolRules", "TrustConfig",
                   "TrustedContext", "check_arguments", "content_hash", "destination_of",
                   "idempotency_key", "make_labeler", "parse_arguments", "parse_envelope",
                   "parse_json", "propose"],
 "tether.runners": [],
 "tether.runs": ["Agent", "RunResult", "RunState"],
 "tether.sql": [],
 "tether.stores": ["Stores", "open_stores"],
 "tether.testing": ["FunctionModel", "ModelFunction", "ScriptedModel", "Turn", "call",
                    "estimate_tokens", "final", "injected_calls", "tool_results"],
 "tether.tools": ["Effect", "LocalTools", "Target", "Tool", "ToolContext", "ToolOptions",
                  "ToolOutput", "ToolSource", "ToolSpec", "render_result", "tool",
                  "unwrap_exception_group"],
 "tether.trace": ["EventKind", "JsonlSink", "MemorySink", "Redactor", "TraceEvent", "TraceSink",
                  "Tracer", "read_trace", "sanitize", "sanitize_value"]}

def _public_modules() -> set[str]:
    found = set()
    for info in pkgutil.walk_packages(tether.__path__, "tether."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.add(info.name)
    return found


def test_every_public_module_is_pinned() -> None:
    assert _public_modules() == set(PUBLIC_MODULES)


def test_root_exports_are_pinned_and_listed_by_dir() -> None:
    assert sorted(tether.__all__) == EXPORTS["tether"]
    assert len(set(tether.__all__)) == len(tether.__all__)
    assert dir(tether) == sorted(tether.__all__)
    with pytest.raises(AttributeError):
        tether.NoSuchName  # noqa: B018


@pytest.mark.parametrize("module", sorted(EXPORTS))
def test_exports_are_pinned_and_resolve(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(getattr(mod, "__all__", []))
    assert sorted(names) == EXPORTS[module]
    assert len(set(names)) == len(names), f"{module}.__all__ lists a name twice"
    for name in names:
        assert getattr(mod, name) is not None


def test_a_name_exported_twice_is_one_object() -> None:
    for module in sorted(EXPORTS):
        if module == "tether":
            continue
        mod = importlib.import_module(module)
        for name in set(mod.__all__) & set(tether.__all__):
            assert getattr(mod, name) is getattr(tether, name), f"{module}.{name} is not tether.{name}"
