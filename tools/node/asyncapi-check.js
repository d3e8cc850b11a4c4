// asyncapi-check.js parses an AsyncAPI document with the AsyncAPI parser
// (@asyncapi/parser, pinned in package-lock.json), the library AsyncAPI's
// generators, Studio and CLI are built on, and prints what it saw as one
// JSON object: every diagnostic, and for each message the schema format of
// its payload and the payload as the parser's Schema model reads it (its
// type, its properties and, through allOf, the properties of what it
// composes), so a Go test can tell a typed payload from an opaque one.
// schema/apitools_test.go runs it.
//
//   node asyncapi-check.js path/to/asyncapi.yaml
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { Parser, fromFile } = require('@asyncapi/parser');

// describe summarises a Schema model: its types and, recursively through
// allOf, the names of its properties and each property's type.
function describe(s, depth = 0) {
  if (!s || depth > 8) return null;
  const out = { type: s.type() ?? null, properties: {}, allOf: [], oneOf: [], anyOf: [] };
  const props = s.properties() || {};
  for (const [name, p] of Object.entries(props)) {
    out.properties[name] = depth < 2 ? describe(p, depth + 1) : { type: p.type() ?? null };
  }
  for (const [k, f] of [['allOf', 'allOf'], ['oneOf', 'oneOf'], ['anyOf', 'anyOf']]) {
    for (const sub of s[f]() || []) out[k].push(describe(sub, depth + 1));
  }
  const ifs = s.if();
  if (ifs) out.then = describe(s.then(), depth + 1);
  return out;
}

async function main() {
  const file = path.resolve(process.argv[2]);
  const parser = new Parser();
  const { document, diagnostics } = await fromFile(parser, file).parse();
  const result = {
    diagnostics: diagnostics.map((d) => ({ severity: d.severity, code: String(d.code), message: d.message, path: d.path.join('/') })),
    messages: {},
  };
  if (document) {
    for (const m of document.components().messages()) {
      const p = m.payload();
      result.messages[m.id()] = {
        schemaFormat: m.schemaFormat(),
        // Whether a schema parser of this parser reads the format; a
        // payload in any other format is passed through unread (opaque).
        parsed: parser.parserRegistry.has(m.schemaFormat()),
        payload: p ? describe(p) : null,
      };
    }
  }
  process.stdout.write(JSON.stringify(result, null, 1) + '\n');
}

main().catch((e) => {
  console.error(e && e.stack || e);
  process.exit(2);
});
