package config

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/wire"
)

// TestEcho: a value of up to 128 bytes is quoted exactly as before; a
// longer one is cut to its first 64 bytes, never inside a character, and
// says how long it was.
func TestEcho(t *testing.T) {
	for _, s := range []string{"", "abc", "a\"b\x00", strings.Repeat("x", echoWhole)} {
		if got := Echo(s); got != strconv.Quote(s) {
			t.Errorf("Echo of a %d-byte value = %s, want %s", len(s), got, strconv.Quote(s))
		}
	}
	if got, want := Echo(strings.Repeat("x", echoWhole+1)), `"`+strings.Repeat("x", 64)+`"… (129 bytes)`; got != want {
		t.Errorf("Echo of 129 bytes = %s, want %s", got, want)
	}
	// "é" is two bytes: 63 x's and then "é" would be cut in its middle at
	// byte 64, so the cut comes before it.
	s := strings.Repeat("x", 63) + strings.Repeat("é", 100)
	if got, want := Echo(s), `"`+strings.Repeat("x", 63)+`"… (263 bytes)`; got != want {
		t.Errorf("Echo cut inside a character: %s, want %s", got, want)
	}
	if got := clip(strings.Repeat("1", 200)); got != strings.Repeat("1", 64)+"… (200 bytes)" {
		t.Errorf("clip of 200 bytes = %s", got)
	}
	if got, want := echoList([]string{"/a", "/b"}), `["/a", "/b"]`; got != want {
		t.Errorf("echoList of a short list = %s, want %s", got, want)
	}
	long := make([]string, 1000)
	for i := range long {
		long[i] = "/disk/" + strconv.Itoa(i)
	}
	if got := echoList(long); len(got) > 200 || !strings.HasPrefix(got, `["/disk/0", "/disk/1", `) || !strings.HasSuffix(got, "…] (1000 elements)") {
		t.Errorf("echoList of 1,000 elements = %s", got)
	}
}

// TestLongValuesEchoCapped: an error about a huge value, from any layer,
// repeats 64 bytes of it and its length, not the whole value.
func TestLongValuesEchoCapped(t *testing.T) {
	huge := strings.Repeat("n", 70000)
	head := `"` + strings.Repeat("n", 64) + `"… (70000 bytes)`
	for name, load := range map[string]func() error{
		"flag": func() error {
			_, _, err := LoadFrom("ctl", "", nil, map[string][]string{"namespace": {huge}})
			return err
		},
		"env": func() error {
			_, _, err := LoadFrom("ctl", "", envOf(map[string]string{"DFKV_CLIENT_NAMESPACE": huge}), nil)
			return err
		},
		"file": func() error {
			_, _, err := LoadFrom("ctl", writeTOML(t, "[client]\nnamespace = \""+huge+"\"\n"), nil, nil)
			return err
		},
		"list element": func() error {
			_, _, err := LoadFrom("ctl", "", nil, map[string][]string{"members": {"a:1", huge}})
			return err
		},
		"size": func() error {
			_, _, err := LoadFrom("server", "", envOf(map[string]string{"DFKV_SERVER_MAX_BLOCK_BYTES": "1" + huge}), nil)
			return err
		},
	} {
		err := load()
		if err == nil {
			t.Fatalf("%s: a 70,000-byte value loaded", name)
		}
		if msg := err.Error(); len(msg) > 600 || !strings.Contains(msg, strings.TrimPrefix(head, `"`)) {
			t.Errorf("%s: error of %d bytes, want one under 600 echoing %s:\n%.800s", name, len(msg), head, msg)
		}
	}
}

// TestNamespaceLimitIsTheLibrarys: the tools take every namespace the client
// library takes (wire.MaxNamespaceBytes), and refuse the first one it does.
func TestNamespaceLimitIsTheLibrarys(t *testing.T) {
	most := strings.Repeat("n", wire.MaxNamespaceBytes)
	cfg, _, err := LoadFrom("ctl", "", nil, map[string][]string{"namespace": {most}})
	if err != nil || cfg.Client.Namespace != most {
		t.Fatalf("a %d-byte namespace: %v", len(most), err)
	}
	if _, err := wire.NewKeyMapper([]byte(most)); err != nil {
		t.Fatalf("the library refuses a %d-byte namespace: %v", len(most), err)
	}
	over := most + "n"
	if _, _, err := LoadFrom("ctl", "", nil, map[string][]string{"namespace": {over}}); err == nil || !strings.Contains(err.Error(), "is 65537 bytes long; allowed 1..65536 bytes") {
		t.Fatalf("a %d-byte namespace: %v; want refused with the limit", len(over), err)
	}
	if _, err := wire.NewKeyMapper([]byte(over)); !errors.Is(err, wire.StatusInvalid) {
		t.Fatalf("the library takes a %d-byte namespace: %v", len(over), err)
	}
}
