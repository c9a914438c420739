"""One engine replica as a Ray actor: it owns one `detllm serve` process on its node.

Ray places the actor (CPU cores or a GPU per replica, on any node of the cluster) and keeps
its lifecycle; the data path does not go through Ray: the router speaks HTTP to the process
directly. Because the actor owns a real process, killing that process (its pid is reported) is
a real crash, which the router must survive (docs/ray.md, "Failover").
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from typing import List, Optional

from .fingerprint import fetch_identity


def _find_binary(binary: Optional[str]) -> str:
    path = binary or os.environ.get("DETLLM_BIN") or "detllm"
    return path


class ServeProcess:
    """A `detllm serve` child: started on a free port, its stderr kept (last lines)."""

    def __init__(self, binary: Optional[str], serve_args: List[str], host: str,
                 api_key: Optional[str], env: Optional[dict] = None):
        self.binary = _find_binary(binary)
        self.serve_args = list(serve_args)
        self.host = host
        self.api_key = api_key
        self.env = env
        self.proc: Optional[subprocess.Popen] = None
        self.port: Optional[int] = None
        self.log: List[str] = []

    def start(self, timeout: float = 300.0) -> str:
        args = [self.binary, "serve", "--host", self.host, "--port", "0", *self.serve_args]
        if self.api_key:
            args += ["--api-key", self.api_key]
        env = dict(os.environ)
        env.update(self.env or {})
        try:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         text=True, encoding="utf-8", errors="backslashreplace",
                                         env=env, start_new_session=True)
        except FileNotFoundError:
            raise RuntimeError(f"the detllm binary {self.binary!r} was not found on this node: "
                               f"pass binary=... or set DETLLM_BIN") from None
        ready = threading.Event()
        port = {}

        def reader():
            for line in self.proc.stderr:
                self.log.append(line)
                del self.log[:-200]
                m = re.search(r"listening on http://\S+:(\d+)", line)
                if m and not ready.is_set():
                    port["port"] = int(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=reader, daemon=True).start()
        if not ready.wait(timeout) or "port" not in port:
            self.kill()
            raise RuntimeError("detllm serve did not start:\n" + "".join(self.log[-30:]))
        self.port = port["port"]
        return self.url

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def poll(self) -> Optional[int]:
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout: float = 60.0) -> Optional[int]:
        """SIGTERM: the server drains (its in-flight requests end) and exits."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Replica:
    """The actor's body (wrapped by ray.remote in ReplicaSet; usable without Ray in tests).

    `weight_version` labels the weights it serves: the router puts it on every response, and
    LLMPool.update_weights moves every replica to a new one behind a barrier."""

    def __init__(self, name: str, serve_args: List[str], binary: Optional[str] = None,
                 host: Optional[str] = None, api_key: Optional[str] = None,
                 weight_version: str = "0", env: Optional[dict] = None):
        self.name = name
        self.serve_args = list(serve_args)
        self.binary = binary
        self.host = host or _node_ip()
        self.api_key = api_key
        self.weight_version = weight_version
        self.env = env
        self.process: Optional[ServeProcess] = None

    def start(self) -> dict:
        self.process = ServeProcess(self.binary, self.serve_args, self.host, self.api_key,
                                    self.env)
        self.process.start()
        return self.info()

    def info(self) -> dict:
        ident = fetch_identity(self.process.url, self.api_key)
        return {"name": self.name, "url": self.process.url, "pid": self.process.proc.pid,
                "node": self.host, "weight_version": self.weight_version,
                "identity": ident.__dict__}

    def pid(self) -> int:
        return self.process.proc.pid

    def poll(self) -> Optional[int]:
        return self.process.poll() if self.process else None

    def log(self) -> str:
        return "".join(self.process.log) if self.process else ""

    def restart(self, serve_args: Optional[List[str]] = None,
                weight_version: Optional[str] = None) -> dict:
        """Stops the process (SIGTERM: it drains) and starts it again, e.g. on new weights."""
        if self.process is not None:
            self.process.stop()
        if serve_args is not None:
            self.serve_args = list(serve_args)
        if weight_version is not None:
            self.weight_version = weight_version
        return self.start()

    def set_weight_version(self, weight_version: str) -> None:
        """The label after an in-place weight update (LLMPool.update_weights): the process is
        the same, its weights are the new version's."""
        self.weight_version = weight_version

    def stop(self) -> Optional[int]:
        return self.process.stop() if self.process else None


def _node_ip() -> str:
    try:
        import ray

        if ray.is_initialized():
            ip = ray.util.get_node_ip_address()
            if ip:
                return ip
    except Exception:  # noqa: BLE001  (outside Ray: loopback)
        pass
    return "127.0.0.1"
