package config

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestBenchSettingsFromEachLayer: the bench's durations, fractions, switch
// and seed read from a file (in TOML's own types too), the environment
// and flags alike.
func TestBenchSettingsFromEachLayer(t *testing.T) {
	path := writeTOML(t, `
[bench]
workload = "mixed"
duration = "1m30s"
warmup = "0s"
fill = false
mixed_get_ratio = 0.25
shared_prefix = 1
seed = "18446744073709551615"
value_size = 4096
`)
	cfg, r, err := LoadFrom("bench", path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Bench
	if b.Workload != "mixed" || b.Duration != 90*time.Second || b.Warmup != 0 || b.Fill != SwitchOff ||
		b.MixedGetRatio != 0.25 || b.SharedPrefix != 1 || b.Seed != math.MaxUint64 || b.ValueSize != 4096 {
		t.Fatalf("from file: %+v", b)
	}
	if sourceOf(t, r, "bench.fill") != fromFile {
		t.Fatalf("bench.fill from %s", sourceOf(t, r, "bench.fill"))
	}

	env := envOf(map[string]string{"DFKV_BENCH_FILL": "on", "DFKV_BENCH_DURATION": "2m", "DFKV_BENCH_MIXED_GET_RATIO": ".5", "DFKV_BENCH_CONCURRENCY": "4"})
	cfg, _, err = LoadFrom("bench", path, env, map[string][]string{"warmup": {"250ms"}, "c": {"8"}})
	if err != nil {
		t.Fatal(err)
	}
	b = cfg.Bench
	if b.Fill != SwitchOn || b.Duration != 2*time.Minute || b.MixedGetRatio != 0.5 || b.Warmup != 250*time.Millisecond || b.Concurrency != 8 {
		t.Fatalf("env and flags over the file: %+v", b)
	}

	for in, want := range map[string]Switch{"auto": SwitchAuto, "AUTO": SwitchAuto, "1": SwitchOn, "true": SwitchOn, "yes": SwitchOn,
		"on": SwitchOn, "0": SwitchOff, "false": SwitchOff, "No": SwitchOff, "off": SwitchOff} {
		cfg, _, err := LoadFrom("bench", "", envOf(map[string]string{"DFKV_BENCH_FILL": in}), nil)
		if err != nil || cfg.Bench.Fill != want {
			t.Errorf("DFKV_BENCH_FILL=%q: %v, %v; want %v", in, cfg.Bench.Fill, err, want)
		}
	}
	if !SwitchAuto.Or(true) || SwitchAuto.Or(false) || !SwitchOn.Or(false) || SwitchOff.Or(true) {
		t.Error("Switch.Or does not resolve auto to its argument and on/off to themselves")
	}
}

// TestBenchFlags: the bench's flags behind a real command line: the fill
// switch stands alone or takes =value, -c is --concurrency, durations
// take Go's forms as the scripts write them.
func TestBenchFlags(t *testing.T) {
	cfg, r, err := runRole(t, "bench", []string{"--fill", "--ops", "1", "--warmup", "0s", "-c", "4", "--duration", "1200ms"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.Bench; b.Fill != SwitchOn || b.Ops != 1 || b.Warmup != 0 || b.Concurrency != 4 || b.Duration != 1200*time.Millisecond {
		t.Fatalf("bench flags: %+v", b)
	}
	if sourceOf(t, r, "bench.concurrency") != fromFlag {
		t.Fatal("-c is not reported as a flag")
	}
	cfg, _, err = runRole(t, "bench", []string{"--fill=false", "--warmup", "0"}, nil)
	if err != nil || cfg.Bench.Fill != SwitchOff || cfg.Bench.Warmup != 0 {
		t.Fatalf("--fill=false --warmup 0: %+v, %v", cfg.Bench, err)
	}
	cfg, _, err = runRole(t, "bench", []string{"--fill=auto", "--concurrency", "5"}, envOf(map[string]string{"DFKV_BENCH_FILL": "1"}))
	if err != nil || cfg.Bench.Fill != SwitchAuto || cfg.Bench.Concurrency != 5 {
		t.Fatalf("--fill=auto over env: %+v, %v", cfg.Bench, err)
	}
	if _, _, err := runRole(t, "bench", []string{"--fill=maybe"}, nil); err == nil ||
		!strings.Contains(err.Error(), `bench.fill (DFKV_BENCH_FILL) from flag --fill: "maybe" is not auto or a boolean; allowed auto, true or false`) {
		t.Fatalf("--fill=maybe: %v", err)
	}
}

func TestBenchSettingErrors(t *testing.T) {
	f := func(name string, env map[string]string, file string, want string) {
		t.Helper()
		path := ""
		if file != "" {
			path = writeTOML(t, file)
		}
		_, _, err := LoadFrom("bench", path, envOf(env), nil)
		msg := fmt.Sprint(err)
		if path != "" {
			msg = strings.ReplaceAll(msg, path, "PATH")
		}
		if err == nil || !strings.Contains(msg, want) {
			t.Errorf("%s: error %v\nwant one containing %s", name, err, want)
		}
	}
	env := func(k, v string) map[string]string { return map[string]string{k: v} }
	f("workload", env("DFKV_BENCH_WORKLOAD", "scan"), "",
		`bench.workload (DFKV_BENCH_WORKLOAD) from env: "scan" is not a workload; valid workloads are put, get, exist, mixed, prefix`)
	f("protocol", env("DFKV_BENCH_PROTOCOL", "http"), "",
		`bench.protocol (DFKV_BENCH_PROTOCOL) from env: "http" is not a protocol; valid protocols are dfkv, redis, memcache`)
	f("addr", env("DFKV_BENCH_ADDR", "localhost"), "", `bench.addr (DFKV_BENCH_ADDR) from env: "localhost" is not host:port`)
	f("duration without a unit", nil, "[bench]\nduration = 10\n",
		`bench.duration (DFKV_BENCH_DURATION) from file PATH: 10 is not a duration such as 10s, 1m30s or 500ms; allowed 1ms..720h`)
	f("zero duration", env("DFKV_BENCH_DURATION", "0"), "", `"0" is out of range; allowed 1ms..720h`)
	f("negative warm-up", env("DFKV_BENCH_WARMUP", "-1s"), "", `bench.warmup (DFKV_BENCH_WARMUP) from env: "-1s" is out of range; allowed 0s..720h`)
	f("ratio", env("DFKV_BENCH_MIXED_GET_RATIO", "1.5"), "", `"1.5" is out of range; allowed 0..1`)
	f("ratio not a number", env("DFKV_BENCH_SHARED_PREFIX", "NaN"), "", `"NaN" is not a number; allowed 0..1`)
	f("fill of a wrong TOML type", nil, "[bench]\nfill = 1.5\n", `bench.fill (DFKV_BENCH_FILL) from file PATH: 1.5 is a TOML float; want a boolean or "auto"`)
	f("ratio of a wrong TOML type", nil, "[bench]\nshared_prefix = true\n", `true is a TOML boolean; want a number or a string`)
	f("value size", env("DFKV_BENCH_VALUE_SIZE", "0"), "", `bench.value_size (DFKV_BENCH_VALUE_SIZE) from env: "0" is out of range; allowed 1..1GiB`)
	f("keys", env("DFKV_BENCH_KEYS", "0"), "", `"0" is out of range; allowed 1..100000000`)
	f("concurrency", env("DFKV_BENCH_CONCURRENCY", "4097"), "", `"4097" is out of range; allowed 1..4096`)
	f("pages", env("DFKV_BENCH_PAGES_PER_SEQ", "0"), "", `"0" is out of range; allowed 1..4096`)
	f("negative seed", env("DFKV_BENCH_SEED", "-1"), "", `bench.seed (DFKV_BENCH_SEED) from env: "-1" is negative`)
	f("empty key prefix", env("DFKV_BENCH_KEY_PREFIX", ""), "", `"" is empty; allowed 1..200 bytes without spaces or control characters`)
	f("key prefix with a space", env("DFKV_BENCH_KEY_PREFIX", "a b"), "", `"a b" has a space or control character at byte 2 (memcached keys cannot hold them)`)
	f("long key prefix", env("DFKV_BENCH_KEY_PREFIX", strings.Repeat("k", 201)), "", `is 201 bytes long (memcached keys hold at most 250)`)
	if _, _, err := LoadFrom("bench", "", envOf(map[string]string{"DFKV_BENCH_KEY_PREFIX": strings.Repeat("k", 200)}), nil); err != nil {
		t.Errorf("a 200-byte key prefix: %v", err)
	}
}

// TestBenchPrintConfigRoundTrip: bench's printout loads back to the same
// settings, the switch, durations, fractions and a seed past int64 too.
func TestBenchPrintConfigRoundTrip(t *testing.T) {
	for _, flags := range []map[string][]string{
		{"fill": {"true"}, "duration": {"1h30m"}, "warmup": {"0"}, "seed": {"18446744073709551615"}, "mixed-get-ratio": {"0.125"},
			"shared-prefix": {"1"}, "value-size": {"4097"}, "key-prefix": {`k"\`}, "protocol": {"redis"}, "addr": {"[::1]:6379"},
			"sweep": {"value-size=4097,64KiB,1048577"}},
		{"sweep": {"concurrency=1,2,4096"}},
		{"fill": {"off"}, "duration": {"1500ms"}, "warmup": {"2m"}, "seed": {"0"}, "mixed-get-ratio": {"1e-07"}},
		{},
	} {
		got, want, _, printed := roundTrip(t, "bench", flags)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip:\n got %+v\nwant %+v\nprinted:\n%s", got.Bench, want.Bench, printed)
		}
		if len(flags) == 0 {
			for _, line := range []string{`bench.duration = "10s"  # default (DFKV_BENCH_DURATION)`, `bench.fill = "auto"  # default (DFKV_BENCH_FILL)`,
				`bench.mixed_get_ratio = 0.9  # default`, `bench.seed = 1  # default`} {
				if !strings.Contains(printed, line) {
					t.Errorf("print-config lacks %s:\n%s", line, printed)
				}
			}
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", time.Millisecond: "1ms", 90 * time.Second: "1m30s", time.Minute: "1m",
		720 * time.Hour: "720h", time.Hour + time.Minute: "1h1m", time.Hour + time.Second: "1h0m1s", 1500 * time.Millisecond: "1.5s"} {
		got := formatDuration(d)
		if got != want {
			t.Errorf("formatDuration(%v) = %q; want %q", d, got, want)
		}
		if back, err := time.ParseDuration(got); err != nil || back != d {
			t.Errorf("%q reads back as %v, %v", got, back, err)
		}
	}
}

// TestBenchSweep: a sweep reads from each layer into its dimension and
// increasing values, prints back as it reads, and is refused when it
// names another dimension, has one step or too many, values out of their
// setting's range, or values out of order.
func TestBenchSweep(t *testing.T) {
	path := writeTOML(t, "[bench]\nsweep = \"value_size = 4KiB, 64KiB ,1MiB\"\n")
	cfg, r, err := LoadFrom("bench", path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Sweep{Dimension: SweepValueSize, Values: []uint64{4096, 65536, 1 << 20}}
	if !reflect.DeepEqual(cfg.Bench.Sweep, want) || sourceOf(t, r, "bench.sweep") != fromFile {
		t.Fatalf("from file: %+v", cfg.Bench.Sweep)
	}
	if s := cfg.Bench.Sweep.String(); s != "value_size=4KiB,64KiB,1MiB" {
		t.Fatalf("String() = %q", s)
	}
	cfg, _, err = LoadFrom("bench", path, envOf(map[string]string{"DFKV_BENCH_SWEEP": "concurrency=1,4"}), nil)
	if err != nil || !reflect.DeepEqual(cfg.Bench.Sweep, Sweep{Dimension: SweepConcurrency, Values: []uint64{1, 4}}) {
		t.Fatalf("env over file: %+v, %v", cfg.Bench.Sweep, err)
	}
	cfg, _, err = runRole(t, "bench", []string{"--sweep", "Value-Size=1KiB,2KiB"}, envOf(map[string]string{"DFKV_BENCH_SWEEP": "concurrency=1,4"}))
	if err != nil || !reflect.DeepEqual(cfg.Bench.Sweep, Sweep{Dimension: SweepValueSize, Values: []uint64{1024, 2048}}) {
		t.Fatalf("flag over env: %+v, %v", cfg.Bench.Sweep, err)
	}
	cfg, _, err = runRole(t, "bench", []string{"--sweep", ""}, envOf(map[string]string{"DFKV_BENCH_SWEEP": "concurrency=1,4"}))
	if err != nil || cfg.Bench.Sweep.Dimension != "" || cfg.Bench.Sweep.Values != nil {
		t.Fatalf(`--sweep "" does not turn the sweep off: %+v, %v`, cfg.Bench.Sweep, err)
	}

	for in, want := range map[string]string{
		"concurrency":              `"concurrency" has no "="; write dimension=v1,v2,…`,
		"keys=1,2":                 `"keys=1,2" sweeps "keys"; the dimensions are concurrency and value_size`,
		"concurrency=4":            `"concurrency=4" has one value; a sweep takes 2..32`,
		"concurrency=1,,4":         `has an empty value 2`,
		"concurrency=1,x":          `has value 2 "x" that is not a whole number`,
		"value_size=1KiB,1.5MiB":   `has value 2 "1.5MiB" that has a fraction`,
		"concurrency=0,4":          `has concurrency 0, out of range 1..4096`,
		"concurrency=1,8192":       `has concurrency 8192, out of range 1..4096`,
		"value_size=1KiB,2GiB":     `has value_size 2GiB, out of range 1..1GiB`,
		"concurrency=1,16,4,64":    `has 4 after 16; give the values in increasing order`,
		"value_size=64KiB,64KiB":   `has 64KiB after 64KiB; give the values in increasing order`,
		"concurrency=" + steps(33): `has 33 values; a sweep takes at most 32`,
	} {
		_, _, err := LoadFrom("bench", "", envOf(map[string]string{"DFKV_BENCH_SWEEP": in}), nil)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "bench.sweep (DFKV_BENCH_SWEEP) from env: ") {
			t.Errorf("DFKV_BENCH_SWEEP=%q: %v\nwant an error containing %s", in, err, want)
		}
	}
	if _, _, err := LoadFrom("bench", "", envOf(map[string]string{"DFKV_BENCH_SWEEP": "concurrency=" + steps(32)}), nil); err != nil {
		t.Errorf("a sweep of 32 steps: %v", err)
	}
}

// steps is "1,2,…,n".
func steps(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(i + 1)
	}
	return strings.Join(s, ",")
}
