"""canopy.Conductor: consume canopy's wakes with the semantics of its Go library, pkg/wake."""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from confluent_kafka import Consumer as _KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from . import events
from ._errors import ConfigError, HandlerError, ValidationError
from ._event import Event, _ms, ack_id, parse_time
from ._schema import validate
from .producer import _PREFIX, DEFAULT_PREFIX, QUIET, Producer, kafka_config, topic_names

log = logging.getLogger("canopy.conductor")

ACKNOWLEDGED_TRIGGERS = frozenset({"result", "status_completed"})
"""The trigger kinds whose agents an acknowledgement names: results and completions, which the
delivery watchdog waits to see forwarded to the conductor."""

# Commit errors that mean the partition is no longer this member's: its new owner delivers the
# wake again, and the acknowledgement it sends has the same id.
_MOVED = {KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS,
          KafkaError._NO_OFFSET, KafkaError._STATE}

# Errors of listing offsets that pass: a partition or a group coordinator that is moving or
# starting. Retried for _BACKLOG_RETRY_SECONDS when the priority lane is assigned.
_TRANSIENT = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
              KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_COORDINATOR,
              KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE}
_BACKLOG_RETRY_SECONDS = 10.0


@dataclass(frozen=True)
class Wake:
    """One wake, as the handler gets it: the wake's JSON (data, with shortcuts to its parts) and
    what the conductor learnt on receipt. stale and age_ms are recomputed at receipt: age_ms is
    the snapshot's age when generated plus the time since generated_at (never negative), and
    stale is age_ms > the conductor's stale_after_ms."""

    data: Mapping[str, Any]
    topic: str
    partition: int
    offset: int
    received_at: datetime
    age_ms: int
    stale: bool
    raw: bytes = field(repr=False)

    @property
    def wake_id(self) -> str:
        return str(self.data["wake_id"])

    @property
    def run_id(self) -> str:
        return str(self.data["run_id"])

    @property
    def lane(self) -> str:
        """"priority" (raised by human input) or "normal"."""
        return str(self.data["lane"])

    @property
    def triggers(self) -> list[dict[str, Any]]:
        """Why the conductor is woken: each trigger's kind, agent_id, event_id, at, ..."""
        return list(self.data["triggers"])

    @property
    def snapshot(self) -> dict[str, Any]:
        """The agent_tree_snapshot: the run's bounded tree as of the wake (seed 000)."""
        return dict(self.data["agent_tree_snapshot"])

    @property
    def part(self) -> dict[str, int] | None:
        """{"number": n, "count": c} when the run's triggers were split over several wakes."""
        p = self.data.get("part")
        return dict(p) if p else None

    @property
    def root_agent_id(self) -> str | None:
        """The run's root (the conductor's node), once its tree.node_created was seen."""
        r = self.data["agent_tree_snapshot"].get("root_agent_id")
        return str(r) if r else None


Handler = Callable[[Wake], None]
Clock = Callable[[], datetime]


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _check_wake(w: Any) -> None:
    """Raise ValueError unless w has what the conductor reads of a wake."""
    if not isinstance(w, dict):
        raise ValueError("not a JSON object")
    want: tuple[tuple[str, type], ...] = (("wake_id", str), ("run_id", str), ("lane", str), ("triggers", list),
                                          ("agent_tree_snapshot", dict))
    for k, t in want:
        if not isinstance(w.get(k), t):
            raise ValueError(f"{k}: missing or not a {t.__name__}")
    s = w["agent_tree_snapshot"]
    for k, t in (("snapshot_id", str), ("snapshot_age_ms", int), ("nodes", list)):
        if not isinstance(s.get(k), t) or isinstance(s.get(k), bool):
            raise ValueError(f"agent_tree_snapshot.{k}: missing or not a {t.__name__}")


