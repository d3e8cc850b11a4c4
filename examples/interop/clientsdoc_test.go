package interop

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// docBlocks returns the lines of docs/CLIENTS.md's fenced blocks whose
// info string is "sh <kind>", by kind (install, first-program, produce,
// dry-run, conductor): the commands the doc tells its reader to type; and
// the programs of those whose info string is "python <kind>", by kind, as
// written (first-program: the program the first command runs).
func docBlocks(t *testing.T, root string) (commands map[string][]string, programs map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs/CLIENTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	open := regexp.MustCompile("^```(sh|python) ([a-z-]+)$")
	commands, programs = map[string][]string{}, map[string]string{}
	lang, kind := "", ""
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		line := sc.Text()
		switch m := open.FindStringSubmatch(line); {
		case m != nil:
			lang, kind = m[1], m[2]
		case line == "```":
			kind = ""
		case kind != "" && lang == "python":
			programs[kind] += line + "\n"
		case kind != "" && strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "#"):
			commands[kind] = append(commands[kind], line)
		}
	}
	return commands, programs
}

// TestClientsDocExamples runs every command of docs/CLIENTS.md exactly as
// the doc writes it (HOST:PORT replaced by the broker's address, and the
// .venv/bin/python the doc's install block makes by a python with the
// canopy package installed, testenv.PythonSDK), from the repository's top
// directory, against the embedded Kafka (kfake on loopback) with canopy's
// default topic names and a real projector:
//   - the first program (the page's first screen), saved as the doc says,
//     exits 0 and the projector applies its run: two nodes, the worker
//     completed;
//   - every dry run, piped into projector replay, exits 0 with wakes and
//     no invalid line (npm's banner in the JSON lines would be two);
//   - every producer exits 0 and the projector applies all they wrote;
//   - every conductor prints one line per wake the projector published,
//     and acknowledges each (the projector applies the acknowledgements),
//     and stops on SIGTERM.
//
// The install commands are not run (tools/install.sh installs the same
// packages); the test checks the doc states them.
func TestClientsDocExamples(t *testing.T) {
	root := testenv.RepoRoot(t)
	blocks, programs := docBlocks(t, root)
	install := strings.Join(blocks["install"], "\n")
	if !strings.HasPrefix(install, "python3 -m venv .venv\n.venv/bin/pip install ./sdk/python\n") {
		t.Errorf("docs/CLIENTS.md's first install block is not python3 -m venv .venv and .venv/bin/pip install ./sdk/python:\n%s", install)
	}
	for _, want := range []string{"apt-get install -y python3-venv kcat nodejs npm", "npm ci"} {
		if !strings.Contains(install, want) {
			t.Errorf("docs/CLIENTS.md's install blocks do not say %q", want)
		}
	}
	if len(blocks["first-program"]) != 1 || programs["first-program"] == "" {
		t.Fatalf("docs/CLIENTS.md has %d first-program commands and %d bytes of its program, want one and the program",
			len(blocks["first-program"]), len(programs["first-program"]))
	}
	for kind, n := range map[string]int{"produce": 4, "dry-run": 4, "conductor": 3} {
		if len(blocks[kind]) != n {
			t.Fatalf("docs/CLIENTS.md has %d %q commands, want %d (one per client): %q", len(blocks[kind]), kind, n, blocks[kind])
		}
	}

	// The doc's .venv/bin/python is one with the canopy package; node_modules
	// are what npm ci installs (tools/install.sh).
	python := testenv.PythonSDK(t)
	asWritten := func(line, brokers string) string {
		return strings.ReplaceAll(strings.ReplaceAll(line, ".venv/bin/python ", python+" "), "HOST:PORT", brokers)
	}
	for _, tool := range []string{"kcat", "go", "node", "npm"} {
		testenv.Tool(t, tool)
	}
	if _, err := os.Stat(filepath.Join(root, "examples/typescript/node_modules/.bin/tsc")); err != nil {
		testenv.Missing(t, "examples/typescript/node_modules (npm ci in examples/typescript)")
	}
	env := os.Environ()

	for _, line := range blocks["dry-run"] {
		cmd := exec.Command("bash", "-o", "pipefail", "-c", asWritten(line, ""))
		cmd.Dir, cmd.Env = root, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		// replay's stderr is its one summary line, or errors before it.
		if err := cmd.Run(); err != nil || !strings.HasPrefix(stderr.String(), "replay: ") || strings.Count(stderr.String(), "\n") != 1 ||
			!strings.Contains(stderr.String(), " 0 invalid,") || !strings.HasPrefix(stdout.String(), "wake ") {
			t.Errorf("%s: %v\nstdout:\n%s\nstderr:\n%s", line, err, stdout.String(), stderr.String())
		}
	}

	b := brokertest.NewKfake(t)
	brokers := strings.Join(b.Addrs, ",")
	names := topics.Names{Prefix: topics.DefaultPrefix, Version: topics.DefaultVersion} // the doc's commands use the defaults
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := cluster.CreateTopics(ctx, adm, names, partitions, 1); err != nil {
		t.Fatal(err)
	}
	p, err := projector.New(ctx, projector.Config{Kafka: kafkaconn.Conn{Brokers: b.Addrs}, Names: names, DataDir: t.TempDir(), Group: "canopy-projector",
		Projection: projection.Config{ForwardGrace: time.Hour}, SessionTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pctx, stopProjector := context.WithCancel(ctx)
	projected := make(chan error, 1)
	go func() { projected <- p.Run(pctx) }()
	defer func() {
		stopProjector()
		if err := <-projected; err != nil {
			t.Errorf("projector: %v", err)
		}
	}()

	// The first program, saved as first.py (in a directory of the test's
	// own, not the checkout).
	first := filepath.Join(t.TempDir(), "first.py")
	if err := os.WriteFile(first, []byte(programs["first-program"]), 0o644); err != nil {
		t.Fatal(err)
	}
	line := strings.ReplaceAll(asWritten(blocks["first-program"][0], brokers), " first.py", " "+first)
	if out, err := exec.Command("bash", "-c", line).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", blocks["first-program"][0], err, out)
	}
	waitDoc(t, ctx, "the first program's run applied", func() bool { return p.Status().Counts.Applied == 5 }, nil)
	m, err := p.ReadModel(ctx, "run-first")
	if err != nil {
		t.Fatal(err)
	}
	if m.Counts.Nodes != 2 || m.Counts.ByStatus.Completed != 1 || m.RootAgentID == nil || *m.RootAgentID != "planner" {
		t.Errorf("the first program's run: %d nodes, %d completed, root %v; want 2, the worker completed, planner",
			m.Counts.Nodes, m.Counts.ByStatus.Completed, m.RootAgentID)
	}

	for _, line := range blocks["produce"] {
		line = asWritten(line, brokers)
		cmd := exec.Command("bash", "-c", line)
		cmd.Dir, cmd.Env = root, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, names.AgentEvents())
	if err != nil {
		t.Fatal(err)
	}
	var events int64
	ends.Each(func(o kadm.ListedOffset) { events += o.Offset })
	// 5 of the first program, then 12 + 10 + 12 + 12 events; each run raises wakes.
	if events != 51 {
		t.Errorf("the first program and the producers wrote %d records, want 51", events)
	}
	waitDoc(t, ctx, "the producers' events applied", func() bool { return p.Status().Counts.Applied == events && p.Status().Counts.Wakes > 0 }, nil)
	wakes := p.Status().Counts.Wakes

	var cs []*shell
	defer func() {
		for _, c := range cs {
			c.stop(t)
		}
	}()
	for _, line := range blocks["conductor"] {
		cs = append(cs, startShell(t, root, env, asWritten(line, brokers)))
	}
	waitDoc(t, ctx, "every conductor printed and acknowledged every wake", func() bool {
		for _, c := range cs {
			if int64(strings.Count(c.out.String(), "\n")) < wakes {
				return false
			}
		}
		return p.Status().Counts.Applied == events+int64(len(cs))*wakes
	}, cs)
	for _, c := range cs {
		c.stop(t)
		if n := int64(strings.Count(c.out.String(), "\n")); n != wakes {
			t.Errorf("%s printed %d lines, want one per wake (%d):\n%s", c.line, n, wakes, c.out.String())
		}
	}
	cs = nil
	if got := p.Status().Counts.DeadLettered; got != 0 {
		t.Errorf("%d records dead-lettered, want none", got)
	}
	if got := p.Status().Counts.Wakes; got != wakes {
		t.Errorf("the acknowledgements raised %d wakes, want none", got-wakes)
	}
}

// shell is a doc command running in bash, in a process group of its own
// (npm, go run: its children are stopped with it).
type shell struct {
	line        string
	cmd         *exec.Cmd
	out, errOut testenv.Buffer
	done        chan error
	stopped     bool
}

func startShell(t *testing.T, dir string, env []string, line string) *shell {
	t.Helper()
	s := &shell{line: line, cmd: exec.Command("bash", "-c", line), done: make(chan error, 1)}
	s.cmd.Dir, s.cmd.Env = dir, env
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.errOut
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	return s
}

// stop sends SIGTERM to the command's process group and waits for bash,
// killing the group after 20s.
func (s *shell) stop(t *testing.T) {
	t.Helper()
	if s.stopped {
		return
	}
	s.stopped = true
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
		t.Errorf("%s did not stop on SIGTERM within 20s:\n%s", s.line, s.errOut.String())
	}
}

// waitDoc polls cond until it holds, failing if ctx ends or a conductor
// exits first.
func waitDoc(t *testing.T, ctx context.Context, what string, cond func() bool, cs []*shell) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		for _, c := range cs {
			select {
			case err := <-c.done:
				c.done <- err
				t.Fatalf("%s: %s exited: %v\n%s", what, c.line, err, c.errOut.String())
			default:
			}
		}
		select {
		case <-ctx.Done():
			var status strings.Builder
			for _, c := range cs {
				status.WriteString("\n" + c.line + ":\n" + c.out.String() + c.errOut.String())
			}
			t.Fatalf("%s: %v%s", what, ctx.Err(), status.String())
		case <-tick.C:
		}
	}
}
