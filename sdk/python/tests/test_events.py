"""The event builders: one per type of the contract, each making events the schemas accept."""
from __future__ import annotations

import inspect
import json
import typing
from datetime import datetime, timedelta, timezone
from importlib import resources
from typing import Any

import pytest

import canopy
from canopy import events

AT = datetime(2026, 2, 14, 10, 0, 0, 123456, tzinfo=timezone.utc)
ENVELOPE_PARAMS = {"run_id", "agent_id", "source", "time", "id", "session_id", "thread_id", "correlation_id",
                   "causation_id"}


def package_schemas() -> dict[str, Any]:
    root = resources.files("canopy") / "schemas" / "events"
    return {f.name: json.loads(f.read_text(encoding="utf-8")) for f in root.iterdir() if f.name.endswith(".json")}


def data_schema(etype: str) -> dict[str, Any]:
    return package_schemas()[etype + ".schema.json"]["properties"]["data"]


def sample(name: str, annotation: Any) -> Any:
    """A valid value for a builder parameter, from its annotation."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return args[0]
    if args and type(None) in args:  # X | None
        return sample(name, next(a for a in args if a is not type(None)))
    text = str(annotation)
    if "Sequence" in text:
        return ["a-1", "a-2"]
    if "datetime" in text:
        return AT + timedelta(hours=1)
    return {"str": f"{name}-1", "int": 3, "bool": True, "float": 0.5}[annotation.__name__]


def build(etype: str, everything: bool) -> canopy.Event:
    """An event of etype from its builder: required fields only, or every field."""
    fn = getattr(events, etype.replace(".", "_"))
    hints = typing.get_type_hints(fn)
    kwargs: dict[str, Any] = {"run_id": "run-1", "agent_id": "agent-1", "time": AT}
    for name, param in inspect.signature(fn).parameters.items():
        if name in ENVELOPE_PARAMS:
            continue
        if param.default is inspect.Parameter.empty or everything:
            kwargs[name] = sample(name, hints[name])
    return fn(**kwargs)


def test_a_builder_per_type() -> None:
    """events.TYPES is every type event.schema.json names, each with its builder, and nothing else."""
    dispatch = package_schemas()["event.schema.json"]["allOf"][1]["properties"]["type"]["enum"]
    assert list(events.TYPES) == sorted(dispatch)
    builders = {n for n, f in inspect.getmembers(events, inspect.isfunction) if f.__module__ == events.__name__}
    assert builders == {t.replace(".", "_") for t in dispatch}
    assert set(events.__all__) == builders | {"TYPES"}


@pytest.mark.parametrize("etype", events.TYPES)
def test_builder_parameters_are_the_schema_fields(etype: str) -> None:
    """Each builder takes its type's data fields (required ones without a default) and the envelope."""
    fn = getattr(events, etype.replace(".", "_"))
    params = inspect.signature(fn).parameters
    d = data_schema(etype)
    props = set(d.get("properties", {}))
    assert set(params) - ENVELOPE_PARAMS == props
    required = {n for n, p in params.items() if p.default is inspect.Parameter.empty}
    assert required == set(d.get("required", [])) | {"run_id", "agent_id"}
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())


# runtime.configured names at least one field: test_runtime_configured_needs_a_field.
@pytest.mark.parametrize("etype,everything", [(t, e) for t in events.TYPES for e in (False, True)
                                              if e or t != "runtime.configured"])
def test_builders_make_valid_events(etype: str, everything: bool) -> None:
    ev = build(etype, everything)
    canopy.validate(ev)
    doc = json.loads(ev.to_json())
    assert doc["type"] == etype
    assert doc["specversion"] == "1.0" and doc["schemaversion"] == canopy.SCHEMA_VERSION == 1
    assert doc["datacontenttype"] == "application/json"
    assert doc["time"] == "2026-02-14T10:00:00.123Z"
    assert doc["runid"] == "run-1" and doc["agentid"] == "agent-1" and doc["source"] == "/agents/agent-1"
    if everything:
        assert set(doc["data"]) == set(data_schema(etype).get("properties", {}))


def test_runtime_configured_needs_a_field() -> None:
    with pytest.raises(canopy.ValidationError, match="matches none"):
        canopy.validate(events.runtime_configured(run_id="r", agent_id="a"))
    canopy.validate(events.runtime_configured(run_id="r", agent_id="a", network_access=False))


