"""Crash-safe files: write to a temporary name, fsync, rename atomically, fsync the folder.

An index lives in numbered generation folders; MANIFEST.json names the current one and
is replaced last, so a writer killed at any point leaves the previous generation in use.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MANIFEST = "MANIFEST.json"
FORMAT = 1


def fsync_path(path: Path) -> None:
    """fsync a folder (its entries) or a file written by a library that does not fsync."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, data: bytes) -> None:
    """Write and fsync a file in a folder that is not yet visible to readers."""
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` so that a reader sees either the old bytes or the new, never a mix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write_synced(tmp, data)
    os.replace(tmp, path)
    fsync_path(path.parent)


def read_manifest(root: Path) -> dict | None:
    path = root / MANIFEST
    if not path.exists():
        return None
    return json.loads(path.read_text())


def manifest_stamp(root: Path) -> tuple[int, int] | None:
    """Cheap change detection: (inode, mtime) of the manifest, which is only ever replaced."""
    try:
        st = (root / MANIFEST).stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def generation_dir(root: Path, generation: int) -> Path:
    return root / f"gen-{generation:08d}"


def new_generation_dir(root: Path, generation: int) -> Path:
    """An empty staging folder; leftovers of a killed writer are removed first."""
    staging = root / f".staging-{generation:08d}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    return staging


def publish(root: Path, staging: Path, generation: int, manifest: dict) -> None:
    """Make a fully written staging folder the current generation."""
    fsync_path(staging)
    final = generation_dir(root, generation)
    if final.exists():  # left by a writer killed after the rename, before the manifest
        shutil.rmtree(final)
    os.rename(staging, final)
    fsync_path(root)
    atomic_write(root / MANIFEST, json.dumps({**manifest, "generation": generation}).encode())


def remove_old_generations(root: Path, keep: set[int]) -> None:
    for item in root.iterdir():
        if item.name.startswith(".staging-") or item.name.endswith(".tmp"):
            if item.is_dir():
                shutil.rmtree(item, ignore_errors=True)
            else:
                item.unlink(missing_ok=True)
        elif item.name.startswith("gen-") and int(item.name[4:]) not in keep:
            shutil.rmtree(item, ignore_errors=True)


@contextmanager
def writer_lock(root: Path) -> Iterator[None]:
    """One writer at a time across processes; readers never take it."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
