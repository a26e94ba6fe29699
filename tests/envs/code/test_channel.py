"""The tester path's channel: frames, and what a misbehaving peer costs (a bounded wait, an error)."""

import os
import struct
import time

import pytest

from envs.code.channel import ChannelError, recv_frame, send_frame


@pytest.fixture
def pipe():
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def test_frames_round_trip(pipe):
    r, w = pipe
    send_frame(w, {"v": [1, "é", {"$t": [2.5]}]}, time.monotonic() + 1)
    send_frame(w, {"e": "ValueError: x"})
    assert recv_frame(r, time.monotonic() + 1) == {"v": [1, "é", {"$t": [2.5]}]}
    assert recv_frame(r, time.monotonic() + 1) == {"e": "ValueError: x"}


def test_a_silent_peer_costs_the_deadline_and_no_more(pipe):
    r, _ = pipe
    t0 = time.monotonic()
    with pytest.raises(ChannelError) as e:
        recv_frame(r, t0 + 0.2)
    assert e.value.reason == "timeout" and time.monotonic() - t0 < 1.0


def test_oversized_garbled_and_closed_channels_are_errors(pipe):
    r, w = pipe
    os.write(w, struct.pack(">I", 1 << 30))
    with pytest.raises(ChannelError, match="cap") as e:
        recv_frame(r, time.monotonic() + 1)
    assert e.value.reason == "malformed"
    for junk in (b"{not json", b"NaN"):
        os.write(w, struct.pack(">I", len(junk)) + junk)
        with pytest.raises(ChannelError) as e:
            recv_frame(r, time.monotonic() + 1)
        assert e.value.reason == "malformed"
    os.close(w)
    with pytest.raises(ChannelError) as e:
        recv_frame(r, time.monotonic() + 1)
    assert e.value.reason == "closed"


def test_a_peer_that_stops_reading_cannot_block_the_writer(pipe):
    _, w = pipe
    t0 = time.monotonic()
    with pytest.raises(ChannelError) as e:
        send_frame(w, {"a": "x" * (4 << 20)}, t0 + 0.2)  # more than a pipe holds
    assert e.value.reason == "timeout" and time.monotonic() - t0 < 1.0
