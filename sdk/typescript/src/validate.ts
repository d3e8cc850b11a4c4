// A JSON Schema (2020-12) evaluator for the keywords canopy's event schemas
// use, so that an event is judged by the contract's own schemas (SCHEMAS,
// generated from schema/events) without a validator dependency. A schema
// with a keyword or format it does not implement is refused when the
// Validator is made, never ignored: a schema that starts using one fails
// the package's tests until this file follows.
import { isIPv6 } from "net";

/** Problem is one thing wrong with a value: where (a path like data.role) and what. */
export interface Problem {
  readonly path: string;
  readonly message: string;
}

type Schema = boolean | { readonly [k: string]: unknown };

// Keywords that only annotate.
const ANNOTATIONS = new Set(["$schema", "$id", "$comment", "title", "description", "examples", "default", "deprecated", "readOnly", "writeOnly"]);
// Keywords whose value is a schema, a list of schemas, or a map of them.
const SUBSCHEMA = new Set(["items", "additionalProperties", "not", "if", "then", "else"]);
const SUBSCHEMA_LIST = new Set(["allOf", "anyOf", "oneOf"]);
const SUBSCHEMA_MAP = new Set(["properties", "patternProperties", "$defs"]);
// Keywords whose value is data.
const VALUED = new Set(["$ref", "type", "enum", "const", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
  "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "required"]);
const FORMATS: { readonly [f: string]: (s: string) => string | undefined } = {
  "date-time": dateTimeProblem,
  uri: uriProblem,
  "uri-reference": uriReferenceProblem,
};

/** SchemaError says a schema uses what the Validator does not implement, or a $ref it cannot resolve. */
export class SchemaError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SchemaError";
  }
}

/**
 * Validator validates values against a set of JSON Schemas, each named by
 * its file name; a $ref names another by file name, with a JSON pointer
 * fragment.
 */
export class Validator {
  private readonly docs: { readonly [file: string]: Schema };
  private readonly patterns = new Map<string, RegExp>();
  private readonly refs = new Map<string, [string, Schema]>();

  /** The Validator of docs; it throws SchemaError if any uses what it does not implement. */
  constructor(docs: { readonly [file: string]: unknown }) {
    this.docs = docs as { readonly [file: string]: Schema };
    for (const [file, s] of Object.entries(this.docs)) this.check(file, s, "#");
  }

  /** validate returns what is wrong with value against the schema of file: nothing if it is valid. */
  validate(file: string, value: unknown): Problem[] {
    const s = this.docs[file];
    if (s === undefined) throw new SchemaError(`no schema ${file}`);
    const out: Problem[] = [];
    this.eval(file, s, value, "", out);
    // A schema reached twice (the envelope, by the event's schema and by its type's) says the same twice.
    const seen = new Set<string>();
    return out.filter((p) => {
      const k = `${p.path}\0${p.message}`;
      return !seen.has(k) && seen.add(k) !== undefined;
    });
  }

  private check(file: string, s: unknown, at: string): void {
    if (typeof s === "boolean") return;
    if (s === null || typeof s !== "object" || Array.isArray(s)) throw new SchemaError(`${file}${at}: not a schema`);
    for (const [k, v] of Object.entries(s)) {
      const where = `${file}${at}/${k}`;
      if (ANNOTATIONS.has(k)) continue;
      if (SUBSCHEMA.has(k)) this.check(file, v, `${at}/${k}`);
      else if (SUBSCHEMA_LIST.has(k)) (v as unknown[]).forEach((x, i) => this.check(file, x, `${at}/${k}/${i}`));
      else if (SUBSCHEMA_MAP.has(k)) {
        for (const [name, x] of Object.entries(v as object)) {
          if (k === "patternProperties") this.regexp(name);
          this.check(file, x, `${at}/${k}/${name}`);
        }
      } else if (VALUED.has(k)) {
        if (k === "format" && !FORMATS[v as string]) throw new SchemaError(`${where}: format ${String(v)} is not one the SDK's validator implements`);
        if (k === "pattern") this.regexp(v as string);
        if (k === "$ref") this.resolve(file, v as string);
      } else {
        throw new SchemaError(`${where}: keyword ${k} is not one the SDK's validator implements`);
      }
    }
  }

  private regexp(p: string): RegExp {
    let re = this.patterns.get(p);
    if (!re) {
      re = new RegExp(p, "u");
      this.patterns.set(p, re);
    }
    return re;
  }

  private resolve(file: string, ref: string): [string, Schema] {
    const key = `${file}\0${ref}`;
    let r = this.refs.get(key);
    if (!r) {
      r = this.lookup(file, ref);
      this.refs.set(key, r);
    }
    return r;
  }

