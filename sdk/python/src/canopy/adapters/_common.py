"""What every adapter shares: where its events go, and the ids and times it gives them."""
from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Protocol

from .._event import Event, derive

logger = logging.getLogger("canopy.adapters")

MAX_ID = 256
"""The longest identifier of the contract, in code points."""

MAX_TEXT = 512
"""The longest free text of an activity event (a title, a summary), in code points."""

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CODE = re.compile(r"[^a-z0-9]+")

MAX_ERRORS = 100
"""How many refused events an adapter keeps for flush() to report (the count goes on)."""


class Sender(Protocol):
    """A canopy.Producer, or anything with its send(event)."""

    def send(self, event: Event) -> Any: ...


Target = Sender | Callable[[Event], Any]
"""Where an adapter sends: a canopy.Producer, or a callable taking each canopy.Event."""


class AdapterError(Exception):
    """Events an adapter could not send (refused by validation, or by the target); errors holds
    each exception, the first MAX_ERRORS of them, and count how many there were."""

    def __init__(self, errors: list[Exception], count: int) -> None:
        self.errors = errors
        self.count = count
        super().__init__(f"canopy adapter: {count} event(s) not sent; the first: {errors[0]!r}")


class Emitter:
    """Sends an adapter's events to its target, never raising into the framework: an agent
    keeps running when canopy cannot take its events. A refusal is logged and kept, and
    flush() raises it (AdapterError), so that a program or a test that flushes sees it."""

    def __init__(self, target: Target) -> None:
        send = getattr(target, "send", None)
        if callable(send):
            self._send: Callable[[Event], Any] = send
        elif callable(target):
            self._send = target
        else:
            raise TypeError("canopy adapter: the target must be a canopy.Producer or a callable taking an Event")
        self._target = target
        self._lock = threading.Lock()
        self._errors: list[Exception] = []
        self._count = 0

    def __call__(self, event: Event) -> None:
        try:
            self._send(event)
        except Exception as e:  # noqa: BLE001 - any refusal is reported by flush, not raised into the agent
            logger.warning("canopy adapter: %s event for agent %s of run %s not sent: %s",
                           event.type, event.agent_id, event.run_id, e)
            self.refused(e)

    def refused(self, error: Exception) -> None:
        """Keep error (an event that could not be built or sent) for flush to raise."""
        with self._lock:
            self._count += 1
            if len(self._errors) < MAX_ERRORS:
                self._errors.append(error)

    def flush(self, timeout: float = 30.0) -> None:
        """Flush the target when it is a Producer (raising its DeliveryError), then raise
        AdapterError if any event was refused since the last flush."""
        flush = getattr(self._target, "flush", None)
        if callable(flush):
            flush(timeout)
        with self._lock:
            errors, count = self._errors, self._count
            self._errors, self._count = [], 0
        if errors:
            raise AdapterError(errors, count)


def ident(value: object, fallback: str) -> str:
    """value as a contract identifier: control characters dropped, at most MAX_ID code points;
    fallback when nothing is left."""
    s = _CONTROL.sub("", str(value)) if value is not None else ""
    s = s.strip()[:MAX_ID]
    return s or fallback


def text(value: object) -> str | None:
    """value as free text of an activity event (control characters but line feed and tab
    dropped, at most MAX_TEXT code points), or None when nothing is left."""
    if value is None:
        return None
    s = re.sub("[\x00-\x08\x0b-\x1f\x7f-\x9f]", "", str(value)).strip()[:MAX_TEXT]
    return s or None


def code(value: object, fallback: str) -> str:
    """value as a short code (error_code, reason): lower case, words joined by '_', at most 64
    characters; fallback when nothing is left."""
    s = _CODE.sub("_", str(value).lower()).strip("_")[:64].strip("_") if value is not None else ""
    return s or fallback


def count(value: object) -> int | None:
    """value as a contract count (an int from 0), or None when it is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def now() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(timezone.utc)


def parse_time(value: object) -> datetime | None:
    """An ISO 8601 time with an offset (the frameworks' span times) as a datetime; None when
    value is not one."""
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def event_id(at: datetime, *parts: str) -> str:
    """An event id derived from what the event is about in the framework (a span, a call)
    rather than from its content: two model calls with the same usage at the same millisecond
    stay two events, and a retry of one is one."""
    return derive(int(at.timestamp() * 1000), "canopy.adapter", *parts)
