package ctl

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExampleConfigKeepsCtlQuiet: a config file started from
// dfkv.example.toml spells out log.level = "info" (the default, as that
// file spells out every default). ctl run with it stays as quiet as with
// no file: the client's WARN about a node it cannot reach would repeat
// the verb's own error.
func TestExampleConfigKeepsCtlQuiet(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(t.TempDir(), "dfkv.toml")
	if err := os.WriteFile(cfg, []byte("[log]\nlevel = \"info\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, noFile := runCtl(t, "", "--members", dead, "get", "k")
	_, _, withFile := runCtl(t, "", "--config", cfg, "--members", dead, "get", "k")
	if strings.Contains(noFile, "level=WARN") || strings.Contains(withFile, "level=WARN") {
		t.Fatalf("no config file, stderr:\n%s\nconfig file with the example's log.level = \"info\", stderr:\n%s", noFile, withFile)
	}
}
