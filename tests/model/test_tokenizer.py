"""Tokenizer and chat template: against the reference library on the bundled model, Unicode
round trips, streaming decode, and a SentencePiece vocabulary built in the test."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from model.chat_template import ChatTemplate, ChatTemplateError
from model.tokenizer import Tokenizer, bytes_to_unicode

VARIED_TEXTS = [
    "Hello world!",
    "The year 2024 had 366 days, 12 months and 52 weeks.",
    "  leading spaces\n\n\ttabs and\r\nwindows lines   ",
    "日本語のテキストと中文文本",
    "emoji 👩‍👩‍👧‍👦 🇫🇷 🤖 done",
    "e\u0301 combining a\u0308 marks",
    "مرحبا بالعالم — עברית",
    "<|im_start|>user\nhi<|im_end|>\n",
    "def f(x):\n    return x**2  # comment",
    "I'm sure you're fine; they'll've gone.",
    "1234567890 3.14159 -42 1e-9",
    "\u200b zero width and non\u00a0breaking",
    "URL: https://example.com/a?b=c&d=e#f",
    "",
]

UNICODE_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8", exclude_categories=["Cs"]),
        st.sampled_from(list("👩‍👧🇫🇷中文日本語\u0301\u0308مرحبا \n\t  ")),
    ),
    max_size=60,
)


@pytest.fixture(scope="module")
def tok(loaded_model) -> Tokenizer:
    return loaded_model.tokenizer


@pytest.fixture(scope="module")
def missing_bytes(tok: Tokenizer) -> frozenset[int]:
    """Bytes without a token: SmolLM2's vocabulary lacks a few control characters (e.g.
    U+0006) and the lead bytes of unassigned planes, which no tokenizer built from it can
    encode."""
    vocab = tok.backend.get_vocab()
    return frozenset(b for b, char in bytes_to_unicode().items() if char not in vocab)


@pytest.mark.parametrize("text", VARIED_TEXTS)
def test_encode_matches_the_reference(tok: Tokenizer, hf_reference, text: str) -> None:
    reference = hf_reference[1]
    assert tok.encode(text) == reference.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("text", VARIED_TEXTS)
def test_decode_matches_the_reference(tok: Tokenizer, hf_reference, text: str) -> None:
    ids = tok.encode(text)
    reference = hf_reference[1]
    assert tok.decode(ids, skip_special_tokens=False) == reference.decode(ids)
    assert tok.decode(ids) == reference.decode(ids, skip_special_tokens=True)


def test_special_tokens_and_eos(tok: Tokenizer, hf_reference) -> None:
    reference = hf_reference[1]
    im_end, endoftext = reference.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert im_end in tok.eos_token_ids and endoftext in tok.eos_token_ids
    assert tok.bos_token_id == reference.bos_token_id
    assert tok.vocab_size == len(reference)
    assert tok.encode("<|im_start|>") == [reference.convert_tokens_to_ids("<|im_start|>")]
    assert tok.decode(tok.encode("<|im_start|>hi<|im_end|>")) == "hi"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=UNICODE_TEXT)
def test_decode_encode_round_trips_unicode(
    tok: Tokenizer, missing_bytes: frozenset[int], text: str
) -> None:
    assume(missing_bytes.isdisjoint(text.encode()))
    assert tok.decode(tok.encode(text), skip_special_tokens=False) == text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=UNICODE_TEXT)
def test_incremental_decoding_never_splits_a_character(
    tok: Tokenizer, missing_bytes: frozenset[int], text: str
) -> None:
    assume(missing_bytes.isdisjoint(text.encode()))
    decoder = tok.incremental_decoder(skip_special_tokens=False)
    pieces = [decoder.push(token) for token in tok.encode(text)]
    pieces.append(decoder.flush())
    assert "".join(pieces) == text
    assert not any("\ufffd" in piece for piece in pieces)


def test_a_character_split_across_tokens_waits_for_its_last_byte(tok: Tokenizer) -> None:
    ids = tok.encode("🤖")
    assert len(ids) > 1  # the emoji's four bytes span several byte-level tokens
    decoder = tok.incremental_decoder()
    assert [decoder.push(i) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert decoder.push(ids[-1]) == "🤖"
    assert tok.token_text(ids[0]) == "\ufffd" * len(tok.token_text(ids[0]))


def test_incremental_decoder_skips_special_tokens(tok: Tokenizer) -> None:
    decoder = tok.incremental_decoder()
    ids = tok.encode("ok<|im_end|>")
    assert "".join(decoder.push(i) for i in ids) + decoder.flush() == "ok"


def test_out_of_vocabulary_id_is_a_clear_error(tok: Tokenizer) -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([tok.vocab_size + 5])


CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "user", "content": "Plan a trip"},
        {"role": "assistant", "content": "Where to?"},
        {"role": "user", "content": "Kyoto, 日本 🇯🇵"},
    ],
    [
        {"role": "system", "content": "You file tickets."},
        {"role": "user", "content": "My laptop is broken"},
        {"role": "assistant", "content": '{"tool": "open_ticket"}'},
        {"role": "tool", "content": '{"ticket": 42}'},
    ],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_the_reference(
    tok: Tokenizer, hf_reference, messages: list[dict], add_generation_prompt: bool
) -> None:
    expected = hf_reference[1].apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=False
    )
    assert tok.apply_chat_template(messages, add_generation_prompt) == expected


TOOLS_TEMPLATE = (
    "{% if tools %}TOOLS {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{ raise_exception('unknown role ' + m.role) }}{% endif %}"
    "{{ bos_token }}{{ m.role }}: {{ m.content }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


def test_chat_template_tools_and_special_tokens() -> None:
    template = ChatTemplate(TOOLS_TEMPLATE, {"bos_token": "<s>"})
    tools = [{"name": "calc", "description": "adds <numbers> & more"}]
    text = template.render([{"role": "tool", "content": "4"}], True, tools)
    assert text == (
        'TOOLS [{"name": "calc", "description": "adds <numbers> & more"}]\n<s>tool: 4\nassistant:'
    )
    assert template.render([{"role": "user", "content": "x"}], False) == "<s>user: x\n"


def test_chat_template_raise_exception_is_a_clear_error() -> None:
    template = ChatTemplate(TOOLS_TEMPLATE)
    with pytest.raises(ChatTemplateError, match="unknown role robot"):
        template.render([{"role": "robot", "content": "beep"}])
    with pytest.raises(ChatTemplateError, match="'role'"):
        template.render([{"content": "no role"}])


def test_chat_template_is_sandboxed() -> None:
    escape = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(ChatTemplateError):
        ChatTemplate(escape).render([{"role": "user", "content": "x"}])
    mutate = "{{ messages.append(1) }}"
    with pytest.raises(ChatTemplateError):
        ChatTemplate(mutate).render([{"role": "user", "content": "x"}])


def test_chat_template_syntax_error() -> None:
    with pytest.raises(ChatTemplateError, match="does not parse"):
        ChatTemplate("{% for m in messages %}")


# ---------------------------------------------------------------------------------------------
# A SentencePiece ('llama' model type) vocabulary, as llama.cpp stores it

SPM_WORDS = ["\u2581the", "\u2581cat", "\u2581sat", "at", "he", "\u2581t", "\u2581c", "\u2581s"]


def _spm_metadata() -> dict:
    letters = sorted(set("".join(SPM_WORDS)))
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + letters + SPM_WORDS
    types = [2, 3, 3] + [6] * 256 + [1] * (len(letters) + len(SPM_WORDS))
    # Longer pieces score higher, so they merge after their parts exist.
    scores = [0.0] * 259 + [-100.0] * len(letters) + [-10.0 + len(w) for w in SPM_WORDS]
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
    }


@pytest.fixture(scope="module")
def spm() -> Tokenizer:
    return Tokenizer.from_gguf_metadata(_spm_metadata(), [2])


def test_sentencepiece_words_and_bos(spm: Tokenizer) -> None:
    tokens = _spm_metadata()["tokenizer.ggml.tokens"]
    ids = spm.encode("the cat sat")
    assert [tokens[i] for i in ids] == ["\u2581the", "\u2581cat", "\u2581sat"]
    assert spm.encode("the", add_special_tokens=True)[0] == 1
    assert spm.decode(ids) == "the cat sat"


def test_sentencepiece_falls_back_to_bytes(spm: Tokenizer) -> None:
    tokens = _spm_metadata()["tokenizer.ggml.tokens"]
    ids = spm.encode("cat→é")
    assert "<0xE2>" in [tokens[i] for i in ids]
    assert spm.decode(ids) == "cat→é"


@settings(max_examples=60, deadline=None)
@given(
    # Control tokens' text ("<s>", found by this test) is read as those tokens, which decode
    # to nothing: plain text only here.
    text=UNICODE_TEXT.filter(
        lambda t: (
            not t.startswith(" ") and "\u2581" not in t and not any(s in t for s in ("<s>", "</s>"))
        )
    )
)
def test_sentencepiece_round_trips_and_streams(spm: Tokenizer, text: str) -> None:
    ids = spm.encode(text)
    assert spm.decode(ids) == text
    decoder = spm.incremental_decoder()
    pieces = [decoder.push(i) for i in ids] + [decoder.flush()]
    assert "".join(pieces) == text
    assert not any("\ufffd" in piece for piece in pieces)


# ---------------------------------------------------------------------------------------------
# Other byte-level pre-tokenizers (Llama 3, Qwen2), on the bundled vocabulary


@pytest.mark.parametrize("pre", ["llama-bpe", "qwen2"])
def test_pre_tokenizer_matches_the_reference_split(gguf_path, hf_reference, pre: str) -> None:
    from tokenizers import Regex, pre_tokenizers
    from tokenizers import Tokenizer as BackendTokenizer
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

    from model.gguf_file import read_gguf

    metadata = dict(read_gguf(gguf_path).metadata) | {"tokenizer.ggml.pre": pre}
    ours = Tokenizer.from_gguf_metadata(metadata, [2])
    reference = BackendTokenizer.from_str(hf_reference[1].backend_tokenizer.to_str())
    reference.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(GGUF_PRE_TOKENIZER_SPLITS[pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    for text in VARIED_TEXTS:
        assert ours.encode(text) == reference.encode(text, add_special_tokens=False).ids, text
