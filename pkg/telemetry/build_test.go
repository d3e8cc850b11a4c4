package telemetry_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/canopy-dev/canopy/pkg/telemetry"
)

// Every registry carries canopy_build_info with the binary's Go version.
func TestBuildInfoMetric(t *testing.T) {
	reg := telemetry.NewRegistry()
	b := telemetry.ReadBuild()
	want := `# HELP canopy_build_info 1, labelled with the version, VCS revision and Go version of the binary.
# TYPE canopy_build_info gauge
canopy_build_info{goversion="` + runtime.Version() + `",modified="` + map[bool]string{true: "true", false: "false"}[b.Modified] + `",revision="` + b.Revision + `",version="` + b.Version + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "canopy_build_info"); err != nil {
		t.Error(err)
	}
}
