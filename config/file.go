package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// missingFileError is a config file that was named (by --config or
// DFKV_CONFIG) but is not there. It is an error, unlike naming no file at
// all, because a role started with a typo in its config path would otherwise
// run on defaults; it matches errors.Is(err, fs.ErrNotExist).
type missingFileError struct{ path, from string }

func (e *missingFileError) Error() string {
	return fmt.Sprintf("config file %s (from %s): no such file; fix the path, or start from dfkv.example.toml", e.path, e.from)
}

func (e *missingFileError) Unwrap() error { return fs.ErrNotExist }

// readFile decodes the TOML file at path and returns its settings by TOML
// key, still as TOML values. Every key in the file must be a known setting
// (of any role); the values are converted only for the settings the caller's
// role takes, by fromTOML.
func readFile(path, from string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &missingFileError{path: path, from: from}
		}
		return nil, fmt.Errorf("cannot read config file %s (from %s): %w", path, from, err)
	}
	return decodeFile(string(data), path)
}

// decodeFile decodes the TOML text of the configuration file at path.
func decodeFile(data, path string) (map[string]any, error) {
	var doc map[string]any
	md, err := toml.Decode(data, &doc)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			if key, ok := secretOnLine(data, pe.Position.Line); ok {
				// The parser's message quotes what it found, which here
				// is (part of) a secret.
				return nil, fmt.Errorf("config file %s: line %d is not valid TOML (the parser's message is not shown: the file sets %s, a secret, which it could quote); check that line, and write a secret as a quoted string", path, pe.Position.Line, key)
			}
			return nil, fmt.Errorf("config file %s: line %d: %s; fix the TOML syntax", path, pe.Position.Line, pe.Message)
		}
		return nil, fmt.Errorf("cannot decode config file %s: %w", path, err)
	}
	// Decoding into a map marks every key decoded, so md.Undecoded() is
	// always empty here; and decoding into a struct would match keys case-
	// insensitively ("Listen" would pass for "listen"). So the keys the file
	// holds (md.Keys(), in file order) are checked against the table directly.
	if err := checkKeys(path, &md); err != nil {
		return nil, err
	}

	out := make(map[string]any)
	for _, sec := range sections() {
		v, ok := doc[sec]
		if !ok {
			continue
		}
		if _, ok := v.(map[string]any); !ok {
			return nil, fmt.Errorf("config file %s: %s is a TOML %s; it must be the table [%s] (see dfkv.example.toml)", path, sec, tomlType(v), sec)
		}
	}
	for i := range settings {
		s := &settings[i]
		tbl := doc
		if sec := s.section(); sec != "" {
			tbl, _ = doc[sec].(map[string]any)
		}
		if v, ok := tbl[s.leaf()]; ok {
			out[s.key] = v
		}
	}
	return out, nil
}

// checkKeys reports every key of the file that is not a setting or one of
// the tables holding them, naming what is valid instead.
func checkKeys(path string, md *toml.MetaData) error {
	var errs []error
	var reported []toml.Key
	for _, k := range md.Keys() {
		if knownKey(k) || under(k, reported) {
			continue
		}
		reported = append(reported, k)
		errs = append(errs, unknownKey(path, k, md.Type(k...)))
	}
	return errors.Join(errs...)
}

// knownKey reports whether k is a table of settings, a setting, or inside a
// setting (level = {x = 1}: fromTOML then says the value has the wrong type,
// which is closer to the mistake than "unknown key log.level.x").
func knownKey(k toml.Key) bool {
	if s := lookupKey(k[0]); s != nil && s.section() == "" {
		return true
	}
	if !isSection(k[0]) {
		return false
	}
	return len(k) == 1 || lookupKey(k[0]+"."+k[1]) != nil
}

// under reports whether k lies inside a key already reported, so a bad table
// is one error rather than one per key in it.
func under(k toml.Key, reported []toml.Key) bool {
	for _, p := range reported {
		if len(p) < len(k) && strings.Join(k[:len(p)], "\x00") == strings.Join(p, "\x00") {
			return true
		}
	}
	return false
}

func unknownKey(path string, k toml.Key, typ string) error {
	hint := suggestKey(k)
	if len(k) >= 2 && isSection(k[0]) {
		return fmt.Errorf("config file %s: unknown key %s in [%s]: no such setting%s; valid keys in [%s] are %s",
			path, k, k[0], hint, k[0], strings.Join(sectionKeys(k[0]), ", "))
	}
	what, none := "key "+k.String(), "no such setting"
	if typ == "Hash" || typ == "ArrayHash" {
		what, none = "table ["+k.String()+"]", "no such table"
		// Table names are short: allow one edit per three letters, so
		// [sever] and [clinet] find theirs and [tls] is not taken for [mds].
		if sec := Closest(k[0], sections()); len(k) == 1 && sec != "" &&
			editDistance(strings.ToLower(k[0]), sec) <= max(1, len(k[0])/3) {
			hint = " (did you mean [" + sec + "]?)"
		}
	}
	return fmt.Errorf("config file %s: unknown %s: %s%s; valid top-level keys are %s",
		path, what, none, hint, topLevelKeys())
}

