package config

import (
	"fmt"
	"sort"
	"strings"
)

// unknownEnv returns a warning for each DFKV_* variable in environ (as
// os.Environ gives it) that neither the table nor otherEnv knows, as etcd's
// verifyEnv does for ETCD_*: a mistyped DFKV_LISTEN would otherwise be
// ignored without a word. Warnings come out sorted, one per variable.
func unknownEnv(environ []string) []string {
	known := make(map[string]bool, len(settings)+len(otherEnv))
	for i := range settings {
		known[settings[i].env] = true
	}
	for _, name := range otherEnv {
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
		if !strings.HasPrefix(name, "DFKV_") || known[name] || seen[name] {
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

// suggestEnv returns the setting env names within two typos of name.
func suggestEnv(name string) string {
	var hits []string
	for i := range settings {
		if editDistance(settings[i].env, name) <= 2 {
			hits = append(hits, settings[i].env)
		}
	}
	return strings.Join(hits, " or ")
}
