"""Native CPU kernels: C sources in model/kernels/, compiled at first use with the system C
compiler (about a second), cached per source, flags and CPU, and loaded with ctypes.

Where no compiler is found or the build fails, `decode_attention` returns None and the
caller keeps its torch path: the kernels are an acceleration, never a requirement.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from functools import cache
from pathlib import Path

import torch

log = logging.getLogger(__name__)

KERNEL_DIR = Path(__file__).parent / "kernels"
# Reassociation lets gcc vectorise the portable loops' dot products (a strict left-to-right
# float sum cannot be); none of these flags assumes finite values (the softmax uses -inf).
# ASSISTANT_KERNEL_MARCH builds for an older instruction set than this CPU's (e.g. "haswell":
# AVX2 only), to run the kernels' other paths here.
MARCH = "-march=" + (os.environ.get("ASSISTANT_KERNEL_MARCH") or "native")
FLAGS = ["-O3", MARCH, "-fno-math-errno", "-fassociative-math", "-fno-signed-zeros"]
FLAGS += ["-fno-trapping-math", "-fopenmp", "-shared", "-fPIC", "-std=c11"]
_build_lock = threading.Lock()


def cache_dir() -> Path:
    root = os.environ.get("ASSISTANT_KERNEL_CACHE") or Path.home() / ".cache" / "assistant"
    return Path(root) / "kernels"


def _cpu_signature() -> str:
    # -march=native ties a build to the CPU's instruction set: key the cache by it.
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            flags = next((line for line in info if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return platform.machine() + flags


@cache
def kernel_library(name: str) -> ctypes.CDLL | None:
    source = KERNEL_DIR / f"{name}.c"
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        log.warning("no C compiler found; %s uses the slower torch path", name)
        return None
    # Every source counts: a kernel may include another.
    sources = b"".join(p.read_bytes() for p in sorted(KERNEL_DIR.glob("*.c")))
    key = sources + " ".join(FLAGS).encode() + _cpu_signature().encode()
    target = cache_dir() / f"{name}-{hashlib.sha256(key).hexdigest()[:16]}.so"
    with _build_lock:
        if not target.exists() and not _build(compiler, source, target):
            return None
    try:
        return ctypes.CDLL(str(target))
    except OSError as exc:
        log.warning("cannot load %s (%s); using the torch path", target, exc)
        return None


def _build(compiler: str, source: Path, target: Path) -> bool:
    log.info("building %s into %s (once per CPU and source)", source.name, target.parent)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Built under a temporary name, then renamed: processes building at once never load
        # a half-written library.
        fd, partial = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
    except OSError as exc:
        log.warning("cannot write %s (%s); set ASSISTANT_KERNEL_CACHE", target.parent, exc)
        return False
    command = [compiler, *FLAGS, "-o", partial, str(source), "-lm"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        os.unlink(partial)
        log.warning("building %s failed; using the torch path:\n%s", source.name, result.stderr)
        return False
    os.replace(partial, target)
    return True


_SYMBOLS = {torch.float32: "decode_attention_f32", torch.bfloat16: "decode_attention_bf16"}


# The C kernel's fixed buffers (MAX_HEAD_DIM, MAX_GROUP in decode_attention.c).
MAX_HEAD_DIM = 256
MAX_GROUP = 16


def decode_attention_available(
    device: torch.device, dtype: torch.dtype, head_dim: int, group: int
) -> bool:
    """Whether the kernel runs this model's decode: CPU, float32/bfloat16, within its buffers,
    and it builds here."""
    return (
        device.type == "cpu"
        and dtype in _SYMBOLS
        and head_dim <= MAX_HEAD_DIM
        and group <= MAX_GROUP
        and kernel_library("decode_attention") is not None
    )


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: torch.Tensor,
    lengths: torch.Tensor,
) -> torch.Tensor | None:
    """Attention of one query token per sequence over its paged context.

    q [D, n_heads, hd]; k_cache/v_cache [blocks, 16, n_kv, hd]; tables [D, max_blocks] and
    lengths [D] int64 (positions to attend to, the new token's included). All on the CPU and
    contiguous. None when the kernel is unavailable, a size is beyond its buffers, or a length
    is not within 1..16 * max_blocks.
    """
    library = kernel_library("decode_attention")
    if library is None or q.dtype not in _SYMBOLS:
        return None
    tensors = (q, k_cache, v_cache, tables, lengths)
    # The kernel reads raw memory: anything else would be read out of bounds. (Lengths
    # outside their block tables are refused by the kernel itself, which loops over them.)
    if not all(t.is_contiguous() and t.device.type == "cpu" for t in tensors):
        raise ValueError("decode_attention needs contiguous CPU tensors")
    if tables.dtype != torch.long or lengths.dtype != torch.long or k_cache.dtype != q.dtype:
        raise ValueError("decode_attention needs int64 tables/lengths and a cache in q's dtype")
    d, n_heads, hd = q.shape
    out = torch.empty_like(q)
    status = getattr(library, _SYMBOLS[q.dtype])(
        *(ctypes.c_void_p(t.data_ptr()) for t in (*tensors, out)),
        ctypes.c_int(d),
        ctypes.c_int(n_heads),
        ctypes.c_int(k_cache.shape[2]),
        ctypes.c_int(hd),
        ctypes.c_int(tables.shape[1]),
        ctypes.c_float(hd**-0.5),
        ctypes.c_int(torch.get_num_threads()),
    )
    return out if status == 0 else None
