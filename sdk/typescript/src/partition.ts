/**
 * murmur2 is Kafka's murmur2 hash (the Java client's Utils.murmur2, and
 * pkg/topics'), of bytes.
 */
export function murmur2(b: Uint8Array): number {
  const m = 0x5bd1e995;
  let h = (0x9747b28c ^ b.length) >>> 0;
  let i = 0;
  for (; i + 4 <= b.length; i += 4) {
    let k = b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  const tail = b.length - i;
  if (tail >= 3) h ^= b[i + 2] << 16;
  if (tail >= 2) h ^= b[i + 1] << 8;
  if (tail >= 1) {
    h ^= b[i];
    h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h >>> 0;
}

/**
 * partition is the partition of n that canopy (pkg/topics.Partition),
 * Kafka's Java client and franz-go place a record keyed by key in: murmur2
 * of the key's UTF-8 bytes, its sign bit cleared, modulo n. Every canopy
 * topic is keyed by run id and co-partitioned, so this is the partition of
 * a run in each of them.
 */
export function partition(key: string | Uint8Array, n: number): number {
  if (n <= 0) return 0;
  const b = typeof key === "string" ? Buffer.from(key, "utf8") : key;
  return ((murmur2(b) & 0x7fffffff) >>> 0) % n;
}
