package harness

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/apachekafka"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
)

// Harness runs scenarios against one broker.
type Harness struct {
	cfg     Config
	began   time.Time
	cluster *kfake.Cluster      // the embedded broker, or nil
	apache  *apachekafka.Broker // Apache Kafka started here, or nil
	// kafka is the broker's address: no TLS or SASL, since the
	// projector processes are given -brokers only (stage.go).
	kafka   kafkaconn.Conn
	admCl   *kgo.Client
	adm     *kadm.Client
	work    string
	ownWork bool
	quiet   *slog.Logger
	stages  int
	// maxRate is the projected events/s max measured, for steady.
	maxRate float64
	// pin is the CPU split of a pinned run (Config.Pin), nil otherwise.
	pin *Pinning
}

// Run runs cfg's scenarios and returns their report. Against the embedded
// broker it starts one in this process for the whole invocation; each
// scenario has topics and a group of its own, deleted at its end.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if _, err := os.Stat(cfg.Projector); err != nil {
		return nil, fmt.Errorf("the projector binary: %w (build it first: make build)", err)
	}
	cfg.Progress = &syncWriter{w: cfg.Progress} // samplers and scenarios both print
	h := &Harness{cfg: cfg, began: time.Now(), quiet: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rep := &Report{Harness: "canopy bench (bench/harness)", Date: h.began.UTC().Format(time.RFC3339), Command: cfg.Command,
		Projector: projectorBuild(cfg.Projector), Machine: machine()}
	fmt.Fprintf(cfg.Progress, "projector: %s\n", rep.Projector)
	if cfg.Pin {
		// Before the broker and the load start, so that every thread they
		// make inherits the harness's CPUs.
		p, err := pinHarness(cfg)
		if err != nil {
			return nil, err
		}
		h.pin, rep.Machine.Pinning = p, p
	}
	defer h.close()
	if err := h.open(); err != nil {
		return nil, err
	}
	switch {
	case h.cluster != nil:
		rep.Broker, rep.Kafka = "embedded kfake (1 broker, loopback, in the harness process)", KafkaEmbedded
	case h.apache != nil:
		rep.Broker, rep.Kafka = "Apache Kafka "+apachekafka.Version()+" (1 KRaft node, broker and controller in one JVM with a 2 GiB heap, loopback, a child process of the harness)", KafkaReal
	default:
		rep.Broker = strings.Join(h.kafka.Brokers, ",")
	}
	if h.apache != nil {
		// A JVM broker runs interpreted until its JIT has compiled the hot
		// paths: measured cold, the first scenario's projector got half
		// the throughput it got minutes later (35,643 vs 75,218 events/s,
		// max against scale's first step), and its raw-consume baseline,
		// measured after it, was warm. One unmeasured max first.
		fmt.Fprintf(h.cfg.Progress, "== warm-up: an unmeasured max scenario, so that the broker's JIT has compiled its hot paths\n")
		if _, err := h.runMax(ctx); err != nil {
			return rep, fmt.Errorf("warming the broker up: %w", err)
		}
		h.maxRate = 0
		rep.Broker += "; warmed up with one unmeasured max scenario before the first"
	}
	rep.Repeat = cfg.Repeat
	for i := 1; i <= cfg.Repeat; i++ {
		if err := h.runAll(ctx, rep, i); err != nil {
			return rep, err
		}
	}
	var all []Target
	for _, s := range rep.Scenarios {
		all = append(all, s.Targets...)
	}
	rep.Targets = summarize(all)
	rep.Machine.LoadAvgEnd = loadAvg()
	return rep, nil
}

// runAll runs every scenario of the configuration once, as the
// repetition-th run, and adds their results to rep.
func (h *Harness) runAll(ctx context.Context, rep *Report, repetition int) error {
	for _, name := range h.cfg.Scenarios {
		if name == "soak" && h.cfg.SoakRate == 0 && h.maxRate == 0 && !contains(rep.Scenarios, "max") {
			// soak runs at 60% of the maximum of this invocation.
			res, err := h.scenario(ctx, "max")
			if err != nil {
				return err
			}
			res.Repetition = repetition
			rep.Scenarios = append(rep.Scenarios, res)
		}
		res, err := h.scenario(ctx, name)
		if res != nil {
			res.Repetition = repetition
			rep.Scenarios = append(rep.Scenarios, res)
		}
		if err != nil {
			return fmt.Errorf("scenario %s (run %d of %d): %w", name, repetition, h.cfg.Repeat, err)
		}
	}
	return nil
}

