package schema_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// judge reads JSON lines of {"name", "doc"} on stdin and prints, for each,
// "ok" or the first problem canopy.validate finds (after Python's JSON
// decoder, which refuses NaN and Infinity as the contract does).
const judge = `
import json, sys
from canopy._schema import schemas

def no_constants(c):
    raise ValueError("not JSON: " + c)

s = schemas()
for line in sys.stdin:
    doc = json.loads(line)["doc"]
    try:
        ev = json.loads(doc, parse_constant=no_constants)
    except ValueError as e:
        print("refuses (not JSON)")
        continue
    errs = s.errors(ev, "event.schema.json")
    print("ok" if not errs else "refuses (" + errs[0].replace("\n", " ") + ")")
`

// TestPythonValidatorAgreesWithDecoder runs the Python package's validation
// (canopy.validate, which canopy.Producer runs before sending, on the JSON
// Schemas shipped in the package) over TestSchemasAgreeWithDecoder's
// corpus, and fails on any input it judges unlike the Go decoder
// (topics.DecodeEvent), but for the exception the contract states for the
// schemas (an integer written 1.0 or 1e0). Inputs that are not UTF-8 are
// left out: Python's strings cannot hold them, so no Python producer sends
// them.
func TestPythonValidatorAgreesWithDecoder(t *testing.T) {
	python := testenv.PythonSDK(t)
	corpus, _ := eventCorpus(t)
	var in bytes.Buffer
	var docs []input
	enc := json.NewEncoder(&in)
	for _, c := range corpus {
		if !isText(c.doc) {
			continue
		}
		docs = append(docs, c)
		if err := enc.Encode(map[string]string{"name": c.name, "doc": string(c.doc)}); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(python, "-c", judge)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the Python validator: %v\n%s", err, stderr.String())
	}
	verdicts := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(verdicts) != len(docs) {
		t.Fatalf("the Python validator judged %d of %d inputs", len(verdicts), len(docs))
	}
	var disagree []string
	accepted := 0
	for i, c := range docs {
		_, derr := topics.DecodeEvent(c.doc)
		pyOK := verdicts[i] == "ok"
		if (derr == nil) != pyOK && !knownException(c.name, derr == nil, pyOK) {
			disagree = append(disagree, fmt.Sprintf("%s: decoder %v, Python %s\n    %s", c.name, verdict(derr), verdicts[i], clipDoc(c.doc)))
		}
		if pyOK {
			accepted++
		}
	}
	t.Logf("%d inputs, %d accepted", len(docs), accepted)
	if len(docs) < 1000 || accepted < 100 {
		t.Fatalf("the corpus is too small to mean anything (%d inputs, %d accepted)", len(docs), accepted)
	}
	if len(disagree) > 0 {
		t.Fatalf("the Python validator and the decoder disagree on %d of %d inputs:\n%s", len(disagree), len(docs), strings.Join(disagree, "\n"))
	}
}
