"""gateway.api.wire: the frames it builds are byte for byte what websockets' own encoder makes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode

from gateway.api.wire import text_header, text_messages

EDGES = [0, 1, 125, 126, 127, 65535, 65536, 70000]


def reference(payload: bytes) -> bytes:
    return Frame(Opcode.TEXT, payload).serialize(mask=False)


def test_every_length_class_matches_the_library_at_its_edges() -> None:
    for length in EDGES:
        payload = b"x" * length
        assert text_header(length) + payload == reference(payload), length


@given(st.lists(st.binary(max_size=300).map(lambda b: b.hex().encode()), max_size=20))
def test_a_run_of_messages_is_the_library_frames_joined(payloads: list[bytes]) -> None:
    assert text_messages(payloads) == b"".join(reference(p) for p in payloads)


def test_a_websockets_client_reads_them_as_the_messages_sent() -> None:
    from websockets.protocol import Protocol, Side, State

    client = Protocol(Side.CLIENT, state=State.OPEN, max_size=None)  # past the handshake: frames are what is tested
    payloads = [b'{"a":1}', b"y" * 200, b"z" * 70000]
    client.receive_data(text_messages(payloads))
    events = client.events_received()
    assert [e.data for e in events] == payloads
    assert all(e.opcode is Opcode.TEXT and e.fin for e in events)
