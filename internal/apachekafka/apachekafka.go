// Package apachekafka runs a real Apache Kafka broker as a child process on
// loopback: a single KRaft node (broker and controller in one JVM), its
// storage formatted in a directory of the caller's, started, waited for
// until it answers, and stopped. canopy's broker-matrix tests and the bench
// (`go run ./bench -kafka real`) use it beside the embedded kfake broker, so
// every guarantee canopy states is proven against the broker its users run.
//
// The broker's jars come from Maven Central: tools/install.sh resolves the
// version pinned in tools/kafka/pom.xml into tools/kafka/lib. Nothing is
// downloaded here.
//
// The settings (see Properties) are what a production cluster needs for
// transactions and compaction, shrunk to one node: replication factor and
// min ISR 1 for the internal topics, a short initial rebalance delay, and
// session-timeout floors low enough for the tests' 1-2 s sessions.
package apachekafka

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoKafka says the broker's jars were not found: run tools/install.sh.
var ErrNoKafka = errors.New("apachekafka: the Apache Kafka jars are not installed (run ./tools/install.sh, which make test does)")

// Config says how to run the broker. The zero value of every field but Dir
// has a working default.
type Config struct {
	// Dir holds the broker's configuration, its log directory (data/) and
	// its output (server.log). Required; it is kept after Stop, so a
	// failing test can show the log.
	Dir string
	// Lib is the directory of the broker's jars. Default: $CANOPY_KAFKA_LIB,
	// else tools/kafka/lib of the source tree that holds the working
	// directory.
	Lib string
	// Java is the java executable. Default: $JAVA_HOME/bin/java, else java
	// on PATH.
	Java string
	// Heap is the JVM's maximum heap. Default 1g, as kafka-server-start.sh.
	Heap string
	// Properties override or add to the broker's server.properties (see
	// Properties for the defaults).
	Properties map[string]string
	// StartTimeout bounds formatting and start-up. Default 90s.
	StartTimeout time.Duration
}

// Properties are the server.properties the broker runs with, before
// Config.Properties and the listeners are applied. Each one is what a
// production cluster would set for transactions and compaction, shrunk to
// a single node, or what makes a short test observe the same behaviour a
// long-lived cluster would.
func Properties() map[string]string {
	return map[string]string{
		// One node: the internal topics have one copy, and need one in sync.
		"offsets.topic.replication.factor":                 "1",
		"transaction.state.log.replication.factor":         "1",
		"transaction.state.log.min.isr":                    "1",
		"share.coordinator.state.topic.replication.factor": "1",
		"share.coordinator.state.topic.min.isr":            "1",
		"default.replication.factor":                       "1",
		"min.insync.replicas":                              "1",
		// Fewer partitions of the internal topics: each is created on first
		// use, and 50 of them take seconds on two cores.
		"offsets.topic.num.partitions":         "6",
		"transaction.state.log.num.partitions": "6",
		// Topics are created by canopy (create-topics), never by a consumer.
		"auto.create.topics.enable": "false",
		"num.partitions":            "1",
		// A group rebalances as soon as its first member joins: the default
		// 3 s delay would only slow every test's first assignment.
		"group.initial.rebalance.delay.ms": "0",
		// The tests and the bench run 1-6 s sessions, in both protocols
		// (under KIP-848 as the group's consumer.session.timeout.ms, with
		// heartbeats a sixth of it); the defaults' floors (6 s, 45 s, 5 s)
		// would refuse them.
		"group.min.session.timeout.ms":             "1000",
		"group.consumer.min.session.timeout.ms":    "1000",
		"group.consumer.session.timeout.ms":        "6000",
		"group.consumer.min.heartbeat.interval.ms": "100",
		"group.consumer.heartbeat.interval.ms":     "1000",
		// Compaction: the cleaner looks every second and cleans a segment
		// as soon as a little of it is dirty; a segment rolls after 2 s, so
		// a test of a few seconds has closed segments to clean.
		"log.cleaner.backoff.ms":          "1000",
		"log.cleaner.min.cleanable.ratio": "0.01",
		"log.roll.ms":                     "2000",
		"log.cleaner.dedupe.buffer.size":  "16777216",
		// A killed transactional producer's open transaction is aborted
		// after its own transaction timeout; look for them often.
		"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
	}
}

