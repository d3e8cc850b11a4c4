package topics

// Partition returns the partition Kafka's default partitioner (murmur2, as in
// the Java client and franz-go's kgo.StickyKeyPartitioner) places key in, out
// of n. Every canopy topic is keyed by run id and co-partitioned, so this is
// the partition of a run in each of them.
//
// librdkafka clients default to a CRC32 partitioner and must set
// partitioner=murmur2_random to agree; the projector reroutes records that
// arrive in the wrong partition rather than mis-project them.
func Partition(key []byte, n int32) int32 {
	if n <= 0 {
		return 0
	}
	return int32((murmur2(key) & 0x7fffffff) % uint32(n))
}

// murmur2 is Kafka's murmur2 hash (org.apache.kafka.common.utils.Utils.murmur2).
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		b = b[4:]
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
