"""``make example``: the self-healing loop on an agent lousho did not build, end to end, step by step.

traffic -> a regression -> the daemon's trigger -> a cycle -> proposal -> canary -> applied (auto mode)
-> the monitor keeps it on live runs -> the audit log verifies.

It works on a copy of this directory (``--dir``, emptied first), with ``lousho models serve-scripted``
(policy.py) standing in for the model provider, and runs the agent in processes of its own, as a user would.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "order-desk"


def say(text: str) -> None:
    print(text, flush=True)


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"example: timed out waiting for {what}")
        time.sleep(0.2)


def trigger_log(harness: Path) -> list[dict]:
    path = harness / ".lousho" / "trigger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def audit_actions(harness: Path) -> list[dict]:
    path = harness / ".lousho" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def lousho(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lousho", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(".lousho/example"), help="work directory (emptied)")
    args = parser.parse_args()
    from lousho.models.process import start_scripted
    from lousho.observe.client.process import start_daemon

    work = args.dir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    agent_dir = work / "openai-agent"
    shutil.copytree(HERE, agent_dir, ignore=shutil.ignore_patterns("__pycache__", ".lousho", "outbox.jsonl"))
    harness, check = agent_dir / "harness", agent_dir / "check.py"

    say(f"1. the provider: lousho models serve-scripted --script {agent_dir / 'policy.py'}")
    model = start_scripted(agent_dir / "policy.py")
    # The agent's own SDK reads these; the daemon passes them on to the cycles it starts (their probes run
    # the agent too). The scripted server needs no key; the SDK wants one to be set.
    env = {**os.environ, "OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": "unused", "ORDER_DESK_MODEL": "desk"}
    daemon = None
    try:
        say(f"   at {model.url}")
        revision = lousho("improve", "revision", str(harness), env=env).stdout.strip()
        say(f"2. the harness {harness} is at revision {revision} (lousho improve revision)")
        daemon = start_daemon(work / "observe.duckdb", "--agent", f"{NAME}={harness}:{check}",
                              "--editor-model-url", model.url, "--editor-model", "editor",
                              # 60 runs: the window rule (the default CUSUM waits for a 1,000-run reference)
                              "--trigger", "seed", "--trigger-interval", "0.5", env={**env, "LOUSHO_IMPROVE": "on"})
        env["LOUSHO_URL"] = daemon.url
        say(f"3. lousho observe --agent {NAME}={harness}:{check} --trigger seed --editor-model-url ... on {daemon.url}")

        def traffic(kind: str, runs: int, seed: int) -> None:
            done = subprocess.run([sys.executable, str(agent_dir / "agent.py"), "--observe", daemon.url, "traffic",
                                   "--kind", kind, "--runs", str(runs), "--seed", str(seed)],
                                  capture_output=True, text=True, env=env, timeout=300, cwd=agent_dir)
            if done.returncode != 0:
                raise SystemExit(f"example: the agent failed:\n{done.stderr[-3000:]}")
            say(f"   {done.stdout.strip()}")

        say("4. live traffic: customers write order ids as printed (A-1)")
        traffic("usual", 40, seed=1)
        say("5. a new checkout page: customers write ids in lower case (a-3): the planted regression")
        traffic("new", 20, seed=2)

        wait_for(lambda: any(r["action"] == "started" for r in trigger_log(harness)), "the trigger")
        started = next(r for r in trigger_log(harness) if r["action"] == "started")
        say(f"6. the daemon's trigger: {started['reason']}")
        say(f"   started a cycle (pid {started['pid']}), its log: {started['log']}")
        wait_for(lambda: any(r["action"] == "finished" for r in trigger_log(harness)), "the cycle")
        finished = next(r for r in trigger_log(harness) if r["action"] == "finished")
        say(f"7. the cycle ended: {finished['reason']}")
        for entry in audit_actions(harness):
            if entry["action"] in ("canary", "apply", "guard"):
                detail = {k: v for k, v in entry.items() if k in ("passed", "reason", "before", "after", "proposal")}
                say(f"   audit: {entry['action']}: {json.dumps(detail, sort_keys=True)[:300]}")
        if finished.get("outcome") != "applied":
            raise SystemExit(f"example: the cycle did not apply a fix: {finished['reason']}")
        new_revision = lousho("improve", "revision", str(harness), env=env).stdout.strip()
        say(f"   the harness is now at {new_revision}; instructions.md gained:")
        say("   " + (harness / "instructions.md").read_text().rstrip().splitlines()[-1])

        say("8. live traffic on the new revision (the same lower-case customers)")
        traffic("new", 60, seed=3)
        say("9. the monitor on live runs: lousho improve DIR --check check.py --watch (one tick)")
        tick = lousho("improve", str(harness), "--check", str(check), "--watch", "--ticks", "1", "--interval", "0.1",
                      "--observe", daemon.url, "--agent-name", NAME, "--editor-model-url", model.url,
                      "--editor-model", "editor", env=env)
        say("   " + (tick.stdout.strip() or tick.stderr.strip()))
        if "tick: kept" not in tick.stdout:
            raise SystemExit("example: the monitor did not keep the edit")
        verified = lousho("improve", "audit", str(harness), "--verify", env=env)
        say(f"10. lousho improve audit DIR --verify: {verified.stdout.strip() or verified.stderr.strip()}")
        if verified.returncode != 0:
            raise SystemExit("example: the audit log does not verify")
        say(f"done: the regression healed itself; see {daemon.url}/agents/{NAME}")
    finally:
        if daemon is not None:
            daemon.stop()
        model.stop()


if __name__ == "__main__":
    main()
