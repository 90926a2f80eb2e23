package config

import (
	"bytes"
	"strings"
	"testing"
)

// TestTokenIsNeverShown: client.token is read from its env, the older
// DFKV_TOKEN and the flag, and neither --print-config, an error about it
// nor a warning about two spellings repeats it.
func TestTokenIsNeverShown(t *testing.T) {
	const tok = "s3cr3t-t0ken-abcdef0123456789"
	for _, c := range []struct {
		name  string
		env   map[string]string
		flags map[string][]string
	}{
		{"env", map[string]string{"DFKV_CLIENT_TOKEN": tok}, nil},
		{"older env", map[string]string{"DFKV_TOKEN": tok}, nil},
		{"flag", nil, map[string][]string{"token": {tok}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, res, err := LoadFrom("ctl", "", envOf(c.env), c.flags)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Client.Token != tok {
				t.Fatalf("token %q", cfg.Client.Token)
			}
			var b bytes.Buffer
			if _, err := res.WriteTo(&b); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(b.String(), tok) || !strings.Contains(b.String(), `client.token = "(secret, 29 bytes)"`) {
				t.Fatalf("print-config shows the token or not that it is set:\n%s", b.String())
			}
		})
	}
	_, res, err := LoadFrom("ctl", "", envOf(map[string]string{"DFKV_CLIENT_TOKEN": tok, "DFKV_TOKEN": tok + "-old"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(res.Warnings(), "\n"); !strings.Contains(w, "DFKV_TOKEN") || strings.Contains(w, tok) {
		t.Fatalf("the two-spellings warning: %q", w)
	}
	for _, bad := range []string{"short", "has a space in it somewhere", strings.Repeat("x", 257), "tab\there-is-long-enough"} {
		_, _, err := LoadFrom("ctl", "", envOf(map[string]string{"DFKV_CLIENT_TOKEN": bad}), nil)
		if err == nil {
			t.Fatalf("token %q accepted", bad)
		}
		if strings.Contains(err.Error(), bad[:5]) || !strings.Contains(err.Error(), "client.token") {
			t.Fatalf("the error repeats the token or does not name the setting: %v", err)
		}
	}
}

// TestCredentialsExcludeSharedMemory: a node that requires credentials
// cannot also hand its arena to shared-memory clients.
func TestCredentialsExcludeSharedMemory(t *testing.T) {
	_, _, err := LoadFrom("server", "", envOf(map[string]string{
		"DFKV_SERVER_CREDENTIALS_FILE": "/etc/dfkv/credentials.toml", "DFKV_SERVER_SHM_SOCKET": "/run/dfkv.sock"}), nil)
	if err == nil || !strings.Contains(err.Error(), "server.shm_socket") {
		t.Fatalf("credentials with shared memory: %v", err)
	}
}
