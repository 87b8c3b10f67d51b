"""Host-side authority: proposal intake, policy rules, trusted context."""

from tether.policy.intake import MAX_PROPOSAL_BYTES, parse_arguments
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
from tether.policy.trusted import Catalog, DictCatalog, Permissions, TrustedContext

__all__ = [
    "MAX_PROPOSAL_BYTES",
    "Allowlist",
    "Catalog",
    "Decision",
    "DictCatalog",
    "EffectApproval",
    "Egress",
    "Permissions",
    "Policy",
    "ProposedCall",
    "Rule",
    "TargetOwnership",
    "TrustedContext",
    "destination_of",
    "parse_arguments",
]
