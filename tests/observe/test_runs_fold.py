"""The kept runs are folded on a thread of their own, off the ack path: once the writer idles with a tail worth
folding, once the tail passes its bound or is a few seconds old, at close and at the next open; a commit never
waits for a fold."""

from __future__ import annotations

import random
import time

import pytest
from daemon_support import metric, post, sql
from otlp_bodies import chat_span, new_ids, request
from runs_data import assert_kept_tables_match_the_view, assert_runs_match_the_view, in_requests, random_store, unfolded

from lousho.observe.client.process import start_daemon
from lousho.observe.decode.otlp_decode import Decoded
from lousho.observe.runs.runs_fold import RunsFold
from lousho.observe.store.span_store import SpanStore


def _poll(check, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the deadline"
        time.sleep(0.02)


def _commit(store: SpanStore, fold: RunsFold, part: Decoded, pause: float = 0.0) -> None:
    """Append ``part`` and tell the fold, as the store's own commit does."""
    store.append([part])
    fold.committed(part.span_count)
    time.sleep(pause)


def test_each_commit_gets_the_next_commit_seq_and_it_survives_a_restart(tmp_path):
    spans, scores = random_store(3, traces=6)
    requests = in_requests(random.Random(3), spans, scores, count=3)
    path = tmp_path / "s.duckdb"
    store = SpanStore(path, fold_thread=False)
    store.append([requests[0]])
    store.append([requests[1]])
    store.close()
    store = SpanStore(path, fold_thread=False)
    store.append([requests[2]])
    con = store.reader()
    assert con.execute("SELECT DISTINCT commit_seq FROM spans ORDER BY 1").fetchall() == [(1,), (2,), (3,)]
    assert con.execute("SELECT watermark FROM runs_fold").fetchall() == [(2,)]  # the reopen folded 1 and 2
    store.close()


def test_the_fold_thread_folds_once_the_writer_idles(tmp_path):
    spans, scores = random_store(5)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    # A tail of any size is worth folding here, and none is old enough to be folded for its age.
    fold = RunsFold(store.reader(), small_tail_spans=1, tail_wait_seconds=3600)
    fold.start()
    try:
        con = store.reader()
        for part in in_requests(random.Random(5), spans, scores, count=4):
            _commit(store, fold, part)
        _poll(lambda: unfolded(con) == 0)
        assert_kept_tables_match_the_view(con)
        assert_runs_match_the_view(con)
    finally:
        fold.stop()
    store.close()


def test_a_small_tail_is_folded_when_it_is_old_not_at_every_idle_moment(tmp_path):
    """A fold costs about 0.17 s however few spans it takes: an agent exporting each span as it ends would
    otherwise have one after every span."""
    spans, scores = random_store(6, traces=4)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    fold = RunsFold(store.reader(), idle_seconds=0.01, small_tail_spans=len(spans) + 1, tail_wait_seconds=1.0)
    fold.start()
    try:
        con = store.reader()
        committed = time.monotonic()
        for part in in_requests(random.Random(6), spans, scores, count=3):
            _commit(store, fold, part)
        time.sleep(0.5)  # idle fifty times over
        assert fold.folds == 0
        assert_runs_match_the_view(con)  # the tail is in every answer meanwhile
        _poll(lambda: fold.folds == 1)
        assert time.monotonic() - committed >= 1.0 and unfolded(con) == 0
        assert_kept_tables_match_the_view(con)
    finally:
        fold.stop()
    store.close()


def test_a_trickle_that_never_idles_is_folded_once_its_tail_is_old(tmp_path):
    spans, scores = random_store(8, traces=30)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    # Never idle long enough, never a tail past the load bounds: only the tail's age folds it.
    fold = RunsFold(store.reader(), idle_seconds=3600, tail_spans=10**9, max_tail_spans=10**9,
                    tail_wait_seconds=0.3)
    fold.start()
    try:
        con = store.reader()
        for part in in_requests(random.Random(8), spans, scores, count=20):
            _commit(store, fold, part, pause=0.05)
        assert fold.folds >= 1  # within the second of commits
        assert_runs_match_the_view(con)
    finally:
        fold.stop()
    store.close()


def test_a_fold_that_fails_is_retried_later_and_later_not_in_a_loop(tmp_path, caplog):
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    broken = store.reader()
    broken.close()  # every fold on it fails
    fold = RunsFold(broken, idle_seconds=0.05, tail_wait_seconds=0.05, max_tail_spans=1)
    fold.start()
    try:
        fold.committed(10)  # past every bound at once
        time.sleep(1.0)
    finally:
        fold.stop()
    store.close()
    failures = [r for r in caplog.records if r.getMessage() == "folding the kept runs failed"]
    # 0.1, 0.2, 0.4 s apart: at most about four tries in the second, where a loop makes thousands.
    assert 1 <= len(failures) <= 5, len(failures)


def test_the_fold_thread_folds_a_tail_past_its_bound_without_waiting_for_idle(tmp_path):
    spans, scores = random_store(7)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    fold = RunsFold(store.reader(), tail_spans=len(spans) // 2, idle_seconds=3600)
    fold.start()
    try:
        con = store.reader()
        requests = in_requests(random.Random(7), spans, scores, count=6)
        for part in requests:
            _commit(store, fold, part)
        # Past the bound: folded although commits never paused for the (hour-long) idle time.
        _poll(lambda: fold.folds >= 1)
        assert unfolded(con) < len(spans) // 2
        assert_runs_match_the_view(con)
    finally:
        fold.stop()
    store.close()


def test_under_load_the_fold_rests_after_a_fold_and_lets_the_tail_grow_up_to_its_hard_bound(tmp_path):
    """Past ``tail_spans`` the thread waits out its rest (``rest_ratio`` times its last fold) while commits go on,
    the tail growing instead; past ``max_tail_spans`` it folds at once. ``runs`` stays exact throughout."""
    spans, scores = random_store(13, traces=120)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    requests = in_requests(random.Random(13), spans, scores, count=8)
    bound = len(spans) // 8
    # Any fold takes milliseconds: a rest of 10,000 times that outlasts the test.
    fold = RunsFold(store.reader(), tail_spans=bound, max_tail_spans=len(spans) // 2, rest_ratio=10_000,
                    idle_seconds=3600)
    fold.start()
    try:
        con = store.reader()
        pending = 0

        def commit(part) -> None:
            nonlocal pending
            store.append([part])
            fold.committed(part.span_count)
            pending += part.span_count

        for part in requests:
            commit(part)
            if pending >= bound:
                break
        _poll(lambda: fold.folds == 1)  # the first fold: nothing to rest from
        pending = unfolded(con)
        rest = iter(requests[requests.index(part) + 1:])
        while pending < len(spans) // 2:
            assert fold.folds == 1, "folded again before its rest ended, below the hard bound"
            assert_runs_match_the_view(con)
            commit(next(rest))
            time.sleep(0.05)  # time for a fold that is (wrongly) due to start
        _poll(lambda: fold.folds == 2)  # past the hard bound: at once, rest or not
        assert_runs_match_the_view(con)
    finally:
        fold.stop()
    store.close()


def test_the_store_folds_everything_at_close(tmp_path):
    spans, scores = random_store(9)
    path = tmp_path / "s.duckdb"
    store = SpanStore(path, fold_thread=False)
    store.append(in_requests(random.Random(9), spans, scores, count=3))
    assert unfolded(store.reader()) == len(spans)
    store.close()
    store = SpanStore(path, verify=False, fold_thread=False)
    con = store.reader()
    assert_kept_tables_match_the_view(con)
    store.close()


@pytest.mark.system
@pytest.mark.slow
def test_the_daemon_folds_committed_spans_by_itself_and_runs_answers_throughout(tmp_path):
    daemon = start_daemon(tmp_path / "o.duckdb")
    try:
        trace_id, root_id = new_ids()
        root = chat_span(trace_id, root_id, **{"lousho.run.id": "folded-run"})
        assert post(daemon.url, "/v1/traces", request([root]).SerializeToString(), "application/x-protobuf"
                    ).status == 200
        # a 200 means the run is there, folded or not
        assert sql(daemon.url, "SELECT run_id, model_calls FROM runs") == [{"run_id": "folded-run", "model_calls": 1}]
        _poll(lambda: sql(daemon.url, "SELECT count(*) AS n FROM kept_runs") == [{"n": 1}])
        # each a request of its own: their parent is not a model span (one nested in another is the same call)
        step_id = new_ids()[1]
        children = [chat_span(trace_id, new_ids()[1], parent=step_id) for _ in range(3)]
        assert post(daemon.url, "/v1/traces", request(children).SerializeToString(), "application/x-protobuf"
                    ).status == 200
        assert sql(daemon.url, "SELECT run_id, model_calls FROM runs") == [{"run_id": "folded-run", "model_calls": 4}]
        _poll(lambda: sql(daemon.url, "SELECT model_calls FROM kept_runs") == [{"model_calls": 4}])
        assert sql(daemon.url, "SELECT count(*) AS n FROM spans WHERE commit_seq > "
                               "(SELECT watermark FROM runs_fold)") == [{"n": 0}]
        # /metrics says what the fold did: every span folded, in at least two folds, nothing left in the tail.
        assert metric(daemon.url, "lousho_folds_total") >= 2 and metric(daemon.url, "lousho_fold_seconds_sum") > 0
        assert metric(daemon.url, "lousho_fold_spans_total") == 4
        assert metric(daemon.url, "lousho_fold_tail_spans") == 0
        # A trickle, each span a request of its own as an agent exporting spans as they end sends them: folded
        # once its tail is two seconds old (runs_fold.TAIL_WAIT_SECONDS), not after each request.
        folds = metric(daemon.url, "lousho_folds_total")
        for _ in range(10):
            span = chat_span(*new_ids(), **{"lousho.run.id": "trickled-run"})
            assert post(daemon.url, "/v1/traces", request([span]).SerializeToString(), "application/x-protobuf"
                        ).status == 200
            time.sleep(0.15)
        _poll(lambda: sql(daemon.url, "SELECT count(*) AS n FROM spans WHERE commit_seq > "
                                      "(SELECT watermark FROM runs_fold)") == [{"n": 0}])
        assert metric(daemon.url, "lousho_folds_total") - folds <= 2
        assert sql(daemon.url, "SELECT model_calls FROM kept_runs WHERE run_id = 'trickled-run'") == [
            {"model_calls": 10}]
    finally:
        assert daemon.stop() == 0


def test_a_checkpoint_does_not_wait_behind_a_fold(tmp_path):
    """The writer checkpoints when idle, as the fold runs: it skips that checkpoint rather than hold up
    the next commit for the fold's whole transaction (DuckDB refuses a CHECKPOINT beside it anyway)."""
    spans, scores = random_store(13, traces=10)
    store = SpanStore(tmp_path / "s.duckdb", fold_thread=False)
    store.append(in_requests(random.Random(13), spans, scores, count=2))
    with store._fold.lock:  # a fold under way
        started = time.monotonic()
        store.checkpoint()
        assert time.monotonic() - started < 1.0
    store.checkpoint()  # and with no fold under way, it checkpoints
    store.close()
