"""The page in a real browser (issue 9, Must show): headless Chromium, driven by Playwright, against a daemon
filled by the demo: sign in with the token once, filter the failed runs, open one, find its span tree and
its score. Screenshots are kept as test artefacts (``tmp_path``, and ``$LOUSHO_ARTEFACTS`` when set).

Debian's ``chromium`` package is the browser (``executable_path``); Playwright never downloads one. The
test never skips: without the browser or the ``playwright`` package it fails and says how to install them
(``make test`` does both), so a machine without them cannot pass it by accident.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from lousho.observe.client.process import DaemonProcess, start_daemon

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "browser-s3cret"


@pytest.fixture
def demo_daemon(tmp_path: Path, demo_run) -> Iterator[DaemonProcess]:  # type: ignore[no-untyped-def]
    demo = tmp_path / "demo"
    shutil.copytree(demo_run.dir, demo)  # the daemon opens the store read-write: work on a copy
    agent = demo / "agent"
    # LOUSHO_IMPROVE=off: the registered agent's regression trigger must not start a cycle during the test.
    daemon = start_daemon(demo / "observe.duckdb", "--token", TOKEN, "--agent",
                          f"ledger={agent}:{agent / 'check.py'}", "--recover-store",
                          f"sqlite:///{demo / 'runs.db'}", env={"LOUSHO_IMPROVE": "off"})
    try:
        yield daemon
    finally:
        assert daemon.stop() == 0, "\n".join(daemon.output[-30:])


def _sync_playwright():
    if not CHROMIUM.exists():
        pytest.fail(f"no system Chromium at {CHROMIUM}: install Debian's `chromium` (`make test` does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the `playwright` package is not installed: `pip install -e '.[dev]'` (`make test` does)")
    return sync_playwright


@pytest.mark.system
@pytest.mark.slow
def test_a_browser_filters_failed_runs_opens_one_and_finds_its_span_tree_and_score(
    demo_daemon: DaemonProcess, demo_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
):
    sync_playwright = _sync_playwright()
    monkeypatch.setenv("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    base = demo_daemon.url
    shots = tmp_path / "screenshots"
    requests: list[str] = []
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("request", lambda request: requests.append(request.url))
            page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: problems.append(str(error)))

            # The token once in the address; the daemon drops it from the address and keeps a cookie.
            page.goto(f"{base}/?token={TOKEN}")
            assert page.url == f"{base}/"
            assert page.locator("#runs tbody tr").count() > 0

            # The reference agent's failed runs (the demo's store also holds another agent's).
            page.select_option("#filter-agent", "ledger")
            page.check("#filter-failed")
            page.click("#filter-apply")
            page.wait_for_url("**/?*failed=1*")
            assert "agent=ledger" in page.url
            rows = page.locator("#runs tbody tr")
            assert rows.count() > 0
            for i in range(rows.count()):
                row = rows.nth(i)
                assert row.locator("td.verdict").inner_text() == "fail" or "error" in row.inner_text()
            page.screenshot(path=str(shots / "runs-failed.png"), full_page=True)

            run_id = rows.first.locator("a.run-link").inner_text()
            rows.first.locator("a.run-link").click()
            page.wait_for_url(f"**/runs/{run_id}")
            assert run_id in page.locator("h1").inner_text()
            tree = page.locator("#span-tree")
            assert tree.locator("tr.span").count() >= 2
            assert "invoke_agent ledger" in tree.inner_text() and "chat scripted" in tree.inner_text()
            assert "failed check: sum-correct" in tree.inner_text()
            scores = page.locator("#scores")
            assert "check" in scores.inner_text() and "sum-correct" in scores.inner_text()
            assert scores.locator(".badge.bad").first.inner_text() == "fail"
            page.screenshot(path=str(shots / "run.png"), full_page=True)

            page.click("dl a[href='/agents/ledger']")
            page.wait_for_url("**/agents/ledger")
            assert "chain verifies" in page.locator("#audit-verdict").inner_text()
            # The monitor shows the edit that matters now: the demo's kept fix, not the planted edit it rolled back.
            kept = re.search(r"the harness is back at (\w+) \(the kept edit\)", demo_run.stdout)[1]
            shown = page.locator("#monitor-edit")
            assert shown.get_attribute("data-after") == kept and "the last kept edit" in shown.inner_text()
            assert "keep" in page.locator("#monitor-conclusion").inner_text()
            assert page.locator("#applied-edits li").count() == 2  # the others are listed
            # The pass-rate chart by run: both revisions side by side, no empty stretch between them.
            points = page.eval_on_selector_all(
                "svg.chart circle[data-revision]", "els => els.map(e => [e.dataset.revision, +e.getAttribute('cx')])")
            assert len({revision for revision, _ in points}) >= 2
            xs = sorted(x for _, x in points)
            assert max(b - a for a, b in zip(xs, xs[1:], strict=False)) < 0.1 * (xs[-1] - xs[0]), xs
            page.locator("svg.chart").first.screenshot(path=str(shots / "agent-pass-rate.png"))
            page.screenshot(path=str(shots / "agent-monitor.png"), full_page=True)
            page.locator("#applied-edits a").first.click()  # the first applied edit of the audit log
            page.wait_for_url("**/agents/ledger?edit=*")
            assert page.locator("#monitor-conclusion").count() == 1
            page.screenshot(path=str(shots / "agent.png"), full_page=True)

            page.goto(f"{base}/recovery")
            assert "no provider outage" in page.locator("#outage").inner_text()
            page.screenshot(path=str(shots / "recovery.png"), full_page=True)
        finally:
            browser.close()

    # The CSP held and nothing it blocked was needed; nothing was fetched from anywhere but the daemon.
    assert problems == []
    assert requests and all(url.startswith(base + "/") for url in requests), requests
    for shot in ("runs-failed.png", "run.png", "agent-monitor.png", "agent.png", "recovery.png"):
        assert (shots / shot).stat().st_size > 10_000
    assert (shots / "agent-pass-rate.png").stat().st_size > 5_000
    artefacts = os.environ.get("LOUSHO_ARTEFACTS")
    if artefacts:
        shutil.copytree(shots, Path(artefacts) / "page-browser", dirs_exist_ok=True)
