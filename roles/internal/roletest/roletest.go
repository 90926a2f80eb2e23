// Package roletest runs dfkv roles in the test's own process: a whole
// node (configuration, engine, listener) on a loopback port, and a role's
// command with the exit status and both outputs main.go would give. The
// ctl, smoke and bench tests share it.
package roletest

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

// StartNode runs a node on a free loopback port with a 256 MiB slab disk
// in a temporary directory and no HTTP listener; extra flags (by flag
// name, as config.LoadFrom takes them) are added or override those. It
// returns the node's address and a stop function, also run at cleanup.
func StartNode(t testing.TB, extra map[string][]string) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string][]string{
		"disks":               {filepath.Join(t.TempDir(), "d0")},
		"disk-capacity-bytes": {"256MiB"},
		"http-listen":         {""},
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
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node stopped with %v", err)
		}
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// Run runs `dfkv NAME args…` for cmd (whose Name is NAME) with stdin, and
// returns the exit status and both outputs as main.go would print them.
func Run(t testing.TB, cmd *cli.Command, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	app := &cli.App{
		Name:      "dfkv",
		Commands:  []*cli.Command{cmd},
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
	if err := app.Run(append([]string{"dfkv", cmd.Name}, args...)); err != nil && code == 0 {
		fmt.Fprintln(&errb, err)
		code = 2
	}
	return code, out.String(), errb.String()
}
