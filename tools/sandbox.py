"""Run untrusted code in bubblewrap with hard limits. There is no unsandboxed fallback.

The sandbox sees a read-only /usr (with the /bin, /lib, /lib64 links Debian has), a fresh
/proc and /dev, and two private tmpfs mounts (/tmp and the working dir /sandbox). It has no
network (its own empty network namespace), no project files, no environment from the
parent, its own PID namespace (nothing it starts outlives the call) and a new session.

Limits come from two places: `prlimit` around bwrap sets the per-process ones (CPU,
address space, file size, open files), and `prlimit` inside the sandbox sets the process
count, which Linux counts per user per user namespace. Run as root, bwrap would give the
sandbox root's uid outside, and the kernel does not enforce the process count for root;
so as root every call runs as a throwaway unprivileged uid.
"""

from __future__ import annotations

import os
import secrets
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_EXIT_SIGXCPU = 128 + signal.SIGXCPU
_READ_CHUNK = 65536
_probe_lock = threading.Lock()
_probe_cache: dict[tuple[str, str, str], str | None] = {}


class SandboxUnavailable(Exception):
    """bubblewrap is missing or cannot create its namespaces on this machine."""


@dataclass(slots=True, frozen=True)
class SandboxLimits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 256 * 2**20
    processes: int = 32
    file_bytes: int = 16 * 2**20
    tmpfs_bytes: int = 32 * 2**20
    open_files: int = 64
    output_bytes: int = 64 * 2**10


@dataclass(slots=True, frozen=True)
class SandboxConfig:
    bwrap: str = "bwrap"
    prlimit: str = "prlimit"
    python: str = "/usr/bin/python3"
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    # Range of throwaway uids used when the caller is root (see the module docstring).
    uid_base: int = 2_000_000_000
    uid_span: int = 1_000_000


@dataclass(slots=True)
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None
    # None, or which limit ended the run: wall_time, cpu_time, memory, file_size, output.
    limit_hit: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Sandbox:
    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()

    def unavailable_reason(self) -> str | None:
        """Why sandboxed tools cannot run here, or None. Probed once per configuration."""
        key = (self.config.bwrap, self.config.prlimit, self.config.python)
        with _probe_lock:
            if key not in _probe_cache:
                _probe_cache[key] = self._probe()
            return _probe_cache[key]

    def run_python(self, code: str, limits: SandboxLimits | None = None) -> SandboxResult:
        """Run `code` with the system's Python inside the sandbox (read from stdin)."""
        reason = self.unavailable_reason()
        if reason is not None:
            raise SandboxUnavailable(reason)
        return self._run([self.config.python, "-I", "-"], code.encode(), limits)

    def _probe(self) -> str | None:
        for name in (self.config.bwrap, self.config.prlimit):
            if shutil.which(name) is None:
                return (
                    f"'{name}' was not found; install Debian's bubblewrap and util-linux "
                    "packages to enable code execution"
                )
        if not Path(self.config.python).is_file():
            return f"the sandbox's Python {self.config.python} does not exist; install python3"
        try:
            result = self._run([self.config.python, "-I", "-c", "print(6 * 7)"], b"", None)
        except OSError as exc:
            return f"bubblewrap could not start: {exc}"
        if result.exit_code != 0 or result.stdout.strip() != "42":
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            return (
                "bubblewrap cannot create a sandbox here (user namespaces may be disabled): "
                f"{detail}"
            )
        return None

    def _run(self, argv: list[str], stdin: bytes, limits: SandboxLimits | None) -> SandboxResult:
        limits = limits or self.config.limits
        command = self._outer_limits(limits) + self._bwrap_args(limits) + argv
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            start_new_session=True,  # one process group to kill on timeout
            **self._identity(),
        )
        pipes = _Pipes(proc, stdin, limits.output_bytes)
        try:
            limit_hit = _communicate(proc, pipes, limits.wall_seconds)
        finally:
            _kill(proc)
            pipes.close()
        marker = f"\n[output truncated: the limit is {limits.output_bytes} bytes]\n"
        stdout, stderr = pipes.text(marker)
        exit_code = _exit_code(proc.returncode)
        if limit_hit is not None:
            return SandboxResult(stdout, stderr, None, limit_hit)
        return SandboxResult(stdout, stderr, exit_code, _limit_from_exit(exit_code, stderr))

    def _outer_limits(self, limits: SandboxLimits) -> list[str]:
        cpu = limits.cpu_seconds
        return [
            _resolve(self.config.prlimit),
            f"--cpu={cpu}:{cpu + 1}",  # SIGXCPU at the soft limit, SIGKILL a second later
            f"--as={limits.memory_bytes}",
            f"--fsize={limits.file_bytes}",
            f"--nofile={limits.open_files}",
            "--core=0",
            "--",
        ]

    def _bwrap_args(self, limits: SandboxLimits) -> list[str]:
        args = [
            _resolve(self.config.bwrap),
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--cap-drop", "ALL",
            "--uid", "65534",
            "--gid", "65534",
            "--hostname", "sandbox",
            "--die-with-parent",
            "--new-session",
            "--ro-bind", "/usr", "/usr",
        ]  # fmt: skip
        args += _system_links()
        tmpfs = str(limits.tmpfs_bytes)
        args += [
            "--proc", "/proc",
            "--dev", "/dev",
            "--size", tmpfs, "--tmpfs", "/tmp",
            "--size", tmpfs, "--tmpfs", "/sandbox",
            # The root and /dev are bwrap's own unsized tmpfs mounts: make them read-only
            # so that only size-limited mounts are writable (device nodes still work).
            "--remount-ro", "/",
            "--remount-ro", "/dev",
            "--size", tmpfs, "--tmpfs", "/dev/shm",
            "--chdir", "/sandbox",
            "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin",
            "--setenv", "HOME", "/sandbox",
            "--setenv", "LANG", "C.UTF-8",
            "--setenv", "PYTHONIOENCODING", "utf-8",
            "/usr/bin/prlimit", f"--nproc={limits.processes}", "--",
        ]  # fmt: skip
        return args

    def _identity(self) -> dict[str, Any]:
        if os.geteuid() != 0:
            return {}
        uid = self.config.uid_base + secrets.randbelow(self.config.uid_span)
        return {"user": uid, "group": uid, "extra_groups": []}


