"""The reference scenarios as the ``tether`` command sees them (entry points ``tether.scenarios``).

Parts are ``module:attribute`` strings: nothing below is imported until its command runs.
"""

from __future__ import annotations

from tether.clisupport.scenarios import ScenarioPlugin

_PKG = "tether_examples.scenarios"

# S1: the maintenance-order lab, its comparison case set, its agent, and the MCP demo.
MAINTENANCE = ScenarioPlugin(
    demos={"mcp": f"{_PKG}.maintenance.mcp_demo:main"},
    lab=f"{_PKG}.maintenance.lab",
    compare=f"{_PKG}.maintenance.evals:MaintenanceScenario",
    run=f"{_PKG}.maintenance.lab",
)
# S2: approvals on drafted e-mails to leads.
LEADS = ScenarioPlugin(demos={"leads": f"{_PKG}.leads.demo:main"})
# S3: claims triage on untrusted inbound e-mail.
CLAIMS = ScenarioPlugin(demos={"claims": f"{_PKG}.claims.demo:main"})
# S4: a tool's contract changing under the agent.
CONTRACT = ScenarioPlugin(demos={"contract": f"{_PKG}.contract.demo:main"})
