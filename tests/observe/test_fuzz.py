"""Mutated protobuf and JSON bodies never get a 5xx, and the daemon keeps serving."""

from __future__ import annotations

import pytest
from daemon_support import get, post
from hypothesis import HealthCheck, given, settings
from otlp_mutations import mutated_bytes, mutated_json

# Derandomized: CI must give the same verdict on every run; raise max_examples locally to explore more.
_settings = settings(max_examples=400, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.system
@pytest.mark.slow
@_settings
@given(body=mutated_bytes())
def test_mutated_protobuf_never_gets_a_5xx(shared_daemon, body):
    reply = post(shared_daemon.url, "/v1/traces", body, "application/x-protobuf")
    assert reply.status in (200, 400), reply.body[:200]


@pytest.mark.system
@pytest.mark.slow
@_settings
@given(body=mutated_json())
def test_mutated_json_never_gets_a_5xx(shared_daemon, body):
    reply = post(shared_daemon.url, "/v1/traces", body, "application/json")
    assert reply.status in (200, 400), reply.body[:200]


@pytest.mark.system
def test_daemon_still_healthy_after_fuzzing(shared_daemon):
    assert get(shared_daemon.url, "/healthz").status == 200
