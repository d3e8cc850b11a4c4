#!/usr/bin/env python3
"""Generate the canopy package's event builders and schema copies from schema/events.

    python3 sdk/python/gen.py          # rewrite src/canopy/events.py and src/canopy/schemas/
    python3 sdk/python/gen.py --check  # exit 1, naming what differs, when they are out of date

The package is plain Python at run time: this script runs when the contract changes, and its
output is checked in. sdk/sdk_test.go runs --check, so a schema that gains or loses a type or a
field fails the tests until the builders follow. Standard library only.
"""
from __future__ import annotations

import argparse
import json
import keyword
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEMAS = HERE.parent.parent / "schema" / "events"
PACKAGE = HERE / "src" / "canopy"
ENVELOPE = {"envelope.schema.json", "event.schema.json"}

# Keyword parameters every builder takes besides its type's data fields: the envelope.
ENVELOPE_PARAMS = ("run_id", "agent_id", "source", "time", "id", "session_id", "thread_id",
                   "correlation_id", "causation_id")


def python_type(name: str, prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """The annotation of a data field, from its schema."""
    if "anyOf" in prop:
        alts = [python_type(name, a, defs) for a in prop["anyOf"]]
        return " | ".join(dict.fromkeys(alts))
    ref = prop.get("$ref", "")
    if ref:
        target = ref.rsplit("/", 1)[-1]
        if target in ("id", "text"):
            return "str"
        if target in ("count", "integer"):
            return "int"
        if target == "timestamp":
            return "datetime | str"
        if target == "idList":
            return "Sequence[str]"
        raise SystemExit(f"gen.py: field {name}: no Python type for {ref}")
    if "enum" in prop:
        return "Literal[" + ", ".join(json.dumps(v) for v in prop["enum"]) + "]"
    t = prop.get("type")
    simple = {"string": "str", "boolean": "bool", "integer": "int", "number": "float", "null": "None"}
    if isinstance(t, str) and t in simple:
        return simple[t]
    raise SystemExit(f"gen.py: field {name}: no Python type for {json.dumps(prop)}")


def summary(text: str) -> str:
    """The first sentence of a schema description, for a docstring."""
    text = " ".join(text.split())
    first = re.split(r"(?<!e\.g)(?<!i\.e)\. ", text)[0].rstrip(".")
    return first + "."


def builder(etype: str, schema: dict[str, Any]) -> str:
    data = schema["properties"]["data"]
    props: dict[str, Any] = data.get("properties", {})
    required = set(data.get("required", []))
    fname = etype.replace(".", "_")
    for p in props:
        if p in ENVELOPE_PARAMS or keyword.iskeyword(p) or not p.isidentifier():
            raise SystemExit(f"gen.py: {etype}: data field {p!r} cannot be a keyword parameter")
    lines = [f"def {fname}(", "    *,", "    run_id: str,", "    agent_id: str,"]
    for p in sorted(props, key=lambda p: (p not in required, list(props).index(p))):
        ann = python_type(p, props[p], {})
        lines.append(f"    {p}: {ann}," if p in required else f"    {p}: {ann} | None = None,")
    lines += [
        "    source: str | None = None,",
        "    time: datetime | None = None,",
        "    id: str | None = None,",
        "    session_id: str | None = None,",
        "    thread_id: str | None = None,",
        "    correlation_id: str | None = None,",
        "    causation_id: str | None = None,",
        ") -> Event:",
    ]
    doc = textwrap.wrap(f'"""{etype}: {summary(schema.get("description", etype))}', 96,
                        initial_indent="    ", subsequent_indent="    ") + [""]
    for p, v in props.items():
        d = summary(v.get("description", "")) if v.get("description") else ""
        doc += textwrap.wrap(f"{p}{' (required)' if p in required else ''}: {d}", 96,
                             initial_indent="    ", subsequent_indent="        ")
    doc.append('    """')
    lines += doc
    body = ["    data: dict[str, Any] = {}"]
    for p in props:
        nullable = p in required and "null" in json.dumps(props[p].get("anyOf", []))
        conv = f"_timestamp({p})" if props[p].get("$ref", "").endswith("/timestamp") else (
            f"list({p})" if props[p].get("$ref", "").endswith("/idList") else p)
        if nullable:
            conv = f"list({p})" if "idList" in json.dumps(props[p]) else p
            body.append(f"    data[{p!r}] = None if {p} is None else {conv}")
        elif p in required:
            body.append(f"    data[{p!r}] = {conv}")
        else:
            body.append(f"    if {p} is not None:")
            body.append(f"        data[{p!r}] = {conv}")
    body += [
        f"    return Event(type={etype!r}, run_id=run_id, agent_id=agent_id, data=data, source=source, time=time,",
        "                 id=id, session_id=session_id, thread_id=thread_id, correlation_id=correlation_id,",
        "                 causation_id=causation_id)",
    ]
    return "\n".join(lines + body) + "\n"


def generate() -> dict[Path, str]:
    """Every generated file's path and content."""
    out: dict[Path, str] = {}
    files = sorted(SCHEMAS.glob("*.schema.json"))
    types = []
    funcs = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        out[PACKAGE / "schemas" / "events" / f.name] = text
        if f.name in ENVELOPE:
            continue
        schema = json.loads(text)
        etype = schema["properties"]["type"]["const"]
        types.append(etype)
        funcs.append(builder(etype, schema))
    head = '''"""Builders of canopy's agent events: one function per event type of the contract.

Generated by sdk/python/gen.py from schema/events/*.schema.json: do not edit (the tests fail when
it is out of date). Each builder takes its type's data fields as keyword arguments (the required
ones without a default; an optional one left None is omitted) and the envelope's: run_id and
agent_id (required), source, time (default now), id (default derived from the content), and the
optional session_id, thread_id, correlation_id and causation_id. It returns a canopy.Event;
canopy.Producer.send validates it against the JSON Schemas before sending.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from ._event import Event, _timestamp

'''
    body = head + "TYPES: tuple[str, ...] = (\n" + "".join(f"    {t!r},\n" for t in types) + ")\n"
    body += '"""Every event type of the contract, sorted."""\n\n'
    body += "__all__ = [\n    \"TYPES\",\n" + "".join(f'    "{t.replace(".", "_")}",\n' for t in types) + "]\n\n\n"
    body += "\n\n".join(funcs)
    out[PACKAGE / "events.py"] = body
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report out-of-date files instead of writing them")
    a = ap.parse_args()
    want = generate()
    have = {p for p in (PACKAGE / "schemas" / "events").glob("*.json")}
    stale = sorted(str(p.relative_to(HERE)) for p, text in want.items()
                   if not p.exists() or p.read_text(encoding="utf-8") != text)
    extra = sorted(str(p.relative_to(HERE)) for p in have - set(want))
    if a.check:
        if stale or extra:
            print("gen.py: out of date with schema/events (run python3 sdk/python/gen.py):", file=sys.stderr)
            for name in stale:
                print(f"  {name} differs", file=sys.stderr)
            for name in extra:
                print(f"  {name} has no schema in schema/events", file=sys.stderr)
            return 1
        return 0
    for p, text in want.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    for name in extra:
        (HERE / name).unlink()
    print(f"gen.py: {len(want)} files written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
