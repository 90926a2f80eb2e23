package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/roles/internal/roletest"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/version"
)

// startNode runs a whole dfkv node in-process (roletest.StartNode) and
// returns its address and a stop function.
func startNode(t *testing.T) (addr string, stop func()) {
	return roletest.StartNode(t, nil)
}

// runBench runs `dfkv bench args…` in-process and returns the exit status
// and both outputs.
func runBench(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return roletest.Run(t, Command(), "", args...)
}

// benchJSON runs bench with --json into a file and decodes it.
func benchJSON(t *testing.T, wantCode int, args ...string) (*Result, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "r.json")
	code, out, errs := runBench(t, append(args, "--json", path)...)
	if code != wantCode {
		t.Fatalf("bench %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, wantCode, out, errs)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("bench %v wrote no JSON: %v\nstdout:\n%s\nstderr:\n%s", args, err, out, errs)
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("bench %v: JSON does not decode: %v\n%s", args, err, b)
	}
	return &res, out
}

// checkClean checks a run that must have succeeded: no error anywhere,
// totals adding up, sane percentiles.
func checkClean(t *testing.T, what string, res *Result, out string, wantOps uint64) {
	t.Helper()
	if !res.OK || res.ErrorCount != 0 || len(res.Errors) != 0 || res.Interrupted {
		t.Fatalf("%s: ok=%v errors=%d %v interrupted=%v samples %q", what, res.OK, res.ErrorCount, res.Errors, res.Interrupted, res.ErrorSamples)
	}
	if strings.Contains(out, "WARNING") {
		t.Fatalf("%s: a clean run printed a warning:\n%s", what, out)
	}
	if wantOps > 0 && res.Totals.Ops != wantOps {
		t.Fatalf("%s: totals.ops %d, want %d", what, res.Totals.Ops, wantOps)
	}
	var seriesOps uint64
	for _, s := range res.Series {
		seriesOps += s.OpsCount
	}
	if len(res.Series) == 0 || seriesOps != res.Totals.Ops {
		t.Fatalf("%s: %d samples adding up to %d ops, want %d", what, len(res.Series), seriesOps, res.Totals.Ops)
	}
	for _, o := range res.Ops {
		l := o.Latency
		if !(l.Min > 0 && l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			t.Fatalf("%s: %s latency percentiles out of order: %+v", what, o.Op, l)
		}
		if len(o.Curve) == 0 {
			t.Fatalf("%s: %s has no percentile curve", what, o.Op)
		}
	}
}