func contains(rs []*ScenarioResult, name string) bool {
	for _, r := range rs {
		if r.Scenario == name {
			return true
		}
	}
	return false
}

func (h *Harness) scenario(ctx context.Context, name string) (*ScenarioResult, error) {
	load := loadAvg()
	fmt.Fprintf(h.cfg.Progress, "== %s (load average %.2f)\n", name, load)
	run := map[string]func(context.Context) (*ScenarioResult, error){"max": h.runMax, "steady": h.runSteady,
		"grow": h.runGrow, "priority": h.runPriority, "scale": h.runScale, "failover": h.runFailover, "soak": h.runSoak}[name]
	if run == nil {
		return nil, fmt.Errorf("unknown scenario %q", name)
	}
	res, err := run(ctx)
	if res != nil {
		// Other work on the machine shows here: the machine is shared.
		res.LoadAvg1 = load
	}
	return res, err
}

func (h *Harness) open() error {
	h.work = h.cfg.WorkDir
	if h.work == "" {
		dir, err := os.MkdirTemp("", "canopy-bench-")
		if err != nil {
			return err
		}
		h.work, h.ownWork = dir, true
	}
	h.kafka.Brokers = h.cfg.Brokers
	if len(h.kafka.Brokers) == 0 && h.cfg.Kafka == KafkaReal {
		fmt.Fprintf(h.cfg.Progress, "starting Apache Kafka %s in %s\n", apachekafka.Version(), filepath.Join(h.work, "kafka"))
		b, err := apachekafka.Start(context.Background(), apachekafka.Config{Dir: filepath.Join(h.work, "kafka"), Heap: "2g"})
		if err != nil {
			return fmt.Errorf("starting Apache Kafka: %w", err)
		}
		h.apache, h.kafka.Brokers = b, []string{b.Addr()}
	}
	if len(h.kafka.Brokers) == 0 {
		// kfake listens on 127.0.0.1. The projectors' session timeout must
		// be allowed by the broker;
		// replication is cosmetic in kfake (one copy), one broker keeps
		// its CPU in one place.
		c, err := kfake.NewCluster(kfake.NumBrokers(1),
			kfake.GroupMinSessionTimeout(time.Second))
		if err != nil {
			return fmt.Errorf("starting the embedded broker: %w", err)
		}
		h.cluster, h.kafka.Brokers = c, c.ListenAddrs()
	}
	var err error
	h.admCl, err = kgo.NewClient(h.kafka.Opts()...)
	if err != nil {
		return err
	}
	h.adm = kadm.NewClient(h.admCl)
	return nil
}

func (h *Harness) close() {
	if h.admCl != nil {
		h.admCl.Close()
	}
	if h.cluster != nil {
		h.cluster.Close()
	}
	if h.apache != nil {
		_ = h.apache.Stop()
	}
	if h.ownWork {
		os.RemoveAll(h.work)
	}
}

// syncWriter serialises writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// projectorBuild describes the binary at path by its Go build info: the
// commit it was built from (vcs.revision, short), "+modified" when the
// tree had changes, and its Go version; the path alone when it carries
// none (built outside a repository, or with -buildvcs=false).
func projectorBuild(path string) string {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return path
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(len(s.Value), 7)]
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if rev == "" {
		return fmt.Sprintf("%s (%s, no commit recorded)", path, bi.GoVersion)
	}
	return fmt.Sprintf("%s built from %s%s (%s)", path, rev, modified, bi.GoVersion)
}

// machine describes this machine.
func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), LoadAvg1: loadAvg(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				m.MemoryBytes = kb << 10
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
				m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ":"))
				break
			}
		}
		f.Close()
	}
	return m
}

func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
