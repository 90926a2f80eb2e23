package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/dfkv/dfkv/rdma"
)

// unknownEnv returns a warning for each DFKV_* variable in environ (as
// os.Environ gives it) that neither the table nor otherEnv knows, as etcd's
// verifyEnv does for ETCD_*: a mistyped DFKV_LISTEN would otherwise be
// ignored without a word. Warnings come out sorted, one per variable.
func unknownEnv(environ []string) []string {
	known := make(map[string]bool, len(settings)+len(otherEnv))
	for i := range settings {
		known[settings[i].env] = true
		if settings[i].oldEnv != "" {
			known[settings[i].oldEnv] = true
		}
	}
	for _, name := range otherEnv {
		known[name] = true
	}
	for _, name := range rdmaEnv {
		known[name] = true
	}
	notBuilt := make(map[string]bool, len(notBuiltEnv))
	for _, name := range notBuiltEnv {
		notBuilt[name] = true
	}
	var names []string
	seen := make(map[string]bool)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "DFKV_") || strings.HasPrefix(name, testEnvPrefix) || known[name] || seen[name] {
			continue
		}
		seen[name] = true
		names = append(names, name)
	}
	sort.Strings(names)
	warnings := make([]string, 0, len(names))
	for _, name := range names {
		if notBuilt[name] {
			warnings = append(warnings, fmt.Sprintf("environment variable %s belongs to a feature this build does not have yet; it is ignored", name))
			continue
		}
		w := fmt.Sprintf("environment variable %s is not a dfkv setting and is ignored", name)
		if hint := suggestEnv(name); hint != "" {
			w += "; did you mean " + hint + "?"
		} else {
			w += "; dfkv.example.toml lists every setting with its env name"
		}
		warnings = append(warnings, w)
	}
	return warnings
}

// suggestEnv returns the setting env names within two typos of name (or
// of a setting's earlier name).
func suggestEnv(name string) string {
	var hits []string
	for i := range settings {
		s := &settings[i]
		if editDistance(s.env, name) <= 2 || (s.oldEnv != "" && editDistance(s.oldEnv, name) <= 2) {
			hits = append(hits, settings[i].env)
		}
	}
	return strings.Join(hits, " or ")
}

// rdmaEnv lists the variables of the RDMA transport. Package rdma reads
// them (rdma.FromEnv) rather than the table: the server role does not
// start the transport yet, and rows would print and accept settings no
// node acts on.
var rdmaEnv = []string{rdma.EnvSwitch, rdma.EnvDevice, rdma.EnvOpTimeout, rdma.EnvBatchOpTimeout}

// rdmaAsked returns why a node asked for the RDMA transport (DFKV_RDMA
// set to a true value, or to something that is not a boolean) cannot
// have it, or nil when it was not asked for. Serving without it would
// mislead (clients set up for RDMA would find TCP), so the node refuses
// to start. The reason is the build's (no "ibverbs" tag: how to build it),
// or the host's (no device: what the verbs library said).
func rdmaAsked(lookup func(string) (string, bool)) error {
	val, ok := lookup(rdma.EnvSwitch)
	if !ok {
		return nil
	}
	on, known := rdma.ParseSwitch(val)
	switch {
	case !known:
		return fmt.Errorf("environment variable %s=%s is not a boolean (1/0, true/false, yes/no, on/off); it asks for the RDMA transport: unset it or set it to 0 to serve over TCP", rdma.EnvSwitch, Echo(val))
	case !on:
		return nil
	}
	s, err := rdma.FromEnv(lookup)
	if err != nil {
		return fmt.Errorf("environment variable %s=%s asks for the RDMA transport, whose settings are wrong: %w", rdma.EnvSwitch, val, err)
	}
	if err := rdma.Check(s.Device); err != nil {
		return fmt.Errorf("environment variable %s=%s asks for the RDMA transport, which cannot run here: %w; unset %s or set it to 0 to serve over TCP", rdma.EnvSwitch, val, err, rdma.EnvSwitch)
	}
	return nil // the node starts it (roles/server)
}