// Broker is a running Apache Kafka node.
type Broker struct {
	cfg        Config
	addr       string // PLAINTEXT listener, host:port
	controller string // CONTROLLER listener
	clusterID  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	err  error         // cmd's exit, once done
	out  *os.File
}

// Start formats the storage of a new single-node cluster in cfg.Dir, starts
// the broker on free loopback ports, and returns once it answers a metadata
// request listing itself. On failure it stops what it started and the error
// carries the tail of the broker's log.
func Start(ctx context.Context, cfg Config) (*Broker, error) {
	if cfg.Dir == "" {
		return nil, errors.New("apachekafka: Config.Dir is required")
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "data"), 0o755); err != nil {
		return nil, fmt.Errorf("apachekafka: %w", err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, fmt.Errorf("apachekafka: finding free loopback ports: %w", err)
	}
	b := &Broker{cfg: cfg, addr: "127.0.0.1:" + strconv.Itoa(ports[0]), controller: "127.0.0.1:" + strconv.Itoa(ports[1])}
	b.clusterID = clusterID()
	if err := b.writeConfig(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	format := b.java(ctx, "kafka.tools.StorageTool", "format", "--cluster-id="+b.clusterID, "--config="+b.path("server.properties"), "--standalone")
	if out, err := format.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("apachekafka: formatting the storage in %s: %w\n%s", b.path("data"), err, out)
	}
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// Addr is the broker's listener, host:port on loopback.
func (b *Broker) Addr() string { return b.addr }

// Dir is the directory given in Config.Dir.
func (b *Broker) Dir() string { return b.cfg.Dir }

// Stop stops the broker: SIGTERM, which makes it shut down cleanly (its log
// flushed, its controller resigned), then SIGKILL if it has not exited in
// 30 s. The directory is kept. Stopping a stopped broker does nothing.
func (b *Broker) Stop() error {
	b.end(syscall.SIGTERM, 30*time.Second)
	return nil
}

// Kill stops the broker with SIGKILL, as a machine crash would.
func (b *Broker) Kill() { b.end(syscall.SIGKILL, 0) }

// end sends the broker sig, waits up to grace for it to exit (then
// SIGKILLs it) and releases its log file.
func (b *Broker) end(sig syscall.Signal, grace time.Duration) {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
	b.mu.Lock()
	b.cmd = nil
	b.mu.Unlock()
	_ = b.out.Close()
}

// Restart starts a stopped (or killed) broker again on the same ports and
// log directory.
func (b *Broker) Restart(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.StartTimeout)
	defer cancel()
	return b.start(ctx)
}

// Log returns the last n lines of the broker's output.
func (b *Broker) Log(n int) string {
	data, err := os.ReadFile(b.path("server.log"))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-n):], []byte("\n")))
}

