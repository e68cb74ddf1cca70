"""The sandbox, probed once per session, with limits small enough for quick tests."""

from __future__ import annotations

import pytest

from tools.sandbox import Sandbox, SandboxConfig, SandboxLimits

TEST_LIMITS = SandboxLimits(
    wall_seconds=4.0,
    cpu_seconds=2,
    memory_bytes=256 * 2**20,
    processes=16,
    file_bytes=2 * 2**20,
    tmpfs_bytes=8 * 2**20,
    output_bytes=16 * 2**10,
)


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    box = Sandbox(SandboxConfig(limits=TEST_LIMITS))
    reason = box.unavailable_reason()
    if reason is not None:
        pytest.fail(f"the sandbox must work on the test machine (.ci/run installs it): {reason}")
    return box
