"""ContentEncoder: a rendered conversation to token ids, control tokens from the template only.

`tokenizers` turns control-token text anywhere in a string into the control token. For a
chat prompt that is wrong: the template's "<|im_start|>" opens a turn, but the same
characters typed by a user, or found in a retrieved document or a tool's output, are text.
Encoding the template and the contents separately would not do either: the pre-tokenizer
and SentencePiece's leading space see text across those seams. So this splits the prompt
where the library would, at the template's control tokens only, and encodes each stretch
between them whole, with control-token parsing switched off (`encode_special_tokens`).
A prompt whose contents spell no control token gets exactly the ids of a plain encode.
"""

from __future__ import annotations

import re

from tokenizers import Tokenizer as BackendTokenizer
from tokenizers import pre_tokenizers


class ContentEncoder:
    def __init__(self, backend: BackendTokenizer) -> None:
        special = {
            token.content: token_id
            for token_id, token in backend.get_added_tokens_decoder().items()
            if token.special
        }
        self._special_ids = special
        # Longest first, as the library matches them.
        self._special = (
            re.compile("|".join(re.escape(t) for t in sorted(special, key=len, reverse=True)))
            if special
            else None
        )
        self._first = _plain_copy(backend)
        # SentencePiece's leading space goes only on a stretch at the very start of the text
        # (byte-level BPE has none: one copy serves both).
        self._later = self._first
        if isinstance(self._first.pre_tokenizer, pre_tokenizers.Metaspace):
            self._later = _plain_copy(backend)
            self._later.pre_tokenizer.prepend_scheme = "never"

    def encode(self, parts: list[tuple[str, bool]]) -> list[int]:
        """Ids of the concatenated parts; control tokens only where a non-content part has one."""
        ids: list[int] = []
        stretch: list[str] = []
        at_start = True
        for piece, token in self._pieces(parts):
            if token is None:
                stretch.append(piece)
                continue
            ids += self._stretch_ids("".join(stretch), at_start)
            ids.append(token)
            stretch, at_start = [], False
        ids += self._stretch_ids("".join(stretch), at_start)
        return ids

    def _pieces(self, parts: list[tuple[str, bool]]):
        """(text, None) for plain text, (token text, id) for a template's control token."""
        for text, is_content in parts:
            if is_content or self._special is None:
                yield text, None
                continue
            last = 0
            for match in self._special.finditer(text):
                yield text[last : match.start()], None
                yield match.group(), self._special_ids[match.group()]
                last = match.end()
            yield text[last:], None

    def _stretch_ids(self, text: str, at_start: bool) -> list[int]:
        if not text:
            return []
        backend = self._first if at_start else self._later
        return backend.encode(text, add_special_tokens=False).ids


def _plain_copy(backend: BackendTokenizer) -> BackendTokenizer:
    copy = BackendTokenizer.from_str(backend.to_str())
    copy.encode_special_tokens = True
    return copy
