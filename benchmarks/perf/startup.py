"""What a daemon's start and a model call cost in CPU: the two costs every agent run and every test repeat.

    .venv/bin/python benchmarks/perf/startup.py [--starts 9] [--calls 300]

- **Daemon start**: ``python -m lousho.observe`` on a new store, until its ready line, then SIGTERM; the time to
  ready and the CPU of the whole process (start, serve nothing, drain, close), median of ``--starts``. Beside
  it, in the same run, a Python process that only imports what the daemon always needs to serve (DuckDB,
  pyarrow, Starlette, uvicorn, gRPC): the floor a start cannot go under without dropping one of them.
- **A model call**: ``ChatClient.complete`` on a 13-message conversation with 5 tools against a local HTTP
  server that answers at once (in this process, so both figures include its CPU), against the openai SDK's
  typed ``chat.completions.create`` of the same body (what ChatClient called before), CPU per call.
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _common import reproduce_command

FLOOR = "import duckdb, pyarrow, starlette.applications, uvicorn, grpc"
ANSWER = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "ok"}}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def daemon_start() -> tuple[float, float]:
    """(seconds to the ready line, CPU seconds of the whole process)."""
    with tempfile.TemporaryDirectory() as work:
        before = _children_cpu()
        t0 = time.perf_counter()
        daemon = subprocess.Popen([sys.executable, "-m", "lousho.observe", "--db", str(Path(work) / "o.duckdb"),
                                   "--port", "0", "--grpc-port", "0"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        assert daemon.stdout is not None
        ready = None
        for line in daemon.stdout:
            if "lousho observe ready" in line:
                ready = time.perf_counter() - t0
                break
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
        daemon.stdout.close()
        if ready is None:
            raise SystemExit("the daemon exited before its ready line")
        return ready, _children_cpu() - before


def floor_start() -> float:
    before = _children_cpu()
    subprocess.run([sys.executable, "-c", FLOOR], check=True)
    return _children_cpu() - before


class _Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (the http.server name)
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args: Any) -> None:
        pass


def model_calls(calls: int) -> tuple[float, float]:
    """CPU ms per call: (ChatClient.complete, the SDK's typed create of the same body)."""
    from lousho.models.client import ChatClient, _body

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = ChatClient(f"http://127.0.0.1:{server.server_port}/v1", "m", api_key="k")
    tool = {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the project. " * 3,
        "parameters": {"type": "object", "required": ["path"],
                       "properties": {f"p{i}": {"type": "string", "description": "a path"} for i in range(4)}}}}
    messages = [{"role": "system", "content": "You fix bugs. " * 150}]
    messages += [{"role": "user" if i % 2 else "assistant", "content": "a line of the talk " * 15} for i in range(12)]
    tools = [tool] * 5
    sdk = client._client()
    body = _body("m", messages, tools, {})

    def ours() -> None:
        client.complete(messages, tools)

    def typed() -> None:
        sdk.chat.completions.with_raw_response.create(**body).http_response.json()

    result = []
    for call in (ours, typed):
        for _ in range(20):
            call()
        t0 = time.process_time()
        for _ in range(calls):
            call()
        result.append(1000 * (time.process_time() - t0) / calls)
    server.shutdown()
    return result[0], result[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=9)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    starts = [daemon_start() for _ in range(args.starts)]
    floor = statistics.median(floor_start() for _ in range(args.starts))
    ours, typed = model_calls(args.calls)
    print(f"# {reproduce_command()}")
    print(f"daemon start, median of {args.starts}: ready in {statistics.median(s[0] for s in starts):.2f} s, "
          f"{statistics.median(s[1] for s in starts):.2f} s CPU; importing what it must serve with: {floor:.2f} s CPU")
    print(f"model call, {args.calls} calls: ChatClient.complete {ours:.2f} ms CPU, the SDK's typed create of the "
          f"same body {typed:.2f} ms CPU ({typed / ours:.1f}x)")


if __name__ == "__main__":
    main()
