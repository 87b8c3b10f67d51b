"""The ``tether`` command: argument parsing (``_main``) and one module per subcommand
(``_commands``). It only calls the API."""

from tether.cli._main import build_parser, main

__all__: list[str] = ["build_parser", "main"]
