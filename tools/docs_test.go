package tools

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

var (
	// fence opens or closes a fenced code block.
	fence = regexp.MustCompile("^\\s*(```|~~~)")
	// codeSpan is inline code, where brackets are not links.
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	// linkTarget is the target of an inline link or image, [text](target)
	// or [text](<target>), with an optional title after it.
	linkTarget = regexp.MustCompile(`\]\(\s*(<[^>\n]*>|[^)\s]+)`)
	// refDef is a reference definition: [label]: target.
	refDef = regexp.MustCompile(`(?m)^ {0,3}\[[^\]\n]+\]:\s*(<[^>\n]*>|\S+)`)
	// heading is an ATX heading.
	heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	// htmlAnchor is an explicit anchor: <a id="..."> or <a name="...">.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	// scheme starts an absolute URL (https:, mailto:, ...).
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// markdownFiles returns the module's Markdown files (third_party,
// node_modules, venv, bin and dot directories aside: code of others,
// installed by tools/install.sh), relative to its root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && (slices.Contains([]string{"third_party", "node_modules", "venv", "bin"}, d.Name()) || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel("..", path)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// prose is a Markdown text without its code: fenced blocks are blanked
// line by line (so that line numbers stay) and code spans removed.
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if fence.MatchString(l) {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
			continue
		}
		lines[i] = codeSpan.ReplaceAllString(l, "``")
	}
	return lines
}

// slug is the anchor GitHub gives a heading: lower case, spaces as
// hyphens, and every character but letters, digits, hyphens and
// underscores dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the anchors of a Markdown text: its headings' slugs (a
// repeated one numbered -1, -2, ... as GitHub does) and its explicit
// <a id> anchors.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	for _, l := range prose(text) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		// Links and emphasis in a heading count as their text.
		h := regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(m[1], "$1")
		s := slug(h)
		if n := count[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		count[s]++
	}
	return out
}

// TestDocLinks: every relative link in the project's Markdown (inline
// links, images and reference definitions) names a file or directory of
// the repository, so that it works in a clone, and every #fragment of a
// link to a Markdown file names one of its headings or anchors.
func TestDocLinks(t *testing.T) {
	files := markdownFiles(t)
	if !slices.Contains(files, "README.md") || !slices.Contains(files, "docs/ARCHITECTURE.md") {
		t.Fatalf("found %v: is the walk at the module's root?", files)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{}
	read := func(rel string) (string, error) {
		if s, ok := texts[rel]; ok {
			return s, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		texts[rel] = string(b)
		return string(b), err
	}
	checked := 0
	for _, file := range files {
		text, err := read(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range prose(text) {
			var targets []string
			for _, m := range linkTarget.FindAllStringSubmatch(l, -1) {
				targets = append(targets, m[1])
			}
			for _, m := range refDef.FindAllStringSubmatch(l, -1) {
				targets = append(targets, m[1])
			}
			for _, target := range targets {
				checked++
				if p := linkProblem(root, file, strings.Trim(target, "<>"), read); p != "" {
					t.Errorf("%s:%d: link %s: %s", file, i+1, target, p)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d links: is the link pattern right?", checked)
	}
}

// linkProblem says what is wrong with a link from the Markdown file at
// rel to target, or "" when nothing is: a relative path must stay inside
// the repository and exist, and a fragment into a Markdown file must be
// one of its anchors.
func linkProblem(root, rel, target string, read func(string) (string, error)) string {
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // absolute: not checked here
	}
	path, frag, _ := strings.Cut(target, "#")
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	dest := rel
	if path != "" {
		abs := filepath.Join(root, filepath.FromSlash(filepath.Dir(rel)), filepath.FromSlash(path))
		r, err := filepath.Rel(root, abs)
		if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return "outside the repository: a clone does not have it"
		}
		if _, err := os.Stat(abs); err != nil {
			return "no such file or directory in the repository"
		}
		dest = filepath.ToSlash(r)
	}
	if frag == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	text, err := read(dest)
	if err != nil {
		return err.Error()
	}
	if !anchors(text)[frag] {
		return fmt.Sprintf("%s has no heading or anchor #%s", dest, frag)
	}
	return ""
}
