"""The run scope (the one owner of a run's start, pause, stop and result) and the runners
that drive a run through it: the agent loop, workflows, plan-then-execute, the desk."""

__all__: list[str] = []