  private lookup(file: string, ref: string): [string, Schema] {
    const hash = ref.indexOf("#");
    const target = hash < 0 ? ref : ref.slice(0, hash);
    const pointer = hash < 0 ? "" : ref.slice(hash + 1);
    const f = target === "" ? file : target;
    let s: unknown = this.docs[f];
    if (s === undefined) throw new SchemaError(`${file}: $ref ${ref}: no schema ${f}`);
    for (const tok of pointer.split("/").slice(1)) {
      const key = decodeURIComponent(tok).replace(/~1/g, "/").replace(/~0/g, "~");
      s = s !== null && typeof s === "object" ? (s as Record<string, unknown>)[key] : undefined;
      if (s === undefined) throw new SchemaError(`${file}: $ref ${ref} points at nothing`);
    }
    return [f, s as Schema];
  }

  private eval(file: string, s: Schema, v: unknown, path: string, out: Problem[]): void {
    if (s === true) return;
    const add = (message: string, at = path): void => {
      out.push({ path: at || "(event)", message });
    };
    if (s === false) return add("not allowed");
    if (typeof s.$ref === "string") {
      const [f, t] = this.resolve(file, s.$ref);
      this.eval(f, t, v, path, out);
    }
    const t = kind(v);
    if (s.type !== undefined) {
      const want = (Array.isArray(s.type) ? s.type : [s.type]) as string[];
      if (!want.some((w) => w === t || (w === "number" && t === "integer"))) return add(`${describe(v)}: want ${want.join(" or ")}`);
    }
    if (s.enum !== undefined && !(s.enum as unknown[]).some((x) => equal(x, v))) {
      add(`${describe(v)} is not one of ${(s.enum as unknown[]).map((x) => JSON.stringify(x)).join(", ")}`);
    }
    if (s.const !== undefined && !equal(s.const, v)) add(`${describe(v)}: want ${JSON.stringify(s.const)}`);
    if (t === "string") this.evalString(s, v as string, add);
    if (t === "number" || t === "integer") evalNumber(s, v as number, add);
    if (t === "array") {
      const a = v as unknown[];
      if (typeof s.maxItems === "number" && a.length > s.maxItems) add(`${a.length} items: at most ${s.maxItems}`);
      if (typeof s.minItems === "number" && a.length < s.minItems) add(`${a.length} items: at least ${s.minItems}`);
      if (s.items !== undefined) a.forEach((x, i) => this.eval(file, s.items as Schema, x, `${path}[${i}]`, out));
    }
    if (t === "object") this.evalObject(file, s, v as Record<string, unknown>, path, out, add);
    for (const sub of (s.allOf ?? []) as Schema[]) this.eval(file, sub, v, path, out);
    if (s.anyOf !== undefined) {
      const branches = (s.anyOf as Schema[]).map((b) => this.sub(file, b, v, path));
      if (!branches.some((b) => b.length === 0)) add(alternatives(branches, path));
    }
    if (s.oneOf !== undefined) {
      const branches = (s.oneOf as Schema[]).map((b) => this.sub(file, b, v, path));
      const n = branches.filter((b) => b.length === 0).length;
      if (n === 0) add(alternatives(branches, path));
      else if (n > 1) add(`matches ${n} of the alternatives, want exactly one`);
    }
    if (s.not !== undefined && this.sub(file, s.not as Schema, v, path).length === 0) add("matches what is not allowed");
    if (s.if !== undefined) {
      const ok = this.sub(file, s.if as Schema, v, path).length === 0;
      const then = ok ? s.then : s.else;
      if (then !== undefined) this.eval(file, then as Schema, v, path, out);
    }
  }

  private sub(file: string, s: Schema, v: unknown, path: string): Problem[] {
    const out: Problem[] = [];
    this.eval(file, s, v, path, out);
    return out;
  }

  private evalString(s: { readonly [k: string]: unknown }, v: string, add: (m: string) => void): void {
    let n = -1;
    const length = () => (n < 0 ? (n = [...v].length) : n); // code points, as maxLength counts
    if (typeof s.maxLength === "number" && length() > s.maxLength) add(`${length()} characters: at most ${s.maxLength}`);
    if (typeof s.minLength === "number" && length() < s.minLength) {
      add(s.minLength === 1 ? "empty: leave the field out instead" : `${length()} characters: at least ${s.minLength}`);
    }
    if (typeof s.pattern === "string" && !this.regexp(s.pattern).test(v)) {
      add(/\\x00-\\x(08|1F)/i.test(s.pattern) ? `${describe(v)} contains a control character` : `${describe(v)} does not match ${s.pattern}`);
    }
    if (typeof s.format === "string") {
      const p = FORMATS[s.format](v);
      if (p) add(`${describe(v)}: ${p}`);
    }
  }

