"""The validity dates of the daemon's TLS certificate: checked at start, shown in /metrics.

A daemon serving an expired certificate starts without a word, and every verifying client then fails
its handshake; one whose certificate is not yet valid is refused the same way. ``check`` refuses both
before anything is bound, and ``expiry_warning`` says so when the end is near.

The dates are read with CPython's ``ssl._ssl._test_decode_cert``: private by name, but the decoder behind
``SSLSocket.getpeercert`` and stable for years; it saves a dependency (``cryptography`` is not one of ours)
and needs no ``openssl`` binary at run time.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from pathlib import Path

from lousho.observe.errors import TlsExpired, TlsNotYetValid, TlsUnusable

# Warn at start when the certificate ends within this many days.
WARN_DAYS = 14
_DAY_S = 86_400.0


@dataclass(frozen=True)
class CertificateDates:
    """notBefore and notAfter of a certificate, in seconds since the epoch (UTC)."""

    not_before: float
    not_after: float

    def days_left(self, now: float | None = None) -> float:
        return (self.not_after - (time.time() if now is None else now)) / _DAY_S


def read(cert: Path) -> CertificateDates:
    """The dates of the first certificate in the PEM file ``cert`` (the daemon's own, before any chain)."""
    try:
        decoded = ssl._ssl._test_decode_cert(str(cert))  # type: ignore[attr-defined]
        return CertificateDates(ssl.cert_time_to_seconds(decoded["notBefore"]),
                                ssl.cert_time_to_seconds(decoded["notAfter"]))
    except (OSError, ssl.SSLError, KeyError, ValueError) as e:
        raise TlsUnusable(f"cannot read the validity dates of {cert}: {e}") from None


def check(cert: Path, now: float | None = None) -> CertificateDates:
    """The dates of ``cert``; raises TlsExpired or TlsNotYetValid when it is not valid at ``now``."""
    dates = read(cert)
    now = time.time() if now is None else now
    if now >= dates.not_after:
        raise TlsExpired(f"the certificate {cert} expired on {_when(dates.not_after)}")
    if now < dates.not_before:
        raise TlsNotYetValid(f"the certificate {cert} is not valid before {_when(dates.not_before)}")
    return dates


def expiry_warning(cert: Path, dates: CertificateDates, now: float | None = None) -> str | None:
    """A one-line coded warning when ``cert`` ends within WARN_DAYS, else None."""
    days = dates.days_left(now)
    if days >= WARN_DAYS:
        return None
    return (f"warning LOUSHO_OBSERVE_TLS_EXPIRING: the certificate {cert} expires in {days:.1f} days "
            f"({_when(dates.not_after)}); renew it before then, or verifying clients will refuse the daemon")


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))
