"""AgentDojo as an external yardstick: its suites run through tether's host offline.

Needs the optional extra ``tether[agentdojo]``. See ``bench/agentdojo.py``.
"""
