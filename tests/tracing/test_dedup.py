"""Dedup keys recomputed from the ledger's rows are the keys the events were kept under: what
``prune`` deletes with its events. Any JSON attributes (nested, unicode, lone surrogates,
integers past 64 bits, floats), any ids, any time; real SQLite files."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.tracing.dedup import dedup_key, forget_keys, ingested_keys
from turnwatch.tracing.ledger import Ledger, connect

# Lone surrogates too (a name decoded with surrogateescape): the ledger keeps them escaped,
# and a key is computed from the escaped text either way (codec.dumps_canonical).
_TEXT = st.text(max_size=12)
_JSON: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**30), 10**30),
        st.floats(allow_nan=False, allow_infinity=False),
        _TEXT,
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_EVENTS = st.lists(
    st.builds(
        Event,
        kind=st.sampled_from(sorted(names.EVENT_KINDS)),
        session=st.sampled_from(["s", "é\u202e", "s\x00x", "[bold]s", "s\udcff"]),
        ts_unix=st.floats(0, 1e11),
        turn=st.one_of(st.none(), _TEXT),
        call=st.one_of(st.none(), _TEXT),
        tool=st.one_of(st.none(), _TEXT),
        attrs=st.dictionaries(_TEXT, _JSON, max_size=4),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=_EVENTS)
def test_the_keys_recomputed_from_the_rows_are_the_keys_kept(events: list[Event]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.sqlite3"
        ledger = Ledger(path)
        ledger.extend(events, dedup=True)
        ledger.close()
        assert ledger.lost == 0
        conn = connect(path)
        kept = {r[0] for r in conn.execute("SELECT key FROM ingested")}
        assert kept == {dedup_key(ev) for ev in events}
        sessions = sorted({ev.session for ev in events})
        made = ingested_keys(conn, sessions)
        assert {k for keys in made.values() for k in keys} == kept
        assert forget_keys(conn, [k for keys in made.values() for k in keys]) == len(kept)
        assert conn.execute("SELECT count(*) FROM ingested").fetchone()[0] == 0
        conn.close()
