import { ValidationError } from "./errors";
import { SCHEMAS } from "./schemas";
import { type Problem, Validator } from "./validate";

let validator: Validator | undefined;

/**
 * validate returns every problem of an event against canopy's contract, or
 * nothing when it is valid: the event as JSON.stringify writes it is
 * checked against schema/events/event.schema.json (the envelope, the type,
 * and the type's payload), and it must be JSON to begin with (no NaN,
 * Infinity, BigInt, function, or string that is not valid Unicode).
 */
export function validate(event: unknown): Problem[] {
  const out: Problem[] = [];
  notJSON(event, "", out);
  if (out.length) return out;
  validator ??= new Validator(SCHEMAS);
  return validator.validate("event.schema.json", JSON.parse(JSON.stringify(event)));
}

/** assertValid throws a ValidationError listing every problem of an event that is not valid. */
export function assertValid(event: unknown): void {
  const problems = validate(event);
  if (problems.length) {
    const e = event !== null && typeof event === "object" ? (event as { id?: unknown; type?: unknown }) : {};
    throw new ValidationError({ id: e.id, type: e.type }, problems);
  }
}

// notJSON adds what of v JSON.stringify would drop, change or refuse.
function notJSON(v: unknown, path: string, out: Problem[]): void {
  const at = path || "(event)";
  switch (typeof v) {
    case "number":
      if (!Number.isFinite(v)) out.push({ path: at, message: `${v}: JSON has no such number` });
      return;
    case "bigint":
      out.push({ path: at, message: "a BigInt: JSON.stringify cannot write it; use a number" });
      return;
    case "string":
      if (!isWellFormed(v)) out.push({ path: at, message: "not valid Unicode: a lone surrogate" });
      return;
    case "function":
    case "symbol":
      out.push({ path: at, message: `a ${typeof v}: not JSON` });
      return;
    case "object":
      if (v === null || typeof (v as { toJSON?: unknown }).toJSON === "function") return;
      if (Array.isArray(v)) v.forEach((x, i) => notJSON(x, `${path}[${i}]`, out));
      else for (const [k, x] of Object.entries(v)) if (x !== undefined) notJSON(x, path ? `${path}.${k}` : k, out);
  }
}

function isWellFormed(s: string): boolean {
  return !/\p{Surrogate}/u.test(s);
}
