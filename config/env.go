package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
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
		if settings[i].oldEnv != "" {
			known[settings[i].oldEnv] = true
		}
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

// notBuiltSwitches are the variables of notBuiltEnv that turn a feature of
// the node on rather than tune it. Set to a true value, one asks a node
// for something this build cannot do, and serving without it would
// mislead (clients set up for RDMA would find TCP), so a node refuses to
// start rather than serve without the RDMA transport it was asked for.
// Client roles (ctl, bench, smoke) and false values get unknownEnv's
// warning only: an engine's environment may carry the variable into a
// shell where an operator runs ctl to look around.
var notBuiltSwitches = []struct{ env, feature string }{
	{"DFKV_RDMA", "the RDMA transport"},
}

// notBuiltAsked returns an error naming each switch of notBuiltSwitches
// set to a true value, or to something that is not a boolean, or nil.
func notBuiltAsked(lookup func(string) (string, bool)) error {
	var errs []error
	for _, sw := range notBuiltSwitches {
		val, ok := lookup(sw.env)
		if !ok {
			continue
		}
		on, known := parseSwitch(val)
		switch {
		case !known:
			errs = append(errs, fmt.Errorf("environment variable %s=%s is not a boolean (1/0, true/false, yes/no, on/off); it asks for %s, which this build does not have (it is not built yet): unset it or set it to 0", sw.env, Echo(val), sw.feature))
		case on:
			errs = append(errs, fmt.Errorf("environment variable %s=%s asks for %s, which this build does not have (it is not built yet): unset %s or set it to 0 to serve over TCP", sw.env, val, sw.feature, sw.env))
		}
	}
	return errors.Join(errs...)
}

// parseSwitch reads an on/off variable: strconv.ParseBool's forms, yes/no,
// on/off, or empty for off.
func parseSwitch(v string) (on, known bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "no", "off":
		return false, true
	case "yes", "on":
		return true, true
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	return b, err == nil
}
