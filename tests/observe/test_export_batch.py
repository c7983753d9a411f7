"""instrument()'s BatchSpanProcessor: lousho's sizes, each overridden by the OTEL_BSP_* variable a user sets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from lousho.observe import instrument
from lousho.observe.client.export import BATCH_SETTINGS, BatchSettings

ROOT = Path(__file__).resolve().parents[2]
VARIABLES = ("OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_BSP_SCHEDULE_DELAY",
             "OTEL_BSP_EXPORT_TIMEOUT")


def _batch_processor(provider: TracerProvider) -> object:
    """The SDK's queue behind instrument()'s processor; the SDK offers no getter for its sizes."""
    (processor,) = provider._active_span_processor._span_processors
    assert isinstance(processor, BatchSpanProcessor)
    return processor._batch_processor


def _sizes(provider: TracerProvider) -> dict[str, float]:
    inner = _batch_processor(provider)
    return {"max_queue_size": inner._max_queue_size, "max_export_batch_size": inner._max_export_batch_size,
            "schedule_delay_millis": inner._schedule_delay_millis}


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_instrument_sizes_the_queue_for_a_burst_without_any_variable(clean_environment):
    provider = instrument("batch-test", "http://127.0.0.1:9")
    try:
        assert _sizes(provider) == {"max_queue_size": 32_768, "max_export_batch_size": 512,
                                    "schedule_delay_millis": 1_000}
        assert _batch_processor(provider)._queue.maxlen == 32_768
    finally:
        provider.shutdown()


@pytest.mark.parametrize(("variable", "setting", "value"), [
    ("OTEL_BSP_MAX_QUEUE_SIZE", "max_queue_size", 4_096),
    ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "max_export_batch_size", 128),
    ("OTEL_BSP_SCHEDULE_DELAY", "schedule_delay_millis", 250),
])
def test_a_variable_the_user_set_wins_over_lousho_for_its_setting_only(clean_environment, variable, setting, value):
    clean_environment.setenv(variable, str(value))
    provider = instrument("batch-test", "http://127.0.0.1:9")
    try:
        expected = {"max_queue_size": 32_768, "max_export_batch_size": 512, "schedule_delay_millis": 1_000}
        assert _sizes(provider) == {**expected, setting: value}
    finally:
        provider.shutdown()


@pytest.mark.parametrize(("environ", "arguments"), [
    ({}, {"max_queue_size": 32_768, "max_export_batch_size": 512, "schedule_delay_millis": 1_000}),
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "9"}, {"max_queue_size": None, "max_export_batch_size": 512,
                                        "schedule_delay_millis": 1_000}),
    # Set, even to a value the SDK cannot read: the SDK then logs it and uses its own default, as without lousho.
    ({"OTEL_BSP_SCHEDULE_DELAY": "soon"}, {"max_queue_size": 32_768, "max_export_batch_size": 512,
                                          "schedule_delay_millis": None}),
    ({"OTEL_BSP_EXPORT_TIMEOUT": "5"}, {"max_queue_size": 32_768, "max_export_batch_size": 512,
                                        "schedule_delay_millis": 1_000}),
    ({name: "1" for name in VARIABLES}, {"max_queue_size": None, "max_export_batch_size": None,
                                         "schedule_delay_millis": None}),
])
def test_arguments_leave_to_the_sdk_exactly_the_variables_the_environment_sets(environ, arguments):
    assert BatchSettings().arguments(environ) == arguments


def test_the_documented_variables_are_the_helpers_settings():
    """docs/observe.md tells users of a plain SDK setup what to export: the same values instrument() uses."""
    doc = (ROOT / "docs" / "observe.md").read_text()
    exported = dict(re.findall(r"^export (OTEL_BSP_\w+)=(\S+)$", doc, re.MULTILINE))
    assert exported == BATCH_SETTINGS.environment()
