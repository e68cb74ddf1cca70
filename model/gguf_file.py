"""Reading a GGUF file: its metadata and a memory-mapped view of each tensor's bytes.

The `gguf` package's own reader builds a Python object per metadata array element, which
takes ~5 s on a 49k-token vocabulary; this one decodes numeric arrays with numpy and only
walks string arrays, so opening the bundled model takes a few tens of milliseconds.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value type ids (gguf spec) -> struct format of one scalar.
_SCALAR_FORMATS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9


class GGUFFormatError(ValueError):
    """The bytes do not form a valid GGUF file (wrong magic, truncated, inconsistent)."""


@dataclass(slots=True)
class GGUFTensor:
    name: str
    shape: tuple[int, ...]  # torch order: the slowest-moving dimension first
    tensor_type: GGMLQuantizationType
    data: np.ndarray  # raw bytes (uint8), a view into the memory map

    @property
    def n_elements(self) -> int:
        return prod(self.shape)


@dataclass(slots=True)
class GGUFFile:
    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensor]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))


class _Cursor:
    """Sequential little-endian reads over a buffer; running past its end is a format error."""

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.buf):
            raise GGUFFormatError(f"the file ends inside its header (at byte {self.pos})")
        values = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += size
        return values

    def take(self, size: int) -> memoryview:
        if size < 0 or self.pos + size > len(self.buf):
            raise GGUFFormatError(f"the file ends inside its header (at byte {self.pos})")
        view = self.buf[self.pos : self.pos + size]
        self.pos += size
        return view

    def string(self) -> str:
        (length,) = self.unpack("Q")
        return bytes(self.take(length)).decode("utf-8", errors="replace")

    def value(self, value_type: int) -> Any:
        if value_type in _SCALAR_FORMATS:
            return self.unpack(_SCALAR_FORMATS[value_type])[0]
        if value_type == _STRING:
            return self.string()
        if value_type == _ARRAY:
            return self.array()
        raise GGUFFormatError(f"unknown metadata value type {value_type}")

    def array(self) -> Any:
        element_type, count = self.unpack("IQ")
        if element_type in _SCALAR_FORMATS:
            dtype = np.dtype("<" + _SCALAR_FORMATS[element_type].replace("?", "b1"))
            raw = self.take(count * dtype.itemsize)
            return np.frombuffer(raw, dtype=dtype).tolist()
        if element_type == _STRING:
            if count > len(self.buf):
                raise GGUFFormatError(f"a string array claims {count} elements")
            return [self.string() for _ in range(count)]
        return [self.value(element_type) for _ in range(count)]


def read_gguf(path: Path) -> GGUFFile:
    """Parse the header and map the tensor data; nothing is dequantised here."""
    with path.open("rb") as handle:
        try:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as exc:  # an empty file cannot be mapped
            raise GGUFFormatError("the file is empty") from exc
    buf = memoryview(mapped)
    cursor = _Cursor(buf)
    if bytes(cursor.take(min(4, len(buf)))) != GGUF_MAGIC:
        raise GGUFFormatError("it does not start with the GGUF magic bytes")
    (version,) = cursor.unpack("I")
    if version not in (2, 3):
        raise GGUFFormatError(f"GGUF version {version} is not supported (only 2 and 3)")
    n_tensors, n_kv = cursor.unpack("QQ")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cursor.string()
        (value_type,) = cursor.unpack("I")
        metadata[key] = cursor.value(value_type)
    infos = [_tensor_info(cursor) for _ in range(n_tensors)]
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
    data_start = -(-cursor.pos // alignment) * alignment
    whole = np.frombuffer(mapped, dtype=np.uint8)
    tensors = {
        name: _map_tensor(whole, data_start, name, shape, ttype, offset)
        for name, shape, ttype, offset in infos
    }
    return GGUFFile(path=path, version=version, metadata=metadata, tensors=tensors)


def _tensor_info(cursor: _Cursor) -> tuple[str, tuple[int, ...], int, int]:
    name = cursor.string()
    (n_dims,) = cursor.unpack("I")
    if n_dims > 8:
        raise GGUFFormatError(f"tensor '{name}' claims {n_dims} dimensions")
    dims = cursor.unpack(f"{n_dims}Q")
    tensor_type, offset = cursor.unpack("IQ")
    return name, tuple(reversed(dims)), tensor_type, offset


def tensor_nbytes(shape: tuple[int, ...], tensor_type: GGMLQuantizationType) -> int:
    block_size, type_size = GGML_QUANT_SIZES[tensor_type]
    if shape and shape[-1] % block_size:
        raise GGUFFormatError(
            f"a row of {shape[-1]} values is not a whole number of {tensor_type.name} blocks"
        )
    return prod(shape) // block_size * type_size


def _map_tensor(
    whole: np.ndarray, data_start: int, name: str, shape: tuple[int, ...], ttype: int, offset: int
) -> GGUFTensor:
    try:
        tensor_type = GGMLQuantizationType(ttype)
    except ValueError:
        raise GGUFFormatError(f"tensor '{name}' has unknown ggml type id {ttype}") from None
    start = data_start + offset
    end = start + tensor_nbytes(shape, tensor_type)
    if end > len(whole):
        raise GGUFFormatError(
            f"tensor '{name}' needs bytes {start}..{end} but the file has only {len(whole)} "
            "(the file is truncated)"
        )
    return GGUFTensor(name=name, shape=shape, tensor_type=tensor_type, data=whole[start:end])
