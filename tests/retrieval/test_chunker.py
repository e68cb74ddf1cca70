from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval import ParsedDocument, Section
from retrieval.chunker import ChunkerConfig, breadcrumb, chunk_document
from retrieval.textbuilder import TextBuilder

WORDS = ["leave", "policy", "the", "employee", "receives", "days", "approval", "manager", "x1"]


def build(sections: list[tuple[list[str], str]], title: str = "Doc") -> ParsedDocument:
    b = TextBuilder(title=title)
    for headings, text in sections:
        for level, heading in enumerate(headings, start=1):
            b.heading(level, heading)
        b.block(text)
    return b.build("fallback")


def n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def test_long_section_is_split_with_overlap_and_exact_offsets(tokenizer) -> None:
    sentences = [f"Rule {i} says employees must file form {i} before day {i}." for i in range(60)]
    doc = build([(["Filing"], " ".join(sentences))])
    config = ChunkerConfig(max_tokens=60, overlap=0.15)
    chunks = chunk_document(doc, tokenizer, config)
    assert len(chunks) > 5
    for chunk in chunks:
        assert doc.text[chunk.start : chunk.end] == chunk.text
        assert n_tokens(tokenizer, chunk.text) <= 60
        assert chunk.section == "Doc > Filing"
    for prev, nxt in zip(chunks, chunks[1:], strict=False):
        assert nxt.start < prev.end, "consecutive chunks should overlap"
        assert nxt.start > prev.start
    assert chunks[-1].end == doc.sections[0].end


def test_chunks_never_cross_a_heading(tokenizer) -> None:
    doc = build([(["A"], "alpha " * 30), (["B"], "beta " * 30)])
    chunks = chunk_document(doc, tokenizer, ChunkerConfig(max_tokens=200))
    assert [c.section for c in chunks] == ["Doc > A", "Doc > B"]
    assert "beta" not in chunks[0].text and "alpha" not in chunks[1].text


def test_one_sentence_longer_than_the_budget_is_cut_by_tokens(tokenizer) -> None:
    doc = build([(["Long"], " ".join(["word"] * 500))])
    chunks = chunk_document(doc, tokenizer, ChunkerConfig(max_tokens=100, overlap=0.1))
    assert all(n_tokens(tokenizer, c.text) <= 100 for c in chunks)
    assert chunks[0].start == doc.sections[0].start and chunks[-1].end == doc.sections[0].end


def test_breadcrumb_does_not_repeat_the_title() -> None:
    assert breadcrumb("Leave", ["Leave", "Sick"]) == "Leave > Sick"
    assert breadcrumb("Leave", []) == "Leave"


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        ChunkerConfig(max_tokens=4)
    with pytest.raises(ValueError, match="overlap"):
        ChunkerConfig(overlap=0.9)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["Intro", "Rules", "Limits"]),
            st.lists(st.sampled_from(WORDS + [".", "!", "\n"]), min_size=1, max_size=120),
        ),
        min_size=1,
        max_size=5,
    ),
    st.integers(min_value=16, max_value=80),
)
def test_chunk_invariants_hold_for_any_text(tokenizer, sections, max_tokens) -> None:
    doc = build([([h], " ".join(words)) for h, words in sections])
    chunks = chunk_document(doc, tokenizer, ChunkerConfig(max_tokens=max_tokens))
    covered: dict[int, list[tuple[int, int]]] = {}
    for chunk in chunks:
        assert doc.text[chunk.start : chunk.end] == chunk.text
        assert n_tokens(tokenizer, chunk.text) <= max_tokens
        owner = [
            n for n, s in enumerate(doc.sections) if s.start <= chunk.start and chunk.end <= s.end
        ]
        assert owner, "a chunk crosses a section boundary"
        covered.setdefault(owner[0], []).append((chunk.start, chunk.end))
    for n, section in enumerate(doc.sections):
        if any(c.isalnum() for c in section.text):
            assert n in covered, f"section {n} lost"


def test_parsed_sections_are_the_unit(tokenizer) -> None:
    text = "Header line\n\nBody one."
    doc = ParsedDocument("T", text, [Section(["Header line"], "Body one.", 13, 22)])
    (chunk,) = chunk_document(doc, tokenizer, ChunkerConfig())
    assert (chunk.start, chunk.end, chunk.text, chunk.section) == (
        13,
        22,
        "Body one.",
        "T > Header line",
    )
