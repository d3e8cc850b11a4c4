// Package cluster reads and checks what a canopy deployment shares through
// its Kafka cluster: which projector instance owns which partition (the
// consumer group's assignment), whether the co-partitioned topics exist
// alike, and the shared secret of the projectors' query endpoints. The
// projector and the gateway both use it; it links neither Pebble nor the
// projector.
package cluster
