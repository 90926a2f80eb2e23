package ctl

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/engine"
)

// TestStatsShowsExtentMoves: the human summary names extent moves when a
// slab disk had any, and stays quiet about them otherwise.
func TestStatsShowsExtentMoves(t *testing.T) {
	var out bytes.Buffer
	writeStats(&out, "127.0.0.1:7600", &nodeStats{Engine: engine.Stats{Engine: "slab", Evictions: 40, ExtentMoves: 3}})
	if !strings.Contains(out.String(), "extents      3 moved to another value size") {
		t.Fatalf("summary of a node with 3 extent moves:\n%s", out.String())
	}
	out.Reset()
	writeStats(&out, "127.0.0.1:7600", &nodeStats{Engine: engine.Stats{Engine: "slab", Evictions: 40}})
	if strings.Contains(out.String(), "extents ") {
		t.Fatalf("summary of a node without extent moves mentions them:\n%s", out.String())
	}
}
