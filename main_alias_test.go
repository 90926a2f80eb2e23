package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMistypedAliasWithArgumentsNamesTheAlias: a symlink whose name is a
// typo of a dfkv alias (dfkv-clt for dfkv-ctl), run with a positional
// argument first (`dfkv-clt get key`), is blamed on its name, listing the
// valid ones, as it is without arguments; the argument is not reported
// as an unknown role.
func TestMistypedAliasWithArgumentsNamesTheAlias(t *testing.T) {
	code, out, errs := runIn("/usr/local/bin/dfkv-clt", "get", "some-key")
	if code != 2 || !strings.Contains(errs, "dfkv-clt") || strings.Contains(errs, `unknown role "get"`) {
		t.Errorf("dfkv-clt get some-key: exit %d\nstdout %q\nstderr %q\nwant exit 2 naming the alias dfkv-clt and the valid names", code, out, errs)
	}
}

// TestSmokeBadTLSFileIsAConfigurationError: smoke exits 1 when the work
// failed (a cluster that does not answer) and 2 for usage and
// configuration: a client.tls_ca file that is missing or holds no
// certificate is configuration.
func TestSmokeBadTLSFileIsAConfigurationError(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ca := range []string{filepath.Join(t.TempDir(), "missing.pem"), notPEM} {
		code, out, errs := runIn("dfkv", "smoke", "--members", "127.0.0.1:1", "--tls", "--tls-ca", ca)
		if code != 2 {
			t.Errorf("smoke --tls --tls-ca %s: exit %d, want 2 (configuration)\nstdout %q\nstderr %q", ca, code, out, errs)
		}
	}
}
