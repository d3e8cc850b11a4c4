import { createHash } from "crypto";

const B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"; // Crockford's base32, as ULIDs use

/** MAX_TIME is the greatest time a ULID holds: 48 bits of Unix milliseconds. */
export const MAX_TIME = 2 ** 48 - 1;

const ULID_RE = /^[0-7][0-9A-HJKMNP-TV-Z]{25}$/i; // as Go's ulid.ParseStrict, in either case

/**
 * ulid encodes a ULID: ms (Unix milliseconds; a time outside [0, MAX_TIME]
 * leaves the time bits zero, as Go's ulid.SetTime does) and the first 10
 * bytes of entropy, in Crockford's base32 (26 characters).
 */
export function ulid(ms: number, entropy: Uint8Array): string {
  if (entropy.length < 10) throw new RangeError("ulid: want 10 bytes of entropy");
  const t = Number.isInteger(ms) && ms >= 0 && ms <= MAX_TIME ? ms : 0;
  let n = BigInt(t) << 80n;
  for (let i = 0; i < 10; i++) n |= BigInt(entropy[i]) << BigInt(8 * (9 - i));
  let s = "";
  for (let i = 0; i < 26; i++, n >>= 5n) s = B32[Number(n & 31n)] + s;
  return s;
}

/** ulidTime returns the Unix milliseconds of a ULID, or undefined if s is not one. */
export function ulidTime(s: string): number | undefined {
  if (!ULID_RE.test(s)) return undefined;
  let ms = 0;
  for (const c of s.slice(0, 10).toUpperCase()) ms = ms * 32 + B32.indexOf(c);
  return ms;
}

/**
 * derive is pkg/ids.Derive: a ULID with time ms (at most MAX_TIME, at least
 * 0) and entropy from a SHA-256
 * of parts, each prefixed with its length in bytes (8 bytes, big-endian) so
 * that no two lists of parts hash alike.
 */
export function derive(ms: number, ...parts: string[]): string {
  const h = createHash("sha256");
  for (const p of parts) {
    const b = Buffer.from(p, "utf8");
    const n = Buffer.alloc(8);
    n.writeBigUInt64BE(BigInt(b.length));
    h.update(n);
    h.update(b);
  }
  return ulid(Math.min(Math.max(Math.floor(ms) || 0, 0), MAX_TIME), h.digest());
}

/**
 * ackId is pkg/ids.Ack: the id of the conductor.wake_received event source
 * sends to acknowledge wake wakeId, a ULID with time ms and entropy from a
 * SHA-256 of the source and the wake id.
 */
export function ackId(ms: number, source: string, wakeId: string): string {
  return ulid(ms, createHash("sha256").update(`conductor.wake_received\0${source}\0${wakeId}`, "utf8").digest());
}
