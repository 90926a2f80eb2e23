package slab

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

const crashDirEnv = "DFKV_SLAB_CRASH_CHILD_DIR"

// crashKeys is how many keys the crash child cycles through; write i goes
// to key i%crashKeys with crashValue(i), and every seventh write of a key
// is a Remove instead.
const crashKeys = 400

func crashValue(i int) []byte { return enginetest.Value(uint64(i), 1+i*7919%9000) }

func crashIsRemove(i int) bool { return (i/crashKeys)%7 == 3 }

// TestCrashChild is the child half of TestSIGKILLRestartKeepsAcknowledged:
// it opens the store and writes (and removes) forever, printing the index
// of every 50th operation once it has returned.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("child process of TestSIGKILLRestartKeepsAcknowledged")
	}
	s, err := Open(smallOpts(dir))
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	for i := 0; ; i++ {
		k := enginetest.Key(i % crashKeys)
		if crashIsRemove(i) {
			err = s.Remove(k)
			if wire.StatusOf(err) == wire.StatusNotFound {
				err = nil
			}
		} else {
			err = s.Put(k, crashValue(i))
		}
		if err != nil {
			fmt.Println("op:", err)
			os.Exit(2)
		}
		if i%50 == 0 {
			fmt.Println("acked", i)
		}
	}
}

// TestSIGKILLRestartKeepsAcknowledged: a process killed with SIGKILL in the
// middle of PUTs and REMOVEs leaves a store whose next Open keeps what was
// acknowledged (the kernel holds the buffered record writes, and O_DIRECT
// payloads are on the device): every key answers its latest acknowledged
// operation or one that was still in flight, never older bytes, another
// key's bytes or a removed value. A clean previous epoch's values survive
// too, and no value fails its checksum.
func TestSIGKILLRestartKeepsAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	dir := t.TempDir()
	s := openT(t, smallOpts(dir))
	for i := range 50 {
		mustCache(t, s, enginetest.Key(10000+i), enginetest.Value(uint64(i), 4000))
	}
	mustClose(t, s)

	for kill := range 3 {
		acked := runCrashChild(t, dir, 1500+kill*700)
		s = openT(t, smallOpts(dir))
		checkCrashState(t, s, acked)
		for i := range 50 {
			got, err := get(t, s, enginetest.Key(10000+i))
			if err != nil || !bytes.Equal(got, enginetest.Value(uint64(i), 4000)) {
				t.Fatalf("kill %d: the clean epoch's key %d: %d bytes, %v", kill, i, len(got), err)
			}
		}
		if st := s.Stats(); st.ChecksumFailures != 0 || !st.Healthy {
			t.Fatalf("kill %d: %+v, want no checksum failures and a healthy store", kill, st)
		}
		// The store is fully usable: a write and its read back, and the
		// next child starts from this state (which it overwrites).
		v := enginetest.Value(77, 12345)
		mustCache(t, s, enginetest.Key(20000), v)
		if got, err := get(t, s, enginetest.Key(20000)); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("kill %d: after the restart: %v", kill, err)
		}
		s.closeFiles() // and crash again: the next child opens a dirty epoch
	}
}

// runCrashChild runs TestCrashChild on dir until it has acknowledged at
// least min operations, kills it with SIGKILL and returns the last index
// it reported acknowledged: the operations after it, up to the next report,
// may or may not have run.
func runCrashChild(t *testing.T, dir string, min int) int {
	t.Helper()
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
	acked := -1
	var lines []string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if n, ok := strings.CutPrefix(line, "acked "); ok {
			acked, _ = strconv.Atoi(n)
			if acked >= min {
				break
			}
			continue
		}
		lines = append(lines, line)
	}
	_ = cmd.Process.Kill() // SIGKILL, mid-operation
	// What the child printed before it died: the last index is a lower
	// bound of what it acknowledged, and it died before printing the next.
	for sc.Scan() {
		if n, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "acked "); ok {
			acked, _ = strconv.Atoi(n)
		}
	}
	_ = cmd.Wait()
	if acked < min {
		t.Fatalf("child stopped before %d operations: %q", min, lines)
	}
	return acked
}

// checkCrashState checks every key of the crash child against the history
// it wrote: acked is the last operation known acknowledged. A key's answer
// must be its latest acknowledged operation's or that of a later one that
// may have run before the kill (up to the child's next report).
func checkCrashState(t *testing.T, s *Store, acked int) {
	t.Helper()
	for k := range crashKeys {
		last := acked - (acked-k)%crashKeys // latest acknowledged op on k
		if last < 0 {
			continue
		}
		got, err := get(t, s, enginetest.Key(k))
		ok := false
		for i := last; i <= acked+50 && !ok; i += crashKeys {
			if crashIsRemove(i) {
				ok = wire.StatusOf(err) == wire.StatusNotFound
			} else {
				ok = err == nil && bytes.Equal(got, crashValue(i))
			}
		}
		if !ok {
			t.Fatalf("key %d after SIGKILL (last acknowledged op %d, remove %v): %d bytes, %v; want its latest acknowledged state or a later one",
				k, last, crashIsRemove(last), len(got), err)
		}
	}
}
