package bench

import (
	"strings"
	"testing"

	"github.com/dfkv/dfkv/config"
)

// TestBenchRefusesFlagsTheRunIgnores: a flag typed for this run that the
// workload or the sweep does not use is refused, as a dfkv client flag
// typed for a redis run is (peerIgnores): otherwise the figures would be
// taken for what it asked. --mixed-get-ratio outside mixed, --keys with
// prefix (it stores sequences x pages), the prefix settings outside
// prefix, and the very setting a sweep varies (-c 8 with --sweep
// concurrency=..., the run never uses 8).
func TestBenchRefusesFlagsTheRunIgnores(t *testing.T) {
	load := func(flags map[string][]string) error {
		t.Helper()
		cfg, res, err := config.LoadFrom("bench", "", nil, flags)
		if err != nil {
			t.Fatalf("%v: %v", flags, err)
		}
		_, _, err = optionsFrom(cfg, res, "", "")
		return err
	}
	for _, c := range []struct {
		name  string
		flags map[string][]string
	}{
		{"--mixed-get-ratio with --workload get", map[string][]string{"workload": {"get"}, "mixed-get-ratio": {"0.2"}}},
		{"--keys with --workload prefix", map[string][]string{"workload": {"prefix"}, "keys": {"100000"}}},
		{"--sequences with --workload put", map[string][]string{"workload": {"put"}, "sequences": {"5"}}},
		{"--pages-per-seq with --workload get", map[string][]string{"workload": {"get"}, "pages-per-seq": {"3"}}},
		{"--shared-prefix with --workload exist", map[string][]string{"workload": {"exist"}, "shared-prefix": {"0.9"}}},
		{"--concurrency with --sweep concurrency=", map[string][]string{"sweep": {"concurrency=1,2"}, "concurrency": {"8"}}},
		{"--value-size with --sweep value_size=", map[string][]string{"sweep": {"value_size=4KiB,8KiB"}, "value-size": {"4KiB"}}},
	} {
		if err := load(c.flags); err == nil {
			t.Errorf("%s: accepted, and the run ignores it; want it refused naming the flag", c.name)
		}
	}
	// What the run does use is not refused.
	for _, flags := range []map[string][]string{
		{"workload": {"mixed"}, "mixed-get-ratio": {"0.2"}},
		{"workload": {"prefix"}, "sequences": {"8"}, "pages-per-seq": {"4"}, "shared-prefix": {"0.25"}},
		{"workload": {"get"}, "keys": {"10"}},
	} {
		if err := load(flags); err != nil {
			t.Errorf("%v: refused: %v", flags, err)
		}
	}
}

// TestBenchOpsAndTypedDurationBothFlags: --ops N --duration 10s typed on
// one command line is the same contradiction as --ops N --duration 9s,
// refused, though 10s equals the default: the default-valued exemption
// is for a config file spelling out every default, not for a typed flag.
func TestBenchOpsAndTypedDurationBothFlags(t *testing.T) {
	cfg, res, err := config.LoadFrom("bench", "", nil, map[string][]string{"ops": {"50"}, "duration": {"10s"}})
	if err != nil {
		t.Fatal(err)
	}
	o, _, err := optionsFrom(cfg, res, "", "")
	if err == nil || !strings.Contains(err.Error(), "both given") {
		t.Fatalf("--ops 50 --duration 10s as flags: ops %d duration %s, err %v; want refused as --ops 50 --duration 9s is", o.Ops, o.Duration, err)
	}
}

// TestBenchEmbeddedWithoutDiskIsNotDescribedAsOneDisk: an embedded store
// without server.disks has no disk, and the report's server line says so,
// rather than "1 disk" (the stand-in engine counted) and RAM bytes set
// against a disk capacity of 0.
func TestBenchEmbeddedWithoutDiskIsNotDescribedAsOneDisk(t *testing.T) {
	res, out := benchJSON(t, 0, "--embedded", "--workload", "put", "--ops", "20", "--warmup", "0", "--value-size", "4KiB", "--keys", "4", "-c", "1")
	if res.Server == nil || len(res.Server.Nodes) != 1 {
		t.Fatalf("server section: %+v", res.Server)
	}
	n := res.Server.Nodes[0]
	if n.Disks != 0 {
		t.Errorf("embedded store without a disk described with %d disk(s): %+v", n.Disks, n)
	}
	if strings.Contains(out, " of 0 B used") {
		t.Errorf("server line sets used bytes against a capacity of 0:\n%s", out)
	}
}
