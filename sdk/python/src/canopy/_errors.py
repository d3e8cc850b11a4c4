"""The exceptions canopy raises. Each is a CanopyError."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._event import Event


class CanopyError(Exception):
    """Every error of this package."""


class ConfigError(CanopyError, ValueError):
    """A Producer's or a Conductor's configuration is invalid; the message lists every problem."""


class ValidationError(CanopyError, ValueError):
    """An event is refused by the contract's JSON Schemas; problems lists each refusal as
    "<path>: <what>" (e.g. "data.role: 'boss' is not one of [...]")."""

    def __init__(self, event_type: str, event_id: str, problems: Sequence[str]) -> None:
        self.event_type = event_type
        self.event_id = event_id
        self.problems = list(problems)
        super().__init__(f"canopy: {event_type} event {event_id} is invalid: " + "; ".join(self.problems))


class DeliveryError(CanopyError):
    """Kafka did not take one or more events. failures holds (event, error) pairs: error is
    confluent_kafka's KafkaError (its name(), e.g. MSG_SIZE_TOO_LARGE or TOPIC_AUTHORIZATION_FAILED,
    says what Kafka refused) or, for an event left undelivered at a flush's timeout, None."""

    def __init__(self, failures: Sequence[tuple[Event, Any]], detail: str = "") -> None:
        self.failures = list(failures)
        parts = []
        for ev, err in self.failures[:5]:
            what = "not delivered before the timeout" if err is None else _kafka_error(err)
            parts.append(f"{ev.type} {ev.id} of run {ev.run_id}: {what}")
        more = f" (and {len(self.failures) - 5} more)" if len(self.failures) > 5 else ""
        msg = f"canopy: {len(self.failures)} event(s) not delivered: " + "; ".join(parts) + more
        if detail:
            msg = f"canopy: {detail}" if not self.failures else msg + f"; {detail}"
        super().__init__(msg)


class HandlerError(CanopyError):
    """A Conductor's handler raised: its wake was neither acknowledged nor committed, so it is
    delivered again after a restart. The handler's exception is __cause__."""


def _kafka_error(err: Any) -> str:
    try:
        return f"{err.name()}: {err.str()}"
    except AttributeError:
        return str(err)