def test_optional_fields_are_left_out() -> None:
    """None means absent, never null or "" (but where the schema wants the field sent as null)."""
    doc = json.loads(events.tree_node_created(run_id="r", agent_id="a", role="worker").to_json())
    assert doc["data"] == {"role": "worker"}
    assert not {"sessionid", "threadid", "correlationid", "causationid"} & set(doc)
    hint = json.loads(events.tree_parent_hint(run_id="r", agent_id="a", hint_type="read_json", artifact_ids=None).to_json())
    assert hint["data"] == {"hint_type": "read_json", "artifact_ids": None}


def test_timestamps_in_data() -> None:
    ev = events.lease_acquired(run_id="r", agent_id="a", owner="pool", expires_at=datetime(2026, 2, 14, 11, 0, tzinfo=timezone(timedelta(hours=1))))
    assert ev.data == {"owner": "pool", "expires_at": "2026-02-14T10:00:00.000Z"}
    with pytest.raises(ValueError, match="timezone-aware"):
        events.lease_acquired(run_id="r", agent_id="a", owner="pool", expires_at=datetime(2026, 2, 14))


def test_time_must_be_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        events.signal_heartbeat(run_id="r", agent_id="a", time=datetime(2026, 2, 14))


def test_ids_are_deterministic() -> None:
    """The same content gives the same id (a retry is a duplicate canopy applies once); other
    content another; the source is not part of it; an explicit id is kept."""
    def ev(**kw: Any) -> canopy.Event:
        args: dict[str, Any] = {"run_id": "run-1", "agent_id": "w", "status": "running", "time": AT}
        args.update(kw)
        return events.tree_node_status(**args)

    a = ev()
    assert a.id == ev().id == ev(source="/elsewhere").id == a.with_source("/x").id
    assert len(a.id) == 26 and canopy.ack_id  # a ULID
    others = {ev(status="blocked").id, ev(reason="r").id, ev(time=AT + timedelta(milliseconds=1)).id, ev(run_id="run-2").id,
              ev(agent_id="v").id, ev(correlation_id="c").id, ev(causation_id="c").id, ev(session_id="s").id,
              ev(thread_id="t").id, events.tree_node_created(run_id="run-1", agent_id="w", role="worker", time=AT).id}
    assert a.id not in others and len(others) == 10
    assert ev(time=AT + timedelta(microseconds=1)).id == a.id  # the contract keeps milliseconds
    assert a.id[:10] == canopy.Event(type="x", run_id="r", agent_id="a", time=AT).id[:10]  # the time part: the event's
    assert ev(id="my-id").id == "my-id"


def test_to_json_is_one_line_of_utf8() -> None:
    ev = events.signal_input(run_id="r", agent_id="human:ann", input_kind="message", text="héllo\nwörld 🙂", time=AT)
    line = ev.to_json()
    assert "\n" not in line and "🙂" in line
    assert json.loads(line)["data"]["text"] == "héllo\nwörld 🙂"


@pytest.mark.parametrize("wake_id,source,at_ms,want", [
    # pkg/ids's golden ids (ids_test.go TestGolden): the acknowledgement ids must be the Go conductor's.
    ("01KARZ3NDEKTSV4RRFFQ69G5FA", "/conductor", 0, "01KARZ3NDEAEZF7EAV2WEKRJ1M"),
    ("not-a-ulid", "/conductor", int(datetime(2026, 2, 14, 10, tzinfo=timezone.utc).timestamp() * 1000), "01KHDSFJ80S4TS5JY7VVDHGA74"),
    ("not-a-ulid", "/conductor", int(datetime(1960, 2, 14, 10, tzinfo=timezone.utc).timestamp() * 1000), "0000000000S4TS5JY7VVDHGA74"),
])
def test_ack_id_is_pkg_ids(wake_id: str, source: str, at_ms: int, want: str) -> None:
    assert canopy.ack_id(wake_id, source, at_ms) == want


def test_version_follows_the_contract() -> None:
    assert canopy.__version__.split(".")[0] == str(canopy.SCHEMA_VERSION)
    assert len(canopy.CONTRACT_SHA256) == 64


def test_typed() -> None:
    assert (resources.files("canopy") / "py.typed").is_file()
