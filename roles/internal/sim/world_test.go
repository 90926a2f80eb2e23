package sim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// pipe opens a connection from host "a" to a listener on host "b".
func pipe(t *testing.T, n *Net) (client, server io.ReadWriteCloser) {
	t.Helper()
	ln, err := n.Listen("b", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	c, err := n.Dialer("a").DialContext(context.Background(), "tcp", "b:1")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func TestNetDeliversInOrderAfterALatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNet(1)
		c, s := pipe(t, n)
		start := time.Now()
		for _, p := range []string{"one ", "two ", "three"} {
			if _, err := c.Write([]byte(p)); err != nil {
				t.Fatal(err)
			}
		}
		got := make([]byte, len("one two three"))
		if _, err := io.ReadFull(s, got); err != nil {
			t.Fatal(err)
		}
		if string(got) != "one two three" {
			t.Fatalf("read %q", got)
		}
		if d := time.Since(start); d < n.latency[0] || d > 3*n.latency[1] {
			t.Fatalf("delivered after %s, want within the latency range %v", d, n.latency)
		}
		_ = c.Close()
		if _, err := s.Read(got); err != io.EOF {
			t.Fatalf("read after the peer closed: %v, want EOF", err)
		}
		_ = s.Close()
	})
}

func TestNetPartitionHoldsBytesUntilItHeals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNet(2)
		c, s := pipe(t, n)
		n.Partition("a", "b", true)
		if _, err := c.Write([]byte("held")); err != nil {
			t.Fatal(err) // the sender cannot tell
		}
		got := make(chan string, 1)
		go func() {
			b := make([]byte, 4)
			_, _ = io.ReadFull(s, b)
			got <- string(b)
		}()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case g := <-got:
			t.Fatalf("read %q through a partition", g)
		default:
		}
		n.Partition("a", "b", false)
		if g := <-got; g != "held" {
			t.Fatalf("after the heal: %q", g)
		}
		// A dial into a partition hangs until its context ends.
		n.Partition("a", "b", true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		began := time.Now()
		if _, err := n.Dialer("a").DialContext(ctx, "tcp", "b:1"); err == nil || time.Since(began) < time.Second {
			t.Fatalf("dial into a partition: %v after %s", err, time.Since(began))
		}
		_ = c.Close()
		_ = s.Close()
	})
}

func TestNetResetAndDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNet(3)
		c, s := pipe(t, n)
		conn := c.(*halfConn)
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		began := time.Now()
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(began) < time.Second {
			t.Fatalf("read past the deadline: %v after %s", err, time.Since(began))
		}
		_ = conn.SetReadDeadline(time.Time{})
		n.Reset("b")
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read after a reset: %v", err)
		}
		if _, err := n.Dialer("a").DialContext(context.Background(), "tcp", "b:2"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial to a port nobody listens on: %v", err)
		}
		_ = c.Close()
		_ = s.Close()
	})
}

func TestDiskPowerCutUndoesUnsyncedWrites(t *testing.T) {
	for _, torn := range []bool{false, true} {
		d := NewDisk(4)
		name := filepath.Join(t.TempDir(), "f")
		f, err := d.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("synced.."), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("LOSTLOST"), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("tail"), 8); err != nil {
			t.Fatal(err)
		}
		d.Crash()
		if _, err := f.WriteAt([]byte("dead"), 0); !errors.Is(err, syscall.EIO) {
			t.Fatalf("a write after the crash: %v, want EIO", err)
		}
		if err := d.PowerCut(torn); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		want := "synced.."
		if torn {
			want = "LOSTed.." // the first unsynced write kept its first half
		}
		if string(got) != want {
			t.Fatalf("torn %v: after the power cut the file holds %q, want %q", torn, got, want)
		}
		_ = f.Close()
	}
}

func TestDiskFaultsAreChosenBySeed(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f") // the file's name is part of the choice
	count := func(seed uint64) (failed []int) {
		d := NewDisk(seed)
		f, err := d.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		d.SetFaults(Faults{WriteENOSPC: 0.3})
		for i := 0; i < 200; i++ {
			// Same moment for all (no bubble): the length tells them apart.
			if _, err := f.WriteAt(bytes.Repeat([]byte{1}, i+1), 0); errors.Is(err, syscall.ENOSPC) {
				failed = append(failed, i)
			}
		}
		return failed
	}
	synctest.Test(t, func(t *testing.T) {
		a, b := count(5), count(5)
		if len(a) < 30 || len(a) > 90 {
			t.Fatalf("%d of 200 writes failed at a 30%% share", len(a))
		}
		if !slices.Equal(a, b) {
			t.Fatalf("the same seed failed different writes: %v and %v", a, b)
		}
		if slices.Equal(a, count(6)) {
			t.Fatal("another seed failed the same writes")
		}
	})
}