// Cleaned reports, for each partition of topic, how far the log cleaner
// has compacted it and where the partition's active segment (which is
// never cleaned) begins, from the broker's own files: the cleaner's offset
// checkpoint and the segment files' names. A partition is compacted as far
// as it can be when Through >= ActiveBase.
func (b *Broker) Cleaned(topic string) (map[int32]Compaction, error) {
	out := map[int32]Compaction{}
	ents, err := os.ReadDir(b.path("data"))
	if err != nil {
		return nil, fmt.Errorf("apachekafka: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		cut := strings.LastIndexByte(name, '-')
		if !e.IsDir() || cut < 0 || name[:cut] != topic {
			continue
		}
		p, err := strconv.ParseInt(name[cut+1:], 10, 32)
		if err != nil {
			continue
		}
		segs, err := filepath.Glob(filepath.Join(b.path("data"), name, "*.log"))
		if err != nil {
			return nil, err
		}
		var base int64
		for _, s := range segs {
			o, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(s), ".log"), 10, 64)
			if err == nil && o > base {
				base = o
			}
		}
		out[int32(p)] = Compaction{ActiveBase: base, Segments: len(segs)}
	}
	f, err := os.Open(b.path("data", "cleaner-offset-checkpoint"))
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("apachekafka: %w", err)
	}
	defer f.Close()
	// version, count, then "topic partition offset" per line.
	sc := bufio.NewScanner(f)
	for line := 0; sc.Scan(); line++ {
		fs := strings.Fields(sc.Text())
		if line < 2 || len(fs) != 3 || fs[0] != topic {
			continue
		}
		p, err1 := strconv.ParseInt(fs[1], 10, 32)
		o, err2 := strconv.ParseInt(fs[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		c := out[int32(p)]
		c.Through = o
		out[int32(p)] = c
	}
	return out, sc.Err()
}

// Compaction is how far the cleaner got with one partition.
type Compaction struct {
	Through    int64 // the cleaner's checkpoint: offsets below it are compacted
	ActiveBase int64 // the base offset of the active segment
	Segments   int   // segment files on disk
}

func (c *Config) defaults() error {
	if c.Lib == "" {
		c.Lib = os.Getenv("CANOPY_KAFKA_LIB")
	}
	if c.Lib == "" {
		c.Lib = findLib()
	}
	if jars, _ := filepath.Glob(filepath.Join(c.Lib, "kafka_2.13-*.jar")); c.Lib == "" || len(jars) == 0 {
		return fmt.Errorf("%w; looked in %q", ErrNoKafka, c.Lib)
	}
	if c.Java == "" {
		c.Java = "java"
		if h := os.Getenv("JAVA_HOME"); h != "" {
			c.Java = filepath.Join(h, "bin", "java")
		}
	}
	if _, err := exec.LookPath(c.Java); err != nil {
		return fmt.Errorf("apachekafka: no Java runtime (%s): %w; install a JDK 17 or later", c.Java, err)
	}
	if c.Heap == "" {
		c.Heap = "1g"
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 90 * time.Second
	}
	return nil
}

// Version is the Apache Kafka version Start runs, from the jar's name in
// the library directory it would use ("unknown" if none is installed).
func Version() string {
	lib, ok := Installed()
	if !ok {
		return "unknown"
	}
	jars, _ := filepath.Glob(filepath.Join(lib, "kafka_2.13-*.jar"))
	if len(jars) == 0 {
		return "unknown"
	}
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(jars[0]), "kafka_2.13-"), ".jar")
}

// Installed reports whether the broker's jars are where Start looks for
// them (and a Java runtime is there to run them), and where that is.
func Installed() (string, bool) {
	var c Config
	err := c.defaults()
	return c.Lib, err == nil
}

// findLib looks for tools/kafka/lib in the directories from the working
// directory up to the source tree's root (the one with go.mod).
func findLib() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "tools", "kafka", "lib")
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

func (b *Broker) path(elem ...string) string {
	return filepath.Join(append([]string{b.cfg.Dir}, elem...)...)
}

