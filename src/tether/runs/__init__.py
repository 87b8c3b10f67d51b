"""What one run is: the agent's configuration, the run's state and result (``Agent``,
``RunState``, ``RunResult``) and its checkpoint."""

from tether.runs._values import Agent, RunResult, RunState

__all__: list[str] = ["Agent", "RunResult", "RunState"]
