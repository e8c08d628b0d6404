"""JSON for the ledger and for ingested lines: orjson, with the standard library behind it.

Every event's attributes are encoded once on the way into the ledger, and every ingested line is
parsed once; with the standard library those two calls were the largest share of both paths.
orjson refuses a few things the standard library takes (integers beyond 64 bits, non-string keys,
objects it does not know without ``default``), so whatever it refuses goes through ``json``
instead: an odd value costs time, never an event. Reading, it does not refuse an integer beyond
64 bits: it returns a float, silently (``2**80 + 1`` comes back as ``1.2089258196146292e+24``).
So text with a run of 19 digits or more, the only way to write one, is read by ``json``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import orjson

from turnwatch.runtime.events import storable_text

_STD_COMPACT = json.JSONEncoder(separators=(",", ":"), default=str).encode
_STD_SORTED = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str).encode


def dumps_attrs(attrs: Mapping[str, Any]) -> str:
    """Compact JSON text of an event's attributes; anything unknown becomes its ``str``."""
    if type(attrs) is not dict:  # orjson would hand another mapping to ``default`` (str)
        attrs = dict(attrs)
    try:
        return orjson.dumps(attrs, default=str).decode()
    except TypeError:  # a >64-bit integer, a non-string key
        return _STD_COMPACT(attrs)


def dumps_line(value: Any) -> bytes:
    """Compact JSON and a newline: one line of an events file. Anything unknown is its ``str``."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # a >64-bit integer, a non-string key
        return _STD_COMPACT(value).encode() + b"\n"


def dumps_canonical(value: Any) -> bytes:
    """Compact JSON with sorted keys: the same content gives the same bytes (identities).

    Text with a lone surrogate is taken :func:`storable`, as the ledger keeps it: an event's
    identity is then the same computed from it or from its row (``dedup.ingested_keys``)."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        pass
    value = storable_deep(value)
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a >64-bit integer, a non-string key
        return _STD_SORTED(value).encode()


def dumps_rows(rows: list[Any]) -> str:
    """Compact JSON text of a list of rows (tuples become arrays), for SQLite's ``json_each``.

    Floats are written in their shortest exact form, which SQLite reads back bit for bit. What
    orjson refuses is written :func:`storable` (SQLite's JSON reader would turn a lone
    surrogate's ``\\udcff`` into bytes that are not UTF-8: a row no reader could decode).
    """
    try:
        return orjson.dumps(rows, default=str).decode()
    except TypeError:
        return _STD_COMPACT(storable_rows(rows))


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def storable(value: Any) -> Any:
    """One column value as SQLite can bind it, and as the JSON path stores it: text
    :func:`storable_text`, an integer beyond 64 bits a float, anything unknown its ``str``."""
    kind = type(value)
    if kind is str:
        return storable_text(value)
    if kind is int:
        if _INT64_MIN <= value <= _INT64_MAX:
            return value
        try:
            return float(value)
        except OverflowError:  # beyond a double too
            return str(value)
    if value is None or kind is float or kind is bytes:
        return value
    if kind is bool:
        return int(value)
    return storable_text(str(value))


def storable_deep(value: Any) -> Any:
    """``value`` with every text in it, keys too, :func:`storable_text` (lists for tuples)."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {
            storable_text(k) if isinstance(k, str) else k: storable_deep(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [storable_deep(v) for v in value]
    return value


def storable_rows(rows: list[Any]) -> list[Any]:
    """Rows (tuples, or single values) with every value :func:`storable`."""
    return [
        tuple(map(storable, row)) if isinstance(row, tuple | list) else storable(row)
        for row in rows
    ]


# The check costs each ingested line about what orjson's parse does; a regular expression's
# search cost three times that (#31). Every ASCII digit becomes ``0``, every other byte a space,
# and C's substring search looks for 19 zeros in a row: the same answer as ``[0-9]{19}`` (no
# byte of another character in UTF-8 is ASCII). Text (attributes read back from the ledger) is
# encoded first, a lone surrogate passed through as its three non-ASCII bytes: one check for
# both, against the regular expression 0.95 µs vs 2.5 on 104 characters, 0.76 vs 0.45 on 23
# (this VM, throttled). Shorter than 19, text holds no such run (most stored attrs: ``{}``).
_ZERO_DIGITS = bytes(0x30 if 0x30 <= c <= 0x39 else 0x20 for c in range(256))
_LONG_RUN = b"0" * 19
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _long_digits(data: bytes | str) -> bool:
    """Whether ``data`` may hold an integer beyond 64 bits (which orjson reads as a float)."""
    if len(data) < 19:
        return False
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    return _LONG_RUN in data.translate(_ZERO_DIGITS)


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def loads(data: bytes | str) -> Any:
    """Parse one JSON document. Raises ``ValueError`` (``orjson.JSONDecodeError``) if invalid.

    Stricter than ``json.loads`` where JSON itself is: ``NaN`` and ``Infinity`` are refused.
    Integers beyond 64 bits come back whole.
    """
    if _long_digits(data):
        return json.loads(data, parse_constant=_refuse)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # A lone surrogate's escape (``"\\udcff"``) is JSON, which orjson refuses: Python's own
        # json.dumps writes one for a name decoded with surrogateescape (and so does
        # EventLines). Read as the standard library reads it; anything else stays refused.
        if _SURROGATE_ESCAPE.search(data if isinstance(data, bytes) else data.encode()) is None:
            raise
        return json.loads(data, parse_constant=_refuse)


def loads_stored(text: str) -> Any:
    """Parse JSON the ledger stored. Lenient where :func:`loads` is strict: ledgers written by
    turnwatch 0.1.0 (``json.dumps``) may hold ``NaN`` or ``Infinity``, and are read as they were.
    """
    if _long_digits(text):
        return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
