"""StopStringMatcher: stop strings split across deltas, never a partial stop emitted."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.stops import StopStringMatcher


def reference_cut(text: str, stops: list[str]) -> tuple[str, bool]:
    """Text before the first stop string completed when reading one character at a time."""
    for end in range(1, len(text) + 1):
        done = [s for s in stops if text[:end].endswith(s)]
        if done:
            return text[: end - max(len(s) for s in done)], True
    return text, False


def stream(pieces: list[str], stops: list[str]) -> tuple[list[str], bool]:
    """Feed `pieces`; check at every step that nothing emitted is ever taken back."""
    matcher = StopStringMatcher(stops)
    full = "".join(pieces)
    expected, expected_hit = reference_cut(full, stops)
    emitted: list[str] = []
    hit = False
    for piece in pieces:
        out, hit = matcher.feed(piece)
        emitted.append(out)
        assert expected.startswith("".join(emitted)), "emitted text that is not in the result"
        if hit:
            break
    if not hit:
        emitted.append(matcher.flush())
    assert hit == expected_hit
    assert "".join(emitted) == expected
    return emitted, hit


def test_stop_split_across_many_small_deltas() -> None:
    emitted, hit = stream(["Hello", " wor", "ld", "<", "|e", "nd", "|>", " more"], ["<|end|>"])
    assert hit and "".join(emitted) == "Hello world"
    assert emitted[3:6] == ["", "", ""]  # "<", "|e", "nd" held back, nothing leaked


def test_held_text_is_released_when_it_turns_out_not_to_be_a_stop() -> None:
    matcher = StopStringMatcher(["STOP"])
    assert matcher.feed("abc ST") == ("abc ", False)
    assert matcher.feed("ART") == ("START", False)
    assert matcher.feed(" S") == (" ", False)
    assert matcher.flush() == "S"


def test_stop_at_the_very_start() -> None:
    assert stream(["##", "#", "rest"], ["###"]) == (["", ""], True)
    matcher = StopStringMatcher(["\n"])
    assert matcher.feed("\nanything") == ("", True)


def test_multiple_stops_and_overlapping_prefixes() -> None:
    stops = ["abcde", "cd", "xyz"]
    # "cd" is completed before "abcde" could be: the text stops there.
    assert stream(["ab", "c", "d", "e"], stops)[0] == ["", "", "ab"]
    assert stream(["abcdef"], stops) == (["ab"], True)
    assert stream(["xx", "y", "xyz"], stops) == (["x", "", "xy"], True)


def test_nothing_more_after_a_stop() -> None:
    matcher = StopStringMatcher(["END"])
    assert matcher.feed("aEND b") == ("a", True)
    assert matcher.matched == "END"
    assert matcher.feed("more") == ("", True)
    assert matcher.flush() == ""


def test_no_stops_passes_everything_through() -> None:
    matcher = StopStringMatcher([])
    assert matcher.feed("abc") == ("abc", False)
    assert matcher.flush() == ""


def test_empty_stop_string_is_rejected() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        StopStringMatcher(["ok", ""])


alphabet = st.sampled_from(list("ab<|>é😀 "))


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.text(alphabet, max_size=4), max_size=12),
    stops=st.lists(st.text(alphabet, min_size=1, max_size=4), max_size=3),
)
def test_any_split_gives_the_reference_result(pieces: list[str], stops: list[str]) -> None:
    stream(pieces, stops)
    # Splitting the same text into single characters gives the same result.
    assert (
        "".join(stream(list("".join(pieces)), stops)[0]) == reference_cut("".join(pieces), stops)[0]
    )
