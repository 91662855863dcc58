package dlock_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestExamplesShown: every Example of every package in the repository
// (this module's and the extras') is attached to a documented exported
// name (or to the package), as pkg.go.dev shows it; one named after a
// variable or a constant, or after no name at all, is shown nowhere. And
// each names its Redis literally, so that its code compiles as copied.
func TestExamplesShown(t *testing.T) {
	dirs := []string{".", "fenced", "dlocktest"}
	extras, err := filepath.Glob("extra/*")
	if err != nil {
		t.Fatal(err)
	}
	dirs = append(dirs, extras...)
	total := 0
	for _, dir := range dirs {
		total += checkExamplesShown(t, dir)
	}
	if total < 20 {
		t.Errorf("%d Examples found; the repository has more", total)
	}
}

// testOnly returns the top-level names declared in the test files of pkg
// other than example_test.go: what an Example's code cannot use and still
// compile once copied (as Examples once named their test's server:
// Addr: redisAddr).
func testOnly(pkg *ast.Package) map[string]bool {
	names := map[string]bool{}
	for path, f := range pkg.Files {
		if !strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, "example_test.go") {
			continue
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							names[n.Name] = true
						}
					case *ast.TypeSpec:
						names[sp.Name.Name] = true
					}
				}
			}
		}
	}
	return names
}

// usesTestOnly reports the names of testOnly that f's code uses: those
// that the parser could not resolve within f (locals and f's own
// declarations it resolves).
func usesTestOnly(f *ast.File, testOnly map[string]bool) []string {
	var used []string
	for _, id := range f.Unresolved {
		if testOnly[id.Name] && !slices.Contains(used, id.Name) {
			used = append(used, id.Name)
		}
	}
	return used
}

// checkExamplesShown checks dir's Examples and returns how many it has.
func checkExamplesShown(t *testing.T, dir string) int {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var files, tests []*ast.File
	for _, p := range pkgs {
		only := testOnly(p)
		for path, f := range p.Files {
			files = append(files, f)
			if !strings.HasSuffix(path, "_test.go") {
				continue
			}
			tests = append(tests, f)
			if !strings.HasSuffix(path, "example_test.go") {
				continue
			}
			if used := usesTestOnly(f, only); len(used) > 0 {
				t.Errorf("%s uses %v of the package's other test files: copied, it would not compile (name the Redis literally)", path, used)
			}
		}
	}
	p, err := doc.NewFromFiles(fset, files, "example.com/"+dir)
	if err != nil {
		t.Fatal(err)
	}
	shown := shownExamples(p)
	all := doc.Examples(tests...)
	for _, ex := range all {
		name := "Example" + ex.Name
		documented, ok := shown[name]
		switch {
		case !ok:
			t.Errorf("%s: %s is attached to no exported function, type or method: pkg.go.dev does not show it", dir, name)
		case !documented:
			t.Errorf("%s: %s is attached to a name without a doc comment", dir, name)
		}
	}
	return len(all)
}

// shownExamples returns the Examples that p shows, each with whether the
// name it is attached to has a doc comment.
func shownExamples(p *doc.Package) map[string]bool {
	shown := map[string]bool{}
	add := func(exs []*doc.Example, doc string) {
		for _, ex := range exs {
			shown["Example"+ex.Name] = strings.TrimSpace(doc) != ""
		}
	}
	add(p.Examples, p.Doc)
	for _, f := range p.Funcs {
		add(f.Examples, f.Doc)
	}
	for _, ty := range p.Types {
		add(ty.Examples, ty.Doc)
		for _, f := range ty.Funcs {
			add(f.Examples, f.Doc)
		}
		for _, f := range ty.Methods {
			add(f.Examples, f.Doc)
		}
	}
	return shown
}
