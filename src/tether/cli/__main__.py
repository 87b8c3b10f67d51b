"""``python -m tether.cli``."""

from tether.cli._main import main

raise SystemExit(main())
