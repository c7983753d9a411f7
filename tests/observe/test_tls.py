"""--tls-cert/--tls-key: HTTPS and gRPC over TLS with a self-signed certificate; clients trust it
with --ca-cert (the OTel exporters with their own options)."""

from __future__ import annotations

import http.client
import ssl
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from coded_errors import assert_coded, start_fails
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from lousho.observe import tls_dates
from lousho.observe.client.process import DaemonProcess, start_daemon
from lousho.observe.client.store_client import DaemonClient
from lousho.observe.errors import TlsExpired, TlsNotYetValid


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1, and its key."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


def _certificate_for(folder: Path, days: int) -> tuple[Path, Path]:
    """A self-signed certificate whose notAfter is ``days`` from now (negative: already past)."""
    cert, key, request = folder / "cert.pem", folder / "key.pem", folder / "request.pem"
    subprocess.run(["/usr/bin/openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(request), "-subj", "/CN=localhost"], check=True, capture_output=True)
    subprocess.run(["/usr/bin/openssl", "x509", "-req", "-in", str(request), "-signkey", str(key),
                    "-days", str(days), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@pytest.fixture(scope="module")
def tls_daemon(tmp_path_factory, certificate) -> Iterator[DaemonProcess]:
    cert, key = certificate
    process = start_daemon(tmp_path_factory.mktemp("tlsd") / "o.duckdb",
                           "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        yield process
    finally:
        assert process.stop() == 0, "\n".join(process.output[-30:])


def _export_one(exporter, service: str) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}):
        pass
    provider.shutdown()


def _count(daemon: DaemonProcess, cert: Path, service: str) -> int:
    client = DaemonClient(daemon.url, ca_cert=cert)
    frame = client.sql("SELECT count(*) AS n FROM spans WHERE service_name = ?", [service])
    return int(frame["n"][0])


@pytest.mark.system
def test_the_ready_line_says_https(tls_daemon):
    assert tls_daemon.url.startswith("https://127.0.0.1:")


@pytest.mark.system
def test_the_otel_http_exporter_exports_over_tls(tls_daemon, certificate, monkeypatch):
    cert, _ = certificate
    # requests lets these variables override a session's CA file (psf/requests#3829), which is
    # how the exporter passes certificate_file; a machine that sets them would test the wrong CA.
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    _export_one(HttpExporter(endpoint=f"{tls_daemon.url}/v1/traces", certificate_file=str(cert)), "tls-http")
    assert _count(tls_daemon, cert, "tls-http") == 1


@pytest.mark.system
def test_the_otel_grpc_exporter_exports_over_tls(tls_daemon, certificate):
    cert, _ = certificate
    assert tls_daemon.grpc_target is not None
    credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    _export_one(GrpcExporter(endpoint=tls_daemon.grpc_target, insecure=False, credentials=credentials,
                             timeout=10), "tls-grpc")
    assert _count(tls_daemon, cert, "tls-grpc") == 1


@pytest.mark.system
def test_a_plain_http_client_cannot_talk_to_it(tls_daemon):
    parts = urllib.parse.urlsplit(tls_daemon.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            conn.request("GET", "/healthz")
            conn.getresponse()
    finally:
        conn.close()


def _lousho(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "lousho", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.system
def test_lousho_sql_over_https_trusts_the_ca_cert(tls_daemon, certificate):
    cert, _ = certificate
    done = _lousho("sql", "--url", tls_daemon.url, "--ca-cert", str(cert), "--json", "SELECT 41 + 1 AS n")
    assert done.returncode == 0, done.stderr
    assert '"n":42' in done.stdout.replace(" ", "")
    by_env = _lousho("sql", "--url", tls_daemon.url, "--json", "SELECT 1 AS n", env={"LOUSHO_CA_CERT": str(cert)})
    assert by_env.returncode == 0, by_env.stderr
    untrusted = _lousho("sql", "--url", tls_daemon.url, "SELECT 1")
    assert untrusted.returncode == 1
    assert "LOUSHO_OBSERVE_UNREACHABLE" in untrusted.stdout + untrusted.stderr


@pytest.mark.system
def test_a_tls_cert_without_its_key_is_a_usage_error(tmp_path, certificate):
    cert, _ = certificate
    done = _lousho("observe", "--db", str(tmp_path / "o.duckdb"), "--port", "0", "--grpc-port", "-1",
                   "--tls-cert", str(cert))
    assert done.returncode == 2
    assert "LOUSHO_OBSERVE_TLS_INCOMPLETE" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "o.duckdb").exists()


@pytest.mark.system
def test_an_unreadable_certificate_or_a_key_of_another_is_a_usage_error(tmp_path, certificate):
    cert, _ = certificate
    for key in (tmp_path / "missing.pem", cert):
        done = _lousho("observe", "--db", str(tmp_path / "o.duckdb"), "--port", "0", "--grpc-port", "-1",
                       "--tls-cert", str(cert), "--tls-key", str(key))
        assert done.returncode == 2, done.stdout + done.stderr
        assert "LOUSHO_OBSERVE_TLS_FILES" in done.stdout + done.stderr
        assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "o.duckdb").exists()


@pytest.mark.system
def test_an_expired_certificate_is_refused_at_start_with_a_code(tmp_path):
    cert, key = _certificate_for(tmp_path, days=-1)
    result = start_fails(tmp_path / "o.duckdb", "--tls-cert", str(cert), "--tls-key", str(key))
    assert_coded(result, "LOUSHO_OBSERVE_TLS_EXPIRED", "renew the certificate", exit_code=2)
    assert str(cert) in result.stderr
    assert not (tmp_path / "o.duckdb").exists()


def test_a_certificate_is_checked_against_both_of_its_dates(tmp_path):
    cert, _ = _certificate_for(tmp_path, days=30)
    dates = tls_dates.check(cert)
    assert 29.9 < dates.days_left() <= 30
    assert tls_dates.expiry_warning(cert, dates) is None
    with pytest.raises(TlsNotYetValid):
        tls_dates.check(cert, now=dates.not_before - 60)
    with pytest.raises(TlsExpired):
        tls_dates.check(cert, now=dates.not_after)


@pytest.mark.system
def test_a_certificate_near_its_end_warns_at_start_and_metrics_show_its_days_left(tls_daemon, certificate):
    cert, _ = certificate  # valid for 2 days: within the 14 days that warn
    assert any(line.startswith("warning LOUSHO_OBSERVE_TLS_EXPIRING") and str(cert) in line
               for line in tls_daemon.output), tls_daemon.output[:5]
    parts = urllib.parse.urlsplit(tls_daemon.url)
    conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=10,
                                       context=ssl.create_default_context(cafile=str(cert)))
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    days = [float(line.split()[1]) for line in text.splitlines() if line.startswith("lousho_tls_cert_expiry_days ")]
    assert len(days) == 1 and 1.9 < days[0] <= 2.0, text
