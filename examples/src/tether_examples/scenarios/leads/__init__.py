"""Scenario S2: lead-draft tool policy (fictitious tenants and leads; drafts are prepared in memory)."""
