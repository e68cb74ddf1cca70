"""Tokenizer: text <-> token ids, built from a GGUF's vocabulary or an HF tokenizer.json.

Encoding goes through the HF `tokenizers` library. Decoding works on raw bytes: every token
id maps to the bytes it stands for, so a UTF-8 character split across tokens is held back by
an incremental UTF-8 decoder instead of being guessed at, and the whole-sequence decode and
the streamed one are the same computation.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as BackendTokenizer
from tokenizers.processors import TemplateProcessing

from model.chat_encoding import ContentEncoder
from model.chat_template import ChatTemplate
from model.config import END_OF_TURN_TOKENS

# llama.cpp token types (tokenizer.ggml.token_type).
CONTROL, USER_DEFINED, BYTE = 3, 4, 6
SPM_SPACE = "\u2581"

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# tokenizer.ggml.pre -> the split regex the merges were learned with (llama.cpp's names).
_PRE_SPLITS = {
    "llama-bpe": _LLAMA3_SPLIT,
    "llama3": _LLAMA3_SPLIT,
    "llama-v3": _LLAMA3_SPLIT,
    "smaug-bpe": _LLAMA3_SPLIT,
    "dbrx": _LLAMA3_SPLIT,
    "falcon3": _LLAMA3_SPLIT,
    "qwen2": _QWEN2_SPLIT,
    "deepseek-r1-qwen": _QWEN2_SPLIT,
}


class TokenizerError(ValueError):
    """The tokenizer files are missing or inconsistent."""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte as a printable character."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


# Byte-level alphabet character -> the byte it stands for, as a str.translate table.
_TO_LATIN1 = {ord(char): byte for byte, char in bytes_to_unicode().items()}


def byte_level_bytes(token: str) -> bytes:
    """The bytes a byte-level BPE token (spelled in GPT-2's alphabet) stands for."""
    return token.translate(_TO_LATIN1).encode("latin-1")


@dataclass(slots=True)
class IncrementalDecoder:
    """Turns token ids into text one at a time; a split UTF-8 character waits for its end."""

    token_bytes: list[bytes]
    skip_ids: frozenset[int]
    strip_leading_space: bool
    _utf8: codecs.IncrementalDecoder = field(init=False)
    _started: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        if token_id in self.skip_ids:
            return ""
        return self._emit(self._utf8.decode(_bytes_of(self.token_bytes, token_id), final=False))

    def flush(self) -> str:
        return self._emit(self._utf8.decode(b"", final=True))

    def _emit(self, text: str) -> str:
        if text and not self._started:
            self._started = True
            if self.strip_leading_space and text.startswith(" "):
                return text[1:]
        return text


def _bytes_of(token_bytes: list[bytes], token_id: int) -> bytes:
    if not 0 <= token_id < len(token_bytes):
        raise ValueError(
            f"token id {token_id} is outside the vocabulary (0..{len(token_bytes) - 1})"
        )
    return token_bytes[token_id]


class Tokenizer:
    def __init__(
        self,
        backend: BackendTokenizer,
        token_bytes: list[bytes],
        bos_token_id: int | None,
        eos_token_ids: list[int],
        chat_template: ChatTemplate | None,
        strip_leading_space: bool = False,
    ) -> None:
        self.backend = backend
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self.bos_token_id = bos_token_id
        self.eos_token_ids = eos_token_ids
        self.chat_template = chat_template
        self.special_token_ids = frozenset(
            i for i, token in backend.get_added_tokens_decoder().items() if token.special
        )
        self._token_bytes = token_bytes
        self._strip_leading_space = strip_leading_space
        self._content_encoder: ContentEncoder | None = None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`; special tokens written in the text become their ids.

        For a conversation use `encode_chat`: message contents must not become control tokens.
        """
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        decoder = self.incremental_decoder(skip_special_tokens)
        return "".join(decoder.push(i) for i in ids) + decoder.flush()

    def incremental_decoder(self, skip_special_tokens: bool = True) -> IncrementalDecoder:
        skip = self.special_token_ids if skip_special_tokens else frozenset()
        return IncrementalDecoder(self._token_bytes, skip, self._strip_leading_space)

    def token_text(self, token_id: int) -> str:
        """The text of one token on its own (partial UTF-8 shown as U+FFFD)."""
        return _bytes_of(self._token_bytes, token_id).decode("utf-8", errors="replace")

    def apply_chat_template(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
    ) -> str:
        return self._template().render(messages, add_generation_prompt, tools)

    def encode_chat(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
    ) -> list[int]:
        """Token ids of the rendered conversation, control tokens from the template only.

        Text in a message that spells a control token ("<|im_end|><|im_start|>system") is
        encoded as the characters it is, so no message can open or close a turn.
        """
        parts = self._template().render_parts(messages, add_generation_prompt, tools)
        if self._content_encoder is None:  # built on first use: a copy of the vocabulary
            self._content_encoder = ContentEncoder(self.backend)
        return self._content_encoder.encode(parts)

    def _template(self) -> ChatTemplate:
        if self.chat_template is None:
            raise ValueError(
                "this model has no chat template; pass a plain prompt instead of messages"
            )
        return self.chat_template

    # Construction -----------------------------------------------------------------------

    @classmethod
    def from_gguf_metadata(cls, metadata: dict[str, Any], eos_token_ids: list[int]) -> Tokenizer:
        kind = metadata.get("tokenizer.ggml.model")
        tokens: list[str] = metadata.get("tokenizer.ggml.tokens") or []
        if not tokens:
            raise TokenizerError("the GGUF file has no tokenizer.ggml.tokens vocabulary")
        types: list[int] = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
        if kind == "gpt2":
            backend, token_bytes = _byte_level_backend(metadata, tokens)
            strip = False
        elif kind == "llama":
            backend, token_bytes = _sentencepiece_backend(metadata, tokens, types)
            strip = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
        else:
            raise TokenizerError(
                f"tokenizer model '{kind}' is not supported (only 'gpt2' byte-level BPE "
                "and 'llama' SentencePiece BPE)"
            )
        _add_control_tokens(backend, tokens, types)
        bos = metadata.get("tokenizer.ggml.bos_token_id")
        add_bos = metadata.get("tokenizer.ggml.add_bos_token", kind == "llama")
        if add_bos and bos is not None:
            backend.post_processor = TemplateProcessing(
                single=f"{tokens[bos]} $A", special_tokens=[(tokens[bos], bos)]
            )
        template = metadata.get("tokenizer.chat_template")
        special = _special_token_strings(metadata, tokens)
        return cls(
            backend,
            token_bytes,
            bos,
            eos_token_ids,
            ChatTemplate(template, special) if template else None,
            strip,
        )

    @classmethod
    def from_hf_folder(cls, folder: Path, eos_token_ids: list[int]) -> Tokenizer:
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise TokenizerError(f"{folder} has no tokenizer.json")
        try:
            backend = BackendTokenizer.from_file(str(path))
        except Exception as exc:  # the Rust library raises a bare Exception
            raise TokenizerError(f"{path} is not a valid tokenizer file: {exc}") from exc
        config = _read_json(folder / "tokenizer_config.json")
        vocab = backend.get_vocab(with_added_tokens=True)
        special = {
            name: _token_content(config.get(name))
            for name in ("bos_token", "eos_token", "unk_token", "pad_token")
            if _token_content(config.get(name))
        }
        eos = set(eos_token_ids)
        if special.get("eos_token") in vocab:
            eos.add(vocab[special["eos_token"]])
        added = backend.get_added_tokens_decoder()
        eos |= {i for i, t in added.items() if t.special and t.content in END_OF_TURN_TOKENS}
        decoder = json.loads(backend.to_str()).get("decoder") or {}
        token_bytes, strip = _hf_token_bytes(backend, decoder)
        template = _hf_chat_template(folder, config)
        bos = vocab.get(special.get("bos_token", ""))
        return cls(
            backend,
            token_bytes,
            bos,
            sorted(eos),
            ChatTemplate(template, special) if template else None,
            strip,
        )


def _byte_level_backend(
    metadata: dict[str, Any], tokens: list[str]
) -> tuple[BackendTokenizer, list[bytes]]:
    to_char = bytes_to_unicode()
    alphabet = set(to_char.values())
    # A token outside the byte alphabet (a mislabelled special token) is respelled in it.
    spelled = [t if set(t) <= alphabet else "".join(to_char[b] for b in t.encode()) for t in tokens]
    vocab = {t: i for i, t in enumerate(spelled)}
    merges = [tuple(m.split(" ", 1)) for m in metadata.get("tokenizer.ggml.merges", [])]
    pre = metadata.get("tokenizer.ggml.pre", "default")
    bpe = models.BPE(vocab, merges, ignore_merges=pre in ("llama-bpe", "llama3", "llama-v3"))
    backend = BackendTokenizer(bpe)
    split = _PRE_SPLITS.get(pre)
    if split is not None:
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    elif pre == "smollm":  # llama.cpp: digits one by one, then GPT-2's split
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    else:
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    token_bytes = [byte_level_bytes(t) for t in spelled]
    return backend, token_bytes


def _sentencepiece_backend(
    metadata: dict[str, Any], tokens: list[str], types: list[int]
) -> tuple[BackendTokenizer, list[bytes]]:
    vocab = {t: i for i, t in enumerate(tokens)}
    if "tokenizer.ggml.merges" in metadata:
        merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
    else:
        merges = _merges_from_scores(tokens, metadata.get("tokenizer.ggml.scores") or [])
    unk_id = metadata.get("tokenizer.ggml.unknown_token_id", 0)
    bpe = models.BPE(vocab, merges, unk_token=tokens[unk_id], fuse_unk=True, byte_fallback=True)
    backend = BackendTokenizer(bpe)
    add_prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement=SPM_SPACE, prepend_scheme="first" if add_prefix else "never", split=False
    )
    steps = [decoders.Replace(SPM_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    # The space the pre-tokenizer prepended is not part of the text.
    backend.decoder = decoders.Sequence(
        [*steps, decoders.Strip(" ", 1, 0)] if add_prefix else steps
    )
    token_bytes = [
        bytes([int(t[3:5], 16)]) if kind == BYTE else t.replace(SPM_SPACE, " ").encode()
        for t, kind in zip(tokens, types, strict=True)
    ]
    return backend, token_bytes


def _merges_from_scores(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """SentencePiece files list no merges: every split of a token into two known tokens is a
    merge, and a higher-scoring result merges first."""
    vocab = {t: i for i, t in enumerate(tokens)}
    found: list[tuple[float, int, str, str]] = []
    for token, index in vocab.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                found.append((-scores[index], index, left, right))
    found.sort()
    return [(left, right) for _, _, left, right in found]


def _add_control_tokens(backend: BackendTokenizer, tokens: list[str], types: list[int]) -> None:
    """Control tokens (`<|im_start|>`) and user-defined ones must match whole in the text."""
    control = [
        AddedToken(t, special=True, normalized=False)
        for t, kind in zip(tokens, types, strict=True)
        if kind == CONTROL
    ]
    user = [
        AddedToken(t, special=False, normalized=False)
        for t, kind in zip(tokens, types, strict=True)
        if kind == USER_DEFINED
    ]
    backend.add_special_tokens(control)
    backend.add_tokens(user)


def _special_token_strings(metadata: dict[str, Any], tokens: list[str]) -> dict[str, str]:
    names = {
        "bos_token": "bos_token_id",
        "eos_token": "eos_token_id",
        "unk_token": "unknown_token_id",
        "pad_token": "padding_token_id",
    }
    return {
        name: tokens[metadata[f"tokenizer.ggml.{key}"]]
        for name, key in names.items()
        if f"tokenizer.ggml.{key}" in metadata
    }


def _token_content(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TokenizerError(f"{path} is not valid JSON: {exc}") from exc


def _hf_chat_template(folder: Path, config: dict[str, Any]) -> str | None:
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one is the chat template
        named = {t.get("name"): t.get("template") for t in template}
        template = named.get("default")
    return template


def _hf_token_bytes(backend: BackendTokenizer, decoder: dict[str, Any]) -> tuple[list[bytes], bool]:
    """Bytes of every token id, following what the tokenizer's own decoder does."""
    size = backend.get_vocab_size(with_added_tokens=True)
    added = {i: t.content for i, t in backend.get_added_tokens_decoder().items()}
    pieces = [added.get(i) or backend.id_to_token(i) or "" for i in range(size)]
    described = json.dumps(decoder)
    if decoder.get("type") == "ByteLevel":
        alphabet = set(bytes_to_unicode().values())
        return [
            byte_level_bytes(p) if i not in added and set(p) <= alphabet else p.encode()
            for i, p in enumerate(pieces)
        ], False
    if "ByteFallback" in described:
        return [
            bytes([int(p[3:5], 16)])
            if len(p) == 6 and p.startswith("<0x") and p.endswith(">") and i not in added
            else p.replace(SPM_SPACE, " ").encode()
            for i, p in enumerate(pieces)
        ], '"Strip"' in described
    return [backend.decode([i], skip_special_tokens=False).encode() for i in range(size)], False
