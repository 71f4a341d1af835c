"""The README's example runs as written against `spoold --dev`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from harness import Spoold, wait_for

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs_against_spoold_dev(spoold_bin: str, tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "no python example in README.md"
    example = tmp_path / "example.py"
    example.write_text(blocks[0])
    assert len(blocks[0].strip().splitlines()) <= 13, "the README example should stay short"

    s = Spoold(spoold_bin, tmp_path, None, [])
    s.args = lambda: [spoold_bin, "--dev", "--app-listen", s.addr, "--admin-listen", s.admin]  # type: ignore[method-assign]
    s.start_fresh()
    out = tmp_path / "out.txt"
    try:
        with open(out, "wb") as f:
            app = subprocess.Popen([sys.executable, str(example)], stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "SPOOL_ADDR": s.addr})
        try:
            wait_for(lambda: "got hello (attempt 1)" in out.read_text(), 20, "the example's handler printing the message")
            app.send_signal(signal.SIGTERM)
            assert app.wait(timeout=20) == 0, out.read_text()
        finally:
            app.kill()
    finally:
        s.kill()
