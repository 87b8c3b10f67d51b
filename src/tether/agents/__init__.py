"""Agents declared in files (``tether run --agent agent.yaml``) and the record that
rebuilds a paused run's agent in another process."""

__all__: list[str] = []