def _resolve(program: str) -> str:
    # bwrap starts with a minimal PATH; find the programs with the caller's.
    return shutil.which(program) or program


def _system_links() -> list[str]:
    """Debian links /bin, /lib, /lib64, /sbin into /usr; keep the same shape inside."""
    args: list[str] = []
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    return args


class _Pipes:
    """Feeds stdin and reads stdout/stderr together, keeping at most `cap` bytes in all.

    Output past the cap is never kept: the caller kills the process as soon as it crosses.
    """

    def __init__(self, proc: subprocess.Popen[bytes], stdin: bytes, cap: int) -> None:
        assert proc.stdin and proc.stdout and proc.stderr
        self.stdin = proc.stdin
        self.out = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
        self.stdout_fd = proc.stdout.fileno()
        self.cap = cap
        self.overflowed: int | None = None
        self.pending = memoryview(stdin)
        self.selector = selectors.DefaultSelector()
        for fd in self.out:
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ)
        if self.pending:
            os.set_blocking(self.stdin.fileno(), False)
            self.selector.register(self.stdin.fileno(), selectors.EVENT_WRITE)
        else:
            self.stdin.close()

    def open(self) -> bool:
        return bool(self.selector.get_map())

    def pump(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout):
            if key.fd in self.out:
                self._read(key.fd)
            else:
                self._write()
            if self.overflowed is not None:
                return

    def _write(self) -> None:
        try:
            written = os.write(self.stdin.fileno(), self.pending[:_READ_CHUNK])
            self.pending = self.pending[written:]
        except BrokenPipeError:
            self.pending = self.pending[:0]
        if not self.pending:
            self.selector.unregister(self.stdin.fileno())
            self.stdin.close()

    def _read(self, fd: int) -> None:
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            self.selector.unregister(fd)
            return
        room = self.cap - sum(len(b) for b in self.out.values())
        self.out[fd] += chunk[: max(room, 0)]
        if len(chunk) > room:
            self.overflowed = fd

    def text(self, marker: str) -> tuple[str, str]:
        decoded = {fd: buf.decode("utf-8", errors="replace") for fd, buf in self.out.items()}
        if self.overflowed is not None:
            decoded[self.overflowed] += marker
        stdout = decoded.pop(self.stdout_fd)
        return stdout, decoded.popitem()[1]

    def close(self) -> None:
        self.selector.close()


def _communicate(proc: subprocess.Popen[bytes], pipes: _Pipes, wall_seconds: float) -> str | None:
    """Run until both pipes close and the process exits; the limit that stopped it, if any."""
    deadline = time.monotonic() + wall_seconds
    while pipes.open():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "wall_time"
        pipes.pump(remaining)
        if pipes.overflowed is not None:
            return "output"
    try:
        proc.wait(max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        return "wall_time"
    return None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Stop the sandbox and return only once everything inside it is gone.

    Killing bwrap's child, the PID namespace's init, makes the kernel kill every process
    in the namespace; bwrap exits after it has reaped that init, so waiting for bwrap
    waits for all of them. Killing bwrap itself would return while they are still dying.
    """
    if proc.poll() is None:
        for child in _children(proc.pid):
            _send_kill(os.kill, child)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _send_kill(os.killpg, proc.pid)
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None and not pipe.closed:
            pipe.close()


def _send_kill(send: Callable[[int, int], None], target: int) -> None:
    try:
        send(target, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The command name is in parentheses and may contain spaces: split after it.
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _exit_code(code: int) -> int:
    """Shell convention: a process killed by signal N exits with 128 + N."""
    return 128 - code if code < 0 else code


def _limit_from_exit(exit_code: int, stderr: str) -> str | None:
    if exit_code == _EXIT_SIGXCPU:
        return "cpu_time"
    if exit_code == 0:
        return None
    # Python reports these limits as exceptions rather than signals.
    tail = stderr[-2000:]
    if "MemoryError" in tail:
        return "memory"
    if "File too large" in tail or "No space left on device" in tail:
        return "file_size"
    return None
