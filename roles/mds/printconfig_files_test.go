package mds

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/urfave/cli/v2"
)

// runPrintConfig runs `dfkv mds ARGS --print-config` in-process and
// returns its exit status.
func runPrintConfig(t *testing.T, args ...string) int {
	t.Helper()
	var out, errb bytes.Buffer
	app := &cli.App{Name: "dfkv", Writer: &out, ErrWriter: &errb, Commands: []*cli.Command{Command()},
		ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run(append(append([]string{"dfkv", "mds"}, args...), "--print-config"))
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

// --print-config checks the files the configuration names, as the start
// would: a missing TLS pair or HTTP token file is a configuration error
// (exit 2), not a start that fails later (exit 1).
func TestPrintConfigChecksNamedFiles(t *testing.T) {
	dir := t.TempDir()
	missing := func(name string) string { return filepath.Join(dir, name) }
	for _, args := range [][]string{
		{"--tls-cert", missing("cert.pem"), "--tls-key", missing("key.pem")},
		{"--http-token-file", missing("token")},
	} {
		if code := runPrintConfig(t, args...); code != 2 {
			t.Errorf("%v --print-config: exit %d; want 2 (the file does not exist)", args, code)
		}
	}
}
