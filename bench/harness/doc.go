// Package harness is canopy's load harness: the place the project's
// performance figures come from (bench/RESULTS.md), and what users run to
// load-test canopy before they trust it with their agents.
//
// It runs scenarios against one broker: an embedded kfake broker on
// loopback, in this process, or (Config.Kafka "real") Apache Kafka started
// as a child JVM on loopback, unless Config.Brokers names a Kafka. Each
// scenario has topics and a consumer group of its own, and runs projector
// instances as processes of the built binary (bin/projector run), so that
// their CPU and memory come from /proc/<pid> and a SIGKILL is real. Human
// input goes through a conductor gateway started in this process.
//
// Traffic (internal/workload): Tree generates one run lazily, shaped like seed 001's plans
// (bands of parallel steps, as wide as it takes to fit the depth budget),
// growing while its nodes lease, progress, request, block, fail and
// complete; Mix interleaves many runs, with a share of huge ones. Senders
// are open loop (a fixed schedule; a send never waits for a reply; a late
// send is counted and its latency also measured from its schedule) or
// closed loop (as fast as the broker acknowledges, to find the maximum).
//
// Runs that finish (workload.MixSpec.Finish, workload.TreeSpec.Finish)
// release every lease, have every completion acknowledged and complete
// their root, with short timers, so that a projector's -retention expires
// them; only soak sends them, and only soak runs its projector with a
// short -retention. soak, not part of the standard set (MoreScenarios),
// sends millions of such events and samples the projector's RSS, Go heap,
// Pebble bytes, the changelog topic's bytes and the live runs over time, to
// show that state stays bounded.
//
// Measurements: every latency and size is recorded in an HdrHistogram;
// end-to-end latency runs from an event's append (its produce
// acknowledgement) to the moment a read_committed consumer reads the
// committed wake naming it among its triggers, by lane. Rates are sampled
// every second; the projectors' CPU and RSS, the harness's own CPU and the
// machine's utilisation are read from /proc. The projectors' GC CPU share
// (runtime/metrics' CPU classes), heap in use and the pauses of their
// intake for memory come from their /metrics, every few seconds.
//
// Config.Pin (bench -pin) separates the projectors from the harness on the
// machine: each projector instance runs on a CPU of its own, the harness's
// broker, gateway, load and readers on the others (on 2 CPUs, 1 + 1), and
// the report says which CPUs each part had.
//
// Baselines measured in the same run make every figure a ratio that
// survives a noisy machine: a plain franz-go consumer of the same records
// (the ceiling for throughput), a naive snapshot strategy that loads and
// sorts the whole tree at every wake (the cost the indexes avoid), and the
// group session timeout (for failover).
//
// Run returns a Report: a table (WriteTable), a JSON result file with the
// OpenMessaging Benchmark's field names, and RESULTS.md's harness section
// (Markdown, UpdateResults), with the standing targets beside the
// measured values.
package harness
