from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Iterator

import pytest

from harness import Redis, Spoold, build_spoold


@pytest.fixture(scope="session")
def spoold_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_spoold(tmp_path_factory.mktemp("bin"))


@pytest.fixture
def start_spoold(spoold_bin: str, tmp_path: Path) -> Iterator[Callable[..., Spoold]]:
    started: list[Spoold] = []

    def start(config: str, extra_args: list[str] | None = None) -> Spoold:
        d = tmp_path / f"spoold{len(started)}"
        d.mkdir()
        s = Spoold(spoold_bin, d, config, extra_args)
        started.append(s)
        s.start_fresh()
        return s

    yield start
    for s in started:
        s.kill()


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[Redis]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed: run `make deps` (scripts/ensure-deps.sh)")
    r = Redis(tmp_path)
    yield r
    r.kill()


def orders_config(*, visibility: str = "10s", ordering: str = "key", max_attempts: int = 5, redis: str = "", partitions: int = 4) -> str:
    ledger = f"redis:\n  addrs: [\"{redis}\"]\n" if redis else ""
    return ledger + f"""
topics:
  - name: orders
    partitions: {partitions}
subscriptions:
  - topic: orders
    group: workers
    max_attempts: {max_attempts}
    visibility_timeout: {visibility}
    ordering: {ordering}
    backoff: {{base: 20ms, max: 200ms, multiplier: 2}}
"""
