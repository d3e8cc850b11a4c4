// Package tools holds the project's own tooling checks: what the Makefile
// promises about the source tree.
package tools

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// makeFuzz is one line of the Makefile's fuzz target.
	makeFuzz = regexp.MustCompile(`-fuzz '\^(Fuzz\w+)\$\$' -fuzztime \$\(FUZZTIME\) (\./\S+)`)
	// fuzzFunc is a fuzz target's declaration.
	fuzzFunc = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(\w+ \*testing\.F\)`)
)

// TestMakeFuzzRunsEveryTarget: `make fuzz` runs every fuzz target of the
// project (third_party aside), each in its own package, and names none that
// does not exist; a new target that is not added to the Makefile fails here.
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	inMake := map[string]bool{}
	for _, m := range makeFuzz.FindAllStringSubmatch(string(mk), -1) {
		inMake[m[1]+" "+m[2]] = true
	}
	if len(inMake) == 0 {
		t.Fatal("the Makefile's fuzz target runs no fuzz target")
	}
	inSource := map[string]bool{}
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "third_party" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg := "./" + filepath.ToSlash(strings.TrimPrefix(filepath.Dir(path), "../"))
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			inSource[m[1]+" "+pkg] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range inSource {
		if !inMake[k] {
			t.Errorf("fuzz target %s is not run by make fuzz: add it to the Makefile", k)
		}
	}
	for k := range inMake {
		if !inSource[k] {
			t.Errorf("make fuzz runs %s, which does not exist", k)
		}
	}
}
