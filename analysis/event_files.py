"""Checking a trial's TensorBoard event files without TensorFlow.

An event file is a sequence of TFRecords: an 8-byte little-endian length, its masked CRC-32C, the
data (a serialised ``Event`` protocol buffer) and the data's masked CRC-32C. A file that ends
inside a record is truncated; a record whose checksum or protocol buffer does not hold is corrupt.
"""

from __future__ import annotations

import struct

EVENT_FILE_PREFIX = "events.out.tfevents."


class EventFileError(Exception):
    """An event file that cannot be read; ``str(error)`` says why."""


def check_event_file(data: bytes, name: str = "event file") -> dict:
    """Read every record of an event file's bytes; {"events": n, "last_step": s, "tags": [...]}
    of its scalars, or an :class:`EventFileError` that says where and why it is broken."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    if not data:
        raise EventFileError(f"truncated: {name} is empty")
    offset, events, last_step, tags = 0, 0, None, set()
    while offset < len(data):
        if offset + 12 > len(data):
            raise EventFileError(f"truncated: {name} ends inside a record header at byte {offset}")
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        if masked_crc32c(header) != length_crc:
            raise EventFileError(f"corrupt: {name}: bad length checksum at byte {offset}")
        end = offset + 12 + length + 4
        if end > len(data):
            raise EventFileError(
                f"truncated: {name} ends inside record {events + 1} (byte {len(data)} of {end})")
        payload = data[offset + 12:offset + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[end - 4:end])
        if masked_crc32c(payload) != payload_crc:
            raise EventFileError(f"corrupt: {name}: bad data checksum in record {events + 1}")
        event = Event()
        try:
            event.ParseFromString(payload)
        except Exception as error:  # google.protobuf's DecodeError
            raise EventFileError(f"corrupt: {name}: record {events + 1} is not an event ({error})") from error
        events += 1
        if event.HasField("summary"):
            last_step = event.step
            tags.update(value.tag for value in event.summary.value)
        offset = end
    return {"events": events, "last_step": last_step, "tags": sorted(tags)}
