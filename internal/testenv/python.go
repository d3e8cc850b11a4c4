package testenv

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PythonVenv returns the python of tools/python/venv, the Python test
// environment tools/install.sh makes from tools/python/requirements.txt
// (confluent-kafka, pytest, setuptools), with the CI rule of Tool.
func PythonVenv(t testing.TB) string {
	t.Helper()
	p := filepath.Join(RepoRoot(t), "tools", "python", "venv", "bin", "python")
	if !isExec(p) {
		Missing(t, "tools/python/venv")
	}
	return p
}

// PythonSDK installs the canopy Python package (sdk/python, as `pip
// install ./sdk/python` would) into a directory of the test's own and
// returns a python3 there: the venv's python, with that directory on its
// path, which callers run like any python (a command's argv[0], or first on
// PATH). Each test builds from a copy of the sources, so tests running at
// once never build in the same place nor replace a package another one is
// importing; pip needs no index (no dependencies, the venv's setuptools).
func PythonSDK(t testing.TB) string {
	t.Helper()
	python := PythonVenv(t)
	dir := t.TempDir()
	src, site, bin := filepath.Join(dir, "src"), filepath.Join(dir, "site"), filepath.Join(dir, "bin")
	copySources(t, filepath.Join(RepoRoot(t), "sdk", "python"), src)
	pip := exec.Command(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
		"--no-build-isolation", "--no-index", "--target", site, src)
	if out, err := pip.CombinedOutput(); err != nil {
		t.Fatalf("pip install sdk/python: %v\n%s", err, out)
	}
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(bin, "python3")
	script := "#!/bin/sh\nPYTHONPATH=" + shellQuote(site) + " PYTHONDONTWRITEBYTECODE=1 exec " + shellQuote(python) + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// copySources copies the package's sources from dir to dst, leaving out
// what a build or a test run left in dir (build/, *.egg-info, caches), so
// that nothing stale reaches the package.
func copySources(t testing.TB, dir, dst string) {
	t.Helper()
	err := fs.WalkDir(os.DirFS(dir), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && (name == "build" || name == "dist" || name == "__pycache__" || name == ".pytest_cache" ||
			strings.HasSuffix(name, ".egg-info")) {
			return fs.SkipDir
		}
		target := filepath.Join(dst, p)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copying %s: %v", dir, err)
	}
}
