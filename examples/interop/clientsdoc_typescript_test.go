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

// TestClientsDocTypeScript runs docs/CLIENTS.md's TypeScript program as the
// doc writes it: the file of its "ts agent.ts" block (HOST:PORT replaced by
// the broker's address) and the commands of its "sh ts-run" block, in a
// project laid out as the doc's "sh ts-install" command lays one out (the
// @canopy/agents package built from sdk/typescript's sources now, beside
// TypeScript and @types/node), against the embedded Kafka (kfake) with
// canopy's default topic names and a real projector: the program
// type-checks (tsc --strict) and exits 0, the projector applies every event
// it sent without dead-lettering any, and the run's read model has the tree
// it describes. The install command is not run (tools/install.sh installs
// the package); the test checks the doc states it.
func TestClientsDocTypeScript(t *testing.T) {
	root := testenv.RepoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs/CLIENTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := fencedBlocks(doc)
	install, program, run := blocks["sh ts-install"], blocks["ts agent.ts"], blocks["sh ts-run"]
	if !regexp.MustCompile(`(?m)^npm install \S*sdk/typescript\b`).MatchString(install) {
		t.Errorf("docs/CLIENTS.md's ts-install block does not npm install sdk/typescript: %q", install)
	}
	if program == "" || run == "" {
		t.Fatalf("docs/CLIENTS.md has no TypeScript program (a ts agent.ts block) or no sh ts-run block")
	}

	node, project := testenv.TypeScriptPackage(t)
	b := brokertest.NewKfake(t)
	brokers := strings.Join(b.Addrs, ",")
	if err := os.WriteFile(filepath.Join(project, "agent.ts"), []byte(strings.ReplaceAll(program, "HOST:PORT", brokers)), 0o644); err != nil {
		t.Fatal(err)
	}
	names := topics.Names{Prefix: topics.DefaultPrefix, Version: topics.DefaultVersion}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, partitions, 1); err != nil {
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

	// The doc's commands, with node and the project's tools (npx finds tsc in node_modules/.bin).
	cmd := exec.Command("bash", "-e", "-c", run)
	cmd.Dir = project
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(node)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", run, err, out)
	}

	sent := int64(strings.Count(program, "events."))
	waitDoc(t, ctx, "the program's events applied", func() bool { return p.Status().Counts.Applied >= sent }, nil)
	if got := p.Status().Counts; got.Applied != sent || got.DeadLettered != 0 {
		t.Errorf("the projector applied %d records and dead-lettered %d, want the program's %d events applied", got.Applied, got.DeadLettered, sent)
	}
	m, err := p.ReadModel(ctx, "run-ts-doc")
	if err != nil {
		t.Fatal(err)
	}
	if m.RootAgentID == nil || *m.RootAgentID != "planner" || m.Counts.Nodes != 2 || m.Counts.Events != sent || m.Counts.ByStatus.Completed != 1 {
		t.Errorf("read model of run-ts-doc: root %v, %d nodes, %d events, %+v; want planner, 2 nodes, %d events, researcher completed",
			m.RootAgentID, m.Counts.Nodes, m.Counts.Events, m.Counts.ByStatus, sent)
	}
}

// fencedBlocks returns the contents of a Markdown document's fenced code
// blocks, by info string.
func fencedBlocks(doc []byte) map[string]string {
	out := map[string]string{}
	info := ""
	var body strings.Builder
	for sc := bufio.NewScanner(bytes.NewReader(doc)); sc.Scan(); {
		line := sc.Text()
		switch {
		case info == "" && strings.HasPrefix(line, "```") && len(line) > 3:
			info = line[3:]
			body.Reset()
		case info != "" && line == "```":
			out[info] += body.String()
			info = ""
		case info != "":
			body.WriteString(line + "\n")
		}
	}
	return out
}
