"use strict";
// generate.js writes src/events.ts (a builder and the payload's type for
// every event type) and src/schemas.ts (the JSON Schemas, which validate()
// checks events against) from the contract's JSON Schemas in
// ../../schema/events, and src/wakes.ts (the wake's types) from
// ../../schema/wake.schema.json. Run it after changing a schema:
//
//   npm run generate            # in sdk/typescript
//   node scripts/generate.js --check   # exit 1 if the files are not what it would write
//
// sdk/typescript_test.go runs --check, so a schema that gains or loses a
// type or a field fails the tests until the package follows. It needs
// nothing but Node.
const fs = require("fs");
const path = require("path");

const root = path.join(__dirname, "..");
const schemaDir = path.join(root, "..", "..", "schema", "events");
const wakeSchema = path.join(root, "..", "..", "schema", "wake.schema.json");

// parseJSON is JSON.parse, but an integer beyond Number's safe range is
// kept exactly, as a BigInt (the contract's 64-bit bounds are such).
function parseJSON(text) {
  let i = 0;
  const ws = () => {
    while (/\s/.test(text[i])) i++;
  };
  const fail = (what) => {
    throw new SyntaxError(`${what} at offset ${i}`);
  };
  function value() {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const o = {};
      ws();
      if (text[i] === "}") return i++, o;
      for (;;) {
        ws();
        if (text[i] !== '"') fail("want a key");
        const k = str();
        ws();
        if (text[i++] !== ":") fail("want :");
        o[k] = value();
        ws();
        if (text[i] === ",") i++;
        else if (text[i] === "}") return i++, o;
        else fail("want , or }");
      }
    }
    if (c === "[") {
      i++;
      const a = [];
      ws();
      if (text[i] === "]") return i++, a;
      for (;;) {
        a.push(value());
        ws();
        if (text[i] === ",") i++;
        else if (text[i] === "]") return i++, a;
        else fail("want , or ]");
      }
    }
    if (c === '"') return str();
    const m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i));
    if (m) {
      i += m[0].length;
      const n = Number(m[0]);
      if (!m[2] && !m[3] && !Number.isSafeInteger(n)) return BigInt(m[0]);
      return n;
    }
    for (const [lit, v] of [["true", true], ["false", false], ["null", null]]) {
      if (text.startsWith(lit, i)) return (i += lit.length), v;
    }
    return fail("want a value");
  }
  function str() {
    const m = /^"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/.exec(text.slice(i));
    if (!m) fail("bad string");
    i += m[0].length;
    return JSON.parse(m[0]);
  }
  const v = value();
  ws();
  if (i !== text.length) fail("trailing text");
  return v;
}

// literal writes v as a TypeScript expression: JSON, BigInts as 123n.
function literal(v, indent) {
  const pad = "  ".repeat(indent + 1);
  const end = "  ".repeat(indent);
  if (typeof v === "bigint") return `${v}n`;
  if (Array.isArray(v)) {
    if (v.every((x) => x === null || typeof x !== "object")) return `[${v.map((x) => literal(x, indent + 1)).join(", ")}]`;
    return `[\n${v.map((x) => pad + literal(x, indent + 1)).join(",\n")}\n${end}]`;
  }
  if (v !== null && typeof v === "object") {
    const keys = Object.keys(v);
    if (keys.length === 0) return "{}";
    return `{\n${keys.map((k) => `${pad}${JSON.stringify(k)}: ${literal(v[k], indent + 1)}`).join(",\n")}\n${end}}`;
  }
  return JSON.stringify(v);
}

const camel = (s) => s.replace(/[._]([a-z0-9])/g, (_, c) => c.toUpperCase());
const pascal = (s) => camel(s).replace(/^./, (c) => c.toUpperCase());