class Conductor:
    """Consumes a conductor's wakes from <prefix>.wakes-priority.v1 and <prefix>.wakes.v1, with
    the semantics of canopy's Go library pkg/wake:

    - reads with isolation.level=read_committed (projectors write wakes in transactions);
    - priority first: the priority backlog found when its partitions are assigned is delivered
      before any normal wake (waiting at most priority_wait_ms for it), and before each normal
      wake every priority wake fetched since;
    - drops duplicates by wake_id among the last dedupe_size ids (and commits past them);
    - recomputes staleness at receipt (Wake.stale, Wake.age_ms) on the clock now;
    - after the handler returns, sends a conductor.wake_received acknowledgement to the agent
      events topic (keyed and partitioned by run; its id derived from the wake id and source,
      so a repeated one is a duplicate), waits until Kafka has it, and only then commits the
      wake's offset.

    One Kafka consumer per lane, so that the priority lane can be polled without waiting before
    every normal wake: the priority lane's consumer group is group + "-priority". A handler
    that raises stops run() with HandlerError: that wake is neither acknowledged nor committed,
    so it is delivered again after a restart. A handler should return within the group's
    max.poll.interval.ms (300 s by default). Extra keyword arguments are librdkafka properties,
    underscores for dots, for the consumers and the acknowledgements' producer alike.
    """

    def __init__(self, brokers: str, *, group: str = "canopy-conductor", prefix: str = DEFAULT_PREFIX,
                 stale_after_ms: int = 10_000, source: str | None = None, agent_id: str = "conductor",
                 ack: bool = True, dedupe_size: int = 10_000, priority_wait_ms: int = 5_000,
                 now: Clock = _utcnow, **kafka_options: Any) -> None:
        problems = []
        if not brokers or any(":" not in b for b in brokers.split(",")):
            problems.append(f"brokers {brokers!r}: want host:port[,host:port...]")
        if not group:
            problems.append("group: must not be empty")
        if not _PREFIX.match(prefix or ""):
            problems.append(f"prefix {prefix!r}: want letters, digits, '.', '_' or '-'")
        if stale_after_ms < 0:
            problems.append(f"stale_after_ms {stale_after_ms}: must not be negative")
        if dedupe_size < 1:
            problems.append(f"dedupe_size {dedupe_size}: must be positive")
        if priority_wait_ms < 0:
            problems.append(f"priority_wait_ms {priority_wait_ms}: must not be negative")
        if not agent_id:
            problems.append("agent_id: must not be empty")
        # The acknowledgement is an event: its source and fallback agent id must pass the contract.
        probe = events.conductor_wake_received(run_id="probe", agent_id=agent_id or "-", wake_id="probe",
                                               source=source or "/conductors/" + group,
                                               time=datetime(1970, 1, 1, tzinfo=timezone.utc))
        try:
            validate(probe)
        except ValidationError as e:
            problems += [f"source {probe.source!r} or agent_id {agent_id!r}: {p}" for p in e.problems]
        if problems:
            raise ConfigError("canopy: invalid conductor config: " + "; ".join(problems))
        self.group = group
        self.source = source or "/conductors/" + group
        self.agent_id = agent_id
        self.stale_after_ms = stale_after_ms
        self.priority_wait_ms = priority_wait_ms
        self._ack = ack
        self._now = now
        names = topic_names(prefix)
        self.priority_topic, self.normal_topic = names["wakes-priority"], names["wakes"]
        extra = kafka_config(kafka_options)
        common = {"bootstrap.servers": brokers, "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest",
                  # New wakes return at once; an idle lane is asked every 100 ms, as pkg/wake's.
                  "fetch.wait.max.ms": 100, **QUIET}
        self._prio = _KafkaConsumer({**common, **extra, "group.id": group + "-priority"})
        self._normal = _KafkaConsumer({**common, **extra, "group.id": group})
        self._producer = Producer(brokers, source=self.source, prefix=prefix, **kafka_options) if ack else None
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._dedupe_size = dedupe_size
        self._assigned = False
        self._backlog: dict[int, int] = {}  # priority partition -> where its backlog ends
        self._backlog_since = 0.0
        self._taken: dict[int, int] = {}  # priority partition -> the offset after the last record taken
        self._fetched_end: set[int] = set()  # backlog partitions librdkafka had fetched to the end
        self._held: Message | None = None  # a normal wake fetched, waiting for the priority lane
        self._subscribed = False
        self._stopping = threading.Event()
        self._closed = False
        self.delivered = 0
        """Wakes handed to the handler."""
        self.duplicates = 0
        """Wakes dropped as duplicates."""
        self.undecodable = 0
        """Records skipped because they were not wakes."""

    # Assignment of the priority lane: where its committed backlog ends.
    def _on_assign(self, consumer: Any, parts: list[TopicPartition]) -> None:
        self._assigned = True
        ends: dict[int, int] = {}
        # A partition just created may answer "not leader" for a moment after the metadata names
        # its leader: retriable errors are retried for a while, not taken for an answer.
        deadline = time.monotonic() + _BACKLOG_RETRY_SECONDS
        while True:
            try:
                committed = {tp.partition: tp.offset for tp in consumer.committed(parts, timeout=10)}
                for tp in parts:
                    low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                    start = max(low, committed.get(tp.partition, -1))
                    if high > start:
                        ends[tp.partition] = high
                break
            except KafkaException as e:
                err = e.args[0] if e.args else None
                transient = isinstance(err, KafkaError) and (err.retriable() or err.code() in _TRANSIENT)
                if transient and time.monotonic() < deadline:
                    ends.clear()
                    time.sleep(0.1)
                    continue
                log.warning("canopy: cannot list the priority backlog; priority wakes go first as they are fetched: %s", e)
                return
        log.debug("canopy: priority partitions %s assigned; backlog ends %s (committed %s)",
                  [tp.partition for tp in parts], ends, committed)
        self._backlog.update(ends)
        self._fetched_end.difference_update(ends)
        self._backlog_since = time.monotonic()

    def _on_revoke(self, _consumer: Any, parts: list[TopicPartition]) -> None:
        for tp in parts:
            self._backlog.pop(tp.partition, None)
            self._taken.pop(tp.partition, None)

    def _subscribe(self) -> None:
        if not self._subscribed:
            self._prio.subscribe([self.priority_topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_revoke)
            self._normal.subscribe([self.normal_topic])
            self._subscribed = True

    def _waiting_for_priority(self) -> bool:
        """Whether normal wakes must wait: the priority lane is not assigned yet, or the backlog
        listed at its assignment has not all been taken (at most priority_wait_ms). Called right
        after a poll of the priority lane returned nothing."""
        if self._backlog:
            positions = self._prio.position([TopicPartition(self.priority_topic, p) for p in self._backlog])
            for tp in positions:
                end = self._backlog.get(tp.partition, 0)
                if self._taken.get(tp.partition, 0) >= end:
                    self._backlog.pop(tp.partition, None)
                elif tp.offset >= end:
                    # librdkafka has fetched past the backlog (the transaction marker that may end
                    # it is never handed over): what it fetched is queued. Once a poll after this
                    # returns nothing, all of it was taken.
                    if tp.partition in self._fetched_end:
                        self._backlog.pop(tp.partition, None)
                    self._fetched_end.add(tp.partition)
            if self._backlog and (time.monotonic() - self._backlog_since) * 1000 > self.priority_wait_ms:
                log.warning("canopy: the priority backlog of partitions %s did not arrive within %d ms; delivering "
                            "normal wakes", sorted(self._backlog), self.priority_wait_ms)
                self._backlog.clear()
        return not self._assigned or bool(self._backlog)

    def poll_once(self, handler: Handler, timeout: float = 0.1) -> bool:
        """Deliver at most one wake to handler: a priority one if any is fetched, else a normal
        one, waiting up to timeout seconds. Returns whether a record was taken (a duplicate or an
        undecodable one counts)."""
        self._subscribe()
        m = self._prio.poll(0)
        if m is not None:
            return self._take(self._prio, m, handler)
        if self._waiting_for_priority():
            m = self._prio.poll(timeout)
            return m is not None and self._take(self._prio, m, handler)
        if self._held is None:
            self._held = self._normal.poll(timeout)
            if self._held is None:
                return False
            # Whatever priority wake was fetched meanwhile goes first.
            m = self._prio.poll(0)
            if m is not None:
                return self._take(self._prio, m, handler)
        m, self._held = self._held, None
        return self._take(self._normal, m, handler)

    def run(self, handler: Handler) -> None:
        """Deliver wakes to handler until stop() (or KeyboardInterrupt), then close. Raises
        HandlerError when the handler raised, DeliveryError when an acknowledgement was not
        delivered, KafkaException on an error Kafka will not recover from."""
        try:
            while not self._stopping.is_set():
                self.poll_once(handler)
        finally:
            self.close()

    def stop(self) -> None:
        """Make run() return after the wake being handled (safe from another thread or a signal handler)."""
        self._stopping.set()

    def close(self) -> None:
        """Leave the consumer groups. Offsets are committed wake by wake, so none is lost."""
        if self._closed:
            return
        self._closed = True
        self._prio.close()
        self._normal.close()

    def __enter__(self) -> Conductor:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _take(self, consumer: Any, m: Message, handler: Handler) -> bool:
        err = m.error()
        if err is not None:
            if err.fatal() or (not err.retriable() and err.code() not in (KafkaError._PARTITION_EOF,)):
                raise KafkaException(err)
            log.warning("canopy: %s, retrying", err)
            return False
        if consumer is self._prio:
            self._taken[m.partition() or 0] = (m.offset() or 0) + 1
        value = m.value() or b""
        try:
            w = json.loads(value)
            _check_wake(w)
        except ValueError as e:
            self.undecodable += 1
            log.warning("canopy: skipped an undecodable wake at %s/%d@%d: %s", m.topic(), m.partition(), m.offset(), e)
            self._commit(consumer, m)
            return True
        wake_id = w["wake_id"]
        if wake_id in self._seen:
            self.duplicates += 1
            log.debug("canopy: dropped a duplicate wake %s at %s/%d@%d", wake_id, m.topic(), m.partition(), m.offset())
            self._commit(consumer, m)
            return True
        self._seen[wake_id] = None
        if len(self._seen) > self._dedupe_size:
            self._seen.popitem(last=False)
        wake = self._received(w, m, value)
        self.delivered += 1
        s = w["agent_tree_snapshot"]
        meta: dict[str, Any] = {
            "event": "conductor.wake.received", "wake_id": wake_id, "run_id": w["run_id"], "lane": w["lane"],
            "snapshot_id": s["snapshot_id"], "as_of_event_seq": s.get("as_of_event_seq"), "topic": m.topic(),
            "partition": m.partition(), "offset": m.offset(), "nodes_included": len(s["nodes"]),
            "nodes_omitted": (s.get("truncation_meta") or {}).get("omitted_count_total", 0),
            "truncated": s.get("truncated", False), "stale": wake.stale, "age_ms": wake.age_ms, "bytes": len(value)}
        if wake.part:
            meta.update(part=wake.part["number"], parts=wake.part["count"])
        log.info("%s", json.dumps(meta))  # metadata only, never node contents
        try:
            handler(wake)
        except Exception as e:
            raise HandlerError(f"canopy: the handler failed on wake {wake_id} of run {w['run_id']}: {e}") from e
        if self._producer is not None:
            self._producer.send(self.ack_event(wake))
            self._producer.flush()
        self._commit(consumer, m)
        return True

    def _received(self, w: dict[str, Any], m: Message, value: bytes) -> Wake:
        now = self._now()
        s = w["agent_tree_snapshot"]
        since = 0
        try:
            gen = parse_time(s["generated_at"])
            if gen.year > 1:
                since = max(0, _ms(now) - _ms(gen))
        except (KeyError, TypeError, ValueError):
            since = 0
        age = int(s["snapshot_age_ms"]) + since
        return Wake(data=w, topic=m.topic() or "", partition=m.partition() or 0, offset=m.offset() or 0,
                    received_at=now, age_ms=age, stale=age > self.stale_after_ms, raw=value)

    def ack_event(self, wake: Wake) -> Event:
        """The conductor.wake_received event acknowledging wake (as pkg/wake.AckEvent): from the
        snapshot's root agent (or agent_id when it has none), naming the agents of the wake's
        result and completion triggers, with an id derived from the wake id and source."""
        s = wake.data["agent_tree_snapshot"]
        scope = s.get("scope") or {}
        agents = list(dict.fromkeys(t["agent_id"] for t in wake.triggers if t.get("kind") in ACKNOWLEDGED_TRIGGERS))
        return events.conductor_wake_received(
            run_id=wake.run_id, agent_id=wake.root_agent_id or self.agent_id, wake_id=wake.wake_id,
            snapshot_id=s["snapshot_id"], agent_ids=agents or None, source=self.source, time=wake.received_at,
            id=ack_id(wake.wake_id, self.source, _ms(wake.received_at)),
            session_id=scope.get("session_id") or None, thread_id=scope.get("thread_id") or None)

    def _commit(self, consumer: Any, m: Message) -> None:
        tp = TopicPartition(m.topic() or "", m.partition() or 0, (m.offset() or 0) + 1)
        try:
            consumer.commit(offsets=[tp], asynchronous=False)
        except KafkaException as e:
            err = e.args[0]
            if isinstance(err, KafkaError) and err.code() in _MOVED:
                log.warning("canopy: %s/%d moved to another member before its offset %d was committed; it may "
                            "deliver the wake again (its acknowledgement has the same id): %s",
                            m.topic(), m.partition(), m.offset(), err)
                return
            raise
