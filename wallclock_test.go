package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// wallClockUses are the places allowed to turn an instant into Unix time,
// each with why the wall clock is right there. Everywhere else an instant
// stays a time.Time: the one time.Now returns carries the monotonic clock,
// so durations, deadlines, back-offs and rate limits are immune to steps of
// the wall clock (NTP, an operator's date). Unix nanoseconds kept in an
// atomic and compared later are not: a backward step of an hour held an
// unreachable object store's retry back, and a revoked HTTP token
// accepted, for that hour.
var wallClockUses = map[string]string{
	"roles/server/command.go": "STATS reports when the node started, as a date",
	"roles/mds/boltdir.go":    "MEMBERS reports a member's last heartbeat as a date; the sweep compares instants",
	"roles/smoke/smoke.go":    "a run id unique across processes",
	"roles/bench/run.go":      "a key prefix unique across runs",
}

// TestNoWallClockArithmetic fails when product code converts an instant to
// Unix time outside wallClockUses: keep the time.Time, or add the place with
// the reason the wall clock is meant.
func TestNoWallClockArithmetic(t *testing.T) {
	fset := token.NewFileSet()
	seen := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch {
			case path != "." && strings.HasPrefix(d.Name(), "."), d.Name() == "testdata",
				path == "contrib", path == filepath.Join("roles", "internal", "sim"):
				return filepath.SkipDir // not product code: tools, fixtures, other modules, the simulation
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch sel.Sel.Name {
			case "Unix", "UnixMilli", "UnixMicro", "UnixNano":
				slash := filepath.ToSlash(path)
				if _, ok := wallClockUses[slash]; ok {
					seen[slash] = true
					return true
				}
				t.Errorf("%s: %s() turns an instant into wall-clock time; keep the time.Time (its monotonic reading survives clock steps), or list the file in wallClockUses with why the wall clock is meant",
					fset.Position(call.Pos()), sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for path := range wallClockUses {
		if !seen[path] {
			t.Errorf("%s is listed in wallClockUses but no longer uses the wall clock: drop it from the list", path)
		}
	}
}
