package ctl

import (
	"maps"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/roles/internal/roletest"
)

// startNode runs a whole dfkv node (file engine) in-process, with the
// extra flags given, and returns its address.
func startNode(t *testing.T, extra map[string][]string) string {
	flags := map[string][]string{"store-engine": {"file"}}
	maps.Copy(flags, extra)
	addr, _ := roletest.StartNode(t, flags)
	return addr
}

// runCtl runs `dfkv ctl args…` in-process with stdin and returns the exit
// status and both outputs, as main.go would print them.
func runCtl(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return roletest.Run(t, Command(), stdin, args...)
}

// TestNotFoundNamesKeyAndNamespace: a miss says which key was looked up in
// which namespace (the usual cause is a key stored under another one), in
// hex for a --key-hex key, and still exits 1.
func TestNotFoundNamesKeyAndNamespace(t *testing.T) {
	members := "--members=" + startNode(t, nil)
	if code, _, errs := runCtl(t, "hello", members, "--namespace", "elsewhere", "put", "greeting"); code != 0 {
		t.Fatalf("put: exit %d: %s", code, errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "greeting"}, `dfkv ctl: get "greeting": not found in namespace "dfkv-tools"`},
		{[]string{"exist", "greeting"}, `dfkv ctl: exist "greeting": not found in namespace "dfkv-tools"`},
		{[]string{"rm", "greeting"}, `dfkv ctl: rm "greeting": not found in namespace "dfkv-tools"`},
		{[]string{"--namespace", "elsewhere", "get", "greetings"}, `dfkv ctl: get "greetings": not found in namespace "elsewhere"`},
		{[]string{"--key-hex", "get", "6b00ff"}, `dfkv ctl: get 6b00ff (hex): not found in namespace "dfkv-tools"`},
		{[]string{"--key-hex", "--namespace", "a\x00b", "rm", "00"}, `dfkv ctl: rm 00 (hex): not found in namespace "a\x00b"`},
		{[]string{"--namespace", strings.Repeat("n", 300), "exist", "k\n"},
			`dfkv ctl: exist "k\n": not found in namespace "` + strings.Repeat("n", 64) + `"… (300 bytes)`},
	} {
		code, out, errs := runCtl(t, "", append([]string{members}, c.args...)...)
		if code != 1 || out != "" || errs != c.want+"\n" {
			t.Errorf("ctl %q: exit %d (want 1)\nstdout %q\nstderr %q\nwant   %q", c.args, code, out, errs, c.want+"\n")
		}
	}
	// The key is there, in the namespace it was put in.
	if code, out, errs := runCtl(t, "", members, "--namespace", "elsewhere", "get", "greeting"); code != 0 || out != "hello" {
		t.Fatalf("get in the namespace it was put in: exit %d, %q %s", code, out, errs)
	}
}
