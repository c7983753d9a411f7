"""A child process for the recover tests: runs durable code against a store URL and can kill itself mid-step.

Usage (each prints one JSON line on success):
  child_run.py run URL RUN_ID LEDGER STEPS [--kill in-fn|before-commit|after-commit --kill-step K]
      start or resume RUN_ID; step i appends "RUN_ID i" to LEDGER (the side effect) and returns {"i": i};
      at step K the process SIGKILLs itself inside fn after the effect (in-fn), inside the checkpoint
      transaction before COMMIT (before-commit) or right after COMMIT, before save_step returns (after-commit).
  child_run.py write URL RUN_ID COUNT        start RUN_ID and record COUNT steps, then finish it
  child_run.py resolve URL GO_FILE ID...     print "ready"; once GO_FILE exists, resolve each approval in order
  child_run.py stale URL RUN_ID GO_FILE      start RUN_ID, record step 0, print "ready", wait for GO_FILE, try
                                             step 1 inside `except Exception`; exit 3 on LeaseLost, 4 if swallowed
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from lousho.recover import ApprovalNotFound, LeaseLost, open_store, resume, start


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} never appeared")
        time.sleep(0.001)


def cmd_run(args: argparse.Namespace) -> None:
    armed = {"on": False}

    def fault(point: str) -> None:
        if armed["on"] and point == f"save_step:{args.kill.replace('-', '_')}":
            _die()

    store = open_store(args.url, fault=fault)
    run = resume(store, args.run_id) if store.get_run(args.run_id) else start(
        store, args.run_id, "child", "send", {"steps": args.steps})
    with run:
        outputs = []
        for i in range(args.steps):

            def effect(i: int = i) -> dict[str, int]:
                with open(args.ledger, "a") as ledger:
                    ledger.write(f"{args.run_id} {i}\n")
                if i == args.kill_step:
                    if args.kill == "in-fn":
                        _die()
                    armed["on"] = True
                return {"i": i}

            outputs.append(run.step(f"effect-{i}", effect))
        run.finish(outputs)
    print(json.dumps({"finished": args.run_id, "attempts": run.attempts}))


def cmd_write(args: argparse.Namespace) -> None:
    store = open_store(args.url)
    with start(store, args.run_id, "child", "send", {}) as run:
        for i in range(args.count):
            run.step("write", lambda i=i: {"i": i, "pid": os.getpid()})
        run.finish({"count": args.count})
    print(json.dumps({"finished": args.run_id}))


def cmd_resolve(args: argparse.Namespace) -> None:
    store = open_store(args.url)
    print("ready", flush=True)
    _wait_for(Path(args.go))
    won = []
    for approval_id in args.ids:
        try:
            store.resolve_approval(approval_id, approved=True)
            won.append(approval_id)
        except ApprovalNotFound:
            pass
    print(json.dumps({"won": won}))


def cmd_stale(args: argparse.Namespace) -> None:
    store = open_store(args.url)
    run = start(store, args.run_id, "child", "send", {})
    run.step("first", lambda: 1)
    print("ready", flush=True)
    _wait_for(Path(args.go))
    try:
        try:
            run.step("second", lambda: 2)
        except Exception:  # what careless agent code does: must not stop LeaseLost
            print("swallowed", flush=True)
            sys.exit(4)
    except LeaseLost as e:
        print(json.dumps({"lease_lost": e.code, "epoch": e.epoch, "current": e.current}), flush=True)
        sys.exit(3)
    sys.exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run")
    p.add_argument("url")
    p.add_argument("run_id")
    p.add_argument("ledger")
    p.add_argument("steps", type=int)
    p.add_argument("--kill", choices=["in-fn", "before-commit", "after-commit"])
    p.add_argument("--kill-step", type=int, default=-1)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("write")
    p.add_argument("url")
    p.add_argument("run_id")
    p.add_argument("count", type=int)
    p.set_defaults(fn=cmd_write)
    p = sub.add_parser("resolve")
    p.add_argument("url")
    p.add_argument("go")
    p.add_argument("ids", nargs="+")
    p.set_defaults(fn=cmd_resolve)
    p = sub.add_parser("stale")
    p.add_argument("url")
    p.add_argument("run_id")
    p.add_argument("go")
    p.set_defaults(fn=cmd_stale)
    args = parser.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
