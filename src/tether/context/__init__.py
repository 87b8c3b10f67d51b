"""What the model sees: request composition, status bar, compression, skills, tool search,
untrusted-data labelling and the prefix-stability meter (SPEC C1-C7)."""

from tether.context._composer import Composer
from tether.context._compression import COMPRESSED, CompressionConfig, ContextOverflow, ModelSummarizer
from tether.context._engine import Composed, ContextConfig, ContextEngine
from tether.context._meter import PrefixMeter, request_bytes
from tether.context._pairing import ContextIntegrityError, check_pairing, pairing_problems
from tether.context._skills import Skill, SkillError, SkillLibrary
from tether.context._status import CallLimit, StatusConfig, choose_status_strategy
from tether.context._store import FrozenStore, LargeOutputStore
from tether.context._subagent import Subagent, SubtaskResult, run_subtask
from tether.context._tokens import TokenAccount, chars_estimator
from tether.context._toolsearch import ToolSearchConfig
from tether.context._untrusted import Observation, wrap_untrusted

__all__ = [
    "COMPRESSED",
    "CallLimit",
    "Composed",
    "Composer",
    "CompressionConfig",
    "ContextConfig",
    "ContextEngine",
    "ContextIntegrityError",
    "ContextOverflow",
    "FrozenStore",
    "LargeOutputStore",
    "ModelSummarizer",
    "Observation",
    "PrefixMeter",
    "Skill",
    "SkillError",
    "SkillLibrary",
    "StatusConfig",
    "Subagent",
    "SubtaskResult",
    "TokenAccount",
    "ToolSearchConfig",
    "chars_estimator",
    "check_pairing",
    "choose_status_strategy",
    "pairing_problems",
    "request_bytes",
    "run_subtask",
    "wrap_untrusted",
]
