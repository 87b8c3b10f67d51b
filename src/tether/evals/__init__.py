"""Evals (SPEC E1–E5): case sets, graders, the workflow-versus-agent comparison, reports."""

from tether.evals._cases import (
    Case,
    CaseFileError,
    CaseSet,
    Expectation,
    ExpectedCall,
    TrajectoryExpectation,
    load_cases,
)
from tether.evals._compare import Comparison, run_comparison
from tether.evals._config import CompareConfig, load_config
from tether.evals._graders import (
    Grade,
    Judge,
    ModelJudge,
    grade_final_response,
    grade_groundedness,
    grade_policy_trace,
    grade_state,
    grade_trajectory,
    groundedness,
)
from tether.evals._runner import CaseRun, EvalScenario, Execution, grade_execution

__all__ = [
    "Case",
    "CaseFileError",
    "CaseRun",
    "CaseSet",
    "CompareConfig",
    "Comparison",
    "EvalScenario",
    "Execution",
    "Expectation",
    "ExpectedCall",
    "Grade",
    "Judge",
    "ModelJudge",
    "TrajectoryExpectation",
    "grade_execution",
    "grade_final_response",
    "grade_groundedness",
    "grade_policy_trace",
    "grade_state",
    "grade_trajectory",
    "groundedness",
    "load_cases",
    "load_config",
    "run_comparison",
]
