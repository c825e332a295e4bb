"""Splitting server-sent events (proxy/sse.py) on their boundaries, the one splitter every fault and
model shape uses: properties (hypothesis) over events with LF, CRLF and CR line ends, a trailing
partial event, and network chunks that cut the body anywhere."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from faultproxy.proxy.sse import EventSplitter, split_events

ENDINGS = [b"\n", b"\r\n", b"\r"]
# A field line, never empty and without a line end of its own (as a server writes one).
lines = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), min_size=1,
                max_size=12).map(lambda text: text.encode())


@st.composite
def event(draw: st.DrawFn) -> bytes:
    """One whole event: its lines, each ended by the event's line end, then the blank line."""
    end = draw(st.sampled_from(ENDINGS))
    return b"".join(line + end for line in draw(st.lists(lines, min_size=1, max_size=4))) + end


@st.composite
def partial(draw: st.DrawFn) -> bytes:
    """What a stream cut mid-event leaves: lines without the blank line, the last one maybe unended."""
    end = draw(st.sampled_from(ENDINGS))
    body = end.join(draw(st.lists(lines, min_size=1, max_size=3)))
    return body + end if draw(st.booleans()) else body


@given(events=st.lists(event(), max_size=6), tail=st.just(b"") | partial())
def test_a_body_splits_into_its_events_and_its_partial_tail(events: list[bytes], tail: bytes) -> None:
    assert split_events(b"".join(events) + tail) == events + ([tail] if tail else [])


@given(events=st.lists(event(), max_size=6), tail=st.just(b"") | partial(), data=st.data())
def test_chunks_cut_anywhere_give_the_same_events(events: list[bytes], tail: bytes, data: st.DataObject) -> None:
    body = b"".join(events) + tail
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(body) - 1)), max_size=8)))
    splitter = EventSplitter()
    fed = [e for start, stop in zip([0, *cuts], [*cuts, len(body)]) for e in splitter.feed(body[start:stop])]
    assert fed == events
    assert splitter.rest() == tail and splitter.rest() == b""  # the tail once, then nothing
