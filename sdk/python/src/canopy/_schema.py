"""Validation of events against the contract's JSON Schemas, shipped in the package (schemas/events).

The schemas use a small part of JSON Schema 2020-12; this module implements exactly that part and
refuses a schema with any other keyword (so a schema that starts using one fails the package's
tests instead of being half-checked). format is an annotation, as 2020-12 has it by default.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

from ._errors import ValidationError

_ANNOTATIONS = {"$schema", "$id", "$defs", "$comment", "title", "description", "format", "examples", "default"}
_ASSERTIONS = {"$ref", "allOf", "anyOf", "not", "if", "then", "type", "const", "enum", "properties",
               "patternProperties", "additionalProperties", "required", "minLength", "maxLength", "pattern",
               "minimum", "maximum", "items", "maxItems"}


class SchemaError(Exception):
    """A schema uses what this validator does not implement."""


def _ecma(pattern: str) -> re.Pattern[str]:
    """A JSON Schema (ECMA-262) pattern as a Python regex: outside a character class, $ is the end
    of the string (Python's $ also matches before a final newline)."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        elif c == "$" and not in_class:
            c = r"\Z"
        out.append(c)
        i += 1
    return re.compile("".join(out))


class Schemas:
    """The event schemas, by file name, with a validator for them."""

    def __init__(self, docs: Mapping[str, Any]) -> None:
        self.docs = dict(docs)
        self._patterns: dict[str, re.Pattern[str]] = {}
        for name, doc in self.docs.items():
            self._check(doc, name)

    def _check(self, s: Any, where: str) -> None:
        if isinstance(s, bool):
            return
        if not isinstance(s, dict):
            raise SchemaError(f"{where}: a schema must be an object")
        unknown = set(s) - _ANNOTATIONS - _ASSERTIONS
        if unknown:
            raise SchemaError(f"{where}: keywords {sorted(unknown)} are not implemented by canopy's validator")
        for k in ("allOf", "anyOf"):
            for i, sub in enumerate(s.get(k, [])):
                self._check(sub, f"{where}/{k}/{i}")
        for k in ("not", "if", "then", "items", "additionalProperties"):
            if k in s:
                self._check(s[k], f"{where}/{k}")
        for k in ("properties", "patternProperties", "$defs"):
            for name, sub in s.get(k, {}).items():
                self._check(sub, f"{where}/{k}/{name}")
        if "pattern" in s:
            self._patterns.setdefault(s["pattern"], _ecma(s["pattern"]))
        for name in s.get("patternProperties", {}):
            self._patterns.setdefault(name, _ecma(name))
        if "$ref" in s:
            self._resolve(s["$ref"], where.split("/", 1)[0])

    def _resolve(self, ref: str, doc: str) -> tuple[Any, str]:
        name, _, frag = ref.partition("#")
        name = name or doc
        if name not in self.docs:
            raise SchemaError(f"{doc}: $ref {ref}: no schema {name}")
        s = self.docs[name]
        for part in [p for p in frag.split("/") if p]:
            s = s[part]
        return s, name

    def errors(self, instance: Any, schema: str) -> list[str]:
        """Every way instance fails the schema named schema (e.g. "event.schema.json")."""
        out: list[str] = []
        self._validate(instance, self.docs[schema], schema, "", out)
        return list(dict.fromkeys(out))  # the envelope is checked by event.schema.json and the type's schema

    def _validate(self, v: Any, s: Any, doc: str, path: str, out: list[str]) -> None:
        if s is True:
            return
        if s is False:
            out.append(f"{path or '(event)'}: not allowed")
            return
        at = path or "(event)"
        if "$ref" in s:
            sub, sdoc = self._resolve(s["$ref"], doc)
            self._validate(v, sub, sdoc, path, out)
        for sub in s.get("allOf", []):
            self._validate(v, sub, doc, path, out)
        if "anyOf" in s:
            alts = [self._sub(v, sub, doc, path) for sub in s["anyOf"]]
            if all(alts):
                out.append(f"{at}: matches none of its allowed forms ({'; '.join(a[0] for a in alts)})")
        if "not" in s and not self._sub(v, s["not"], doc, path):
            out.append(f"{at}: {_show(v)} is not allowed")
        if "if" in s and not self._sub(v, s["if"], doc, path):
            if "then" in s:
                self._validate(v, s["then"], doc, path, out)
        if "type" in s:
            types = s["type"] if isinstance(s["type"], list) else [s["type"]]
            if not any(_is(v, t) for t in types):
                out.append(f"{at}: {_show(v)} is not of type {' or '.join(types)}")
                return
        if "const" in s and not _equal(v, s["const"]):
            out.append(f"{at}: {_show(v)} is not {_show(s['const'])}")
        if "enum" in s and not any(_equal(v, e) for e in s["enum"]):
            out.append(f"{at}: {_show(v)} is not one of {json.dumps(s['enum'])}")
        if isinstance(v, str):
            self._string(v, s, at, out)
        elif _is(v, "number"):
            if "minimum" in s and v < s["minimum"]:
                out.append(f"{at}: {v} is less than {s['minimum']}")
            if "maximum" in s and v > s["maximum"]:
                out.append(f"{at}: {v} is more than {s['maximum']}")
        elif isinstance(v, list):
            if "maxItems" in s and len(v) > s["maxItems"]:
                out.append(f"{at}: {len(v)} items, at most {s['maxItems']} allowed")
            if "items" in s:
                for i, x in enumerate(v):
                    self._validate(x, s["items"], doc, f"{path}[{i}]", out)
        elif isinstance(v, dict):
            self._object(v, s, doc, path, out)

    def _string(self, v: str, s: Mapping[str, Any], at: str, out: list[str]) -> None:
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            out.append(f"{at}: not valid UTF-8 (a lone surrogate)")
            return
        if "minLength" in s and len(v) < s["minLength"]:
            out.append(f"{at}: {_show(v)} is shorter than {s['minLength']} character(s)")
        if "maxLength" in s and len(v) > s["maxLength"]:
            out.append(f"{at}: {len(v)} characters, at most {s['maxLength']} allowed")
        if "pattern" in s and not self._patterns[s["pattern"]].search(v):
            out.append(f"{at}: {_show(v)} does not match {s['pattern']}")

    def _object(self, v: dict[str, Any], s: Mapping[str, Any], doc: str, path: str, out: list[str]) -> None:
        at = path or "(event)"
        for name in s.get("required", []):
            if name not in v:
                out.append(f"{at}: {name} is required")
        props = s.get("properties", {})
        pats = s.get("patternProperties", {})
        for name, x in v.items():
            sub = f"{path}.{name}" if path else name
            matched = name in props
            if matched:
                self._validate(x, props[name], doc, sub, out)
            for p, ps in pats.items():
                if self._patterns[p].search(name):
                    matched = True
                    self._validate(x, ps, doc, sub, out)
            if not matched and "additionalProperties" in s:
                if s["additionalProperties"] is False:
                    out.append(f"{at}: unknown field {name}")
                else:
                    self._validate(x, s["additionalProperties"], doc, sub, out)

    def _sub(self, v: Any, s: Any, doc: str, path: str) -> list[str]:
        errs: list[str] = []
        self._validate(v, s, doc, path, errs)
        return errs


def _is(v: Any, t: str) -> bool:
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if isinstance(v, bool):
        return False
    if t == "integer":
        return isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v.is_integer())
    if t == "number":
        return isinstance(v, (int, float)) and (not isinstance(v, float) or math.isfinite(v))
    return False


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _show(v: Any) -> str:
    s = json.dumps(v, ensure_ascii=False, default=repr)
    return s if len(s) <= 80 else s[:77] + "..."


@lru_cache(maxsize=1)
def schemas() -> Schemas:
    """The event schemas shipped in the package."""
    root = resources.files("canopy") / "schemas" / "events"
    docs = {f.name: json.loads(f.read_text(encoding="utf-8")) for f in root.iterdir() if f.name.endswith(".json")}
    return Schemas(docs)


def validate(event: Any) -> None:
    """Raise ValidationError unless event (a canopy.Event, or a CloudEvents dict) is valid against
    event.schema.json: the envelope, a known type, and that type's data schema."""
    doc = event.to_dict() if hasattr(event, "to_dict") else event
    problems = schemas().errors(doc, "event.schema.json")
    if problems:
        etype = doc.get("type", "?") if isinstance(doc, dict) else "?"
        eid = doc.get("id", "?") if isinstance(doc, dict) else "?"
        raise ValidationError(str(etype), str(eid), problems)
