package server

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/urfave/cli/v2"
)

// runPrintConfig runs `dfkv server ARGS --print-config` in-process and
// returns its exit status.
func runPrintConfig(t *testing.T, args ...string) int {
	t.Helper()
	var out, errb bytes.Buffer
	app := &cli.App{Name: "dfkv", Writer: &out, ErrWriter: &errb, Commands: []*cli.Command{Command()},
		ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run(append(append([]string{"dfkv", "server"}, args...), "--print-config"))
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

// --print-config checks server.http_token_file and server.mds_tls_ca as
// it checks the quotas, credentials and TLS files: a missing one is a
// configuration error (exit 2), not a start that fails later (the MDS CA
// only after the node has opened its disks and is listening).
func TestPrintConfigChecksTokenAndMDSCAFiles(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--http-token-file", filepath.Join(dir, "token")},
		{"--mds-tls-ca", filepath.Join(dir, "mds-ca.pem"), "--mds", "10.0.0.1:7700", "--advertise-addr", "10.0.0.2:7600"},
	} {
		if code := runPrintConfig(t, args...); code != 2 {
			t.Errorf("%v --print-config: exit %d; want 2 (the file does not exist)", args, code)
		}
	}
}
