package docscheck

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository's top directory (two levels up).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// trackedFiles lists the files git tracks, relative to root; without git
// (an exported tree) it walks the tree.
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err == nil {
		return strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	}
	var files []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || strings.HasPrefix(d.Name(), ".") && p != root) {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return nil
	})
	return files
}

var (
	linkRe    = regexp.MustCompile(`\]\(([^) ]+)\)`)
	codeRe    = regexp.MustCompile("`[^`]*`")
	headingRe = regexp.MustCompile(`^#+ +(.*?) *#* *$`)
	slugDrop  = regexp.MustCompile(`[^a-z0-9 _-]`)
)

// markdown is one file's links (line number, target) and heading anchors,
// fenced code left out.
type markdown struct {
	links   []link
	anchors map[string]bool
}

type link struct {
	line   int
	target string
}

func readMarkdown(t *testing.T, path string) markdown {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md := markdown{anchors: map[string]bool{}}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := headingRe.FindStringSubmatch(line); m != nil {
			// GitHub's anchor: lower case, punctuation dropped, spaces to
			// hyphens, -1, -2, ... for repeats.
			slug := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")
			if k := seen[slug]; k > 0 {
				md.anchors[slug+"-"+strconv.Itoa(k)] = true
			} else {
				md.anchors[slug] = true
			}
			seen[slug]++
		}
		for _, m := range linkRe.FindAllStringSubmatch(codeRe.ReplaceAllString(line, ""), -1) {
			md.links = append(md.links, link{n, m[1]})
		}
	}
	return md
}

// Every relative link of README.md and docs/ names a file that exists,
// and an anchor a heading of that file.
func TestDocLinksResolve(t *testing.T) {
	root := repoRoot(t)
	var pages []string
	for _, f := range trackedFiles(t, root) {
		if f == "README.md" || strings.HasPrefix(f, "docs/") && strings.HasSuffix(f, ".md") {
			pages = append(pages, f)
		}
	}
	if len(pages) < 5 {
		t.Fatalf("only %d pages: %v", len(pages), pages)
	}
	cache := map[string]markdown{}
	read := func(p string) markdown {
		if md, ok := cache[p]; ok {
			return md
		}
		cache[p] = readMarkdown(t, p)
		return cache[p]
	}
	for _, page := range pages {
		abs := filepath.Join(root, page)
		for _, l := range read(abs).links {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			if strings.HasPrefix(l.target, "/") {
				t.Errorf("%s:%d: %s is an absolute path", page, l.line, l.target)
				continue
			}
			path, anchor, _ := strings.Cut(l.target, "#")
			dest := abs
			if path != "" {
				dest = filepath.Join(filepath.Dir(abs), path)
			}
			if rel, _ := filepath.Rel(root, dest); strings.HasPrefix(rel, "..") {
				t.Errorf("%s:%d: %s leaves the repository", page, l.line, l.target)
				continue
			}
			fi, err := os.Stat(dest)
			if err != nil {
				t.Errorf("%s:%d: %s: no such file", page, l.line, l.target)
				continue
			}
			if anchor != "" && (fi.IsDir() || !strings.HasSuffix(dest, ".md") || !read(dest).anchors[anchor]) {
				t.Errorf("%s:%d: %s: no heading with anchor #%s", page, l.line, l.target, anchor)
			}
		}
	}
}

// outsidePath matches a path into the sibling "shared" folder of the tree
// this was written in, or into a build machine's work directory (written
// in pieces, so that this line does not match itself).
var outsidePath = regexp.MustCompile(`\.\.` + `/shared/|(^|[^A-Za-z0-9_.-])/` + `work/`)

// No tracked text file names a path outside the repository.
func TestNoPathOutsideTheRepository(t *testing.T) {
	root := repoRoot(t)
	for _, f := range trackedFiles(t, root) {
		if strings.HasSuffix(f, ".gz") || strings.HasSuffix(f, ".png") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(b), "\n") {
			if outsidePath.MatchString(line) {
				t.Errorf("%s:%d names a path outside the repository: %s", f, n+1, strings.TrimSpace(line))
			}
		}
	}
}

var (
	tocEntryRe = regexp.MustCompile(`^- \[[^]]+\]\(#([^)]+)\)$`)
	sectionRe  = regexp.MustCompile(`^## +(.*?) *$`)
)

// A page that opens with a table of contents (a list of links to its own
// headings before its first section) lists every one of its sections.
func TestTablesOfContentsComplete(t *testing.T) {
	root := repoRoot(t)
	for _, page := range trackedFiles(t, root) {
		if !strings.HasPrefix(page, "docs/") || !strings.HasSuffix(page, ".md") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		toc := map[string]bool{}
		var sections []string
		fenced, inBody := false, false
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "```") {
				fenced = !fenced
				continue
			}
			if fenced {
				continue
			}
			if m := sectionRe.FindStringSubmatch(line); m != nil {
				inBody = true
				sections = append(sections, m[1])
				continue
			}
			if m := tocEntryRe.FindStringSubmatch(line); m != nil && !inBody {
				toc[m[1]] = true
			}
		}
		if len(toc) == 0 {
			continue
		}
		for _, s := range sections {
			slug := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(s), ""), " ", "-")
			if !toc[slug] {
				t.Errorf("%s: section %q (#%s) is missing from the table of contents", page, s, slug)
			}
		}
	}
}

// TestLayoutFoldersMatchTheTree keeps docs/layout.md's folder table the
// tree's: one row per top-level folder that holds tracked files (hidden
// ones aside), no row for a folder that is gone, and at most 15 of them,
// so the top level keeps showing the product's parts.
func TestLayoutFoldersMatchTheTree(t *testing.T) {
	root := repoRoot(t)
	tree := map[string]bool{}
	for _, f := range trackedFiles(t, root) {
		if dir, _, ok := strings.Cut(f, "/"); ok && !strings.HasPrefix(dir, ".") {
			tree[dir+"/"] = true
		}
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "## Folders")
	table, _, _ = strings.Cut(table, "\n## ")
	rows := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if cell, ok := strings.CutPrefix(line, "| `"); ok {
			name, _, _ := strings.Cut(cell, "`")
			rows[name] = true
		}
	}
	for dir := range tree {
		if !rows[dir] {
			t.Errorf("docs/layout.md: no row for the folder %s", dir)
		}
	}
	for row := range rows {
		if !tree[row] {
			t.Errorf("docs/layout.md: a row for %s, which the tree lacks", row)
		}
	}
	if len(tree) > 15 {
		t.Errorf("%d top-level folders, want at most 15", len(tree))
	}
}
