"""Moved to :mod:`turnwatch.runtime.lines` (the event readers read lines the same way); still
importable from here."""

from turnwatch.runtime.lines import CHUNK as CHUNK
from turnwatch.runtime.lines import MAX_LINE_BYTES as MAX_LINE_BYTES
from turnwatch.runtime.lines import LineReader as LineReader
from turnwatch.runtime.lines import Oversized as Oversized
