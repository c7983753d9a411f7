"""A child process for the store race tests: opens its own store, prints "ready", waits for GO_FILE, then races.

Each prints one JSON line at the end. ``--hold S`` sleeps S seconds at the method's ``before_commit`` fault point,
inside the transaction, so that racers overlap on purpose instead of by luck.

  race_child.py open URL GO                              open (and migrate) the store
  race_child.py create URL GO RUN_ID TAG                 create_run(RUN_ID, input=TAG): {"won": bool}
  race_child.py resolve URL GO DECISION ID...            resolve each approval (approve|deny): {"won": [...]}
  race_child.py save URL GO RUN_ID FIRST STRIDE          save steps FIRST, FIRST+STRIDE, ... at epoch 0 until
                                                         LeaseLost: {"saved": [...], "lost": {epoch, current}}
  race_child.py bump URL GO RUN_ID AFTER                 once RUN_ID has AFTER steps, bump its epoch 0 -> 1
  race_child.py claim URL GO RUN_ID OWNER                claim_run: {"epoch": int or null}
  race_child.py outcome URL GO THRESHOLD                 record one provider failure: {"change": str or null}
  race_child.py probe URL GO OWNER                       reserve_probe: {"reserved": bool}
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lousho.recover import ApprovalNotFound, LeaseLost, RunExists, open_store
from lousho.recover.store import RunStore


def _ready_then_wait(go: str) -> None:
    print("ready", flush=True)
    deadline = time.monotonic() + 30
    while not Path(go).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{go} never appeared")
        time.sleep(0.001)


def _open(args: argparse.Namespace) -> RunStore:
    def fault(point: str) -> None:
        if args.hold and point.endswith(":before_commit") and not point.startswith("migrate"):
            time.sleep(args.hold)

    store = open_store(args.url, fault=fault)
    _ready_then_wait(args.go)
    return store


def cmd_open(args: argparse.Namespace) -> dict[str, Any]:
    _ready_then_wait(args.go)  # the race is the open itself: migrations of an empty schema
    open_store(args.url).close()
    return {"opened": True}


def cmd_create(args: argparse.Namespace) -> dict[str, Any]:
    store = _open(args)
    try:
        store.create_run(args.run_id, agent="racer", kind="send", input=args.tag)
        return {"won": True}
    except RunExists:
        return {"won": False}


def cmd_resolve(args: argparse.Namespace) -> dict[str, Any]:
    store = _open(args)
    won = []
    for approval_id in args.ids:
        try:
            store.resolve_approval(approval_id, approved=args.decision == "approve")
            won.append(approval_id)
        except ApprovalNotFound:
            pass
    return {"won": won}


def cmd_save(args: argparse.Namespace) -> dict[str, Any]:
    store = _open(args)
    saved = []
    step = args.first
    try:
        while True:
            record = store.save_step(args.run_id, step, "race", {"step": step}, epoch=0)
            saved.append([record.step, record.epoch])
            step += args.stride
    except LeaseLost as e:
        return {"saved": saved, "lost": {"epoch": e.epoch, "current": e.current}}


def cmd_bump(args: argparse.Namespace) -> dict[str, Any]:
    store = _open(args)
    while len(store.load_steps(args.run_id)) < args.after:
        time.sleep(0.002)
    return {"epoch": store.bump_epoch(args.run_id, expected=0)}


def cmd_claim(args: argparse.Namespace) -> dict[str, Any]:
    store = _open(args)
    now = datetime.now(UTC)
    run = store.claim_run(args.run_id, owner=args.owner, lease_seconds=60, now=now, orphan_before=now)
    return {"epoch": None if run is None else run.lease_epoch}


def cmd_outcome(args: argparse.Namespace) -> dict[str, Any]:
    store = _open(args)
    now = datetime.now(UTC)
    _, change = store.record_outcome(provider_failure=True, now=now, threshold=args.threshold,
                                     first_probe_at=now + timedelta(seconds=30), error={"code": "LOUSHO_TEST"})
    return {"change": change}


def cmd_probe(args: argparse.Namespace) -> dict[str, Any]:
    store = _open(args)
    now = datetime.now(UTC)
    return {"reserved": store.reserve_probe(owner=args.owner, now=now, expiry=now + timedelta(seconds=60))}


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {
        "open": (cmd_open, []),
        "create": (cmd_create, [("run_id", str), ("tag", str)]),
        "resolve": (cmd_resolve, [("decision", str)]),
        "save": (cmd_save, [("run_id", str), ("first", int), ("stride", int)]),
        "bump": (cmd_bump, [("run_id", str), ("after", int)]),
        "claim": (cmd_claim, [("run_id", str), ("owner", str)]),
        "outcome": (cmd_outcome, [("threshold", int)]),
        "probe": (cmd_probe, [("owner", str)]),
    }
    for name, (fn, positional) in commands.items():
        p = sub.add_parser(name)
        p.add_argument("url")
        p.add_argument("go")
        for arg, kind in positional:
            p.add_argument(arg, type=kind)
        if name == "resolve":
            p.add_argument("ids", nargs="+")
        p.add_argument("--hold", type=float, default=0.0)
        p.set_defaults(fn=fn)
    args = parser.parse_args()
    print(json.dumps(args.fn(args)), flush=True)


if __name__ == "__main__":
    main()