// TestBenchAgainstServer: PUT then GET (and the other workloads) against
// a real node, with exact totals and a well-formed HTML report.
func TestBenchAgainstServer(t *testing.T) {
	addr, _ := startNode(t)
	common := []string{"--members", addr, "--keys", "16", "-c", "4", "--warmup", "0", "--value-size", "64KiB"}

	res, out := benchJSON(t, 0, append(common, "--workload", "put", "--ops", "40")...)
	checkClean(t, "put", res, out, 40)
	if len(res.Ops) != 1 || res.Ops[0].Op != "put" || res.Ops[0].Count != 40 || res.Totals.Bytes != 40*65536 {
		t.Fatalf("put: ops %+v, bytes %d", res.Ops, res.Totals.Bytes)
	}
	if res.Fill != nil {
		t.Fatalf("put filled the key space without --fill: %+v", res.Fill)
	}
	// The node described itself before the measured stage.
	if sv := res.Server; sv == nil || sv.Protocol != "dfkv" || len(sv.Nodes) != 1 {
		t.Fatalf("server section: %+v", sv)
	}
	if n := res.Server.Nodes[0]; n.Addr != addr || n.Error != "" || n.Version != version.Version || n.CPUs != runtime.NumCPU() ||
		n.Engine == "" || n.Disks != 1 || n.CapacityBytes != 256<<20 || n.GoVersion != runtime.Version() {
		t.Fatalf("node description: %+v", n)
	}
	if res.BenchVersion != version.Version || res.BenchCommit == "" || res.BenchCPUs != runtime.NumCPU() {
		t.Fatalf("bench build: %q %q %d", res.BenchVersion, res.BenchCommit, res.BenchCPUs)
	}
	if !strings.Contains(out, "server "+addr+": dfkv "+version.Version) || !strings.Contains(out, "engine "+res.Server.Nodes[0].Engine+", 1 disk, RAM tier off; ") ||
		!strings.Contains(out, "\nbench dfkv "+version.Version) {
		t.Fatalf("table lacks the server or bench line:\n%s", out)
	}

	htmlPath := filepath.Join(t.TempDir(), "r.html")
	res, out = benchJSON(t, 0, append(common, "--workload", "get", "--ops", "40", "--html", htmlPath)...)
	checkClean(t, "get", res, out, 40)
	if res.Fill == nil || res.Fill.Keys != 16 || res.Fill.Errors != 0 {
		t.Fatalf("get: fill %+v, want 16 keys and no error", res.Fill)
	}
	// Described after the fill: the node holds the 16 keys.
	if n := res.Server.Nodes[0]; n.Objects < 16 || n.UsedBytes < 16*65536 || !(n.Fill > 0 && n.Fill < 1) {
		t.Fatalf("get: node after the fill: %+v", n)
	}
	if len(res.Ops) != 1 || res.Ops[0].Op != "get" || res.Ops[0].Bytes != 40*65536 {
		t.Fatalf("get: ops %+v", res.Ops)
	}
	if !strings.Contains(out, "get") || !strings.Contains(out, "p99.9") {
		t.Fatalf("get: table lacks the op row or columns:\n%s", out)
	}
	page, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	// Where the files went is said on stderr; stdout is the table alone.
	jsonPath := filepath.Join(t.TempDir(), "g.json")
	code, stdout, stderr := runBench(t, append(common, "--workload", "get", "--ops", "8", "--json", jsonPath, "--html", htmlPath)...)
	if code != 0 || stderr != "dfkv bench: JSON result written to "+jsonPath+"\ndfkv bench: HTML report written to "+htmlPath+"\n" ||
		strings.Contains(stdout, "written to") || !strings.HasPrefix(stdout, "dfkv bench: workload get") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	// With --json -, stdout is the JSON alone, the table and the HTML's
	// path go to stderr.
	code, stdout, stderr = runBench(t, append(common, "--workload", "get", "--ops", "8", "--json", "-", "--html", htmlPath)...)
	var doc Result
	if err := json.Unmarshal([]byte(stdout), &doc); code != 0 || err != nil || !strings.Contains(stderr, "op ") ||
		!strings.HasSuffix(stderr, "dfkv bench: HTML report written to "+htmlPath+"\n") {
		t.Fatalf("--json -: exit %d, %v\nstdout:\n%s\nstderr:\n%s", code, err, stdout, stderr)
	}
	// With --html -, stdout is the HTML alone, from its first byte.
	code, stdout, stderr = runBench(t, append(common, "--workload", "get", "--ops", "8", "--html", "-")...)
	if code != 0 || !strings.HasPrefix(stdout, "<!DOCTYPE html>") || !strings.Contains(stderr, "op ") {
		t.Fatalf("--html -: exit %d\nstdout begins %.80q\nstderr:\n%s", code, stdout, stderr)
	}
	if n := bytes.Count(page, []byte("<svg")); n != 3 {
		t.Fatalf("HTML report has %d <svg> plots, want 3", n)
	}
	for _, bad := range []string{"<script", "src=", "href=", "@import", "url("} {
		if bytes.Contains(page, []byte(bad)) {
			t.Fatalf("HTML report contains %q: it must not fetch or run anything", bad)
		}
	}
	if !bytes.Contains(page, []byte("<polyline")) || !bytes.Contains(page, []byte("no errors")) {
		t.Fatalf("HTML report lacks plot lines or the no-error note")
	}
	if !bytes.Contains(page, []byte("<td>"+addr)) || !bytes.Contains(page, []byte("<th>RAM tier</th>")) {
		t.Fatalf("HTML report lacks the server table")
	}

	res, out = benchJSON(t, 0, append(common, "--workload", "exist", "--ops", "30", "--value-size", "4KiB")...)
	checkClean(t, "exist", res, out, 30)
	if res.Ops[0].Op != "exist" || res.Totals.Bytes != 0 {
		t.Fatalf("exist: %+v bytes %d", res.Ops, res.Totals.Bytes)
	}

	res, out = benchJSON(t, 0, append(common, "--workload", "mixed", "--ops", "100", "--mixed-get-ratio", "0.5")...)
	checkClean(t, "mixed", res, out, 100)
	if len(res.Ops) != 2 || res.Ops[0].Count+res.Ops[1].Count != 100 {
		t.Fatalf("mixed: %+v", res.Ops)
	}
	checkPerOpSeries(t, "mixed", res, "put", "get")

	// Duration mode: the series covers the measured stage.
	res, out = benchJSON(t, 0, append(common, "--workload", "put", "--duration", "1200ms", "--warmup", "100ms", "--value-size", "4KiB")...)
	checkClean(t, "put --duration", res, out, 0)
	if res.Totals.Seconds < 1.2 || res.Config.DurationS != 1.2 {
		t.Fatalf("put --duration 1200ms measured %.3fs (config %v)", res.Totals.Seconds, res.Config.DurationS)
	}
}

