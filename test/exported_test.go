package test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxExported bounds what one package asks a reader to learn: its exported
// top-level names (types, functions, constants, variables) and the exported
// methods of its types, counted in non-test files, stay under 80. A
// package past it is doing more than one job (gc was 149 before it became
// gc, gc/collector and gc/reclaimer).
const maxExported = 79

// TestExportedNames keeps every package of the module within maxExported;
// -v lists the counts, largest first.
func TestExportedNames(t *testing.T) {
	counts := map[string]int{}
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && d.Name() != ".." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", filepath.Dir(p))
		counts[filepath.ToSlash(rel)] += exportedNames(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pkgs := make([]string, 0, len(counts))
	for p := range counts {
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return counts[pkgs[i]] > counts[pkgs[j]] })
	for _, p := range pkgs {
		t.Logf("%4d %s", counts[p], p)
		if counts[p] > maxExported {
			t.Errorf("%s: %d exported names, more than %d: split it by job", p, counts[p], maxExported)
		}
	}
}

// exportedNames counts f's exported declarations and methods.
func exportedNames(f *ast.File) int {
	n := 0
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() {
				n++
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if name.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}
