"""Runs the real `assistant` entry point in a subprocess against a data dir."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_cli(*args: str, data_dir: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ASSISTANT_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1"}
    env.pop("ASSISTANT_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "assistant.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
