package config

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

const examplePath = "../dfkv.example.toml"

// TestExampleTOMLComplete: dfkv.example.toml has every setting of the table
// and nothing else, so the file can promise every setting, commented, with
// its env name and default.
func TestExampleTOMLComplete(t *testing.T) {
	data, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	md, err := toml.Decode(string(data), &doc)
	if err != nil {
		t.Fatalf("%s: %v", examplePath, err)
	}
	inFile := make(map[string]bool)
	for _, k := range md.Keys() {
		if len(k) == 1 && isSection(k[0]) {
			continue // a table header
		}
		inFile[strings.Join(k, ".")] = true
	}
	for i := range settings {
		s := &settings[i]
		if !inFile[s.key] {
			t.Errorf("%s lacks setting %s (%s)", examplePath, s.key, s.env)
		}
		delete(inFile, s.key)
	}
	for key := range inFile {
		t.Errorf("%s has key %s, which is not in the settings table", examplePath, key)
	}

	// Each setting's comment names its env variable and flag.
	text := string(data)
	for i := range settings {
		s := &settings[i]
		if !strings.Contains(text, "env "+s.env+" ") {
			t.Errorf("%s does not name env %s for %s", examplePath, s.env, s.key)
		}
		if !strings.Contains(text, "flag --"+s.flag+" ") {
			t.Errorf("%s does not name flag --%s for %s", examplePath, s.flag, s.key)
		}
	}
}

// TestExampleTOMLLoads: the example loads as-is for every role and gives the
// defaults, so it never teaches a value the code does not use.
func TestExampleTOMLLoads(t *testing.T) {
	want := mustDefaults(t)
	for _, rn := range roleNames {
		cfg, r, err := LoadFrom(rn.name, examplePath, nil, nil)
		if err != nil {
			t.Fatalf("%s: %s does not load: %v", rn.name, examplePath, err)
		}
		if !reflect.DeepEqual(cfg, want) {
			t.Errorf("%s: %s gives\n%+v\nwant the defaults\n%+v", rn.name, examplePath, cfg, want)
		}
		for _, rv := range r.values {
			if rv.src.kind != fromFile {
				t.Errorf("%s: %s came from %s; the example should set it", rn.name, rv.s.key, rv.src.kind)
			}
		}
	}
}
