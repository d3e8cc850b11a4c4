"""canopy.Producer against a real broker: placement, validation first, deterministic ids, and
errors naming what Kafka refused."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

import canopy
from canopy import events
from conftest import Kafka

AT = datetime(2026, 2, 14, 10, 0, tzinfo=timezone.utc)


def test_records_land_where_go_puts_them(kafka: Kafka, vectors: list[tuple[bytes, int, int]]) -> None:
    """Every record is keyed by its run id, carries the CloudEvents content type, and sits in the
    partition pkg/topics.Partition gives the run id: murmur2, whatever librdkafka's partitioner
    would do."""
    prefix = kafka.topics("producer")
    runs: dict[str, int] = {}
    for key, n, p in vectors:
        if n != kafka.partitions or not key:
            continue
        try:
            run = key.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if run.isprintable() and len(runs) < 300:
            runs[run] = p
    assert len(runs) == 300
    with canopy.Producer(kafka.brokers, source="/tests/producer", prefix=prefix,
                         partitioner="consistent_random") as p:  # librdkafka's CRC32: the producer must not use it
        for run in runs:
            p.send(events.tree_node_created(run_id=run, agent_id="conductor", role="conductor", time=AT))
    recs = kafka.read(f"{prefix}.agent-events.v1", want=len(runs))
    assert len(recs) == len(runs)
    for m in recs:
        run = m.key().decode()
        assert json.loads(m.value())["runid"] == run
        assert m.partition() == runs[run], f"run {run!r} in partition {m.partition()}, Go puts it in {runs[run]}"
        assert m.headers() == [("content-type", b"application/cloudevents+json")]


def test_validation_before_sending(kafka: Kafka) -> None:
    prefix = kafka.topics("validation")
    with canopy.Producer(kafka.brokers, source="/tests/validation", prefix=prefix) as p:
        with pytest.raises(canopy.ValidationError, match=r"data\.role"):
            p.send(events.tree_node_created(run_id="run-1", agent_id="a", role="boss"))  # type: ignore[arg-type]
        with pytest.raises(canopy.ValidationError, match="runid"):
            p.send(events.signal_heartbeat(run_id="", agent_id="a"))
        p.send(events.signal_heartbeat(run_id="run-1", agent_id="a"))
    recs = kafka.read(f"{prefix}.agent-events.v1")
    assert [json.loads(m.value())["type"] for m in recs] == ["signal.heartbeat"]


def test_retries_keep_the_id(kafka: Kafka) -> None:
    """Sending an event again (a retry) sends the same id; the producer's source fills a missing one."""
    prefix = kafka.topics("retry")
    ev = events.signal_progress(run_id="run-1", agent_id="w", fraction=0.5)
    with canopy.Producer(kafka.brokers, source="/tests/retry", prefix=prefix) as p:
        sent = p.send(ev)
        p.send(ev)
        p.send(events.signal_progress(run_id="run-1", agent_id="w", fraction=0.5, time=ev.time, source="/mine"))
    docs = [json.loads(m.value()) for m in kafka.read(f"{prefix}.agent-events.v1", want=3)]
    assert [d["id"] for d in docs] == [ev.id] * 3
    assert [d["source"] for d in docs] == ["/tests/retry", "/tests/retry", "/mine"]
    assert sent.source == "/tests/retry" and sent.id == ev.id


def test_human_input_topic(kafka: Kafka) -> None:
    prefix = kafka.topics("human")
    with canopy.Producer(kafka.brokers, source="/humans/ann", prefix=prefix) as p:
        p.send(events.signal_input(run_id="run-1", agent_id="human:ann", input_kind="steer", text="go"),
               topic=p.human_input_topic, traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01")
    [m] = kafka.read(f"{prefix}.human-input.v1", want=1)
    assert dict(m.headers())["traceparent"] == b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"


def test_delivery_error_names_what_kafka_refused(kafka: Kafka) -> None:
    """A record over the topic's max.message.bytes: the broker refuses it, and flush says so."""
    prefix = kafka.topics("refused", config={"max.message.bytes": "1024"})
    big = events.signal_input(run_id="run-1", agent_id="human:ann", input_kind="message", text="x" * 4000)
    p = canopy.Producer(kafka.brokers, source="/tests/refused", prefix=prefix)
    p.send(big)
    with pytest.raises(canopy.DeliveryError) as e:
        p.flush(30)
    assert [ev.id for ev, _ in e.value.failures] == [big.id]
    assert "MSG_SIZE_TOO_LARGE" in str(e.value) and big.id in str(e.value) and "run-1" in str(e.value)


def test_missing_topic(kafka: Kafka) -> None:
    p = canopy.Producer(kafka.brokers, source="/tests/missing", prefix="no-such-prefix")
    with pytest.raises(canopy.DeliveryError, match=r"no-such-prefix\.agent-events\.v1"):
        p.send(events.signal_heartbeat(run_id="run-1", agent_id="a"))


def test_config_problems_are_all_reported() -> None:
    with pytest.raises(canopy.ConfigError) as e:
        canopy.Producer("localhost", source="", prefix="bad prefix")
    msg = str(e.value)
    assert "brokers" in msg and "source" in msg and "prefix" in msg
