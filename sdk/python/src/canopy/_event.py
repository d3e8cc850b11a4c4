"""canopy.Event: one CloudEvents 1.0 agent event, and the deterministic ids canopy's events carry."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from ._contract import SCHEMA_VERSION

_B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base32, as ULIDs use
_MAX_ULID_MS = (1 << 48) - 1

CONTENT_TYPE = "application/cloudevents+json"
"""The content-type header of every record canopy's topics carry."""


def ulid(ms: int, entropy: bytes) -> str:
    """The ULID with time ms (clamped to 0..2^48-1) and the first 10 bytes of entropy."""
    ms = min(max(ms, 0), _MAX_ULID_MS)
    n = (ms << 80) | int.from_bytes(entropy[:10], "big")
    return "".join(_B32[(n >> (5 * i)) & 31] for i in reversed(range(26)))


def ulid_ms(value: str) -> int | None:
    """The time of a ULID in Unix milliseconds, or None if value is not a ULID."""
    if len(value) != 26 or value[0] > "7":
        return None
    ms = 0
    for c in value[:10].upper():
        i = _B32.find(c)
        if i < 0:
            return None
        ms = ms * 32 + i
    if any(_B32.find(c) < 0 for c in value[10:].upper()):
        return None
    return ms


def derive(ms: int, *parts: str) -> str:
    """A ULID with time ms and entropy from a SHA-256 of parts, each length-prefixed so that no
    two part lists hash alike (pkg/ids.Derive's construction)."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)
    return ulid(ms, h.digest())


def ack_id(wake_id: str, source: str, at_ms: int) -> str:
    """The id of the conductor.wake_received event source sends for wake wake_id, as pkg/ids.Ack:
    time the wake id's own (at_ms when it is not a ULID), entropy a SHA-256 of the source and the
    wake id, so a repeated acknowledgement is a duplicate canopy applies once."""
    ms = ulid_ms(wake_id)
    if ms is None:
        ms = at_ms if 0 <= at_ms <= _MAX_ULID_MS else 0  # out of a ULID's range: no time, as pkg/ids
    seed = hashlib.sha256(f"conductor.wake_received\0{source}\0{wake_id}".encode("utf-8", "surrogatepass"))
    return ulid(ms, seed.digest())


def format_time(at: datetime) -> str:
    """RFC 3339 in UTC at millisecond precision, as canopy keeps times: 2026-02-14T10:00:00.000Z."""
    at = at.astimezone(timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def parse_time(value: str) -> datetime:
    """An RFC 3339 time (Z or an offset), as a timezone-aware datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))


def _timestamp(value: datetime | str) -> str:
    """A data field's timestamp: a datetime formatted like an event's time, a string as given."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("canopy: a timestamp must be timezone-aware (datetime.now(timezone.utc), not utcnow())")
        return format_time(value)
    return value


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


@dataclass(frozen=True)
class Event:
    """One canopy agent event, as the builders of canopy.events make it.

    time is kept at millisecond precision in UTC (what the contract keeps). id defaults to a ULID
    derived from the content: the event's time, and a SHA-256 of its type, run, agent, time,
    scope, correlation, causation and data (not its source). Sending the same Event again, or
    one built again with the same arguments and time, gives the same id, which canopy applies
    once. source defaults to the sending Producer's source, or /agents/<agent_id> when the
    event is serialised without one.
    """

    type: str
    run_id: str
    agent_id: str
    data: Mapping[str, Any] | None = None
    source: str | None = None
    time: datetime | None = None
    id: str | None = None
    session_id: str | None = None
    thread_id: str | None = None
    correlation_id: str | None = None
    causation_id: str | None = None
    _derived: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        at = _now() if self.time is None else self.time
        if not isinstance(at, datetime):
            raise TypeError(f"canopy: time must be a datetime, not {type(at).__name__}")
        if at.tzinfo is None:
            raise ValueError("canopy: time must be timezone-aware (datetime.now(timezone.utc), not utcnow())")
        at = at.astimezone(timezone.utc)
        object.__setattr__(self, "time", at.replace(microsecond=at.microsecond // 1000 * 1000))
        if self.data is not None:
            object.__setattr__(self, "data", dict(self.data))
        if self.id is None or self._derived:
            object.__setattr__(self, "id", self._content_id())
            object.__setattr__(self, "_derived", True)

    def _content_id(self) -> str:
        assert self.time is not None
        data = "" if self.data is None else json.dumps(self.data, sort_keys=True, separators=(",", ":"),
                                                       ensure_ascii=False, allow_nan=False)
        return derive(_ms(self.time), "canopy.event", self.type, self.run_id, self.agent_id, format_time(self.time),
                      self.session_id or "", self.thread_id or "", self.correlation_id or "",
                      self.causation_id or "", data)

    def with_source(self, source: str) -> Event:
        """This event with source set (its id unchanged: the source is not part of it)."""
        return replace(self, source=source)

    def to_dict(self) -> dict[str, Any]:
        """The event as CloudEvents 1.0 JSON (structured mode): optional attributes that are None
        are left out, never sent as empty strings."""
        assert self.time is not None and self.id is not None
        out: dict[str, Any] = {
            "specversion": "1.0",
            "id": self.id,
            "source": self.source if self.source is not None else "/agents/" + self.agent_id,
            "type": self.type,
            "time": format_time(self.time),
            "datacontenttype": "application/json",
            "runid": self.run_id,
            "agentid": self.agent_id,
            "schemaversion": SCHEMA_VERSION,
        }
        for name, value in (("sessionid", self.session_id), ("threadid", self.thread_id),
                            ("correlationid", self.correlation_id), ("causationid", self.causation_id)):
            if value is not None:
                out[name] = value
        out["data"] = {} if self.data is None else dict(self.data)
        return out

    def to_json(self) -> str:
        """The event as one line of JSON (UTF-8 when encoded)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
