package slab

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

const crashDirEnv = "DFKV_SLAB_CRASH_CHILD_DIR"

// TestCrashChild is the child half of TestSIGKILLRestartIsCold: it opens
// the store, writes forever and says "ready" once it has written some.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("child process of TestSIGKILLRestartIsCold")
	}
	s, err := Open(smallOpts(dir))
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	for i := 0; ; i++ {
		if err := s.Cache(enginetest.Key(i%500), enginetest.Value(uint64(i), 1+i%50000)); err != nil {
			fmt.Println("cache:", err)
			os.Exit(2)
		}
		if i == 200 {
			fmt.Println("ready")
		}
	}
}

// TestSIGKILLRestartIsCold: a node killed with SIGKILL in the middle of
// writes restarts cold (empty, healthy) and never returns wrong bytes; the
// store is fully usable afterwards. (The clean half: a graceful restart of
// the same directory first proves the child's store was warm-capable.)
func TestSIGKILLRestartIsCold(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	dir := t.TempDir()
	// A clean previous epoch with values in it, so cold vs warm is visible.
	s := openT(t, smallOpts(dir))
	for i := range 50 {
		mustCache(t, s, enginetest.Key(10000+i), enginetest.Value(uint64(i), 4000))
	}
	mustClose(t, s)

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	ready := false
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.TrimSpace(sc.Text()) == "ready" {
			ready = true
			break
		}
	}
	_ = cmd.Process.Kill() // SIGKILL, mid-write
	_ = cmd.Wait()
	if !ready {
		t.Fatalf("child never got ready: %q", lines)
	}

	s = openT(t, smallOpts(dir))
	defer mustClose(t, s)
	if st := s.Stats(); st.Objects != 0 || st.UsedBytes != 0 || !st.Healthy {
		t.Fatalf("after SIGKILL: %+v, want empty and healthy", st)
	}
	for i := range 500 {
		_, err := s.Lookup(enginetest.Key(i))
		wantStatus(t, err, wire.StatusNotFound, "Lookup after SIGKILL")
	}
	for i := range 50 {
		_, err := s.Lookup(enginetest.Key(10000 + i))
		wantStatus(t, err, wire.StatusNotFound, "Lookup of the previous epoch's value after SIGKILL")
	}
	v := enginetest.Value(1, 12345)
	mustCache(t, s, enginetest.Key(1), v)
	if got, err := get(t, s, enginetest.Key(1)); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("after the cold start: %v", err)
	}
}