// doc is a JSDoc comment of text at indent.
function doc(text, indent) {
  const pad = " ".repeat(indent);
  const lines = [];
  for (const para of String(text).replace(/\*\//g, "*\\/").split("\n")) {
    let line = "";
    for (const w of para.split(" ")) {
      if (line && (line + " " + w).length > 96 - indent) {
        lines.push(line);
        line = w;
      } else line = line ? line + " " + w : w;
    }
    lines.push(line);
  }
  if (lines.length === 1) return `${pad}/** ${lines[0]} */\n`;
  return `${pad}/**\n${lines.map((l) => `${pad} *${l ? " " + l : ""}`).join("\n")}\n${pad} */\n`;
}

// The envelope's $defs a payload field may refer to, as TypeScript types:
// what the event carries, and what its builder takes.
const DEFS = {
  id: ["string", "string"],
  idList: ["readonly string[]", "readonly string[]"],
  timestamp: ["string", "Date | string"],
  text: ["string", "string"],
  integer: ["number", "number"],
  count: ["number", "number"],
};

// fieldType returns [the payload's type, the builder's] of a property
// schema, or throws naming what it does not know.
function fieldType(where, s) {
  if (s.$ref) {
    const m = /^envelope\.schema\.json#\/\$defs\/([A-Za-z]+)$/.exec(s.$ref);
    if (!m || !DEFS[m[1]]) throw new Error(`${where}: $ref ${s.$ref} is not one of the envelope's $defs generate.js knows`);
    return DEFS[m[1]];
  }
  if (s.anyOf) {
    const types = s.anyOf.map((b, i) => fieldType(`${where}.anyOf[${i}]`, b));
    const uniq = (xs) => [...new Set(xs)].join(" | ");
    return [uniq(types.map((t) => t[0])), uniq(types.map((t) => t[1]))];
  }
  if (s.enum) {
    const t = s.enum.map((x) => JSON.stringify(x)).join(" | ");
    return [t, t];
  }
  if (s.const !== undefined) return [JSON.stringify(s.const), JSON.stringify(s.const)];
  const simple = { string: "string", boolean: "boolean", number: "number", integer: "number", null: "null" };
  if (typeof s.type === "string" && simple[s.type]) return [simple[s.type], simple[s.type]];
  if (s.type === "array" && s.items) {
    const [a, b] = fieldType(`${where}.items`, s.items);
    return [`readonly (${a})[]`, `readonly (${b})[]`];
  }
  throw new Error(`${where}: a field schema generate.js does not know how to type: ${JSON.stringify(s)}`);
}

const ENVELOPE_FIELDS = ["runId", "agentId", "source", "time", "id", "sessionId", "threadId", "correlationId", "causationId", "subject", "dataschema"];

function generate() {
  const files = fs.readdirSync(schemaDir).filter((f) => f.endsWith(".schema.json")).sort();
  const schemas = {};
  for (const f of files) schemas[f] = parseJSON(fs.readFileSync(path.join(schemaDir, f), "utf8"));

  const header = (what) => `// Code generated by scripts/generate.js from schema/events/*.schema.json (${what}). DO NOT EDIT.\n` +
    "// After changing a schema, run `npm run generate` in sdk/typescript.\n\n";

  let sch = header("the schemas, verbatim");
  sch += "/**\n * SCHEMAS are the JSON Schemas of canopy's events (schema/events), by file name: what validate()\n" +
    " * checks an event against. Integers beyond Number's safe range are BigInts, exact.\n */\n";
  sch += `export const SCHEMAS: { readonly [file: string]: unknown } = ${literal(schemas, 0)};\n`;

  const types = schemas["event.schema.json"].allOf[1].properties.type.enum;
  const perType = files.filter((f) => f !== "event.schema.json" && f !== "envelope.schema.json").map((f) => f.replace(/\.schema\.json$/, ""));
  if (JSON.stringify([...types].sort()) !== JSON.stringify(perType)) {
    throw new Error(`event.schema.json's type enum ${JSON.stringify(types)} is not the per-type schemas' ${JSON.stringify(perType)}`);
  }

  let ev = header("one builder per event type");
  ev += 'import { type Envelope, type Event, makeEvent, toTime } from "./event";\n\n';
  ev += "/** EVENT_TYPES are the contract's event types (event.schema.json's type enum), in its order. */\n";
  ev += `export const EVENT_TYPES = ${literal(types, 0)} as const;\n\n`;
  ev += "/** EventType is an event type of the contract. */\nexport type EventType = (typeof EVENT_TYPES)[number];\n\n";
  const fieldsTable = {};
  for (const type of types) {
    const s = schemas[`${type}.schema.json`];
    if (s.properties?.type?.const !== type) throw new Error(`${type}.schema.json: properties.type.const is not ${type}`);
    const data = s.properties.data;
    const props = data.properties || {};
    const required = new Set(data.required || []);
    const nullable = Array.isArray(data.type) && data.type.includes("null");
    const name = pascal(type);
    const fn = camel(type);
    let dataT = doc(`${data.description || `The ${type} payload.`}`, 0);
    dataT += `export interface ${name}Data {\n`;
    let fieldsT = doc(`What ${fn} takes: the envelope, and the ${type} payload's fields in camelCase.`, 0);
    fieldsT += `export interface ${name}Fields extends Envelope {\n`;
    const assign = [];
    fieldsTable[type] = {};
    const seen = new Set(ENVELOPE_FIELDS);
    for (const [field, ps] of Object.entries(props)) {
      const [wire, input] = fieldType(`${type}.data.${field}`, ps);
      const c = camel(field);
      if (seen.has(c)) throw new Error(`${type}: data field ${field} is ${c} in camelCase, which another field or the envelope already is`);
      seen.add(c);
      fieldsTable[type][c] = field;
      const opt = required.has(field) ? "" : "?";
      const d = ps.description ? doc(ps.description, 2) : "";
      dataT += `${d}  readonly ${field}${opt}: ${wire};\n`;
      fieldsT += `${d}  ${c}${opt}: ${input};\n`;
      const conv = input.includes("Date") ? (opt ? `f.${c} === undefined ? undefined : toTime(f.${c})` : `toTime(f.${c})`) : `f.${c}`;
      assign.push(`${field}: ${conv}`);
    }
    dataT += "}\n\n";
    fieldsT += "}\n\n";
    ev += dataT + fieldsT;
    ev += doc(`${fn} builds a ${type} event. ${s.description || ""}${nullable ? " Its payload has no required field." : ""}`.trim(), 0);
    ev += `export function ${fn}(f: ${name}Fields): Event<"${type}"> {\n`;
    ev += `  return makeEvent("${type}", f, { ${assign.join(", ")} });\n}\n\n`;
  }
  ev += "/** EventDataMap is the payload of each event type, as it is sent. */\nexport interface EventDataMap {\n";
  for (const type of types) ev += `  "${type}": ${pascal(type)}Data;\n`;
  ev += "}\n\n";
  ev += "/** BUILDERS are the builders by event type. */\n";
  ev += "export const BUILDERS: { readonly [T in EventType]: (f: never) => Event<T> } = {\n";
  for (const type of types) ev += `  "${type}": ${camel(type)},\n`;
  ev += "};\n\n";
  ev += "/** FIELDS are, by event type, the payload fields its builder takes (camelCase) and their names in the contract. */\n";
  ev += `export const FIELDS: { readonly [T in EventType]: { readonly [field: string]: string } } = ${literal(fieldsTable, 0)};\n`;
  return { "src/schemas.ts": sch, "src/events.ts": ev, "src/wakes.ts": wakeTypes(parseJSON(fs.readFileSync(wakeSchema, "utf8")), header) };
}

// wakeTypes writes the TypeScript types of schema/wake.schema.json: Wake,
// and an interface for each object of its $defs.
function wakeTypes(w, header) {
  const defs = w.$defs || {};
  const named = (name) => pascal(name);
  function ts(where, s, indent) {
    if (s.$ref) {
      const m = /^#\/\$defs\/([A-Za-z]+)$/.exec(s.$ref);
      if (!m || !defs[m[1]]) throw new Error(`wake.schema.json ${where}: $ref ${s.$ref} is not one of its $defs`);
      return defs[m[1]].type === "object" ? named(m[1]) : ts(`$defs/${m[1]}`, defs[m[1]], indent);
    }
    if (s.anyOf) return [...new Set(s.anyOf.map((b, i) => ts(`${where}/anyOf/${i}`, b, indent)))].join(" | ");
    if (s.enum) return s.enum.map((x) => JSON.stringify(x)).join(" | ");
    if (s.const !== undefined) return JSON.stringify(s.const);
    const types = Array.isArray(s.type) ? s.type : [s.type];
    return types.map((t) => {
      switch (t) {
        case "string":
          return "string";
        case "integer":
        case "number":
          return "number";
        case "boolean":
          return "boolean";
        case "null":
          return "null";
        case "array":
          if (!s.items) throw new Error(`wake.schema.json ${where}: an array without items`);
          return `${ts(`${where}/items`, s.items, indent)}[]`;
        case "object":
          return objectType(where, s, indent);
      }
      throw new Error(`wake.schema.json ${where}: a schema generate.js does not know how to type: ${JSON.stringify(s)}`);
    }).join(" | ");
  }
  function objectType(where, s, indent) {
    const req = new Set(s.required || []);
    const pad = "  ".repeat(indent + 1);
    let out = "{\n";
    for (const [k, ps] of Object.entries(s.properties || {})) {
      if (ps.description) out += doc(ps.description, 2 * (indent + 1));
      out += `${pad}${k}${req.has(k) ? "" : "?"}: ${ts(`${where}/properties/${k}`, ps, indent + 1)};\n`;
    }
    return out + "  ".repeat(indent) + "}";
  }
  let out = header("the wake's types, from schema/wake.schema.json").replace("schema/events/*.schema.json", "schema/wake.schema.json");
  out += doc(`Wake is one wake as canopy publishes it (schema/wake.schema.json). ${w.description || ""}`.trim(), 0);
  out += `export interface Wake ${objectType("", w, 0)}\n\n`;
  for (const [name, d] of Object.entries(defs)) {
    if (d.type !== "object") continue;
    out += doc(`${named(name)}: ${d.description || name}`, 0);
    out += `export interface ${named(name)} ${objectType(`$defs/${name}`, d, 0)}\n\n`;
  }
  return out.replace(/\n\n$/, "\n");
}

const out = generate();
if (process.argv.includes("--check")) {
  const stale = Object.entries(out).filter(([f, text]) => {
    try {
      return fs.readFileSync(path.join(root, f), "utf8") !== text;
    } catch {
      return true;
    }
  });
  if (stale.length) {
    console.error(`sdk/typescript: ${stale.map(([f]) => f).join(" and ")} do not follow schema/events: run \`npm run generate\` in sdk/typescript`);
    process.exit(1);
  }
} else {
  for (const [f, text] of Object.entries(out)) fs.writeFileSync(path.join(root, f), text);
}
