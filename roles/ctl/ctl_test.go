package ctl

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/server"
)

// startNode runs a whole dfkv node (config, file engine, listener)
// in-process, with the extra flags given, and returns its address.
func startNode(t *testing.T, extra map[string][]string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string][]string{
		"disk":          {filepath.Join(t.TempDir(), "d0")},
		"disk-capacity": {"256MiB"},
		"store-engine":  {"file"},
		"http-listen":   {""},
	}
	maps.Copy(flags, extra)
	cfg, _, err := config.LoadFrom("server", "", nil, flags)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- server.Run(ctx, cfg, server.Deps{Listener: ln, Ready: func(*server.Server) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("node did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node stopped with %v", err)
		}
	})
	return ln.Addr().String()
}

// runCtl runs `dfkv ctl args…` in-process with stdin and returns the exit
// status and both outputs, as main.go would print them.
func runCtl(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	app := &cli.App{
		Name:      "dfkv",
		Commands:  []*cli.Command{Command()},
		Reader:    strings.NewReader(stdin),
		Writer:    &out,
		ErrWriter: &errb,
		ExitErrHandler: func(c *cli.Context, err error) {
			if err == nil {
				return
			}
			if ec, ok := err.(cli.ExitCoder); ok {
				if msg := ec.Error(); msg != "" {
					fmt.Fprintln(&errb, msg)
				}
				code = ec.ExitCode()
				return
			}
			fmt.Fprintln(&errb, err)
			code = 1
		},
	}
	if err := app.Run(append([]string{"dfkv", "ctl"}, args...)); err != nil && code == 0 {
		fmt.Fprintln(&errb, err)
		code = 2
	}
	return code, out.String(), errb.String()
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
