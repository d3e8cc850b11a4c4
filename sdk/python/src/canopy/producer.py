"""canopy.Producer: sends agent events to canopy's Kafka topics as the contract requires."""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as _KafkaProducer

from ._errors import ConfigError, DeliveryError
from ._event import CONTENT_TYPE, Event
from ._partition import partition
from ._schema import validate

DEFAULT_PREFIX = "canopy"
"""The default prefix of canopy's topic names."""

TOPIC_VERSION = 1
"""The version in canopy's topic names (<prefix>.agent-events.v1)."""

QUIET: dict[str, Any] = {"enable.metrics.push": False}
"""librdkafka settings of every client the package makes: no client metrics pushed to the broker
(KIP-714), which also keeps librdkafka's telemetry notices off stderr."""

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
_PREFIX = re.compile(r"^[A-Za-z0-9._-]+$")


def kafka_config(options: Mapping[str, Any]) -> dict[str, Any]:
    """librdkafka properties from keyword arguments: security_protocol=... is security.protocol."""
    return {k.replace("_", "."): v for k, v in options.items()}


def topic_names(prefix: str) -> dict[str, str]:
    """canopy's topic names under prefix, as pkg/topics.Names."""
    return {base: f"{prefix}.{base}.v{TOPIC_VERSION}"
            for base in ("agent-events", "human-input", "wakes", "wakes-priority")}


class Producer:
    """Sends canopy events to <prefix>.agent-events.v1.

    Each event is validated against the contract's JSON Schemas (ValidationError, before anything
    is sent), keyed by its run id and placed in the partition murmur2 of the run id gives (as
    pkg/topics and Kafka's Java client place keys, whatever partitioner the Kafka client would
    use), with the header content-type: application/cloudevents+json. The Kafka producer is
    idempotent with acks=all. An event without a source takes this producer's.

    send() queues; flush() waits and raises DeliveryError naming each event Kafka refused and
    why. Use it as a context manager to flush on leaving. Extra keyword arguments are
    librdkafka properties, underscores for dots (security_protocol="SASL_SSL").
    """

    def __init__(self, brokers: str, *, source: str, prefix: str = DEFAULT_PREFIX,
                 validate_events: bool = True, **kafka_options: Any) -> None:
        problems = []
        if not brokers or any(":" not in b for b in brokers.split(",")):
            problems.append(f"brokers {brokers!r}: want host:port[,host:port...]")
        if not source:
            problems.append("source: must not be empty (it names this producer, e.g. /agents/my-app)")
        if not _PREFIX.match(prefix or ""):
            problems.append(f"prefix {prefix!r}: want letters, digits, '.', '_' or '-'")
        if problems:
            raise ConfigError("canopy: invalid producer config: " + "; ".join(problems))
        self.source = source
        self.topic = topic_names(prefix)["agent-events"]
        self.human_input_topic = topic_names(prefix)["human-input"]
        self._validate = validate_events
        conf: dict[str, Any] = {"bootstrap.servers": brokers, "client.id": source, "enable.idempotence": True,
                                "acks": "all", "partitioner": "murmur2_random",
                                # canopy's topics are made by its operator, with its partition count.
                                "allow.auto.create.topics": False, **QUIET}
        conf.update(kafka_config(kafka_options))
        self._kafka = _KafkaProducer(conf)
        self._partitions: dict[str, int] = {}
        self._lock = threading.Lock()
        self._failed: list[tuple[Event, KafkaError]] = []
        self._pending: dict[int, Event] = {}
        self._seq = 0

    def partitions(self, topic: str, timeout: float = 10.0) -> int:
        """The number of partitions of topic (from the cluster's metadata, then cached)."""
        n = self._partitions.get(topic)
        if n is not None:
            return n
        try:
            md = self._kafka.list_topics(topic, timeout=timeout)
        except KafkaException as e:
            raise DeliveryError([], f"metadata of {topic}: {e.args[0]}") from e
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            why = t.error if t is not None and t.error is not None else "no partitions"
            raise DeliveryError([], f"topic {topic}: {why} (canopy's topics are created by its operator, not by producers)")
        self._partitions[topic] = len(t.partitions)
        return len(t.partitions)

    def send(self, event: Event, *, topic: str | None = None, traceparent: str | None = None) -> Event:
        """Validate event and queue it for its run's partition of the agent events topic (or of
        topic, e.g. self.human_input_topic for a human's signal.input); return it as sent (with
        this producer's source if it had none). traceparent is a W3C trace context header, so
        that the wakes the event raises continue its trace."""
        if event.source is None:
            event = event.with_source(self.source)
        if self._validate:
            validate(event)
        if traceparent is not None and not _TRACEPARENT.match(traceparent):
            raise ValueError(f"canopy: traceparent {traceparent!r} is not a W3C trace context (00-<32 hex>-<16 hex>-<2 hex>)")
        topic = topic or self.topic
        value = event.to_json().encode("utf-8")
        key = event.run_id.encode("utf-8")
        part = partition(key, self.partitions(topic))
        headers = [("content-type", CONTENT_TYPE.encode())]
        if traceparent is not None:
            headers.append(("traceparent", traceparent.encode()))
        with self._lock:
            self._seq += 1
            seq = self._seq
            self._pending[seq] = event

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            with self._lock:
                ev = self._pending.pop(seq, event)
                if err is not None:
                    self._failed.append((ev, err))

        while True:
            try:
                self._kafka.produce(topic, value=value, key=key, partition=part, headers=headers, on_delivery=delivered)
                break
            except BufferError:
                self._kafka.poll(0.1)  # the local queue is full: let deliveries drain it
            except KafkaException as e:
                with self._lock:
                    self._pending.pop(seq, None)
                raise DeliveryError([(event, e.args[0])]) from e
        self._kafka.poll(0)
        return event

    def flush(self, timeout: float = 30.0) -> None:
        """Wait up to timeout seconds for every queued event to be delivered; raise DeliveryError
        naming those Kafka refused (with its error) and those still undelivered."""
        deadline = time.monotonic() + timeout
        left = self._kafka.flush(timeout)
        while left and time.monotonic() < deadline:
            left = self._kafka.flush(max(0.0, deadline - time.monotonic()))
        with self._lock:
            failed: list[tuple[Event, Any]] = list(self._failed)
            self._failed.clear()
            if left:
                failed += [(ev, None) for ev in self._pending.values()]
        if failed:
            raise DeliveryError(failed)

    def close(self, timeout: float = 30.0) -> None:
        """Flush (raising DeliveryError as flush does)."""
        self.flush(timeout)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.flush()
        else:
            self._kafka.flush(5)  # the error in flight matters more than a delivery report

