"""Reading a configuration file a person wrote: TOML (``.toml``) or YAML (anything else)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

from tether.errors import ConfigError

__all__ = ["read_config_file"]


def read_config_file(path: Path, what: str, *, raw: bytes | None = None) -> tuple[bytes, str, Any]:
    """The bytes (``raw``: read before), the text and the parsed data of the file ``what`` names
    (``agent file``, ``MCP config``). Raises ``ConfigError``: unreadable, not UTF-8, or not
    valid TOML/YAML."""
    try:
        raw = path.read_bytes() if raw is None else raw
        text = raw.decode("utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read {what} {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    toml = path.suffix.lower() == ".toml"
    try:
        data = tomllib.loads(text) if toml else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: not valid {'TOML' if toml else 'YAML'}: {err}") from None
    return raw, text, data
