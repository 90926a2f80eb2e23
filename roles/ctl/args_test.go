package ctl

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestStatsWithNoMembers: `ctl members`, `stats` and `info` asked of an
// MDS whose group has no node (a typo in --group, every node gone) fail,
// so a script or probe does not read an empty cluster as healthy.
func TestStatsWithNoMembers(t *testing.T) {
	ctrl := startMDS(t, map[string][]string{"db-path": {filepath.Join(t.TempDir(), "mds.db")}})
	node := startNode(t, map[string][]string{"mds": {ctrl}})
	memberRow(t, ctrl, node) // the node is registered in group "default"
	for _, args := range [][]string{{"members"}, {"stats"}, {"stats", "--json"}, {"info"}} {
		code, out, errs := runCtl(t, "", append([]string{"--mds", ctrl, "--group", "defualt"}, args...)...)
		if code == 0 {
			t.Errorf("ctl --group defualt %q (a group without nodes): exit 0\nstdout %q\nstderr %q", args, out, errs)
		}
	}
}

// TestLogLevelInfoHonoured: ctl logs errors only by default, but a
// log.level given, info as much as warn, is honoured: both show the
// client's WARN about backing off from an unreachable node.
func TestLogLevelInfoHonoured(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	_, _, warnErrs := runCtl(t, "", "--members", dead, "--log-level", "warn", "get", "k")
	_, _, infoErrs := runCtl(t, "", "--members", dead, "--log-level", "info", "get", "k")
	if strings.Contains(warnErrs, "level=WARN") && !strings.Contains(infoErrs, "level=WARN") {
		t.Fatalf("--log-level warn logs:\n%s--log-level info logs:\n%s", warnErrs, infoErrs)
	}
}

// TestDashKeyAfterDoubleDash: a key that looks like a ctl option, given
// after "--" (the usual way to say "not an option"), is a key.
func TestDashKeyAfterDoubleDash(t *testing.T) {
	members := "--members=" + startNode(t, nil)
	if code, _, errs := runCtl(t, "v", members, "put", "--", "-k"); code != 0 {
		t.Fatalf("put -- -k: exit %d %s", code, errs)
	}
	code, out, errs := runCtl(t, "v", members, "put", "--", "--config")
	if code != 0 {
		t.Fatalf("put -- --config (a key): exit %d stdout %q stderr %q", code, out, errs)
	}
}
