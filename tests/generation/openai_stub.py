"""A local OpenAI-compatible stub server for tests, in a thread (`Stub`) or as its own process
(`python openai_stub.py --log FILE`, started and stopped by PID with `StubProcess`).

`Stub(reply)` answers every POST from a script `reply(body, path) -> (status, payload, headers)`
and records the bodies. Run as a process it answers with `deterministic_reply`: completions
that are a pure function of (prompt, seed, choice index, max_tokens), as a server honouring
per-request seeds does, so two such servers give the same samples and a sharded run's fresh
samples equal an unsharded run's. It prints `port <n>` once listening and appends one JSON line
per request ({"prompt", "n", "seed"}) to its log, so tests count what an engine asked for
across processes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

Reply = Callable[[dict, str], tuple[int, Any, dict]]


class Stub:
    """A local HTTP server answering POSTs from a script: `reply(body, path) -> (status, payload, headers)`."""

    def __init__(self, reply: Reply, log: Path | None = None):
        self.reply, self.bodies, self.headers, self.log = reply, [], [], log
        self.lock, self.in_flight, self.most_in_flight = threading.Lock(), 0, 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub.lock:
                    stub.bodies.append(body)
                    stub.headers.append(dict(self.headers))
                    stub.in_flight += 1
                    stub.most_in_flight = max(stub.most_in_flight, stub.in_flight)
                    if stub.log is not None:
                        with stub.log.open("a") as f:
                            f.write(json.dumps({k: body.get(k) for k in ("prompt", "n", "seed")}) + "\n")
                try:
                    status, payload, headers = stub.reply(body, self.path)
                finally:
                    with stub.lock:
                        stub.in_flight -= 1
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def deterministic_text(prompt: str, seed: int, i: int) -> str:
    """Choice i of a request with `seed`: a think block in think mode, then an answer whose
    length varies (so a small max_tokens truncates some)."""
    tag = hashlib.blake2b(f"{prompt}|{seed}|{i}".encode(), digest_size=4).hexdigest()
    answer = f"The answer is \\boxed{{{int(tag, 16) % 7}}}" + " ok" * (int(tag, 16) % 9)
    if " /no_think<|im_end|>" in prompt.rsplit("<|im_start|>user", 1)[-1]:
        return answer
    return f"<think>{tag}</think>{answer}"


def deterministic_reply(body: dict, path: str) -> tuple[int, Any, dict]:
    """A completions answer: `n` deterministic choices, one character per token."""
    seed, limit = int(body.get("seed", 0)), int(body.get("max_tokens", 16))
    choices = []
    for i in range(int(body.get("n", 1))):
        text = deterministic_text(body["prompt"], seed, i)
        finish = "stop" if len(text) <= limit else "length"
        choices.append({"index": i, "text": text[:limit], "finish_reason": finish})
    return 200, {"choices": choices}, {}


class StubProcess:
    """`openai_stub.py` in its own process: `.url`, `.pid`, `.requests()`; stopped by PID on exit."""

    def __init__(self, log: Path):
        self.log = log
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--log", str(log)],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"the stub server did not start (said {line!r})")
        self.pid = self.proc.pid
        self.url = f"http://127.0.0.1:{int(line.split()[1])}/v1"

    def requests(self) -> list[dict]:
        """Every request received so far ({"prompt", "n", "seed"} per line of the log)."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # SIGKILL to its own PID: nothing to flush (the log is written per request)
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> "StubProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    stub = Stub(deterministic_reply, log=args.log)
    print(f"port {stub.port}", flush=True)
    stub.server.serve_forever()


if __name__ == "__main__":
    main()