// checkPerOpSeries checks that every sample of the series splits into
// ops, in order, that the split adds up to each operation's count, and
// that the intervals with operations have latencies.
func checkPerOpSeries(t *testing.T, what string, res *Result, ops ...string) {
	t.Helper()
	sums := map[string]uint64{}
	for i, smp := range res.Series {
		if len(smp.PerOp) != len(ops) {
			t.Fatalf("%s: sample %d splits into %+v, want %v", what, i, smp.PerOp, ops)
		}
		for j, ps := range smp.PerOp {
			if ps.Op != ops[j] || (ps.Ops > 0 && !(ps.P50 > 0 && ps.P50 <= ps.P99 && ps.OpsPerS > 0)) {
				t.Fatalf("%s: sample %d op %d: %+v", what, i, j, ps)
			}
			sums[ps.Op] += ps.Ops
		}
	}
	for _, o := range res.Ops {
		if sums[o.Op] != o.Count {
			t.Fatalf("%s: the series holds %d %s, the totals %d", what, sums[o.Op], o.Op, o.Count)
		}
	}
}

// TestBenchPrefix: with half the sequences stored and half of every
// sequence shared, a lookup finds all pages of a stored sequence and the
// shared half of the others: hit rate 0.75, mean prefix 3 of 4 pages.
func TestBenchPrefix(t *testing.T) {
	addr, _ := startNode(t)
	res, out := benchJSON(t, 0, "--members", addr, "--workload", "prefix", "--sequences", "6", "--pages-per-seq", "4",
		"--shared-prefix", "0.5", "--value-size", "4KiB", "-c", "3", "--ops", "12", "--warmup", "0")
	checkClean(t, "prefix", res, out, 12)
	checkPerOpSeries(t, "prefix", res, "exist_prefix", "get_prefix")
	p := res.Prefix
	if p == nil || p.Lookups != 12 || p.SharedPages != 2 || p.CachedSequences != 3 || p.HitRate != 0.75 || p.MeanPrefixPages != 3 {
		t.Fatalf("prefix: %+v", p)
	}
	// 2 shared pages + 2 own pages of each of the 3 stored sequences.
	if res.Fill == nil || res.Fill.Keys != 8 {
		t.Fatalf("prefix: populate stored %+v, want 8 pages", res.Fill)
	}
	if !strings.Contains(out, "hit rate 75.0%") {
		t.Fatalf("prefix: table lacks the hit rate:\n%s", out)
	}
}

// TestBenchErrors: failures are counted, announced, and exit 1.
func TestBenchErrors(t *testing.T) {
	addr, stop := startNode(t)

	// Values of another size than expected are WRONG_SIZE, not a result.
	res, _ := benchJSON(t, 0, "--members", addr, "--workload", "put", "--fill", "--keys", "4", "--value-size", "4KiB", "--ops", "4", "--warmup", "0")
	checkClean(t, "put --fill", res, "", 4)
	res, out := benchJSON(t, 1, "--members", addr, "--workload", "get", "--fill=false", "--keys", "4", "--value-size", "8KiB", "--ops", "10", "--warmup", "0", "-c", "2")
	if res.OK || res.Errors[classWrongSize] != 10 || res.ErrorCount != 10 {
		t.Fatalf("get of 4KiB values as 8KiB: ok=%v errors %v", res.OK, res.Errors)
	}
	if !strings.Contains(out, "WARNING: 10 errors (WRONG_SIZE 10)") {
		t.Fatalf("table does not warn about the errors:\n%s", out)
	}

	stop()
	htmlPath := filepath.Join(t.TempDir(), "err.html")
	res, out = benchJSON(t, 1, "--members", addr, "--workload", "get", "--keys", "4", "--value-size", "4KiB", "--ops", "6", "--warmup", "0", "-c", "2", "--dial-timeout-ms", "500", "--html", htmlPath)
	if page, err := os.ReadFile(htmlPath); err != nil || !bytes.Contains(page, []byte(`class="warn"`)) || bytes.Count(page, []byte("<svg")) != 3 {
		t.Fatalf("HTML report of a failed run lacks the warning or the (empty) plots: %v\n%s", err, page)
	}
	if res.OK || res.Errors["UNAVAILABLE"] != 4+6 || res.ErrorsByPhase["fill"]["UNAVAILABLE"] != 4 || res.Totals.Ops != 0 {
		t.Fatalf("run against a stopped node: ok=%v errors %v by phase %v totals %+v samples %q", res.OK, res.Errors, res.ErrorsByPhase, res.Totals, res.ErrorSamples)
	}
	if !strings.Contains(out, "WARNING: 10 errors (UNAVAILABLE 10)") || !strings.Contains(out, "connection refused") {
		t.Fatalf("table does not warn about the stopped node:\n%s", out)
	}
	if !strings.Contains(out, "fill FAILED: all 4 PUTs failed") || strings.Contains(out, "fill 4 keys in") {
		t.Fatalf("the header reports a fill that stored nothing as done:\n%s", out)
	}
	if len(res.ErrorSamples) != 2 {
		t.Fatalf("want one error sample per phase and class (2), got %q", res.ErrorSamples)
	}
	if n := res.Server.Nodes[0]; !strings.HasPrefix(n.Error, "STATS: ") || n.Version != "" || !strings.Contains(out, "server "+addr+": no description (STATS: ") {
		t.Fatalf("a stopped node's description: %+v\n%s", n, out)
	}

	// The client answers reads of an unreachable node as misses; bench
	// must not report them as a short prefix.
	res, _ = benchJSON(t, 1, "--members", addr, "--workload", "prefix", "--sequences", "2", "--pages-per-seq", "2", "--value-size", "4KiB", "--ops", "4", "--warmup", "0", "-c", "1")
	if res.ErrorsByPhase["run"]["UNAVAILABLE"] != 4 || res.Errors["NOT_FOUND"] != 0 || res.Prefix.Lookups != 0 {
		t.Fatalf("prefix against a stopped node: errors %v, prefix %+v", res.ErrorsByPhase, res.Prefix)
	}
}

