"""Whether the standard OTEL_* variables ask for trace export is decided in one place
(``agents._build._otel_wanted``, issue 23): the OpenTelemetry rules a user sets are obeyed."""

from __future__ import annotations

import pytest

from tether.agents._build import _otel_wanted
from tether.errors import ConfigError

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}


def test_an_endpoint_or_an_otlp_exporter_asks_for_export() -> None:
    assert _otel_wanted(ENDPOINT)
    assert _otel_wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})
    assert _otel_wanted({"OTEL_TRACES_EXPORTER": "otlp"})
    assert _otel_wanted({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    assert not _otel_wanted({})
    assert not _otel_wanted({"OTEL_SERVICE_NAME": "notes-agent"})


@pytest.mark.parametrize(
    "off",
    [
        {"OTEL_SDK_DISABLED": "true"},
        {"OTEL_SDK_DISABLED": " TRUE "},
        {"OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_TRACES_EXPORTER": "console"},
    ],
)
def test_the_sdk_switched_off_or_another_exporter_named_exports_nothing(off: dict[str, str]) -> None:
    assert not _otel_wanted({**ENDPOINT, **off})


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"])
def test_a_protocol_tether_does_not_speak_is_a_config_error(variable: str) -> None:
    with pytest.raises(ConfigError, match="grpc"):
        _otel_wanted({**ENDPOINT, variable: "grpc"})
