package test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Limits a newcomer can read: a file fits in one sitting, a function on one
// screen and a half. Tests count too: they are read as often as the code.
const (
	maxFileLines = 500
	maxFuncLines = 80
)

// TestSizes keeps every Go file and function of the module within the limits.
func TestSizes(t *testing.T) {
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && d.Name() != ".." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		checkSizes(t, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func checkSizes(t *testing.T, p string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, p, nil, 0)
	if err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
		t.Errorf("%s: %d lines, more than %d", p, n, maxFileLines)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		var body *ast.BlockStmt
		switch x := n.(type) {
		case *ast.FuncDecl:
			body = x.Body
		case *ast.FuncLit:
			body = x.Body
		}
		if body != nil {
			start, end := fset.Position(n.Pos()), fset.Position(body.Rbrace)
			if l := end.Line - start.Line + 1; l > maxFuncLines {
				t.Errorf("%s:%d: function of %d lines, more than %d", p, start.Line, l, maxFuncLines)
			}
		}
		return true
	})
}
