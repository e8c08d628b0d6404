"""What the commands show of recorded text: controls escaped, and the escape undone when an id
is pasted back (:mod:`turnwatch.cli.shown`)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from turnwatch.cli.shown import typed_back, visible

CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@given(st.text())
def test_nothing_a_terminal_acts_on_is_shown_and_the_id_comes_back(text: str) -> None:
    shown = visible(text)
    assert not CONTROLS.search(shown)
    if "\\" not in text:  # a backslash of its own may read as an escape: found as typed first
        assert typed_back(shown) == text


def test_what_needs_no_escape_is_shown_as_it_is() -> None:
    for text in ("sess-042", "Grep", "mcp__github__search", "日本語", "s:fire:1", "[b]x", "a\\nb"):
        assert visible(text) == text
    assert visible("a\x1b[2Jb\n\u202e") == "a\\x1b[2Jb\\n\\u202e"
    assert visible("\x9b\x7f\t") == "\\x9b\\x7f\\t"
    # Only what visible writes is undone: an escape of a printable character is text.
    assert typed_back("a\\x41\\u0042\\x1b") == "a\\x41\\u0042\x1b"
