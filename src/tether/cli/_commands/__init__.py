"""Sub-commands of the ``tether`` CLI, one module each (discovered by ``tether.cli``)."""
