"""Host-side authority: proposal intake, policy rules, trusted context, approvals and the effect ledger.

Names are imported on first use: importing one submodule (``tether.policy._trusted``, all a
client such as ``tether submit`` needs) does not load the rules, the desk and the schema engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.core._exports import lazy_exports

if TYPE_CHECKING:
    from tether.policy._approvals import (
        ALL_TENANTS,
        Approvals,
        EffectOutcome,
        Review,
        Reviewer,
        idempotency_key,
    )
    from tether.policy._intake import (
        MAX_DEPTH,
        MAX_PROPOSAL_BYTES,
        Proposal,
        check_arguments,
        content_hash,
        parse_arguments,
        parse_envelope,
        parse_json,
        propose,
    )
    from tether.policy._memory_store import MemoryApprovalStore
    from tether.policy._provenance import ProvenanceIndex
    from tether.policy._provenance_labels import SourceTrust, TrustConfig
    from tether.policy._provenance_rules import (
        ArgumentRule,
        ProvenancePolicy,
        ProvenanceRules,
        ToolRules,
        make_labeler,
    )
    from tether.policy._rules import (
        Allowlist,
        Decision,
        EffectApproval,
        Egress,
        Policy,
        ProposedCall,
        Rule,
        TargetOwnership,
        destination_of,
    )
    from tether.policy._sqlite_store import SqliteApprovalStore
    from tether.policy._store import ApprovalStore, LedgerStatus, ProposalStatus, StoredProposal
    from tether.policy._trusted import Catalog, DictCatalog, Permissions, TrustedContext

__all__ = [
    "ALL_TENANTS",
    "MAX_DEPTH",
    "MAX_PROPOSAL_BYTES",
    "Allowlist",
    "ApprovalStore",
    "Approvals",
    "ArgumentRule",
    "Catalog",
    "Decision",
    "DictCatalog",
    "EffectApproval",
    "EffectOutcome",
    "Egress",
    "LedgerStatus",
    "MemoryApprovalStore",
    "Permissions",
    "Policy",
    "Proposal",
    "ProposalStatus",
    "ProposedCall",
    "ProvenanceIndex",
    "ProvenancePolicy",
    "ProvenanceRules",
    "Review",
    "Reviewer",
    "Rule",
    "SourceTrust",
    "SqliteApprovalStore",
    "StoredProposal",
    "TargetOwnership",
    "ToolRules",
    "TrustConfig",
    "TrustedContext",
    "check_arguments",
    "content_hash",
    "destination_of",
    "idempotency_key",
    "make_labeler",
    "parse_arguments",
    "parse_envelope",
    "parse_json",
    "propose",
]

_WHERE = {
    "ALL_TENANTS": "approvals",
    "Allowlist": "rules",
    "ApprovalStore": "store",
    "Approvals": "approvals",
    "ArgumentRule": "provenance_rules",
    "Catalog": "trusted",
    "Decision": "rules",
    "DictCatalog": "trusted",
    "EffectApproval": "rules",
    "EffectOutcome": "approvals",
    "Egress": "rules",
    "LedgerStatus": "store",
    "MAX_DEPTH": "intake",
    "MAX_PROPOSAL_BYTES": "intake",
    "MemoryApprovalStore": "memory_store",
    "Permissions": "trusted",
    "Policy": "rules",
    "Proposal": "intake",
    "ProposalStatus": "store",
    "ProposedCall": "rules",
    "ProvenanceIndex": "provenance",
    "ProvenancePolicy": "provenance_rules",
    "ProvenanceRules": "provenance_rules",
    "Review": "approvals",
    "Reviewer": "approvals",
    "Rule": "rules",
    "SourceTrust": "provenance_labels",
    "SqliteApprovalStore": "sqlite_store",
    "StoredProposal": "store",
    "TargetOwnership": "rules",
    "ToolRules": "provenance_rules",
    "TrustConfig": "provenance_labels",
    "TrustedContext": "trusted",
    "check_arguments": "intake",
    "content_hash": "intake",
    "destination_of": "rules",
    "idempotency_key": "approvals",
    "make_labeler": "provenance_rules",
    "parse_arguments": "intake",
    "parse_envelope": "intake",
    "parse_json": "intake",
    "propose": "intake",
}


__getattr__, __dir__ = lazy_exports(__name__, {name: f"tether.policy._{mod}" for name, mod in _WHERE.items()})
