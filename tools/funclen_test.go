package tools

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines is the most lines a function of non-test code may span, from
// its func keyword to its closing brace, unless its doc comment has a line
// that starts "Long because" and says why.
const maxFuncLines = 80

// longAllowed are functions over maxFuncLines whose doc comment gives no
// reason yet, keyed by package directory and name (Recv.Name for methods).
// An entry that is no longer over the limit fails the test, so the list only
// shrinks.
var longAllowed = map[string]bool{}

// longFunc is one function declaration of the source tree and its length.
type longFunc struct {
	key   string // package directory and name: "pkg/snapshot builder.fit"
	pos   string // file:line
	lines int
	// reason is true when the doc comment says why the function is long.
	reason bool
}

// funcName is a declaration's name, Recv.Name for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// hasReason: the doc comment has a line that starts "Long because".
func hasReason(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for line := range strings.SplitSeq(doc.Text(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "Long because") {
			return true
		}
	}
	return false
}

// funcLengths lists every function with a body in the module's non-test Go
// files (third_party, node_modules and dot directories aside).
func funcLengths(t *testing.T) []longFunc {
	t.Helper()
	var out []longFunc
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && (d.Name() == "third_party" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel("..", path)
		if err != nil {
			return err
		}
		fns, err := fileFuncs(filepath.ToSlash(rel), nil)
		out = append(out, fns...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fileFuncs lists the functions with a body of the Go file at rel (from
// the module's root), or of src when it is not nil.
func fileFuncs(rel string, src any) ([]longFunc, error) {
	path := rel
	if src == nil {
		path = filepath.Join("..", filepath.FromSlash(rel))
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var out []longFunc
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		start := fset.Position(fd.Pos())
		out = append(out, longFunc{
			key:    filepath.ToSlash(filepath.Dir(rel)) + " " + funcName(fd),
			pos:    fmt.Sprintf("%s:%d", rel, start.Line),
			lines:  fset.Position(fd.End()).Line - start.Line + 1,
			reason: hasReason(fd.Doc),
		})
	}
	return out, nil
}

// checkLengths returns the problems of funcs against maxFuncLines and
// allowed, and a line for each long function that is not one.
func checkLengths(funcs []longFunc, allowed map[string]bool) (problems, long []string) {
	funcs = slices.Clone(funcs)
	slices.SortFunc(funcs, func(a, b longFunc) int { return b.lines - a.lines })
	seen := map[string]bool{}
	for _, f := range funcs {
		switch {
		case f.lines <= maxFuncLines:
		case allowed[f.key]:
			seen[f.key] = true
			long = append(long, fmt.Sprintf("%s (%s): %d lines, allowed in longAllowed", f.key, f.pos, f.lines))
		case f.reason:
			long = append(long, fmt.Sprintf("%s (%s): %d lines, with its reason", f.key, f.pos, f.lines))
		default:
			problems = append(problems, fmt.Sprintf("%s (%s) is %d lines, over %d: split it into named steps, or say why in its doc comment (a line starting \"Long because\")",
				f.key, f.pos, f.lines, maxFuncLines))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(allowed)) {
		if !seen[key] {
			problems = append(problems, fmt.Sprintf("longAllowed lists %s, which is no longer over %d lines (or no longer exists): remove it", key, maxFuncLines))
		}
	}
	return problems, long
}

// TestFunctionLength: no function of non-test code is over maxFuncLines
// lines unless its doc comment says why (a line starting "Long because") or
// it is in longAllowed; a long function is a reader's longest climb, so its
// length is a decision, not an accident.
func TestFunctionLength(t *testing.T) {
	funcs := funcLengths(t)
	if len(funcs) < 100 {
		t.Fatalf("found %d functions: is the walk at the module's root?", len(funcs))
	}
	problems, long := checkLengths(funcs, longAllowed)
	for _, l := range long {
		t.Log(l)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestFunctionLengthCheck: the check counts a function from its func
// keyword to its closing brace, takes a reason only on a doc comment line
// that starts "Long because", and fails on an allow-list entry that is no
// longer long.
func TestFunctionLengthCheck(t *testing.T) {
	body := func(n int) string { return strings.Repeat("\t_ = 0\n", n-2) }
	src := "package p\n\n" +
		"func fits() {\n" + body(maxFuncLines) + "}\n\n" +
		"// long is long.\nfunc long() {\n" + body(maxFuncLines+1) + "}\n\n" +
		"// reasoned is long.\n//\n// Long because it is a table.\nfunc reasoned() {\n" + body(maxFuncLines+1) + "}\n\n" +
		"// mentions says it is Long because, but not at a line's start.\nfunc mentions() {\n" + body(maxFuncLines+1) + "}\n\n" +
		"type T struct{}\n\nfunc (*T) allowed() {\n" + body(maxFuncLines+1) + "}\n"
	funcs, err := fileFuncs("x/p/p.go", src)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]int{}
	for _, f := range funcs {
		lines[f.key] = f.lines
	}
	if lines["x/p fits"] != maxFuncLines || lines["x/p long"] != maxFuncLines+1 || lines["x/p T.allowed"] != maxFuncLines+1 {
		t.Fatalf("lengths %v", lines)
	}
	problems, _ := checkLengths(funcs, map[string]bool{"x/p T.allowed": true, "x/p fits": true})
	want := []string{"x/p long (", "x/p mentions (", "longAllowed lists x/p fits,"}
	if len(problems) != len(want) {
		t.Fatalf("problems:\n%s\nwant %d: %q", strings.Join(problems, "\n"), len(want), want)
	}
	for _, w := range want {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, w) }) {
			t.Errorf("no problem starting %q in:\n%s", w, strings.Join(problems, "\n"))
		}
	}
}
