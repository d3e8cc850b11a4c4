"""The package's own JSON Schema validation (canopy.validate), which Producer.send runs first.

sdk/sdk_test.go's TestPythonValidatorAgreesWithDecoder runs it over schema/'s differential corpus
against the Go decoder; these are the cases a producer gets wrong most.
"""
from __future__ import annotations

import copy
from typing import Any

import pytest

import canopy
from canopy._schema import SchemaError, Schemas, schemas

GOOD: dict[str, Any] = {
    "specversion": "1.0", "id": "01JM0000000000000000000000", "source": "/agents/w", "type": "tree.node_created",
    "time": "2026-02-14T10:00:00Z", "runid": "run-1", "agentid": "w", "schemaversion": 1,
    "data": {"role": "worker", "parent_agent_id": "c"},
}


def with_(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    d = doc
    for p in parents:
        d = d[p]
    if value is KeyError:
        del d[last]
    else:
        d[last] = value
    return doc


def test_good() -> None:
    canopy.validate(GOOD)
    canopy.validate(with_("sessionid", None))  # null is absent
    canopy.validate(with_("time", "2026-02-14T10:00:00.123+01:00"))
    canopy.validate(with_("myext", "x"))  # an extension attribute


@pytest.mark.parametrize("path,value,says", [
    ("type", "tree.unknown", "type"),
    ("runid", KeyError, "runid is required"),
    ("runid", "", "shorter than 1"),
    ("runid", "a\x01b", "does not match"),
    ("runid", "run-1\n", "does not match"),  # ECMA's $ is the end: no trailing newline
    ("agentid", "x" * 257, "257 characters"),
    ("schemaversion", 2, "is not 1"),
    ("schemaversion", True, "not of type integer"),
    ("specversion", "0.3", "is not \"1.0\""),
    ("time", "2026-02-14 10:00:00Z", "does not match"),
    ("time", "0001-01-01T00:00:00Z", "is not allowed"),
    ("sessionid", "", "matches none"),
    ("data.role", "boss", "is not one of"),
    ("data.role", KeyError, "data: role is required"),
    ("data.extra", 1, "unknown field extra"),
    ("data", [], "not of type object"),
    ("Upper", "x", "unknown field Upper"),
    ("runid", "\ud800", "not valid UTF-8"),
])
def test_refused(path: str, value: Any, says: str) -> None:
    with pytest.raises(canopy.ValidationError) as e:
        canopy.validate(with_(path, value))
    assert says in str(e.value), str(e.value)
    assert e.value.problems


def test_every_problem_is_reported() -> None:
    doc = with_("data.role", "boss")
    doc["runid"] = ""
    with pytest.raises(canopy.ValidationError) as e:
        canopy.validate(doc)
    assert len(e.value.problems) == 2


def test_numbers() -> None:
    ok = {**GOOD, "type": "signal.progress", "data": {"fraction": 1}}
    canopy.validate(ok)
    for bad in (1.5, -0.1, "0.5", True):
        with pytest.raises(canopy.ValidationError):
            canopy.validate({**ok, "data": {"fraction": bad}})
    usage = {**GOOD, "type": "model.usage", "data": {"model": "m", "input_tokens": 3.0}}
    canopy.validate(usage)  # 3.0 is an integer to JSON Schema
    with pytest.raises(canopy.ValidationError):
        canopy.validate({**usage, "data": {"model": "m", "input_tokens": -1}})


def test_unknown_keywords_are_refused() -> None:
    """A schema that starts using a keyword the validator lacks fails loudly, not half-checked."""
    docs = dict(schemas().docs)
    docs["envelope.schema.json"] = {**docs["envelope.schema.json"], "minProperties": 1}
    with pytest.raises(SchemaError, match="minProperties"):
        Schemas(docs)
