package config

import (
	"os"
	"path/filepath"
	"testing"
)

// envOf returns a lookup over m, standing in for os.LookupEnv.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// writeTOML writes body to a fresh file and returns its path.
func writeTOML(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dfkv.toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// sourceOf returns the layer key's value came from.
func sourceOf(t *testing.T, r *Resolved, key string) string {
	t.Helper()
	for _, rv := range r.values {
		if rv.s.key == key {
			return rv.src.kind
		}
	}
	t.Fatalf("role %s has no setting %s", r.role, key)
	return ""
}

// mustDefaults is the Config every role starts from.
func mustDefaults(t *testing.T) *Config {
	t.Helper()
	cfg, _, err := LoadFrom("server", "", nil, nil)
	if err != nil {
		t.Fatalf("defaults do not load: %v", err)
	}
	return cfg
}