// suggestKey names the settings k was probably meant to be: same name in
// another table, different case, or a typo or two away.
func suggestKey(k toml.Key) string {
	leaf := k[len(k)-1]
	full := strings.Join(k, ".")
	var hits []string
	for i := range settings {
		s := &settings[i]
		l, sl := strings.ToLower(leaf), strings.ToLower(s.leaf())
		if strings.EqualFold(s.key, full) || l == sl || (len(leaf) > 3 && editDistance(sl, l) <= 2) ||
			(len(k) >= 2 && strings.EqualFold(s.section(), k[0]) && (strings.HasPrefix(l, sl+"_") || strings.HasPrefix(sl, l+"_"))) {
			hits = append(hits, fmt.Sprintf("%s (%s)", s.key, s.env))
		}
	}
	if len(hits) == 0 {
		return ""
	}
	return " (did you mean " + strings.Join(hits, " or ") + "?)"
}

func sectionKeys(sec string) []string {
	var out []string
	for i := range settings {
		if settings[i].section() == sec {
			out = append(out, settings[i].leaf())
		}
	}
	return out
}

func topLevelKeys() string {
	var keys []string
	for i := range settings {
		if settings[i].section() == "" {
			keys = append(keys, settings[i].key)
		}
	}
	for _, sec := range sections() {
		keys = append(keys, "["+sec+"]")
	}
	return strings.Join(keys, ", ")
}

// secretOnLine reports whether the parser's message about line (1-based)
// of a TOML text could quote a secret, and which setting's: then it must
// not be echoed. The key may come in any form TOML allows, or nearly:
// bare under its table, dotted (client.token), quoted, spaced
// (server . mds_token), inside an inline table, or in another case
// (Token, which is not the setting, but what follows it is a token all
// the same). A value can also run over several lines (an array), whose
// later lines name no key and may hold an "=" of their own (a comment, a
// quoted element): rather than guess which key a line belongs to, any
// secret set anywhere in the text counts, the reported line's first.
func secretOnLine(text string, line int) (string, bool) {
	lines := strings.Split(text, "\n")
	if line < 1 || line > len(lines) {
		return "", false
	}
	if key, ok := secretKeyIn(lines[line-1]); ok {
		return key, true
	}
	for _, l := range lines {
		if key, ok := secretKeyIn(l); ok {
			return key, true
		}
	}
	return "", false
}

// secretKeyIn returns the secret setting a key assigned on line names.
func secretKeyIn(line string) (string, bool) {
	for _, m := range tomlKeyOnLine.FindAllStringSubmatch(line, -1) {
		for j := range settings {
			s := &settings[j]
			if _, name, _ := strings.Cut(s.key, "."); s.secret() && strings.EqualFold(name, m[1]) {
				return s.key, true
			}
		}
	}
	return "", false
}

var tomlKeyOnLine = regexp.MustCompile(`["']?([A-Za-z0-9_-]+)["']?\s*=`)

// fromTOML turns a file value into set's input, and a display of it for
// errors. Scalars may be TOML strings or integers ("64MiB" or 67108864),
// and also floats where the setting is a number with a fraction, and
// booleans where it is a switch or 0/1; lists must be arrays of strings.
func fromTOML(s *setting, v any) (vals []string, raw string, err error) {
	if s.value.list() {
		arr, ok := v.([]any)
		if !ok {
			return nil, tomlDisplay(v), fmt.Errorf("is a TOML %s; want an array of strings", tomlType(v))
		}
		vals = make([]string, len(arr))
		for i, e := range arr {
			str, ok := e.(string)
			if !ok {
				return nil, tomlDisplay(v), fmt.Errorf("has element %d that is a TOML %s; want an array of strings", i+1, tomlType(e))
			}
			vals[i] = str
		}
		return vals, echoList(vals), nil
	}
	switch x := v.(type) {
	case string:
		return []string{x}, Echo(x), nil
	case int64:
		n := strconv.FormatInt(x, 10)
		return []string{n}, n, nil
	case float64:
		if _, ok := s.value.(floatValue); ok {
			f := strconv.FormatFloat(x, 'g', -1, 64)
			return []string{f}, f, nil
		}
	case bool:
		switch s.value.(type) {
		case switchValue, onOffValue:
			b := strconv.FormatBool(x)
			return []string{b}, b, nil
		}
	}
	switch s.value.(type) {
	case floatValue:
		return nil, tomlDisplay(v), fmt.Errorf("is a TOML %s; want a number or a string", tomlType(v))
	case switchValue:
		return nil, tomlDisplay(v), fmt.Errorf("is a TOML %s; want a boolean or \"auto\"", tomlType(v))
	}
	return nil, tomlDisplay(v), fmt.Errorf("is a TOML %s; want a string or an integer", tomlType(v))
}

func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "table"
	case []map[string]any:
		return "array of tables"
	}
	return "datetime"
}

func tomlDisplay(v any) string {
	switch x := v.(type) {
	case string:
		return Echo(x)
	case map[string]any:
		return "{…}"
	case []map[string]any:
		return "[{…}]"
	}
	return clip(fmt.Sprint(v))
}

// Closest returns the name in names nearest to typed, at most two edits
// away (case ignored), or "": the "did you mean" of a mistyped flag.
func Closest(typed string, names []string) string {
	best, bestDist := "", 3
	for _, n := range names {
		if d := editDistance(strings.ToLower(typed), strings.ToLower(n)); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, for "did you mean".
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
