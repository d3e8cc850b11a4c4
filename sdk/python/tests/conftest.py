"""Fixtures of the canopy package's tests.

sdk/sdk_test.go (TestPythonSDK) runs this suite against each broker canopy is tested with, and
passes what the tests need in the environment: CANOPY_BROKERS, CANOPY_PREFIX (topics it created,
with a projector on them), CANOPY_PARTITIONS, CANOPY_PARTITION_VECTORS (Go's partition of many
keys), CANOPY_WAKES (wakes replay computed) and CANOPY_RESULTS (where the end-to-end test writes
what the Go test checks next). Run by hand without them, the tests that need them are skipped;
under CI=true they fail.
"""
from __future__ import annotations

import base64
import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def env(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        msg = f"{name} is not set: sdk/sdk_test.go (go test ./sdk/) runs these tests with a broker"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return v


@dataclass
class Kafka:
    """The broker, and helpers to make topics of a test's own and read them."""

    brokers: str
    partitions: int

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.brokers})

    def topics(self, stem: str, config: dict[str, str] | None = None) -> str:
        """Create canopy's topics under a new prefix of stem and return the prefix."""
        prefix = f"{stem}-{uuid.uuid4().hex[:8]}"
        names = [f"{prefix}.{b}.v1" for b in ("agent-events", "human-input", "wakes", "wakes-priority")]
        admin = self.admin()  # kept until the futures are done: its handle serves them
        futures = admin.create_topics([NewTopic(n, self.partitions, 1, config=config or {}) for n in names])
        for f in futures.values():
            f.result(30)
        self.wait_for_leaders(names)
        return prefix

    def wait_for_leaders(self, names: list[str], timeout: float = 30.0) -> None:
        """Wait until the metadata a new client reads shows every partition of names with a leader.

        CreateTopics answers once the controller has the topic, before the broker's metadata may
        list it all. A producer started in that moment once lost 2 of 300 records in CI with
        every delivery reported good; librdkafka is known to restart a partition's idempotence
        sequence when a partition leaves its metadata and comes back, after which the broker drops
        what it takes for duplicates. canopy's operator (internal/cluster.CreateTopics) and the
        TypeScript tests wait the same way.
        """
        deadline = time.monotonic() + timeout
        admin = self.admin()
        missing: list[str] = list(names)
        while time.monotonic() < deadline:
            md = admin.list_topics(timeout=10)
            missing = []
            for n in names:
                t = md.topics.get(n)
                if (t is None or t.error is not None or len(t.partitions) != self.partitions
                        or any(p.leader < 0 for p in t.partitions.values())):
                    missing.append(n)
            if not missing:
                return
            time.sleep(0.05)
        raise AssertionError(f"topics without a leader for every partition after {timeout}s: {missing}")

    def produce_tx(self, records: list[tuple[str, bytes, bytes]]) -> None:
        """Produce (topic, key, value) records in one transaction, as a projector writes wakes,
        each in the partition murmur2 of its key gives."""
        p = Producer({"bootstrap.servers": self.brokers, "transactional.id": "tx-" + uuid.uuid4().hex,
                      "partitioner": "murmur2_random"})
        p.init_transactions(30)
        p.begin_transaction()
        for topic, key, value in records:
            p.produce(topic, key=key, value=value)
        p.commit_transaction(30)

    def read(self, topic: str, want: int | None = None, timeout: float = 30.0) -> list[Any]:
        """The committed records of topic, in (partition, offset) order: all of them, waiting
        until there are want when want is given."""
        c = Consumer({"bootstrap.servers": self.brokers, "group.id": "read-" + uuid.uuid4().hex,
                      "isolation.level": "read_committed", "enable.auto.commit": False,
                      "enable.partition.eof": True,
                      # librdkafka's default resets an out-of-range position to
                      # the end: a reader must never skip what it came for.
                      "auto.offset.reset": "earliest"})
        md = c.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Any] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                        if len(eof) == len(parts) and (want is None or len(out) >= want):
                            break
                        continue
                    raise AssertionError(m.error())
                eof.discard(m.partition())
                out.append(m)
            if want is not None and len(out) < want:
                # Said in the failure: how many each partition holds, against
                # how many were read of it.
                marks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in parts}
                read = {p: sum(1 for m in out if m.partition() == p) for p in parts}
                raise AssertionError(f"read {len(out)} of {want} records of {topic} in {timeout}s: "
                                     f"watermarks (low, high) {marks}, read by partition {read}")
        finally:
            c.close()
        out.sort(key=lambda m: (m.partition(), m.offset()))
        return out

    def committed(self, group: str, topic: str) -> dict[int, int]:
        """The offsets group committed on topic, by partition (those it committed)."""
        c = Consumer({"bootstrap.servers": self.brokers, "group.id": group})
        try:
            md = c.list_topics(topic, timeout=10)
            tps = c.committed([TopicPartition(topic, p) for p in md.topics[topic].partitions], timeout=10)
            return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}
        finally:
            c.close()


@pytest.fixture(scope="session")
def kafka() -> Kafka:
    return Kafka(env("CANOPY_BROKERS"), int(os.environ.get("CANOPY_PARTITIONS", "4")))


@pytest.fixture(scope="session")
def prefix() -> str:
    """The prefix of the topics the Go test created, which its projector consumes."""
    return env("CANOPY_PREFIX")


@pytest.fixture(scope="session")
def vectors() -> list[tuple[bytes, int, int]]:
    """(key, partitions, partition) as pkg/topics.Partition computes them."""
    out = []
    with open(env("CANOPY_PARTITION_VECTORS"), encoding="utf-8") as f:
        for line in f:
            v = json.loads(line)
            out.append((base64.b64decode(v["key"]) if v["key"] else b"", v["partitions"], v["partition"]))
    return out


@pytest.fixture(scope="session")
def replay_wakes() -> list[dict[str, Any]]:
    """The wakes replay computes for examples/small-run.jsonl."""
    with open(env("CANOPY_WAKES"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session")
def results() -> str:
    return env("CANOPY_RESULTS")

