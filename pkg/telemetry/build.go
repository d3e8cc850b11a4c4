package telemetry

import (
	"fmt"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Build identifies the running binary: what `projector version` and
// `conductor-gateway version` print and canopy_build_info carries. It comes
// from the build information Go embeds, so there is nothing to stamp by
// hand: a binary built from a module version (go install ...@v1.2.3) has that
// version, one built in a checkout has "(devel)" and the commit.
type Build struct {
	// Version is the main module's version, "(devel)" for a local build.
	Version string
	// Revision is the VCS commit, "" when the build had no VCS
	// information (go build -buildvcs=false, go test).
	Revision string
	// Modified says the checkout had uncommitted changes.
	Modified bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// ReadBuild reads the running binary's Build.
func ReadBuild() Build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Build{Version: "unknown", GoVersion: "unknown"}
	}
	b := Build{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the one line a version command prints:
// "canopy (devel) 1a2b3c4d5e6f+modified go1.26.8".
func (b Build) String() string {
	rev := b.Revision
	if rev == "" {
		rev = "unknown-revision"
	} else if len(rev) > 12 {
		rev = rev[:12]
	}
	if b.Modified {
		rev += "+modified"
	}
	return fmt.Sprintf("canopy %s %s %s", b.Version, rev, b.GoVersion)
}

// buildInfo is canopy_build_info: 1, labelled with the Build, so that a
// dashboard or alert can tell which version each instance runs (the
// Prometheus convention of go_build_info and prometheus_build_info).
func buildInfo(b Build) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help: "1, labelled with the version, VCS revision and Go version of the binary.",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "revision": b.Revision, "modified": fmt.Sprint(b.Modified), "goversion": b.GoVersion,
		},
	})
	g.Set(1)
	return g
}
