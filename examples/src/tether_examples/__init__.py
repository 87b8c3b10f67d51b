"""tether's reference scenarios (S1–S4, the research task) and its AgentDojo adapter.

A distribution of its own (``tether-examples``, ``pip install -e examples``), so that the
``tether`` wheel holds the harness only. The scenarios reach the ``tether`` command through the
``tether.scenarios`` entry points (``tether_examples.plugins``); tether never imports this package.
"""