  private evalObject(file: string, s: { readonly [k: string]: unknown }, o: Record<string, unknown>, path: string, out: Problem[],
    add: (m: string, at?: string) => void): void {
    const at = (k: string) => (path ? `${path}.${k}` : k);
    for (const r of (s.required ?? []) as string[]) {
      if (!Object.prototype.hasOwnProperty.call(o, r)) add("required", at(r));
    }
    const props = (s.properties ?? {}) as { readonly [k: string]: Schema };
    const patterns = Object.entries((s.patternProperties ?? {}) as { readonly [k: string]: Schema });
    if (patterns.length === 0 && s.additionalProperties === undefined) {
      // Only the named properties matter (the common case, an if's): no need to look at every key.
      for (const k of Object.keys(props)) {
        if (Object.prototype.hasOwnProperty.call(o, k)) this.eval(file, props[k], o[k], at(k), out);
      }
      return;
    }
    for (const [k, x] of Object.entries(o)) {
      let matched = false;
      if (Object.prototype.hasOwnProperty.call(props, k)) {
        matched = true;
        this.eval(file, props[k], x, at(k), out);
      }
      for (const [p, ps] of patterns) {
        if (this.regexp(p).test(k)) {
          matched = true;
          this.eval(file, ps, x, at(k), out);
        }
      }
      if (!matched && s.additionalProperties !== undefined) {
        if (s.additionalProperties === false) add("unknown field", at(k));
        else this.eval(file, s.additionalProperties as Schema, x, at(k), out);
      }
    }
  }
}

// kind is a JSON value's JSON Schema type.
function kind(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  if (typeof v === "bigint") return "integer";
  return typeof v; // string, boolean, object
}

function describe(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v.length > 40 ? v.slice(0, 40) + "…" : v);
  if (typeof v === "bigint") return String(v);
  if (v !== null && typeof v === "object") return Array.isArray(v) ? "an array" : "an object";
  return JSON.stringify(v) ?? String(v);
}

function equal(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if ((typeof a === "number" || typeof a === "bigint") && (typeof b === "number" || typeof b === "bigint")) {
    return Number.isInteger(Number(a)) && Number.isInteger(Number(b)) && BigInt(a) === BigInt(b);
  }
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => equal(x, b[i]));
  if (a && b && typeof a === "object" && typeof b === "object" && !Array.isArray(a) && !Array.isArray(b)) {
    const ka = Object.keys(a), kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k) => equal((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
  }
  return false;
}