func (b *Broker) writeConfig() error {
	props := Properties()
	maps.Copy(props, b.cfg.Properties)
	maps.Copy(props, map[string]string{
		"process.roles":                       "broker,controller",
		"node.id":                             "1",
		"controller.quorum.bootstrap.servers": b.controller,
		"listeners":                           "PLAINTEXT://" + b.addr + ",CONTROLLER://" + b.controller,
		"advertised.listeners":                "PLAINTEXT://" + b.addr,
		"controller.listener.names":           "CONTROLLER",
		"inter.broker.listener.name":          "PLAINTEXT",
		"listener.security.protocol.map":      "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"log.dirs":                            b.path("data"),
	})
	var buf bytes.Buffer
	buf.WriteString("# Written by canopy's internal/apachekafka; see Properties for why each is set.\n")
	for _, k := range slices.Sorted(maps.Keys(props)) {
		fmt.Fprintf(&buf, "%s=%s\n", k, props[k])
	}
	if err := os.WriteFile(b.path("server.properties"), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("apachekafka: %w", err)
	}
	// INFO to the file: what a failing test shows.
	log4j := `Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: org.apache.kafka.storage.internals.log
        level: WARN
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
`
	if err := os.WriteFile(b.path("log4j2.yaml"), []byte(log4j), 0o644); err != nil {
		return fmt.Errorf("apachekafka: %w", err)
	}
	return nil
}

// java returns a command running main with the broker's class path, JVM
// options and logging.
func (b *Broker) java(ctx context.Context, main string, args ...string) *exec.Cmd {
	jvm := []string{
		"-Xmx" + b.cfg.Heap, "-Xms256m",
		// kafka-server-start.sh's collector settings.
		"-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
		"-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + b.path("log4j2.yaml"),
		"-cp", filepath.Join(b.cfg.Lib, "*"),
		main,
	}
	cmd := exec.CommandContext(ctx, b.cfg.Java, append(jvm, args...)...)
	cmd.Dir = b.cfg.Dir
	// The JVM dies with its parent, even a parent that is SIGKILLed: a
	// test binary that times out must not leave brokers behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return cmd
}

func (b *Broker) start(ctx context.Context) error {
	out, err := os.OpenFile(b.path("server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("apachekafka: %w", err)
	}
	// Not CommandContext's: the broker outlives the start's deadline.
	cmd := b.java(context.Background(), "kafka.Kafka", b.path("server.properties"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("apachekafka: starting the broker: %w", err)
	}
	done := make(chan struct{})
	b.mu.Lock()
	b.cmd, b.done, b.out = cmd, done, out
	b.mu.Unlock()
	go func() {
		err := cmd.Wait()
		b.mu.Lock()
		b.err = err
		b.mu.Unlock()
		close(done)
	}()
	if err := b.waitReady(ctx, done); err != nil {
		b.Kill()
		return fmt.Errorf("apachekafka: broker on %s in %s did not become ready: %w\nlast lines of its log:\n%s",
			b.addr, b.cfg.Dir, err, b.Log(40))
	}
	return nil
}

// waitReady polls the broker with metadata requests until it lists itself
// and the controller has a leader, or the broker exits, or ctx ends.
func (b *Broker) waitReady(ctx context.Context, exited <-chan struct{}) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.RetryTimeout(time.Second),
		kgo.WithLogger(kgo.BasicLogger(io.Discard, kgo.LogLevelNone, nil)))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	var last error
	for {
		select {
		case <-exited:
			b.mu.Lock()
			err := b.err
			b.mu.Unlock()
			return fmt.Errorf("the broker exited: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-poll.C:
		}
		try, cancel := context.WithTimeout(ctx, 2*time.Second)
		md, err := adm.BrokerMetadata(try)
		cancel()
		switch {
		case err != nil:
			last = err
		case len(md.Brokers) == 0 || md.Controller < 0:
			last = errors.New("no broker or no controller in the metadata yet")
		default:
			return nil
		}
	}
}

// clusterID returns a new cluster id as Kafka makes them: 16 random bytes
// in URL-safe base64, never starting with '-', which a command line would
// take for an option (Kafka's Uuid.randomUuid has the same rule; one in 64
// ids broke the storage tool's arguments before).
func clusterID() string {
	for {
		var id [16]byte
		_, _ = rand.Read(id[:])
		if s := base64.RawURLEncoding.EncodeToString(id[:]); s[0] != '-' {
			return s
		}
	}
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
