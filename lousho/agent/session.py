"""Sessions: a conversation whose transcript persists; each turn is a durable run of kind ``turn``.

Turn n of session S is run ``S.turn-<n>``. While a turn is unfinished (interrupted, or waiting for
a person) the session refuses the next one: resume it or discard it first, so two turns never
interleave in one transcript. A finished turn's messages become the transcript in the same step
that clears the pending mark (an optimistic write: a concurrent writer gets SessionConflict).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lousho.agent.errors import RunPending
from lousho.agent.loop import Agent, RunOptions, RunResult
from lousho.recover import durable
from lousho.recover.store import Session as SessionRecord
from lousho.recover.store import StoredRun


class Session:
    def __init__(self, agent: Agent, session_id: str) -> None:
        self.agent = agent
        self.id = session_id

    @property
    def record(self) -> SessionRecord:
        found = self.agent.store.get_session(self.id)
        return found or SessionRecord(self.id, self.agent.directory.name, [], 0, None, 0)

    def transcript(self) -> list[dict[str, Any]]:
        return list(self.record.transcript)

    def pending(self) -> StoredRun | None:
        turn = self.record.pending_turn
        return self.agent.store.get_run(turn) if turn else None

    def send(self, text: str, options: RunOptions | None = None) -> RunResult:
        """Run the next turn on the transcript so far plus ``text``."""
        options = options or RunOptions()
        if options.session_id is None:  # the turn's runs carry their session, the unit the monitor clusters by
            options = replace(options, session_id=self.id)
        record = self._settle_finished(self.record)
        if record.pending_turn:
            raise RunPending(f"session {self.id}: turn {record.pending_turn} is unfinished")
        run_id = f"{self.id}.turn-{record.turns + 1}"
        record = self.agent.store.save_session(replace(record, turns=record.turns + 1, pending_turn=run_id))
        payload = {"messages": [*record.transcript, {"role": "user", "content": text}], "text": text,
                   "agent_dir": str(self.agent.directory.path), "options": options.to_dict(), "setup": {},
                   "session": self.id}
        run = durable.start(self.agent.store, run_id, self.agent.directory.name, "turn", payload)
        return self._commit(record, self.agent.run_turn(run))

    def resume(self) -> RunResult:
        """Finish the pending turn from its last checkpoint."""
        record = self.record
        if not record.pending_turn:
            raise RunPending(f"session {self.id} has no pending turn", hint="send the next turn instead")
        run = self.agent.store.get_run(record.pending_turn)
        if run is not None and run.status == "finished":  # finished elsewhere (the recover loop): commit it
            self._settle_finished(record)
            output = run.output if isinstance(run.output, dict) else {}
            return RunResult(run.id, output.get("text"), output.get("finish_reason", "stop"),
                             len(self.agent.store.load_steps(run.id)),
                             messages=tuple(output.get("messages", [])))
        return self._commit(record, self.agent.resume(record.pending_turn))

    def _settle_finished(self, record: SessionRecord) -> SessionRecord:
        """``record`` with its pending turn committed if that turn's run finished without this class seeing it.

        The recover loop resumes a turn interrupted by a crash like any run, but only a Session writes the
        transcript: without this, a turn the loop finished blocked the session for good (``send`` said it was
        unfinished, ``resume`` that it was not resumable) and discarding it lost its messages."""
        if not record.pending_turn:
            return record
        run = self.agent.store.get_run(record.pending_turn)
        if run is None or run.status != "finished":
            return record
        messages = (run.output or {}).get("messages", []) if isinstance(run.output, dict) else []
        return self.agent.store.save_session(replace(record, transcript=messages, pending_turn=None))

    def discard_pending(self) -> None:
        """Give up on the pending turn: its run is stopped and the transcript stays as it was."""
        record = self.record
        if not record.pending_turn:
            return
        run = self.agent.store.get_run(record.pending_turn)
        if run is not None and run.status not in ("finished", "stopped"):
            self.agent.store.update_run(run.id, status="stopped",
                                        last_error={"message": "discarded by the session",
                                                    "code": "LOUSHO_SESSION_TURN_DISCARDED", "category": None,
                                                    "retryable": False})
        self.agent.store.save_session(replace(record, pending_turn=None))

    def _commit(self, record: SessionRecord, result: RunResult) -> RunResult:
        if result.finish_reason not in ("stop", "max-steps"):
            return result  # still pending (awaiting a person) or stopped: the transcript is unchanged
        run = self.agent.store.get_run(result.run_id)
        messages = (run.output or {}).get("messages", []) if run is not None else []
        latest = self.agent.store.get_session(self.id) or record
        self.agent.store.save_session(replace(latest, transcript=messages, pending_turn=None))
        return result
