package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchSmallValuesFailsOnBenchErrors: scripts/bench-small-values.sh
// (smoke-run by scripts/test.sh with --quick, "the script works") exits
// non-zero when the load generator fails, instead of printing a table of
// zeros and "-nan%" ratios and exiting 0. fio is a stub here (the disk's
// figures are not what is tested), and DFKV_CLIENT_TLS_CA without
// client.tls makes every `dfkv bench` refuse its configuration, as any
// broken client would.
func TestBenchSmallValuesFailsOnBenchErrors(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	stub := t.TempDir()
	fio := "#!/bin/sh\n# terse v3 stand-in: every field 1000 (field 8 read IOPS, 49 write IOPS)\n" +
		"l=3; i=0; while [ $i -lt 60 ]; do l=\"$l;1000\"; i=$((i+1)); done; echo \"$l\"\n"
	if err := os.WriteFile(filepath.Join(stub, "fio"), []byte(fio), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "../../scripts/bench-small-values.sh", "--quick", t.TempDir())
	cmd.Env = append(cleanEnv(), "PATH="+stub+":"+os.Getenv("PATH"), "DFKV_CLIENT_TLS_CA=/nonexistent/ca.pem")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Errorf("bench-small-values.sh exited 0 although every dfkv bench run failed:\n%s", out)
	} else if !strings.Contains(string(out), "dfkv bench") {
		t.Logf("exited %v:\n%s", err, out)
	}
}

// TestBenchShmBenchFailsOnError: scripts/bench-shm.sh's bench() runs in
// $(...), where bash does not apply set -e, and reads the figure from
// $work/b.json, which every run rewrites: when a `dfkv bench` run fails,
// the function fails too, rather than print the previous run's figure.
// The function is taken from the script and run with a stand-in for dfkv
// whose first run succeeds and whose second fails.
func TestBenchShmBenchFailsOnError(t *testing.T) {
	raw, err := os.ReadFile("../../scripts/bench-shm.sh")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	start := strings.Index(text, "\nbench() {")
	end := strings.Index(text[max(start, 0):], "\n}\n")
	if start < 0 || end < 0 {
		t.Fatal("bench-shm.sh has no bench() function")
	}
	fn := text[start+1 : start+end+3]
	work := t.TempDir()
	stub := "#!/bin/sh\nif [ ! -e \"$(dirname \"$0\")/ran\" ]; then touch \"$(dirname \"$0\")/ran\"\n" +
		"  prev=; for a; do [ \"$prev\" = --json ] && printf '{\\n \"totals\": {\\n  \"gb_per_s\": 8.40,\\n }\\n}\\n' > \"$a\"; prev=$a; done; exit 0\nfi\n" +
		"echo 'dfkv bench: connection refused' >&2; exit 1\n"
	if err := os.WriteFile(filepath.Join(work, "dfkv"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "set -euo pipefail\nwork=" + work + "\nport=1\n" + fn +
		"s=$(bench get on)\nt=$(bench get off)\necho \"shm $s tcp $t\"\n"
	out, err := exec.Command("bash", "-c", script).CombinedOutput()
	if err == nil {
		t.Errorf("the second dfkv bench run failed, yet bench-shm.sh's bench() succeeded and the script went on: %s", out)
	}
}
