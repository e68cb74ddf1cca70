"""Adversarial tests: each attack must fail inside the sandbox and leave the host unchanged."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tools.sandbox import (
    Sandbox,
    SandboxConfig,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailable,
)

REPO = Path(__file__).resolve().parents[2]


def _host_processes_named(comm: str, within: float = 5.0) -> list[int]:
    """Processes named `comm` still alive after `within` seconds. The kernel kills a PID
    namespace's processes when its init exits, but on a busy machine they can take a moment
    to leave /proc: only those still there after the grace period count."""
    deadline = time.monotonic() + within
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if (entry / "comm").read_text().strip() == comm:
                        found.append(int(entry.name))
                except OSError:
                    continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line]


def test_ordinary_code_runs(sandbox: Sandbox) -> None:
    result = sandbox.run_python("import sys\nprint(sum(range(10)))\nprint('é', file=sys.stderr)")
    assert (result.stdout, result.stderr, result.exit_code, result.limit_hit) == (
        "45\n",
        "é\n",
        0,
        None,
    )


def test_exit_status_is_reported(sandbox: Sandbox) -> None:
    result = sandbox.run_python("raise SystemExit(3)")
    assert result.exit_code == 3 and result.limit_hit is None


def test_socket_to_host_loopback_fails(sandbox: Sandbox) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        result = sandbox.run_python(
            "import socket\n"
            "s = socket.socket(); s.settimeout(2)\n"
            f"print(s.connect_ex(('127.0.0.1', {port})))\n"
        )
        assert result.exit_code == 0
        assert int(result.stdout) != 0  # the connection was refused inside
        with pytest.raises(BlockingIOError):
            listener.accept()  # and nothing reached the host's listener
    finally:
        listener.close()


def test_socket_to_outside_address_and_dns_fail(sandbox: Sandbox) -> None:
    result = sandbox.run_python(
        "import errno, socket\n"
        "s = socket.socket(); s.settimeout(2)\n"
        "print(errno.errorcode.get(s.connect_ex(('93.184.216.34', 80)), 'connected'))\n"
        "try:\n"
        "    socket.getaddrinfo('example.com', 80); print('resolved')\n"
        "except OSError as exc:\n"
        "    print('no dns')\n"
        "print(sorted(n for _, n in socket.if_nameindex()))\n"
    )
    assert result.exit_code == 0, result.stderr
    assert _lines(result.stdout) == ["ENETUNREACH", "no dns", "['lo']"]


def test_writes_outside_the_private_tmpfs_fail(sandbox: Sandbox) -> None:
    marker = f"escape-{uuid.uuid4().hex}"
    targets = ["/" + marker, f"/usr/{marker}", f"/dev/{marker}", str(REPO / marker)]
    code = (
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('x'); print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print(type(exc).__name__)\n"
        f"open('/tmp/{marker}', 'w').write('private')\n"
        f"print(open('/tmp/{marker}').read())\n"
    )
    result = sandbox.run_python(code)
    assert result.exit_code == 0, result.stderr
    assert _lines(result.stdout) == [
        "OSError",
        "OSError",
        "OSError",
        "FileNotFoundError",
        "private",
    ]
    for path in [*targets, f"/tmp/{marker}"]:
        assert not Path(path).exists()  # the sandbox's /tmp is not the host's


def test_data_dir_database_and_shadow_are_invisible(sandbox: Sandbox, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "secret_key").write_text("top-secret-signing-key")
    with sqlite3.connect(data / "assistant.db") as db:
        db.execute("CREATE TABLE users (email TEXT)")
        db.execute("INSERT INTO users VALUES ('ceo@example.com')")
    before = sorted((p.name, p.read_bytes()) for p in data.iterdir())
    paths = [
        str(data / "secret_key"),
        str(data / "assistant.db"),
        "/etc/shadow",
        "/etc/passwd",
        str(REPO / "pyproject.toml"),
        str(REPO / ".venv" / "pyvenv.cfg"),
    ]
    code = (
        "import os\n"
        f"for path in {paths!r}:\n"
        "    try:\n"
        "        print(open(path, 'rb').read())\n"
        "    except OSError as exc:\n"
        "        print(type(exc).__name__)\n"
        f"print(os.path.exists({str(tmp_path)!r}), os.path.exists('/etc'))\n"
    )
    result = sandbox.run_python(code)
    assert result.exit_code == 0, result.stderr
    assert _lines(result.stdout) == ["FileNotFoundError"] * len(paths) + ["False False"]
    assert sorted((p.name, p.read_bytes()) for p in data.iterdir()) == before


def test_parent_environment_secrets_are_not_inherited(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"sk-{uuid.uuid4().hex}"
    monkeypatch.setenv("ASSISTANT_SECRET_KEY", secret)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    result = sandbox.run_python(
        "import os, glob, json\n"
        "seen = [open(p, 'rb').read().decode(errors='replace')\n"
        "        for p in glob.glob('/proc/*/environ')]\n"
        "print(json.dumps({'env': dict(os.environ), 'proc': seen}))\n"
    )
    assert result.exit_code == 0, result.stderr
    assert secret not in result.stdout
    env = json.loads(result.stdout)["env"]
    assert set(env) <= {"PATH", "HOME", "LANG", "PYTHONIOENCODING", "PWD"}


FORK_BOMB_COMM = f"fb{uuid.uuid4().hex[:10]}"
FORK_BOMB = (
    "import os, sys, time\n"
    f"open('/proc/self/comm', 'w').write({FORK_BOMB_COMM!r})\n"
    "children = 0\n"
    "for _ in range(500):\n"
    "    try:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(60); os._exit(0)\n"
    "        children += 1\n"
    "    except OSError:\n"
    "        break\n"
    "print(children, flush=True)\n"
    "while True:\n"
    "    try:\n"
    "        os.fork()\n"
    "    except OSError:\n"
    "        pass\n"
)
SLOW_ATTACKS = {
    "fork_bomb": FORK_BOMB,
    "infinite_loop": "while True:\n    pass",
    "sleep": "import time\nprint('start', flush=True)\ntime.sleep(600)",
}


@pytest.fixture(scope="module")
def slow_attacks(sandbox: Sandbox) -> dict[str, SandboxResult]:
    """The attacks that run until a time limit, run side by side to share the wait."""
    with ThreadPoolExecutor(len(SLOW_ATTACKS)) as pool:
        futures = {
            name: pool.submit(sandbox.run_python, code) for name, code in SLOW_ATTACKS.items()
        }
        return {name: future.result() for name, future in futures.items()}


def test_fork_bomb_is_contained_and_leaves_nothing_behind(
    sandbox: Sandbox, slow_attacks: dict[str, SandboxResult]
) -> None:
    result = slow_attacks["fork_bomb"]
    assert int(result.stdout.split()[0]) < sandbox.config.limits.processes
    assert result.limit_hit in ("wall_time", "cpu_time")
    assert _host_processes_named(FORK_BOMB_COMM) == []


def test_infinite_loop_is_stopped(slow_attacks: dict[str, SandboxResult]) -> None:
    result = slow_attacks["infinite_loop"]
    assert result.limit_hit in ("cpu_time", "wall_time")
    assert result.exit_code in (None, 152)


def test_sleeping_past_the_wall_time_is_killed(slow_attacks: dict[str, SandboxResult]) -> None:
    result = slow_attacks["sleep"]
    assert (result.stdout, result.limit_hit, result.exit_code) == ("start\n", "wall_time", None)


def test_allocating_2_gb_fails(sandbox: Sandbox) -> None:
    result = sandbox.run_python("x = bytearray(2 * 1024**3)\nprint('allocated')")
    assert "allocated" not in result.stdout
    assert result.limit_hit == "memory" and result.exit_code == 1
    assert "MemoryError" in result.stderr


def test_printing_100_mb_is_cut_at_the_output_limit(sandbox: Sandbox) -> None:
    code = (
        "import sys\n"
        "line = 'x' * 1023 + '\\n'\n"
        "for _ in range(100 * 1024):\n"
        "    sys.stdout.write(line)\n"
        "sys.stdout.flush()\n"
        "print('finished', file=sys.stderr)\n"
    )
    result = sandbox.run_python(code)
    cap = sandbox.config.limits.output_bytes
    assert result.limit_hit == "output" and result.exit_code is None
    assert result.stdout.endswith(f"[output truncated: the limit is {cap} bytes]\n")
    assert len(result.stdout.encode()) < cap + 100
    assert "finished" not in result.stderr  # stopped long before it wrote 100 MB


def test_large_files_hit_the_file_size_limit(sandbox: Sandbox) -> None:
    result = sandbox.run_python("open('/tmp/big', 'wb').write(b'x' * (64 * 1024 * 1024))")
    assert result.limit_hit == "file_size" and result.exit_code == 1


def test_filling_the_private_tmpfs_stops_at_its_size(sandbox: Sandbox) -> None:
    code = (
        "import sys\n"
        "written = 0\n"
        "try:\n"
        "    for i in range(100):\n"
        "        with open(f'/tmp/f{i}', 'wb') as f:\n"
        "            f.write(b'x' * (1024 * 1024))\n"
        "        written += 1\n"
        "finally:\n"
        "    print(written, flush=True)\n"
    )
    result = sandbox.run_python(code)
    assert result.limit_hit == "file_size" and "No space left on device" in result.stderr
    assert int(result.stdout) <= sandbox.config.limits.tmpfs_bytes // 2**20


def test_a_process_that_outlives_the_call_is_killed(sandbox: Sandbox) -> None:
    comm = f"dm{uuid.uuid4().hex[:10]}"
    code = (
        "import os, time\n"
        f"open('/proc/self/comm', 'w').write({comm!r})\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(120)\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
    )
    result = sandbox.run_python(code)
    assert result.stdout == "parent done\n" and result.exit_code == 0
    assert _host_processes_named(comm) == []


def test_sandbox_runs_unprivileged(sandbox: Sandbox) -> None:
    result = sandbox.run_python(
        "import os\n"
        "status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines())\n"
        "print(os.getuid(), status['CapEff'].strip(), status['NoNewPrivs'].strip())\n"
        "print(sorted(os.listdir('/proc')))\n"
    )
    uid, caps, no_new_privs = result.stdout.splitlines()[0].split()
    assert (uid, int(caps, 16), no_new_privs) == ("65534", 0, "1")
    assert str(os.getpid()) not in result.stdout.splitlines()[1]  # its own PID namespace


def test_missing_bubblewrap_disables_instead_of_running_unsandboxed() -> None:
    box = Sandbox(SandboxConfig(bwrap="/nonexistent/bwrap", limits=SandboxLimits()))
    reason = box.unavailable_reason()
    assert reason is not None and "bubblewrap" in reason
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        box.run_python("print('ran anyway')")
