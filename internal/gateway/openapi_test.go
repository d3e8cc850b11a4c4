package gateway

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/canopy-dev/canopy/internal/problem"
)

// operation is a path and method of schema/openapi.yaml.
type operation struct{ path, method string }

var (
	pathLine   = regexp.MustCompile(`^  (/[^:]*):\s*$`)
	methodLine = regexp.MustCompile(`^    (get|put|post|delete|patch|head|options):\s*$`)
	statusLine = regexp.MustCompile(`^        "([1-5][0-9][0-9])":\s*$`)
)

// openAPI reads the operations of schema/openapi.yaml and the statuses each
// documents. go.mod has no YAML library: the document keeps the standard
// two-space layout, which this reads line by line.
func openAPI(t testing.TB) map[operation][]int {
	t.Helper()
	doc, err := readOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func readOpenAPI() (map[operation][]int, error) {
	f, err := os.Open("../../schema/openapi.yaml")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[operation][]int{}
	var path string
	var op operation
	inPaths := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line != "" && line[0] != ' ' {
			inPaths = line == "paths:"
			continue
		}
		if !inPaths {
			continue
		}
		if m := pathLine.FindStringSubmatch(line); m != nil {
			path = m[1]
		} else if m := methodLine.FindStringSubmatch(line); m != nil {
			op = operation{path, strings.ToUpper(m[1])}
			out[op] = nil
		} else if m := statusLine.FindStringSubmatch(line); m != nil {
			var s int
			fmt.Sscan(m[1], &s)
			out[op] = append(out[op], s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("schema/openapi.yaml: no operations found")
	}
	return out, sc.Err()
}

// TestOpenAPIRoutes: the document lists exactly the gateway's operations;
// each answers 401 (documented) without a token and 405 to a method not
// documented.
func TestOpenAPIRoutes(t *testing.T) {
	doc := openAPI(t)
	g := &Gateway{}
	served := map[operation]bool{}
	for path, rt := range g.table() {
		for m := range rt {
			served[operation{path, m}] = true
		}
	}
	for op := range doc {
		if !served[op] {
			t.Errorf("openapi.yaml documents %s %s, which the gateway does not serve", op.method, op.path)
		}
	}
	for op := range served {
		if _, ok := doc[op]; !ok {
			t.Errorf("the gateway serves %s %s, which openapi.yaml does not document", op.method, op.path)
		}
	}
	e := newEnv(t, 2)
	_, srv := e.gateway(e.config())
	for op := range doc {
		url := srv.URL + strings.NewReplacer("{run_id}", "run-1", "{session_id}", "s1").Replace(op.path)
		r := call(t, op.method, url, "", nil)
		if r.status != 401 || r.problem(t).Type != problem.Unauthorized {
			t.Errorf("%s %s without a token: %d", op.method, op.path, r.status)
		}
		r = call(t, http.MethodPut, url, tokAll, nil)
		if r.status != 405 || r.problem(t).Type != problem.MethodNotAllowed || r.header.Get("Allow") != op.method {
			t.Errorf("PUT %s: %d Allow %q", op.path, r.status, r.header.Get("Allow"))
		}
	}
}

// observed records the statuses the tests saw per operation; TestMain checks
// them against the document once every test ran.
var observed = struct {
	sync.Mutex
	m map[operation]map[int]bool
}{m: map[operation]map[int]bool{}}

var (
	runPath     = regexp.MustCompile(`^/v1/runs(?:/[^/]+/([a-z-]+))?$`)
	sessionPath = regexp.MustCompile(`^/v1/sessions/[^/]+(/history)?$`)
)

// opFor is the operation of a request's path, if it is one.
func opFor(method, path string) (operation, bool) {
	if m := sessionPath.FindStringSubmatch(path); m != nil {
		return operation{"/v1/sessions/{session_id}" + m[1], method}, true
	}
	m := runPath.FindStringSubmatch(path)
	switch {
	case m == nil:
		return operation{}, false
	case m[1] == "":
		return operation{"/v1/runs", method}, true
	}
	return operation{"/v1/runs/{run_id}/" + m[1], method}, true
}

func observe(method, path string, status int) {
	op, ok := opFor(method, path)
	if !ok {
		return // not an operation: the 404 of an unknown path
	}
	observed.Lock()
	defer observed.Unlock()
	if observed.m[op] == nil {
		observed.m[op] = map[int]bool{}
	}
	observed.m[op][status] = true
}

func checkObserved() error {
	doc, err := readOpenAPI()
	if err != nil {
		return err
	}
	observed.Lock()
	defer observed.Unlock()
	var errs []string
	for op, statuses := range observed.m {
		documented, ok := doc[op]
		for s := range statuses {
			if s == 405 && !ok {
				continue // a method not documented, answered 405 as it should
			}
			if !slices.Contains(documented, s) {
				errs = append(errs, fmt.Sprintf("%s %s answered %d, which schema/openapi.yaml does not document", op.method, op.path, s))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}