// TestBenchPeers drives the in-memory redis and memcached fakes with the
// same workers as dfkv.
func TestBenchPeers(t *testing.T) {
	for _, proto := range []string{"redis", "memcache"} {
		t.Run(proto, func(t *testing.T) {
			addr := startFakePeer(t, proto)
			common := []string{"--protocol", proto, "--addr", addr, "-c", "3", "--warmup", "0", "--value-size", "100KiB"}
			for _, w := range []string{"get", "put", "exist", "mixed", "prefix"} {
				space := []string{"--keys", "8"}
				if w == wPrefix {
					space = []string{"--sequences", "4", "--pages-per-seq", "2"}
				}
				res, out := benchJSON(t, 0, append(append(common, space...), "--workload", w, "--ops", "24")...)
				checkClean(t, proto+" "+w, res, out, 24)
				if res.Config.Protocol != proto || res.Config.Target != addr {
					t.Fatalf("%s: config %+v", w, res.Config)
				}
				if sv := res.Server; sv == nil || sv.Protocol != proto || sv.Addr != addr || sv.Nodes != nil || !strings.Contains(out, "server "+proto+" at "+addr+"\n") {
					t.Fatalf("%s: server section %+v\n%s", w, sv, out)
				}
				if w == "prefix" && res.Prefix.HitRate != 0.75 {
					t.Fatalf("prefix over %s: hit rate %v, want 0.75", proto, res.Prefix.HitRate)
				}
			}
		})
	}
	// A sweep from the command line, against a peer.
	addr := startFakePeer(t, "redis")
	res, out := benchJSON(t, 0, "--protocol", "redis", "--addr", addr, "--workload", "get", "--keys", "8", "--value-size", "1KiB", "--warmup", "0",
		"--ops", "20", "--sweep", "concurrency=1,2")
	if !res.OK || res.Sweep == nil || len(res.Sweep.Steps) != 2 || res.Sweep.Steps[1].Totals.Ops != 20 || !strings.Contains(out, "\nconcurrency ") || !strings.Contains(out, "knee: ") {
		t.Fatalf("sweep over redis: %+v\n%s", res.Sweep, out)
	}

	// A peer that is not there: errors, exit 1.
	res, _ = benchJSON(t, 1, "--protocol", "memcache", "--addr", freeAddr(t), "--workload", "put", "--ops", "3", "--warmup", "0", "-c", "1", "--value-size", "1KiB")
	if res.Errors["UNAVAILABLE"] != 3 {
		t.Fatalf("memcached not running: errors %v", res.Errors)
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestBenchUsageErrors(t *testing.T) {
	f := func(want string, args ...string) {
		t.Helper()
		code, out, errs := runBench(t, args...)
		if code != exitUsage || !strings.Contains(errs, want) {
			t.Fatalf("bench %v: exit %d (want %d), stderr %q (want %q)\nstdout %s", args, code, exitUsage, errs, want, out)
		}
	}
	f(`bench.workload (DFKV_BENCH_WORKLOAD) from flag --workload: "scan" is not a workload; valid workloads are put, get, exist, mixed, prefix`, "--workload", "scan")
	f(`bench.protocol (DFKV_BENCH_PROTOCOL) from flag --protocol: "http" is not a protocol; valid protocols are dfkv, redis, memcache`, "--protocol", "http")
	f("--protocol redis needs --addr host:port", "--protocol", "redis")
	f("--addr is for --protocol redis|memcache", "--addr", "127.0.0.1:6379")
	f(`bench.addr (DFKV_BENCH_ADDR) from flag --addr: "redis" is not host:port`, "--protocol", "redis", "--addr", "redis")
	f(`bench.value_size (DFKV_BENCH_VALUE_SIZE) from flag --value-size: "1.5MiB" has a fraction`, "--value-size", "1.5MiB")
	f(`from flag --value-size: "0" is out of range; allowed 1..1GiB`, "--value-size", "0")
	f("--value-size 128MiB exceeds server.max_block_bytes 64MiB", "--value-size", "128MiB")
	f(`bench.mixed_get_ratio (DFKV_BENCH_MIXED_GET_RATIO) from flag --mixed-get-ratio: "2" is out of range; allowed 0..1`, "--mixed-get-ratio", "2")
	f(`bench.concurrency (DFKV_BENCH_CONCURRENCY) from flag --concurrency: "0" is out of range; allowed 1..4096`, "-c", "0")
	f(`from flag --keys: "0" is out of range; allowed 1..100000000`, "--keys", "0")
	f(`from flag --duration: "0" is out of range; allowed 1ms..720h`, "--duration", "0")
	f(`from flag --duration: "10" is not a duration such as 10s`, "--duration", "10")
	f(`from flag --warmup: "-1s" is out of range; allowed 0s..720h`, "--warmup", "-1s")
	f(`from flag --shared-prefix: "1.5" is out of range; allowed 0..1`, "--shared-prefix", "1.5")
	f(`from flag --pages-per-seq: "4097" is out of range; allowed 1..4096`, "--pages-per-seq", "4097")
	f(`from flag --sequences: "0" is out of range`, "--sequences", "0")
	f("has a space or control character at byte 2", "--key-prefix", "a b")
	f("is 201 bytes long", "--key-prefix", strings.Repeat("k", 201))
	f("DFKV_CLIENT_TIMEOUT_MS", "--timeout-ms", "0")
	f("would both write to stdout", "--json", "-", "--html", "-")
	f("--sweep value size 128MiB exceeds server.max_block_bytes 64MiB", "--sweep", "value_size=1MiB,128MiB")
	f(`bench.sweep (DFKV_BENCH_SWEEP) from flag --sweep: "concurrency=4,1" has 1 after 4; give the values in increasing order`, "--sweep", "concurrency=4,1")
	f("--ops 5 and --duration 1s both given (bench.ops from flag --ops, bench.duration from flag --duration)", "--ops", "5", "--duration", "1s")
	f(`unexpected argument "false" after --fill: give its value after "=", as --fill=false`, "--fill", "false", "--ops", "1")
	f(`bench.fill (DFKV_BENCH_FILL) from flag --fill: "maybe" is not auto or a boolean`, "--fill=maybe")

	// The same settings from the environment: the table reads them all.
	t.Setenv("DFKV_BENCH_WORKLOAD", "scan")
	f(`bench.workload (DFKV_BENCH_WORKLOAD) from env: "scan" is not a workload`)
	t.Setenv("DFKV_BENCH_WORKLOAD", "get")
	t.Setenv("DFKV_BENCH_OPS", "10")
	t.Setenv("DFKV_BENCH_DURATION", "2s")
	f("--ops 10 and --duration 2s both given (bench.ops from env, bench.duration from env)")
	os.Unsetenv("DFKV_BENCH_DURATION") // t.Setenv puts back what was there before the test

	code, out, _ := runBench(t, "--print-config", "--fill", "-c", "3", "--warmup", "0s")
	for _, line := range []string{"client.members = ", `bench.workload = "get"  # env (DFKV_BENCH_WORKLOAD)`, "bench.ops = 10  # env (DFKV_BENCH_OPS)",
		"bench.fill = true  # flag (DFKV_BENCH_FILL)", "bench.concurrency = 3  # flag (DFKV_BENCH_CONCURRENCY)", `bench.warmup = "0s"  # flag`,
		`bench.duration = "10s"  # default (DFKV_BENCH_DURATION)`} {
		if code != 0 || !strings.Contains(out, line) {
			t.Fatalf("--print-config: exit %d, no line %q in\n%s", code, line, out)
		}
	}
}

// TestBenchPeerRefusesDFKVSettings: a peer run (redis, memcached) has
// clients of its own that reach --addr over plain TCP, so a dfkv client
// setting typed on its command line would be ignored: it is refused,
// naming the setting and why. The same settings from a file or the
// environment (shared with every tool) do not stop the run; those that
// would make it measure something else than a dfkv run with them (TLS,
// credentials, shared memory, an embedded store) are warned about.
func TestBenchPeerRefusesDFKVSettings(t *testing.T) {
	addr := freeAddr(t) // nothing listens: a run that starts fails with exit 1, not 2
	f := func(want string, args ...string) {
		t.Helper()
		for _, proto := range []string{"redis", "memcache"} {
			args := append([]string{"--protocol", proto, "--addr", addr, "--ops", "1", "--warmup", "0", "-c", "1"}, args...)
			code, out, errs := runBench(t, args...)
			want := strings.ReplaceAll(want, "PROTO", proto)
			if code != exitUsage || !strings.Contains(errs, want) {
				t.Fatalf("bench %v: exit %d (want %d), stderr %q (want %q)\nstdout %s", args, code, exitUsage, errs, want, out)
			}
		}
	}
	f("--tls (client.tls) is for --protocol dfkv, not PROTO: bench's PROTO client speaks plain TCP", "--tls")
	f("--tls (client.tls) is for --protocol dfkv", "--tls=1")
	f("--tls-server-name (client.tls_server_name) is for --protocol dfkv", "--tls", "--tls-server-name", "x")
	f("--token (client.token) is for --protocol dfkv, not PROTO: bench's PROTO client sends no credentials", "--token", "0123456789abcdef0123")
	// The default list, typed, is still a list typed for a dfkv run.
	f("--members (client.members) is for --protocol dfkv, not PROTO: the run measures the one server at --addr", "--members", "127.0.0.1:7600")
	f("--mds (client.mds) is for --protocol dfkv", "--mds", "127.0.0.1:7700")
	f("--embedded (client.embedded) is for --protocol dfkv", "--embedded")
	f("--shm (client.shm) is for --protocol dfkv", "--shm", "on")
	f("--namespace (client.namespace) is for --protocol dfkv", "--namespace", "n")
	f("--max-block-bytes (server.max_block_bytes) is for --protocol dfkv", "--max-block-bytes", "1MiB")
	// Every one is named, not just the first.
	code, _, errs := runBench(t, "--protocol", "redis", "--addr", addr, "--ops", "1", "--tls", "--members", "a:1")
	if code != exitUsage || !strings.Contains(errs, "--members (client.members)") || !strings.Contains(errs, "--tls (client.tls)") {
		t.Fatalf("two dfkv settings: exit %d, stderr %q", code, errs)
	}

	// What the peer's clients honour is not refused: their timeouts.
	peer := startFakePeer(t, "redis")
	common := []string{"--protocol", "redis", "--addr", peer, "--ops", "4", "--warmup", "0", "-c", "1", "--value-size", "1KiB"}
	code, out, errs := runBench(t, append(common, "--timeout-ms", "5000", "--dial-timeout-ms", "1000")...)
	if code != 0 || strings.Contains(errs, "WARN") {
		t.Fatalf("--timeout-ms, --dial-timeout-ms with redis: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}

	// From a shared file and environment: the run goes on. A file
	// spelling out the default members, or real members (they name the
	// cluster, which --addr replaces), is silent; TLS and a token, which
	// the dfkv run being compared with used, are warned about.
	path := filepath.Join(t.TempDir(), "dfkv.toml")
	if err := os.WriteFile(path, []byte("[client]\nmembers = [\"127.0.0.1:7600\"]\nnamespace = \"ns\"\ntls = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DFKV_TOKEN", "0123456789abcdef0123")
	t.Setenv("DFKV_CLIENT_MDS", "127.0.0.1:7700")
	code, out, errs = runBench(t, append(common, "--config", path)...)
	if code != 0 || !strings.Contains(errs, "client.tls (DFKV_CLIENT_TLS) from file "+path+" is not used by --protocol redis: bench's redis client speaks plain TCP") ||
		!strings.Contains(errs, "client.token (DFKV_CLIENT_TOKEN) from env DFKV_TOKEN is not used by --protocol redis: bench's redis client sends no credentials") ||
		strings.Contains(errs, "client.members") || strings.Contains(errs, "client.mds") || strings.Contains(errs, "client.namespace") {
		t.Fatalf("dfkv settings from a file and the environment: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

// TestBenchOptions: the settings become the run's options; fill follows
// the workload unless given, and the prefix workload always fills.
func TestBenchOptions(t *testing.T) {
	opts := func(flags map[string][]string) Options {
		t.Helper()
		cfg, res, err := config.LoadFrom("bench", "", nil, flags)
		if err != nil {
			t.Fatal(err)
		}
		o, _, err := optionsFrom(cfg, res, "", "")
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	for w, fill := range map[string]bool{"put": false, "get": true, "exist": true, "mixed": true, "prefix": true} {
		if o := opts(map[string][]string{"workload": {w}}); o.Fill != fill {
			t.Errorf("workload %s fills %v by default; want %v", w, o.Fill, fill)
		}
	}
	if o := opts(map[string][]string{"workload": {"put"}, "fill": {"true"}}); !o.Fill {
		t.Error("put --fill does not fill")
	}
	if o := opts(map[string][]string{"workload": {"get"}, "fill": {"false"}}); o.Fill {
		t.Error("get --fill=false fills")
	}
	if o := opts(map[string][]string{"workload": {"prefix"}, "fill": {"false"}}); !o.Fill {
		t.Error("prefix --fill=false does not store its sequences")
	}
	o := opts(map[string][]string{"protocol": {"memcache"}, "addr": {"127.0.0.1:11211"}, "value-size": {"4KiB"}, "ops": {"7"},
		"warmup": {"0"}, "seed": {"18446744073709551615"}, "workload": {"mixed"}, "mixed-get-ratio": {"0.5"}, "c": {"2"}, "key-prefix": {"p/"}})
	want := Options{Workload: wMixed, Protocol: "memcache", Target: "127.0.0.1:11211", ValueSize: 4096, Keys: 1024, Concurrency: 2,
		Duration: 10 * time.Second, Ops: 7, GetRatio: 0.5, KeyPrefix: "p/", Seed: 1<<64 - 1, Sequences: 64, PagesPerSeq: 16, SharedPrefix: 0.5, Fill: true}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("options\n got %+v\nwant %+v", o, want)
	}
	o = opts(map[string][]string{"sweep": {"concurrency=1,8"}})
	if !reflect.DeepEqual(o.Sweep, config.Sweep{Dimension: config.SweepConcurrency, Values: []uint64{1, 8}}) || o.maxConcurrency() != 8 {
		t.Fatalf("--sweep concurrency=1,8: %+v", o.Sweep)
	}
}

// TestBenchOpsOrDuration: a run measures a number of operations or a
// length of time. Given in two layers, the later one wins, as any setting
// does (a flag over the file and the environment, the environment over
// the file); given twice in one layer, it is refused. A duration equal to
// the default, as a file spelling out every default has, is no choice.
func TestBenchOpsOrDuration(t *testing.T) {
	load := func(file string, env map[string]string, flags map[string][]string) (Options, error) {
		t.Helper()
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		cfg, res, err := config.LoadText("bench", "dfkv.toml", file, lookup, flags)
		if err != nil {
			t.Fatal(err)
		}
		o, _, err := optionsFrom(cfg, res, "", "")
		return o, err
	}
	ok := func(what string, ops int64, d time.Duration, file string, env map[string]string, flags map[string][]string) {
		t.Helper()
		o, err := load(file, env, flags)
		if err != nil || o.Ops != ops || (ops == 0 && o.Duration != d) {
			t.Errorf("%s: ops %d duration %s, %v; want ops %d duration %s", what, o.Ops, o.Duration, err, ops, d)
		}
	}
	refused := func(what, want string, file string, env map[string]string, flags map[string][]string) {
		t.Helper()
		if _, err := load(file, env, flags); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error with %q", what, err, want)
		}
	}
	ok("--ops over the file's duration", 3, 0, "[bench]\nduration = \"5s\"\n", nil, map[string][]string{"ops": {"3"}})
	ok("--duration over the file's ops", 0, 2*time.Second, "[bench]\nops = 100\n", nil, map[string][]string{"duration": {"2s"}})
	ok("--duration over DFKV_BENCH_OPS", 0, 2*time.Second, "", map[string]string{"DFKV_BENCH_OPS": "10"}, map[string][]string{"duration": {"2s"}})
	ok("--ops over DFKV_BENCH_DURATION", 4, 0, "", map[string]string{"DFKV_BENCH_DURATION": "1m"}, map[string][]string{"ops": {"4"}})
	ok("DFKV_BENCH_DURATION over the file's ops", 0, time.Minute, "[bench]\nops = 100\n", map[string]string{"DFKV_BENCH_DURATION": "1m"}, nil)
	ok("DFKV_BENCH_OPS over the file's duration", 9, 0, "[bench]\nduration = \"5s\"\n", map[string]string{"DFKV_BENCH_OPS": "9"}, nil)
	ok("the default duration spelled out beside ops", 6, 0, "[bench]\nduration = \"10s\"\nops = 6\n", nil, nil)
	refused("both in the file", "--ops 100 and --duration 5s both given (bench.ops from file dfkv.toml, bench.duration from file dfkv.toml)",
		"[bench]\nduration = \"5s\"\nops = 100\n", nil, nil)
	refused("both in the environment", "--ops 10 and --duration 1m0s both given (bench.ops from env, bench.duration from env)",
		"", map[string]string{"DFKV_BENCH_OPS": "10", "DFKV_BENCH_DURATION": "1m"}, nil)
	refused("both flags", "--ops 3 and --duration 2s both given (bench.ops from flag --ops, bench.duration from flag --duration)",
		"[bench]\nops = 100\n", nil, map[string][]string{"ops": {"3"}, "duration": {"2s"}})
	// --ops 0 measures for the duration: it clashes with nothing.
	ok("--ops 0 beside a duration", 0, 5*time.Second, "[bench]\nduration = \"5s\"\nops = 100\n", nil, map[string][]string{"ops": {"0"}})
}

func TestIsTerminal(t *testing.T) {
	if isTerminal(&bytes.Buffer{}) {
		t.Fatal("a buffer is a terminal")
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if isTerminal(null) {
		t.Fatal("/dev/null (a character device) is taken for a terminal")
	}
}

// TestTableAndHTMLWarnLoudly renders a result with errors: the table and
// the HTML both lead with the warning, naming every class.
func TestTableAndHTMLWarnLoudly(t *testing.T) {
	res := &Result{Config: ResultConfig{Workload: "get", Protocol: "dfkv", Target: "x:1", ValueSize: 4096, Concurrency: 1, Ops: 5},
		ErrorCount: 3, Errors: map[string]uint64{"TIMEOUT": 2, "IO_ERROR": 1}, ErrorSamples: []string{"GET \"k\": <boom>"}}
	var tb, hb bytes.Buffer
	if err := res.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tb.String(), "WARNING: 3 errors (TIMEOUT 2, IO_ERROR 1)") {
		t.Fatalf("table:\n%s", tb.String())
	}
	if err := res.WriteHTML(&hb); err != nil {
		t.Fatal(err)
	}
	h := hb.String()
	if !strings.Contains(h, `class="warn"`) || !strings.Contains(h, "TIMEOUT 2") || !strings.Contains(h, "&lt;boom&gt;") {
		t.Fatalf("HTML does not warn (or does not escape):\n%s", h)
	}
}

// TestHTMLEscapes: whatever a run echoes (the target, an operation's
// name, an error from a peer) comes out as text, never as markup.
func TestHTMLEscapes(t *testing.T) {
	const evil = `<script>alert("x")</script>`
	res := &Result{Config: ResultConfig{Workload: "put", Protocol: "redis", Target: evil, ValueSize: 4096, Concurrency: 1, Ops: 1},
		Server:     &ServerInfo{Protocol: "dfkv", Nodes: []NodeInfo{{Addr: "n1", Engine: evil, Version: evil}, {Addr: "n2", Error: evil}}},
		ErrorCount: 1, Errors: map[string]uint64{"REDIS_ERR": 1}, ErrorSamples: []string{"PUT " + evil + ": ERR"},
		Stage: &Stage{Ops: []OpResult{{Op: evil, Count: 1, Curve: []CurvePoint{{Percentile: 0, Us: 5}, {Percentile: 90, Us: 9}}}}}}
	var hb bytes.Buffer
	if err := res.WriteHTML(&hb); err != nil {
		t.Fatal(err)
	}
	h := hb.String()
	if strings.Contains(h, "<script") {
		t.Fatalf("HTML report holds a script element:\n%s", h)
	}
	esc := `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`
	for _, where := range []string{"target " + esc, "<td>" + esc + "</td>", "<code>PUT " + esc + ": ERR</code>", `dominant-baseline="middle">` + esc + "</text>",
		"<td>dfkv " + esc + "</td>", "n2: no description (" + esc + ")"} {
		if !strings.Contains(h, where) {
			t.Errorf("HTML report lacks the escaped %q", where)
		}
	}
	if n := strings.Count(h, "<svg"); n != 3 || !strings.Contains(h, "<polyline") {
		t.Errorf("HTML report has %d plots, or no plot line", n)
	}
}

// TestInterruptedRunIsNotAResult: a run cut short (SIGINT) ends promptly,
// keeps what it measured, and is marked as not a result.
func TestInterruptedRunIsNotAResult(t *testing.T) {
	addr := startFakePeer(t, "redis")
	ctx, cancel := context.WithCancel(context.Background())
	o := Options{Workload: wPut, Protocol: "redis", Target: addr, ValueSize: 1024, Keys: 8, Concurrency: 2,
		Duration: time.Hour, KeyPrefix: "bench/", Seed: 1, Sequences: 1, PagesPerSeq: 1}
	time.AfterFunc(300*time.Millisecond, cancel)
	res, err := execute(ctx, o, &peerTarget{proto: "redis", addr: addr, dialTimeout: time.Second, timeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted || res.OK || res.ErrorCount != 0 || res.Totals.Ops == 0 {
		t.Fatalf("interrupted run: interrupted=%v ok=%v errors=%d ops=%d", res.Interrupted, res.OK, res.ErrorCount, res.Totals.Ops)
	}
	if w := res.warning(); !strings.Contains(w, "run interrupted") {
		t.Fatalf("warning %q does not say the run was interrupted", w)
	}
}

func TestProgressBar(t *testing.T) {
	var b bytes.Buffer
	progressBar(&b, Options{Duration: 10 * time.Second}, "")(5*time.Second, 500, 2e9, 0)
	if s := b.String(); !strings.HasPrefix(s, "\r[") || !strings.Contains(s, " 50%") || !strings.Contains(s, "100 ops/s") || !strings.Contains(s, " 0.4 GB/s") || strings.Contains(s, "ERRORS") {
		t.Fatalf("progress line %q", s)
	}
	b.Reset()
	progressBar(&b, Options{Ops: 100}, "step 1/2 concurrency=4: ")(time.Second, 20, 0, 5)
	if s := b.String(); !strings.HasPrefix(s, "\rstep 1/2 concurrency=4: [") || !strings.Contains(s, " 25%") || !strings.Contains(s, "ERRORS 5") {
		t.Fatalf("progress line with errors %q", s)
	}
}
