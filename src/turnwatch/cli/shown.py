"""Recorded text on a terminal: shown as it was recorded, never acted on.

A session id, a tool name (an agent CLI's tool names are a model's output), an error a runtime
recorded: turnwatch prints them to an on-call engineer's terminal, and any of them may hold what
a terminal acts on rather than shows. An escape sequence recolours or clears the screen or sets
the window's title, a newline makes one id look like two lines, a bidirectional override shows
an id reversed. rich strips only a few control characters (bell, backspace, carriage return)
and passes escape sequences through. So control characters (C0, DEL, C1) and the bidirectional
controls are shown escaped, the way Python writes them in a string (``\\x1b``, ``\\n``,
``\\u202e``), and an id pasted back in that form is found (:func:`typed_back`).
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.text import Text

_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_ESCAPES: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
_ESCAPES.update({ord(c): f"\\u{ord(c):04x}" for c in _BIDI})
_ANY = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_ESCAPED = re.compile(r"\\(?:x([0-9a-f]{2})|u([0-9a-f]{4})|([nrt]))")
_NAMED = {"n": "\n", "r": "\r", "t": "\t"}


def visible(text: str) -> str:
    """``text`` with its control characters and bidirectional controls escaped."""
    return text.translate(_ESCAPES) if _ANY.search(text) else text


def typed_back(text: str) -> str:
    """What :func:`visible` showed as ``text`` (an id pasted back): the escapes it writes
    undone, and only those (``\\x41`` stays as it is: visible never writes it)."""
    return _ESCAPED.sub(_undo, text)


def _undo(m: re.Match[str]) -> str:
    ch = _NAMED.get(m[3]) or chr(int(m[1] or m[2], 16))
    return ch if ord(ch) in _ESCAPES else m[0]


def show(console: Console, text: str, **kwargs: Any) -> None:
    """Print one message that carries recorded text: as text, not markup, its controls escaped."""
    console.print(visible(text), markup=False, highlight=False, **kwargs)


def recover_with(console: Console, command: str) -> None:
    """``Recover with: <command>``: the command whole on one line (people paste it), bold, its
    controls escaped."""
    console.print(Text.assemble("Recover with: ", (visible(command), "bold")), soft_wrap=True)
