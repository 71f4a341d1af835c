"""The path a user takes: the wheel and sdist built by the documented command
(`python -m build sdk/python`), the wheel installed into a fresh venv outside
the repository, a producer and a worker run from there against a real spoold.
The sdist is built into a wheel outside the tree too, with no checkout near it."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

from conftest import orders_config
from harness import REPO

SDK = REPO / "sdk" / "python"
VERSION = (REPO / "VERSION").read_text().strip()

PRODUCER = textwrap.dedent(
    """
    import asyncio, sys, spool

    async def main() -> None:
        n = int(sys.argv[1])
        async with spool.connect() as client:
            half = n // 2
            for i in range(half):
                await client.publish("orders", f"m{i}", key=f"k{i % 3}", id=f"m{i}")
            async with client.publisher("orders") as p:
                futures = [await p.publish(f"m{i}", key=f"k{i % 3}", id=f"m{i}") for i in range(half, n)]
                for f in futures:
                    await f
        print("published", n, flush=True)

    asyncio.run(main())
    """
)

WORKER = textwrap.dedent(
    """
    import asyncio, sys, spool

    async def main() -> None:
        n = int(sys.argv[1])
        seen: set[str] = set()
        async with spool.connect() as client:
            async with client.subscription("workers", ["orders"], concurrency=4) as sub:
                async for m in sub:
                    print(m.id, m.attempt, flush=True)
                    m.ack()
                    seen.add(m.id)
                    if len(seen) == n:
                        break
        print("worker done", flush=True)

    asyncio.run(main())
    """
)


def run(args: list[str | Path], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    p = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{args} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def test_wheel_and_sdist_install_outside_the_repository(start_spoold, tmp_path: Path) -> None:
    scratch = tmp_path
    assert not scratch.resolve().is_relative_to(REPO), "the scratch project must be outside the repository"
    dist = scratch / "dist"
    run([sys.executable, "-m", "build", "--outdir", dist, SDK], cwd=scratch)
    wheel = dist / f"spoolmq-{VERSION}-py3-none-any.whl"
    sdist = dist / f"spoolmq-{VERSION}.tar.gz"
    assert wheel.exists() and sdist.exists(), sorted(p.name for p in dist.iterdir())

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    for stub in ("spool/v1/subscriber_pb2.py", "spool/v1/subscriber_pb2_grpc.py", "spool/v1/publisher_pb2.pyi", "spool/_version.py"):
        assert stub in names, f"{stub} missing from the wheel"
    with tarfile.open(sdist) as t:
        names = set(t.getnames())
    for f in ("VERSION", "proto/spool/v1/subscriber.proto", "proto/spool/v1/message.proto", "setup.py"):
        assert f"spoolmq-{VERSION}/{f}" in names, f"{f} missing from the sdist"

    # The sdist builds a wheel by itself: unpacked where no checkout is near.
    with tarfile.open(sdist) as t:
        t.extractall(scratch / "unpacked", filter="data")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check", "-w", scratch / "fromsdist", scratch / "unpacked" / f"spoolmq-{VERSION}"], cwd=scratch)
    assert (scratch / "fromsdist" / wheel.name).exists()

    venv = scratch / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=scratch)
    py = venv / "bin" / "python"
    run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel], cwd=scratch)
    where = run([py, "-c", "import spool; print(spool.__file__); print(spool.__version__)"], cwd=scratch).split()
    assert where[0].startswith(str(venv)), where
    assert where[1] == VERSION

    spoold = start_spoold(orders_config())
    (scratch / "producer.py").write_text(PRODUCER)
    (scratch / "worker.py").write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"SPOOL_ADDR": spoold.addr}
    n = 20
    assert f"published {n}" in run([py, "producer.py", str(n)], cwd=scratch, env=env, timeout=60)
    out = run([py, "worker.py", str(n)], cwd=scratch, env=env, timeout=60).splitlines()
    assert out[-1] == "worker done", out
    got = sorted(line.split()[0] for line in out[:-1])
    assert got == sorted(f"m{i}" for i in range(n)), out
