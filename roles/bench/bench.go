// Package bench is `dfkv bench`, the capacity-planning load generator.
//
// It drives a dfkv cluster (through the Go client: static members, or the
// members an MDS lists) or, for comparison, a redis or memcached (minimal
// RESP and meta-protocol clients of its own, one connection per worker),
// with one of five workloads:
//
//	put     PUT values of --value-size over --keys keys
//	get     GET them (the key space is filled first, unmeasured)
//	exist   existence checks: dfkv EXIST, redis EXISTS, memcached `mg KEY`
//	mixed   GET with probability --mixed-get-ratio, else PUT
//	prefix  the inference pattern: sequences of pages sharing a prefix;
//	        half the sequences are stored, then every lookup asks how long
//	        a prefix of its pages is stored (EXIST_PREFIX) and loads it
//
// A run is: fill (optional, unmeasured) → warm-up (unmeasured) → measured
// stage of --duration or --ops; a sweep (sweep.go) runs a warm-up and a
// measured stage per value of one setting and finds the knee. Latencies go to per-worker HDR-style
// histograms (hist.go), merged at the end, and to coarse per-interval
// ones (interval.go) for throughput and latency over time, per
// operation. The results are a table on
// stdout, --json, and --html with inline SVG plots. Any failed operation,
// in any stage, is counted by class, announced by a WARNING line, and
// makes the exit status 1: a figure from a run with errors is never
// reported as a result.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/embed"
	"github.com/dfkv/dfkv/roles/internal/rolekit"
)

// Exit statuses.
const (
	exitErrors = 1 // the run had errors or was interrupted
	exitUsage  = 2 // bad flags or configuration
)

// outputFlags are the files one run writes its result to, and the
// comparison mode. They are not settings (nothing to keep in a config
// file or the environment), so they are bench's own flags, beside the
// [bench] settings of config.Flags.
func outputFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "json", Usage: "write the result as JSON to FILE (- for stdout; the table then goes to stderr)", TakesFile: true},
		&cli.StringFlag{Name: "html", Usage: "write a self-contained HTML report with plots to FILE", TakesFile: true},
		&cli.BoolFlag{Name: compareFlag, Usage: "compare two earlier --json results instead of running: --compare A.json B.json prints them side by side with ratios B/A (--html FILE writes them too); results of different workloads are refused"},
	}
}

// Command is `dfkv bench`.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "load-test a cluster (or redis/memcached, for comparison): throughput, latency percentiles, plots",
		UsageText: "dfkv bench [--members host:port,...] [--workload put|get|exist|mixed|prefix] [--value-size 1MiB] [-c 16] [--duration 10s|--ops N] [--sweep concurrency=1,4,16,64] [--json FILE] [--html FILE]\n" +
			"dfkv bench [--html FILE] --compare A.json B.json",
		Description: "Runs fill (unmeasured, for get/exist/mixed), warm-up (unmeasured), then the measured stage.\n" +
			"Prints a table; --json and --html write the full result, and their paths go to stderr.\n" +
			"Exit status 1 when any operation failed (the counts are in the table's WARNING line and in\n" +
			"the JSON \"errors\"), 2 on bad usage.\n" +
			"--sweep concurrency=1,4,16,64 (or value_size=4KiB,64KiB,1MiB) answers \"how much load at what\n" +
			"latency\": one dimension per run; the fill runs once (once per step for value_size), then each\n" +
			"step warms up and measures, and the report gives each step's ops/s and GB/s against p50, p90,\n" +
			"p99 and p99.9, and marks the knee: the first step whose p99 rose by at least 50 points of\n" +
			"percent more than its throughput (GB/s; ops/s for exist) did, against the step before, and\n" +
			"stayed up (no later step's p99 is over 10% below it).\n" +
			"A percentile p from fewer than 10/(1-p) samples is starred as an estimate.\n" +
			"--compare A.json B.json prints two earlier --json results side by side with ratios B/A (and\n" +
			"writes them as HTML with --html); it runs nothing, and refuses results of different workloads.\n" +
			"--protocol redis|memcache --addr host:port measures a peer cache with the same workers, over\n" +
			"plain TCP; of the dfkv client's settings only --timeout-ms and --dial-timeout-ms apply to it,\n" +
			"and the others are refused as flags; from the config file or the environment they go unused,\n" +
			"with a warning for those that change what a dfkv run measures (TLS, a token, shm, embedded).\n" +
			"Every option but --json, --html and --compare is a [bench] setting: it may also come from the\n" +
			"config file or the DFKV_BENCH_* environment, and --print-config shows where each came from.",
		Flags:  append(config.Flags("bench"), outputFlags()...),
		Action: action,
	}
}

