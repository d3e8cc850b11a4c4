package testenv

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TypeScriptPackage builds the @canopy/agents package from sdk/typescript's
// sources now, with its own tsc, into dir/node_modules/@canopy/agents, a
// directory of the test's own, beside its dependencies and tools (links to
// sdk/typescript/node_modules: kafkajs, typescript, @types/node, .bin): dir
// is laid out as a project that installed the package, so a dist/ left in
// the checkout by an older build is never what is tested. Without node or
// the package's node_modules (npm ci in sdk/typescript, which
// tools/install.sh runs) the test fails under CI=true and is skipped
// otherwise.
func TypeScriptPackage(t testing.TB) (node, dir string) {
	t.Helper()
	node = Tool(t, "node")
	sdk := filepath.Join(RepoRoot(t), "sdk/typescript")
	tsc := filepath.Join(sdk, "node_modules/typescript/bin/tsc")
	if _, err := os.Stat(tsc); err != nil {
		Missing(t, "sdk/typescript/node_modules (npm ci in sdk/typescript)")
	}
	dir = t.TempDir()
	modules := filepath.Join(dir, "node_modules")
	pkg := filepath.Join(modules, "@canopy/agents")
	if b, err := exec.Command(node, tsc, "-p", sdk, "--outDir", filepath.Join(pkg, "dist")).CombinedOutput(); err != nil {
		t.Fatalf("tsc -p sdk/typescript: %v\n%s", err, b)
	}
	manifest, err := os.ReadFile(filepath.Join(sdk, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "package.json"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	deps, err := os.ReadDir(filepath.Join(sdk, "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps {
		if d.Name() == "@canopy" || d.Name() != ".bin" && d.Name()[0] == '.' {
			continue
		}
		if err := os.Symlink(filepath.Join(sdk, "node_modules", d.Name()), filepath.Join(modules, d.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return node, dir
}

// TypeScriptExamples compiles examples/typescript against the package
// TypeScriptPackage builds, with the package's tsc, and returns node and
// the directory of the compiled examples (producer.js, conductor.js). They
// run from there as they are: the package and its dependencies are in the
// node_modules beside them.
func TypeScriptExamples(t testing.TB) (node, dir string) {
	t.Helper()
	node, out := TypeScriptPackage(t)
	root := RepoRoot(t)
	modules := filepath.Join(out, "node_modules")
	pkg := filepath.Join(modules, "@canopy/agents")
	tsc := filepath.Join(modules, "typescript/bin/tsc")
	examples := filepath.Join(root, "examples/typescript")
	cfg, err := json.Marshal(map[string]any{
		"extends": filepath.Join(examples, "tsconfig.json"),
		"compilerOptions": map[string]any{
			"outDir":    filepath.Join(out, "js"),
			"typeRoots": []string{filepath.Join(modules, "@types")},
			// Not examples/typescript/node_modules' link to the checkout's sdk/typescript.
			"paths": map[string][]string{"@canopy/agents": {pkg}},
		},
		"files": []string{filepath.Join(examples, "producer.ts"), filepath.Join(examples, "conductor.ts")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "tsconfig.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(node, tsc, "-p", filepath.Join(out, "tsconfig.json")).CombinedOutput(); err != nil {
		t.Fatalf("tsc -p examples/typescript (against sdk/typescript's build): %v\n%s", err, b)
	}
	return node, filepath.Join(out, "js")
}
