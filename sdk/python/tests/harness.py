"""Real spoold and redis-server processes for the tests."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Awaitable, Callable

import grpc.aio

from spool.v1 import admin_pb2_grpc

REPO = Path(__file__).resolve().parents[3]


def _port_window() -> tuple[int, int]:
    """The ports [lo, hi) free ports are picked from: below the kernel's
    ephemeral range (Linux: 32768-60999), whose ports any outgoing
    connection may take as its local port. A port from bind(0) is an
    ephemeral one: between the close and spoold's or redis-server's bind,
    a connection on the machine may take it ("address already in use").
    Above the range when there is no room below it."""
    start, end = 32768, 60999
    try:
        start, end = (int(f) for f in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        pass  # not Linux: 32768 is below macOS's range too
    if start - 10000 >= 1000:
        return 10000, start
    if 65536 - (end + 1) >= 1000:
        return end + 1, 65536
    raise AssertionError(f"the ephemeral port range {start}-{end} leaves no room for test servers: narrow it (sysctl net.ipv4.ip_local_port_range)")


def free_ports(n: int) -> list[int]:
    """n distinct ports on 127.0.0.1 that are free now, outside the
    ephemeral range (see _port_window); each is held until all are found."""
    lo, hi = _port_window()
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(200):
            if len(ports) == n:
                return ports
            port = random.randrange(lo, hi)
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            held.append(s)
            ports.append(port)
        if len(ports) == n:
            return ports
        raise AssertionError(f"found {len(ports)} of {n} free ports in {lo}-{hi - 1} on 127.0.0.1")
    finally:
        for s in held:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Polls cond until it holds or timeout seconds pass (for processes)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for: {what}")
        time.sleep(0.02)  # polling interval of a condition wait


async def eventually(cond: Callable[[], bool | Awaitable[bool]], timeout: float, what: str) -> None:
    """Awaits cond until it holds or timeout seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        r = cond()
        if not isinstance(r, bool):
            r = await r
        if r:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for: {what}")
        await asyncio.sleep(0.02)  # polling interval of a condition wait


class Spoold:
    """A spoold process with its own config, data dir and free ports."""

    def __init__(self, binary: str, workdir: Path, config: str, extra_args: list[str] | None = None) -> None:
        self.binary = binary
        self.workdir = workdir
        self.app_port, self.admin_port = free_ports(2)
        self.addr = f"127.0.0.1:{self.app_port}"
        self.admin = f"127.0.0.1:{self.admin_port}"
        self.log_path = workdir / "spoold.log"
        self.cfg_path = workdir / "spool.yaml"
        self.extra_args = extra_args or []
        self.config = config
        self._write_config()
        self.proc: subprocess.Popen[bytes] | None = None
        self._admin_channel: grpc.aio.Channel | None = None

    def _write_config(self) -> None:
        if self.config is not None:
            node = (
                f"node:\n  id: pytest\n  data_dir: {self.workdir / 'data'}\n  app_listen: [\"{self.addr}\"]\n"
                f"  admin_listen: \"{self.admin}\"\n  drain_timeout: 5s\n"
            )
            self.cfg_path.write_text(node + self.config)

    def start_fresh(self) -> None:
        """start, on other free ports if another process took ours meanwhile
        (other test suites on the machine pick free ports too, and may pick
        the same one in the same instant)."""
        for _ in range(3):
            try:
                self.start()
                return
            except AssertionError as e:
                if "address already in use" not in str(e):
                    raise
            self.app_port, self.admin_port = free_ports(2)
            self.addr, self.admin = f"127.0.0.1:{self.app_port}", f"127.0.0.1:{self.admin_port}"
            self._write_config()
        self.start()

    def args(self) -> list[str]:
        return [self.binary, "--config", str(self.cfg_path), *self.extra_args]

    def start(self) -> None:
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args(), stdout=logf, stderr=logf)
        logf.close()
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"spoold exited during start-up with code {proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://{self.admin}/readyz", timeout=1) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_for(ready, 20, "spoold ready")

    def stop(self) -> None:
        """SIGTERM and a graceful exit (code 0)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=20)
        assert code == 0, f"spoold exited with code {code} after SIGTERM:\n{self.log_tail()}"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def admin_stub(self) -> admin_pb2_grpc.AdminServiceStub:
        if self._admin_channel is None:
            self._admin_channel = grpc.aio.insecure_channel(self.admin)
        return admin_pb2_grpc.AdminServiceStub(self._admin_channel)


class Redis:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def pong() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    return s.recv(16).startswith(b"+PONG")
            except OSError:
                return False

        wait_for(pong, 10, "redis-server answering")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def build_spoold(out: Path) -> str:
    env_bin = os.environ.get("SPOOLD_BIN")
    if env_bin:
        return env_bin
    binary = out / "spoold"
    subprocess.run(["go", "build", "-o", str(binary), "./cmd/spoold"], cwd=REPO, check=True)
    return str(binary)