func action(c *cli.Context) error {
	if c.Bool(compareFlag) {
		return compareAction(c)
	}
	if err := fillValueApart(c); err != nil {
		return err
	}
	cfg, resolved, log, done, err := rolekit.LoadResolved(c, "bench")
	if err != nil || done {
		return err
	}
	o, warns, err := optionsFrom(cfg, resolved, c.String("json"), c.String("html"))
	if err != nil {
		return cli.Exit("dfkv bench: "+err.Error(), exitUsage)
	}
	for _, w := range warns {
		log.Warn(w)
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var t target
	if o.Protocol == "dfkv" {
		cc := *cfg
		// One pooled connection per worker, so the client does not dial
		// and close connections under load.
		cc.Client.PoolSize = max(cc.Client.PoolSize, o.maxConcurrency())
		cl, err := embed.ToolClient(&cc, c.String("config"), log)
		if err != nil {
			// The settings were checked when loaded: what fails here is
			// the cluster (an MDS that does not answer), not the usage,
			// unless a file they name (a TLS one) is bad.
			if _, bad := errors.AsType[*rolekit.ConfigError](err); bad {
				return cli.Exit("dfkv bench: "+err.Error(), exitUsage)
			}
			return cli.Exit("dfkv bench: "+err.Error(), exitErrors)
		}
		// Operations run under Background, as an engine's calls through
		// libdfkv do, and as the redis and memcached workers run (a
		// deadline per operation, no context): a cancellable context
		// would add a cancellation watch to every call that neither
		// peer pays. SIGINT still ends the run between operations, and a
		// call in flight ends within the client timeout.
		t = &dfkvTarget{cl: cl, ctx: context.Background()}
	} else {
		t = &peerTarget{proto: o.Protocol, addr: o.Target, dialTimeout: cfg.Client.DialTimeout, timeout: cfg.Client.Timeout}
	}
	defer t.Close()

	var prog io.Writer
	if isTerminal(c.App.ErrWriter) {
		prog = c.App.ErrWriter
	}
	res, err := execute(ctx, o, t, prog)
	if err != nil {
		return cli.Exit("dfkv bench: "+err.Error(), exitErrors)
	}
	return report(c, res)
}

// report writes the table, --json and --html, and maps the result to the
// exit status.
func report(c *cli.Context, res *Result) error {
	table := c.App.Writer
	jsonPath, htmlPath := c.String("json"), c.String("html")
	if jsonPath == "-" || htmlPath == "-" {
		table = c.App.ErrWriter // stdout carries the document alone
	}
	if err := res.WriteTable(table); err != nil {
		return cli.Exit("dfkv bench: writing the table: "+err.Error(), exitErrors)
	}
	if err := writeOutputs(c, output{"--json", jsonPath, "JSON result", res.WriteJSON}, output{"--html", htmlPath, "HTML report", res.WriteHTML}); err != nil {
		return err
	}
	if !res.OK {
		return cli.Exit(fmt.Sprintf("dfkv bench: %s", strings.TrimPrefix(strings.SplitN(res.warning(), " — ", 2)[0], "WARNING: ")), exitErrors)
	}
	return nil
}

// output is a file a run or a comparison writes, and what writes it.
type output struct {
	flag, path, what string // "--json", its path ("" none, "-" stdout), "JSON result"
	write            func(io.Writer) error
}

// writeOutputs writes each output and says on stderr where each file
// went, so stdout keeps only the table or the document sent there.
func writeOutputs(c *cli.Context, outs ...output) error {
	for _, o := range outs {
		if o.path == "" {
			continue
		}
		if err := writeFile(c.App.Writer, o.path, o.write); err != nil {
			return cli.Exit(fmt.Sprintf("dfkv bench: %s %s: %v", o.flag, o.path, err), exitErrors)
		}
		if o.path != "-" {
			path := o.path
			if abs, err := filepath.Abs(path); err == nil {
				path = abs
			}
			fmt.Fprintf(c.App.ErrWriter, "dfkv bench: %s written to %s\n", o.what, path)
		}
	}
	return nil
}

// writeFile writes with fn to path, or to stdout for "-".
func writeFile(stdout io.Writer, path string, fn func(io.Writer) error) error {
	if path == "-" {
		return fn(stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fillValueApart refuses "--fill false": --fill is a boolean flag, so
// its value must follow "=", and "false" would be taken as an argument
// (refused anyway, but with a message that does not say why).
func fillValueApart(c *cli.Context) error {
	if c.NArg() == 0 || !c.IsSet("fill") {
		return nil
	}
	switch w := strings.ToLower(c.Args().First()); w {
	case "auto", "true", "false", "1", "0", "yes", "no", "on", "off":
		return cli.Exit(fmt.Sprintf("dfkv bench: unexpected argument %q after --fill: give its value after \"=\", as --fill=%s (--fill alone means true)", c.Args().First(), w), exitUsage)
	}
	return nil
}

// optionsFrom turns the [bench] settings into Options, with the checks
// that involve more than one setting (each alone was checked by Load;
// res tells where each came from) and the two output files. The
// warnings are for settings the run does not use but that came from a
// file or the environment, not from its command line.
func optionsFrom(cfg *config.Config, res *config.Resolved, jsonPath, htmlPath string) (Options, []string, error) {
	b := &cfg.Bench
	o := Options{
		Workload:     b.Workload,
		Protocol:     b.Protocol,
		ValueSize:    int(b.ValueSize),
		Keys:         b.Keys,
		Concurrency:  b.Concurrency,
		Duration:     b.Duration,
		Ops:          int64(b.Ops),
		Warmup:       b.Warmup,
		GetRatio:     b.MixedGetRatio,
		KeyPrefix:    b.KeyPrefix,
		Seed:         b.Seed,
		Sequences:    b.Sequences,
		PagesPerSeq:  b.PagesPerSeq,
		SharedPrefix: b.SharedPrefix,
		Sweep:        b.Sweep,
		// The prefix workload always stores its sequences: they are its
		// premise. Otherwise auto fills where the workload reads keys.
		Fill: b.Workload == wPrefix || b.Fill.Or(b.Workload == wGet || b.Workload == wExist || b.Workload == wMixed),
	}
	if err := opsOrDuration(&o, res); err != nil {
		return o, nil, err
	}
	unusedWarns, err := unusedByRun(cfg, res)
	if err != nil {
		return o, nil, err
	}
	if jsonPath == "-" && htmlPath == "-" {
		return o, nil, fmt.Errorf("--json - and --html - would both write to stdout; send one of them to a file")
	}
	var warns []string
	o.Target, warns, err = targetOf(cfg, res)
	return o, append(unusedWarns, warns...), err
}

// unusedByRun refuses [bench] settings typed as flags that this run's
// workload or sweep does not use (the figures would be taken for what
// they asked), and warns of the same settings from a file or the
// environment, which other runs share.
func unusedByRun(cfg *config.Config, res *config.Resolved) (warns []string, err error) {
	b := &cfg.Bench
	why := map[string]string{}
	if b.Workload != wMixed {
		why["bench.mixed_get_ratio"] = "only --workload mixed uses it"
	}
	if b.Workload == wPrefix {
		why["bench.keys"] = "--workload prefix stores --sequences x --pages-per-seq pages instead"
	} else {
		for _, k := range []string{"bench.sequences", "bench.pages_per_seq", "bench.shared_prefix"} {
			why[k] = "only --workload prefix uses it"
		}
	}
	switch b.Sweep.Dimension {
	case config.SweepConcurrency:
		why["bench.concurrency"] = "--sweep concurrency= gives the concurrency of each step"
	case config.SweepValueSize:
		why["bench.value_size"] = "--sweep value_size= gives the value size of each step"
	}
	var errs []error
	for _, og := range res.Origins() {
		reason, unused := why[og.Key]
		if !unused || og.Layer == config.LayerDefault || og.Default && og.Layer != config.LayerFlag {
			continue
		}
		if og.Layer == config.LayerFlag {
			errs = append(errs, fmt.Errorf("--%s (%s) is not used by this run: %s; drop it", og.Flag, og.Key, reason))
		} else {
			warns = append(warns, fmt.Sprintf("%s from %s is not used by this run: %s", og.Key, og.From, reason))
		}
	}
	return warns, errors.Join(errs...)
}

// opsOrDuration settles a run given both a number of operations and a
// length of time. As with any setting, the later layer wins: a flag
// over the file and the environment (a file or variable holding one of
// them is no reason to refuse the other typed for this run), the
// environment over the file. Both in one layer is a contradiction of the
// user's own, refused. A duration equal to the default from a file or
// the environment is no choice (a file spelling out every default has
// one); typed as a flag, it is.
func opsOrDuration(o *Options, res *config.Resolved) error {
	ops, _ := res.Origin("bench.ops")
	dur, _ := res.Origin("bench.duration")
	if o.Ops == 0 || dur.Default && dur.Layer != config.LayerFlag {
		return nil
	}
	switch {
	case ops.Layer == dur.Layer:
		return fmt.Errorf("--ops %d and --duration %s both given (bench.ops from %s, bench.duration from %s): a run measures a number of operations or a length of time; give one",
			o.Ops, o.Duration, ops.From, dur.From)
	case dur.Layer > ops.Layer:
		o.Ops = 0 // measure for the duration
	}
	return nil
}

// targetOf checks the protocol's own settings and names what the run
// measures, for the report.
func targetOf(cfg *config.Config, res *config.Resolved) (string, []string, error) {
	b := &cfg.Bench
	if b.Protocol != "dfkv" {
		if b.Addr == "" {
			return "", nil, fmt.Errorf("--protocol %s needs --addr host:port of the server (bench.addr, DFKV_BENCH_ADDR)", b.Protocol)
		}
		warns, err := peerIgnores(cfg, res)
		return b.Addr, warns, err
	}
	if b.Addr != "" {
		return "", nil, fmt.Errorf("--addr is for --protocol redis|memcache (bench.addr is %q); give dfkv nodes with --members", b.Addr)
	}
	what, size := "--value-size", b.ValueSize
	if sw := b.Sweep; sw.Dimension == config.SweepValueSize {
		what, size = "--sweep value size", sw.Values[len(sw.Values)-1]
	}
	if size > cfg.Server.MaxBlockBytes {
		return "", nil, fmt.Errorf("%s %s exceeds server.max_block_bytes %s (DFKV_SERVER_MAX_BLOCK_BYTES, --max-block-bytes)",
			what, config.FormatSize(size), config.FormatSize(cfg.Server.MaxBlockBytes))
	}
	if cfg.Client.Embedded == 1 {
		return "an embedded store in this process", nil, nil
	}
	if len(cfg.Client.MDS) > 0 {
		return "members from MDS " + strings.Join(cfg.Client.MDS, ","), nil, nil
	}
	return strings.Join(cfg.Client.Members, ","), nil, nil
}

// peerHonours are the settings outside [bench] and [log] that a peer
// run's own clients read: the timeouts of their connections. Every other
// setting bench takes is for the dfkv client and its cluster.
var peerHonours = map[string]bool{"client.timeout_ms": true, "client.dial_timeout_ms": true}

// peerIgnores refuses the dfkv client settings given as flags to a peer
// run: typed for this run, they would be ignored, and the figures taken
// for what they asked (over TLS, with credentials, against those
// members). The same settings from the file or the environment are
// shared with every tool, so they only draw a warning, and only those
// that change what a dfkv run measures (TLS, a token, shared memory, an
// embedded store): members, an MDS or a namespace name the cluster,
// which --addr replaces, and the report names the server measured.
func peerIgnores(cfg *config.Config, res *config.Resolved) (warns []string, err error) {
	proto := cfg.Bench.Protocol
	var errs []error
	for _, og := range res.Origins() {
		if og.Layer == config.LayerDefault || peerHonours[og.Key] || strings.HasPrefix(og.Key, "bench.") || strings.HasPrefix(og.Key, "log.") {
			continue
		}
		why, asks := peerWhy(cfg, og.Key, proto)
		if og.Layer == config.LayerFlag {
			errs = append(errs, fmt.Errorf("--%s (%s) is for --protocol dfkv, not %s: %s; drop it", og.Flag, og.Key, proto, why))
		} else if asks {
			warns = append(warns, fmt.Sprintf("%s (%s) from %s is not used by --protocol %s: %s", og.Key, og.Env, og.From, proto, why))
		}
	}
	return warns, errors.Join(errs...)
}

// peerWhy says why the dfkv client setting key does nothing in a run
// against proto, and whether its value asks for something the peer's
// client does not do.
func peerWhy(cfg *config.Config, key, proto string) (why string, asks bool) {
	cc := &cfg.Client
	switch key {
	case "client.tls":
		return fmt.Sprintf("bench's %s client speaks plain TCP", proto), cc.TLS == 1
	case "client.tls_ca", "client.tls_cert", "client.tls_key", "client.tls_server_name":
		// Only with client.tls on, which is warned about.
		return fmt.Sprintf("bench's %s client speaks plain TCP", proto), false
	case "client.token":
		return fmt.Sprintf("bench's %s client sends no credentials", proto), cc.Token != ""
	case "client.shm":
		return fmt.Sprintf("bench's %s client reaches the server over TCP only", proto), cc.Shm == "on"
	case "client.embedded":
		return "the run measures the server at --addr, not an embedded store", cc.Embedded == 1
	case "client.members", "client.mds":
		return "the run measures the one server at --addr", false
	case "server.max_block_bytes":
		return "it bounds the values of dfkv nodes", false
	}
	return "only the dfkv client reads it", false
}

// execute runs o against t: fill, warm-up, measured stage, or the steps
// of a sweep. progress, if not nil, gets a live one-line progress
// display (a terminal). The error is for a run that could not start;
// failed operations are counted in the Result, not returned.
func execute(ctx context.Context, o Options, t target, progress io.Writer) (*Result, error) {
	if o.Sweep.Dimension != "" {
		return executeSweep(ctx, o, t, progress)
	}
	res := newResult(o, time.Now())
	r := newRun(o, t)
	fill, err := r.fillStage(ctx, progress)
	if err != nil {
		return nil, err
	}
	res.Fill = fill
	res.addErrors("fill", &r.fillErr)
	if ctx.Err() == nil {
		res.Server = t.describe(ctx)
		if err := r.measureStage(ctx, progress, ""); err != nil {
			return nil, err
		}
	}
	st := r.stage()
	res.Stage = &st
	res.addErrors("run", &r.runErr)
	return res.finish(ctx.Err() != nil), nil
}

// fillStage runs r's fill when its options ask for one, and returns it
// (nil when there was none).
func (r *run) fillStage(ctx context.Context, progress io.Writer) (*FillResult, error) {
	if !r.o.Fill {
		return nil, nil
	}
	if progress != nil {
		fmt.Fprintf(progress, "filling %d keys of %s (unmeasured)...", len(r.fillKeys()), config.FormatSize(uint64(r.o.ValueSize)))
	}
	keys, d, err := r.fill(ctx)
	if progress != nil {
		fmt.Fprint(progress, "\r\033[K")
	}
	if err != nil && ctx.Err() == nil {
		return nil, err
	}
	return r.fillResult(keys, d), nil
}

// measureStage runs r's warm-up and measured stage, drawing progress
// lines that start with label.
func (r *run) measureStage(ctx context.Context, progress io.Writer, label string) error {
	if progress != nil {
		r.progress = progressBar(progress, r.o, label)
		if r.o.Warmup > 0 {
			fmt.Fprintf(progress, "\r%swarming up for %s (unmeasured)...\033[K", label, r.o.Warmup)
		}
	}
	err := r.measure(ctx)
	if progress != nil {
		fmt.Fprint(progress, "\r\033[K")
	}
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// progressBar returns the progress callback drawing one terminal line,
// after label.
func progressBar(w io.Writer, o Options, label string) func(time.Duration, uint64, uint64, uint64) {
	const width = 30
	return func(el time.Duration, ops, bytes, errs uint64) {
		var frac float64
		if o.Ops > 0 {
			frac = float64(ops+errs) / float64(o.Ops)
		} else {
			frac = el.Seconds() / o.Duration.Seconds()
		}
		frac = min(max(frac, 0), 1)
		n := int(frac * width)
		bar := strings.Repeat("=", n) + strings.Repeat(" ", width-n)
		secs := max(el.Seconds(), 1e-9)
		line := fmt.Sprintf("\r%s[%s] %3.0f%% %5.1fs %s ops/s %s GB/s", label, bar, 100*frac, el.Seconds(), sig3(float64(ops)/secs), sig3(float64(bytes)/secs/1e9))
		if errs > 0 {
			line += fmt.Sprintf(" ERRORS %d", errs)
		}
		fmt.Fprint(w, line+"\033[K")
	}
}

// isTerminal reports whether w is a terminal (not merely a character
// device: /dev/null is one too).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