// compare compares two numbers exactly (BigInt when both are integers:
// a bound may be a BigInt beyond Number's safe range).
function compare(a: number | bigint, b: number | bigint): number {
  if ((typeof a === "bigint" || Number.isInteger(a)) && (typeof b === "bigint" || Number.isInteger(b))) {
    const x = BigInt(a), y = BigInt(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  const x = Number(a), y = Number(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

function evalNumber(s: { readonly [k: string]: unknown }, v: number, add: (m: string) => void): void {
  const bound = (k: string) => s[k] as number | bigint | undefined;
  let b: number | bigint | undefined;
  if ((b = bound("maximum")) !== undefined && compare(v, b) > 0) add(`${describe(v)}: at most ${b}`);
  if ((b = bound("minimum")) !== undefined && compare(v, b) < 0) add(`${describe(v)}: at least ${b}`);
  if ((b = bound("exclusiveMaximum")) !== undefined && compare(v, b) >= 0) add(`${describe(v)}: less than ${b}`);
  if ((b = bound("exclusiveMinimum")) !== undefined && compare(v, b) <= 0) add(`${describe(v)}: more than ${b}`);
}

function alternatives(branches: Problem[][], path: string): string {
  let msgs = branches.map((b) => b.map((p) => (p.path === (path || "(event)") ? p.message : `${p.path}: ${p.message}`)).join("; "));
  // "or null" goes without saying next to what the value should have been.
  if (msgs.length > 1) msgs = msgs.filter((m) => !m.endsWith(": want null"));
  return [...new Set(msgs)].join(", or ");
}

// dateTimeProblem checks RFC 3339's date-time: the fields in range, the day
// in its month.
function dateTimeProblem(s: string): string | undefined {
  const m = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|([+-])(\d{2}):(\d{2}))$/.exec(s);
  if (!m) return "not an RFC 3339 date-time";
  const [y, mo, d, h, mi, sec] = m.slice(1, 7).map(Number);
  const leap = (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1];
  if (mo < 1 || mo > 12 || d < 1 || d > (days ?? 0)) return "not a day of the calendar";
  if (h > 23 || mi > 59 || sec > 60) return "not a time of day";
  if (m[9] && (Number(m[10]) > 23 || Number(m[11]) > 59)) return "not a time offset";
  if (sec === 60) {
    // A leap second is 23:59:60 in UTC.
    const off = m[9] ? (m[9] === "+" ? 1 : -1) * (Number(m[10]) * 60 + Number(m[11])) : 0;
    const utc = (((h * 60 + mi - off) % 1440) + 1440) % 1440;
    if (utc !== 23 * 60 + 59) return "not a time of day: a leap second is 23:59:60 in UTC";
  }
  return undefined;
}

// The URI checks are Go's net/url.Parse, which the projector's decoder
// (pkg/topics) judges source and dataschema with, byte for byte.

function uriReferenceProblem(s: string): string | undefined {
  if (/^[A-Za-z0-9/._~-]*$/.test(s)) return undefined; // a path of unreserved characters: nothing to parse
  if (s.includes("\\")) return "not a URI-reference: contains a backslash";
  const p = goParseURL(Buffer.from(s, "utf8"));
  if (typeof p === "string") return "not a URI-reference: " + p;
  const h = hostname(p.host);
  if (h.includes(":") && (!p.host.includes("[") || !isIPv6(h) || h.includes("%"))) return "not a URI-reference: a bad IPv6 host";
  return undefined;
}

function uriProblem(s: string): string | undefined {
  const p = uriReferenceProblem(s);
  if (p) return p;
  const u = goParseURL(Buffer.from(s, "utf8"));
  if (typeof u === "string" || u.scheme === "") return "not an absolute URI: want a scheme, e.g. https://";
  return undefined;
}

const lit = (b: Buffer, i: number, c: string) => b[i] === c.charCodeAt(0);
const isAlpha = (c: number) => (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a);
const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
const isHex = (c: number) => isDigit(c) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46);

// goParseURL is net/url.Parse: the URL's scheme and host (unescaped), or
// the error it returns.
function goParseURL(b: Buffer): { scheme: string; host: string } | string {
  const hash = b.indexOf("#");
  const u = hash < 0 ? b : b.subarray(0, hash);
  if (u.some((c) => c < 0x20 || c === 0x7f)) return "net/url: invalid control character in URL";
  if (u.length === 1 && lit(u, 0, "*")) return { scheme: "", host: "" };
  let scheme = "";
  let rest = u;
  for (let i = 0; i < u.length; i++) {
    const c = u[i];
    if (isAlpha(c)) continue;
    if (isDigit(c) || c === 0x2b || c === 0x2d || c === 0x2e) {
      if (i === 0) break;
      continue;
    }
    if (c === 0x3a) {
      if (i === 0) return "missing protocol scheme";
      scheme = u.subarray(0, i).toString("latin1").toLowerCase();
      rest = u.subarray(i + 1);
    }
    break;
  }
  const q = rest.indexOf("?");
  if (q >= 0) rest = rest.subarray(0, q);
  let host = "";
  if (!lit(rest, 0, "/")) {
    if (scheme !== "") return checkFragment(b, hash, { scheme, host }); // opaque
    const slash = rest.indexOf("/");
    if ((slash < 0 ? rest : rest.subarray(0, slash)).includes(":")) return "first path segment in URL cannot contain colon";
  }
  if ((scheme !== "" || !(lit(rest, 0, "/") && lit(rest, 1, "/") && lit(rest, 2, "/"))) && lit(rest, 0, "/") && lit(rest, 1, "/")) {
    let authority = rest.subarray(2);
    const slash = authority.indexOf("/");
    rest = slash >= 0 ? authority.subarray(slash) : Buffer.alloc(0);
    if (slash >= 0) authority = authority.subarray(0, slash);
    const h = parseAuthority(scheme, authority);
    if (h.err) return h.err;
    host = h.host;
  }
  const e = unescape(rest, "path");
  if (typeof e !== "object") return e;
  return checkFragment(b, hash, { scheme, host });
}

function checkFragment(b: Buffer, hash: number, ok: { scheme: string; host: string }): { scheme: string; host: string } | string {
  if (hash < 0) return ok;
  const e = unescape(b.subarray(hash + 1), "fragment");
  return typeof e === "object" ? ok : e;
}

function parseAuthority(scheme: string, a: Buffer): { host: string; err?: string } {
  const at = a.lastIndexOf("@");
  const h = parseHost(scheme, at < 0 ? a : a.subarray(at + 1));
  if (typeof h === "string") return { host: "", err: h };
  if (at >= 0) {
    const user = a.subarray(0, at);
    for (const c of user.toString("utf8")) {
      if (!/[A-Za-z0-9\-._:~!$&'()*+,;=%@]/.test(c)) return { host: "", err: "net/url: invalid userinfo" };
    }
    const colon = user.indexOf(":");
    for (const part of colon < 0 ? [user] : [user.subarray(0, colon), user.subarray(colon + 1)]) {
      const e = unescape(part, "userinfo");
      if (typeof e !== "object") return { host: "", err: e };
    }
  }
  return { host: h.host };
}

const validOptionalPort = (p: Buffer) => p.length === 0 || (lit(p, 0, ":") && p.subarray(1).every(isDigit));

function parseHost(scheme: string, host: Buffer): { host: string } | string {
  const open = host.lastIndexOf("[");
  if (open > 0) return "invalid IP-literal";
  if (open === 0) {
    const close = host.lastIndexOf("]");
    if (close < 0) return "missing ']' in host";
    const colonPort = host.subarray(close + 1);
    if (!validOptionalPort(colonPort)) return `invalid port ${JSON.stringify(colonPort.toString("utf8"))} after host`;
    const name = host.subarray(1, close);
    const zone = name.indexOf("%25");
    let unescaped: Buffer;
    if (zone >= 0) {
      const a = unescape(name.subarray(0, zone), "host");
      if (typeof a !== "object") return a;
      const z = unescape(name.subarray(zone), "zone");
      if (typeof z !== "object") return z;
      unescaped = Buffer.concat([a, z]);
    } else {
      const a = unescape(name, "host");
      if (typeof a !== "object") return a;
      unescaped = a;
    }
    const addr = unescaped.toString("utf8");
    if (!isIPv6(addr)) return `invalid host: ParseAddr(${JSON.stringify(addr)})`;
    return { host: "[" + addr + "]" + colonPort.toString("utf8") };
  }
  let i = host.indexOf(":");
  if (i >= 0) {
    const last = host.lastIndexOf(":");
    if (last !== i && scheme !== "http" && scheme !== "https") i = last;
    const colonPort = host.subarray(i);
    if (!validOptionalPort(colonPort)) return `invalid port ${JSON.stringify(colonPort.toString("utf8"))} after host`;
  }
  const h = unescape(host, "host");
  return typeof h === "object" ? { host: h.toString("utf8") } : h;
}

// hostAllowed are the ASCII bytes Go's url.Parse allows in a host unescaped.
const hostAllowed = new Set([..."!$&'()*+,;=:[]<>\"-_.~"].map((c) => c.charCodeAt(0)));

// unescape is net/url's unescape: the bytes with %XX decoded, or the error.
function unescape(s: Buffer, mode: "path" | "fragment" | "host" | "zone" | "userinfo"): Buffer | string {
  const out: number[] = [];
  for (let i = 0; i < s.length;) {
    const c = s[i];
    if (c === 0x25) {
      if (i + 2 >= s.length || !isHex(s[i + 1]) || !isHex(s[i + 2])) {
        return `invalid URL escape ${JSON.stringify(s.subarray(i, i + 3).toString("utf8"))}`;
      }
      const v = parseInt(s.subarray(i + 1, i + 3).toString("latin1"), 16);
      const pct25 = v === 0x25;
      if (mode === "host" && v < 0x80 && !pct25) return `invalid URL escape ${JSON.stringify(s.subarray(i, i + 3).toString("latin1"))}`;
      if (mode === "zone" && !pct25 && v !== 0x20 && !isAlpha(v) && !isDigit(v) && !hostAllowed.has(v)) {
        return `invalid URL escape ${JSON.stringify(s.subarray(i, i + 3).toString("latin1"))}`;
      }
      out.push(v);
      i += 3;
      continue;
    }
    if ((mode === "host" || mode === "zone") && c < 0x80 && !isAlpha(c) && !isDigit(c) && !hostAllowed.has(c)) {
      return `invalid character ${JSON.stringify(String.fromCharCode(c))} in host name`;
    }
    out.push(c);
    i++;
  }
  return Buffer.from(out);
}

// hostname is url.URL.Hostname: the host without its port and brackets.
function hostname(host: string): string {
  let h = host;
  const colon = h.lastIndexOf(":");
  if (colon >= 0 && /^:\d*$/.test(h.slice(colon))) h = h.slice(0, colon);
  if (h.startsWith("[") && h.endsWith("]")) h = h.slice(1, -1);
  return h;
}
