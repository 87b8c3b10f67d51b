"""Host-side authority: proposal intake, policy rules, trusted context, approvals and the effect ledger."""

from tether.policy.approvals import ALL_TENANTS, Approvals, EffectOutcome, Review, Reviewer, idempotency_key
from tether.policy.intake import (
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
from tether.policy.memory_store import MemoryApprovalStore
from tether.policy.provenance import ProvenanceIndex, SourceTrust, TrustConfig
from tether.policy.provenance_rules import (
    ArgumentRule,
    ProvenancePolicy,
    ProvenanceRules,
    ToolRules,
    make_labeler,
)
from tether.policy.rules import (
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
from tether.policy.sqlite_store import SqliteApprovalStore
from tether.policy.store import ApprovalStore, LedgerStatus, ProposalStatus, StoredProposal
from tether.policy.trusted import Catalog, DictCatalog, Permissions, TrustedContext

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
