package topics_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// franzPartition is the ground truth: franz-go's default key partitioner,
// which is Kafka's (murmur2, sign bit masked, modulo n).
func franzPartition(key []byte, n int32) int32 {
	if key == nil {
		key = []byte{} // a nil key would be placed at random (sticky)
	}
	return int32(franz.Partition(&kgo.Record{Key: key}, int(n)))
}

// Keyed records are placed by the hash alone, so one partitioner serves.
var franz = kgo.StickyKeyPartitioner(nil).ForTopic("t")

func TestPartitionMatchesFranzGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	counts := []int32{1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 50, 64, 100, 128, 255, 256, 1000, 4096, 65537, math.MaxInt32}
	for i := range 20000 {
		key := make([]byte, rng.IntN(70))
		switch i % 3 {
		case 0: // arbitrary bytes, high bits included
			for j := range key {
				key[j] = byte(rng.Uint32())
			}
		case 1: // run-id-like text
			const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZabcdefghijklmnopqrstuvwxyz-_/."
			for j := range key {
				key[j] = alphabet[rng.IntN(len(alphabet))]
			}
		case 2: // mostly 0xff and 0x80: sign extension would show here
			for j := range key {
				key[j] = []byte{0xff, 0x80, 0x7f, 0x00}[rng.IntN(4)]
			}
		}
		var n int32
		if i%2 == 0 {
			n = counts[rng.IntN(len(counts))]
		} else {
			n = 1 + rng.Int32N(math.MaxInt32)
		}
		got, want := topics.Partition(key, n), franzPartition(key, n)
		if got != want {
			t.Fatalf("Partition(%x, %d) = %d; franz-go places it in %d", key, n, got, want)
		}
		if got < 0 || got >= n {
			t.Fatalf("Partition(%x, %d) = %d: out of range", key, n, got)
		}
	}
}

// Every tail length (len%4) and every partition count up to 300 for a few
// keys.
func TestPartitionEveryCount(t *testing.T) {
	for _, k := range []string{"", "r", "ru", "run", "run-", "run-1", "run-12", "run-123", "run-1234", "01JM0000000000000000000001"} {
		for n := int32(1); n <= 300; n++ {
			if got, want := topics.Partition([]byte(k), n), franzPartition([]byte(k), n); got != want {
				t.Fatalf("Partition(%q, %d) = %d, want %d", k, n, got, want)
			}
		}
	}
}

// Fixed vectors, derived from franz-go's partitioner, so that a change of
// the hash is caught even if the library changed with it.
func TestPartitionVectors(t *testing.T) {
	vectors := []struct {
		key  string
		n    int32
		want int32
	}{
		{"", 1, 0},
		{"", 6, 3},
		{"", 12, 9},
		{"", 100, 81},
		{"", 2147483647, 275646681},
		{"a", 1, 0},
		{"a", 6, 4},
		{"a", 12, 4},
		{"a", 100, 24},
		{"a", 2147483647, 584102524},
		{"abc", 1, 0},
		{"abc", 6, 3},
		{"abc", 12, 3},
		{"abc", 100, 7},
		{"abc", 2147483647, 479470107},
		{"abcd", 1, 0},
		{"abcd", 6, 2},
		{"abcd", 12, 8},
		{"abcd", 100, 0},
		{"abcd", 2147483647, 823834100},
		{"abcde", 1, 0},
		{"abcde", 6, 1},
		{"abcde", 12, 1},
		{"abcde", 100, 41},
		{"abcde", 2147483647, 461995741},
		{"run-1", 1, 0},
		{"run-1", 6, 1},
		{"run-1", 12, 1},
		{"run-1", 100, 37},
		{"run-1", 2147483647, 637533037},
		{"run-demo-1", 1, 0},
		{"run-demo-1", 6, 2},
		{"run-demo-1", 12, 2},
		{"run-demo-1", 100, 62},
		{"run-demo-1", 2147483647, 1864901162},
		{"run-thousand", 1, 0},
		{"run-thousand", 6, 2},
		{"run-thousand", 12, 2},
		{"run-thousand", 100, 30},
		{"run-thousand", 2147483647, 65277830},
		{"01JM0000000000000000000001", 1, 0},
		{"01JM0000000000000000000001", 6, 1},
		{"01JM0000000000000000000001", 12, 7},
		{"01JM0000000000000000000001", 100, 43},
		{"01JM0000000000000000000001", 2147483647, 857012143},
		{"\x00", 1, 0},
		{"\x00", 6, 2},
		{"\x00", 12, 8},
		{"\x00", 100, 88},
		{"\x00", 2147483647, 375494588},
		{"\xff\xfe\xfd", 1, 0},
		{"\xff\xfe\xfd", 6, 2},
		{"\xff\xfe\xfd", 12, 8},
		{"\xff\xfe\xfd", 100, 92},
		{"\xff\xfe\xfd", 2147483647, 998637092},
		{"ünïcode", 1, 0},
		{"ünïcode", 6, 1},
		{"ünïcode", 12, 1},
		{"ünïcode", 100, 53},
		{"ünïcode", 2147483647, 1258917253},
	}
	for _, v := range vectors {
		if got := topics.Partition([]byte(v.key), v.n); got != v.want {
			t.Errorf("Partition(%q, %d) = %d, want %d", v.key, v.n, got, v.want)
		}
		if got := franzPartition([]byte(v.key), v.n); got != v.want {
			t.Errorf("franz-go places %q in %d of %d, the vector says %d", v.key, got, v.n, v.want)
		}
	}
}

// Kafka's own murmur2 vectors (UtilsTest.testMurmur2). Out of MaxInt32
// partitions the partition is the hash with its sign bit cleared.
func TestPartitionKafkaMurmur2Vectors(t *testing.T) {
	for _, c := range []struct {
		in   string
		hash int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		want := c.hash & 0x7fffffff
		if got := topics.Partition([]byte(c.in), math.MaxInt32); got != want {
			t.Errorf("Partition(%q, MaxInt32) = %d, want %d (murmur2 %d)", c.in, got, want, c.hash)
		}
	}
}

func TestPartitionDegenerateCounts(t *testing.T) {
	for _, n := range []int32{0, -1, math.MinInt32} {
		if got := topics.Partition([]byte("run-1"), n); got != 0 {
			t.Errorf("Partition(run-1, %d) = %d, want 0", n, got)
		}
	}
	for _, k := range [][]byte{nil, {}, []byte("x")} {
		if got := topics.Partition(k, 1); got != 0 {
			t.Errorf("Partition(%q, 1) = %d", k, got)
		}
	}
	// nil and empty keys hash alike.
	if topics.Partition(nil, 12) != topics.Partition([]byte{}, 12) {
		t.Error("nil and empty keys differ")
	}
}

func TestPartitionDoesNotModifyKey(t *testing.T) {
	key := []byte("run-demo-1")
	topics.Partition(key, 12)
	if string(key) != "run-demo-1" {
		t.Errorf("key modified: %q", key)
	}
}
