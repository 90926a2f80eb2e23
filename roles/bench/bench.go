// Package bench is `dfkv bench`, the capacity-planning load generator.
//
// It drives a dfkv cluster (through the Go client: static members, or the
// members an MDS lists) or, for
// comparison, a redis or memcached (minimal RESP and meta-protocol clients
// of its own, one connection per worker), with one of five workloads:
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
// stage of --duration or --ops. Latencies go to per-worker HDR-style
// histograms (hist.go), merged at the end. The results are a table on
// stdout, --json, and --html with inline SVG plots. Any failed operation,
// in any stage, is counted by class, announced by a WARNING line, and
// makes the exit status 1: a figure from a run with errors is never
// reported as a result.
package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/internal/rolekit"
)

// Exit statuses.
const (
	exitErrors = 1 // the run had errors or was interrupted
	exitUsage  = 2 // bad flags or configuration
)

func benchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "workload", Value: wPut, Usage: "put, get, exist, mixed or prefix"},
		&cli.StringFlag{Name: "protocol", Value: "dfkv", Usage: "dfkv (the cluster in --members), redis or memcache (the server at --addr)"},
		&cli.StringFlag{Name: "addr", Usage: "host:port of the redis or memcached server (--protocol redis|memcache)"},
		&cli.StringFlag{Name: "value-size", Value: "1MiB", Usage: "bytes per value (the page size for --workload prefix), e.g. 4KiB, 64KiB, 1MiB"},
		&cli.IntFlag{Name: "keys", Value: 1024, Usage: "number of distinct keys, chosen uniformly at random"},
		&cli.IntFlag{Name: "concurrency", Aliases: []string{"c"}, Value: 16, Usage: "workers, each with its own connection (dfkv: the client pool grows to at least this)"},
		&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Usage: "length of the measured stage"},
		&cli.Int64Flag{Name: "ops", Usage: "measure this many operations (all workers together) instead of --duration"},
		&cli.DurationFlag{Name: "warmup", Value: time.Second, Usage: "unmeasured warm-up before the measured stage"},
		&cli.BoolFlag{Name: "fill", Usage: "PUT every key once before measuring, unmeasured (default on for get, exist, mixed, off for put; --fill=false to skip)", DisableDefaultText: true},
		&cli.Float64Flag{Name: "mixed-get-ratio", Value: 0.9, Usage: "fraction of GETs in --workload mixed"},
		&cli.IntFlag{Name: "sequences", Value: 64, Usage: "prefix: number of sequences (the even ones are stored)"},
		&cli.IntFlag{Name: "pages-per-seq", Value: 16, Usage: "prefix: pages per sequence"},
		&cli.Float64Flag{Name: "shared-prefix", Value: 0.5, Usage: "prefix: fraction of each sequence's leading pages shared by all sequences"},
		&cli.StringFlag{Name: "key-prefix", Value: "bench/", Usage: "prefix of every key bench writes"},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of key choice and value bytes"},
		&cli.StringFlag{Name: "json", Usage: "write the result as JSON to FILE (- for stdout; the table then goes to stderr)", TakesFile: true},
		&cli.StringFlag{Name: "html", Usage: "write a self-contained HTML report with plots to FILE", TakesFile: true},
	}
}

// Command is `dfkv bench`.
func Command() *cli.Command {
	return &cli.Command{
		Name:      "bench",
		Usage:     "load-test a cluster (or redis/memcached, for comparison): throughput, latency percentiles, plots",
		UsageText: "dfkv bench [--members host:port,...] [--workload put|get|exist|mixed|prefix] [--value-size 1MiB] [-c 16] [--duration 10s|--ops N] [--json FILE] [--html FILE]",
		Description: "Runs fill (unmeasured, for get/exist/mixed), warm-up (unmeasured), then the measured stage.\n" +
			"Prints a table; --json and --html write the full result. Exit status 1 when any operation\n" +
			"failed (the counts are in the table's WARNING line and in the JSON \"errors\"), 2 on bad usage.\n" +
			"--protocol redis|memcache --addr host:port measures a peer cache with the same workers.",
		Flags:  append(config.Flags("bench"), benchFlags()...),
		Action: action,
	}
}

func action(c *cli.Context) error {
	cfg, log, done, err := rolekit.Load(c, "bench")
	if err != nil || done {
		return err
	}
	o, err := optionsFrom(c, cfg)
	if err != nil {
		return cli.Exit("dfkv bench: "+err.Error(), exitUsage)
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var t target
	if o.Protocol == "dfkv" {
		cc := *cfg
		// One pooled connection per worker, so the client does not dial
		// and close connections under load.
		cc.Client.PoolSize = max(cc.Client.PoolSize, o.Concurrency)
		cl, err := rolekit.OpenClient(&cc, log)
		if err != nil {
			// The settings were checked when loaded: what fails here is
			// the cluster (an MDS that does not answer), not the usage.
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
	if jsonPath == "-" {
		table = c.App.ErrWriter
	}
	if err := res.WriteTable(table); err != nil {
		return cli.Exit("dfkv bench: writing the table: "+err.Error(), exitErrors)
	}
	write := func(path string, fn func(io.Writer) error) error {
		if path == "-" {
			return fn(c.App.Writer)
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
	if jsonPath != "" {
		if err := write(jsonPath, res.WriteJSON); err != nil {
			return cli.Exit(fmt.Sprintf("dfkv bench: --json %s: %v", jsonPath, err), exitErrors)
		}
	}
	if htmlPath != "" {
		if err := write(htmlPath, res.WriteHTML); err != nil {
			return cli.Exit(fmt.Sprintf("dfkv bench: --html %s: %v", htmlPath, err), exitErrors)
		}
	}
	if !res.OK {
		return cli.Exit(fmt.Sprintf("dfkv bench: %s", strings.TrimPrefix(strings.SplitN(res.warning(), " — ", 2)[0], "WARNING: ")), exitErrors)
	}
	return nil
}

// optionsFrom reads and checks the bench flags.
func optionsFrom(c *cli.Context, cfg *config.Config) (Options, error) {
	o := Options{
		Workload:     c.String("workload"),
		Protocol:     c.String("protocol"),
		Keys:         c.Int("keys"),
		Concurrency:  c.Int("concurrency"),
		Duration:     c.Duration("duration"),
		Ops:          c.Int64("ops"),
		Warmup:       c.Duration("warmup"),
		GetRatio:     c.Float64("mixed-get-ratio"),
		KeyPrefix:    c.String("key-prefix"),
		Seed:         c.Uint64("seed"),
		Sequences:    c.Int("sequences"),
		PagesPerSeq:  c.Int("pages-per-seq"),
		SharedPrefix: c.Float64("shared-prefix"),
	}
	if c.IsSet("ops") && c.IsSet("duration") {
		return o, fmt.Errorf("--ops %d and --duration %s both given: a run measures a number of operations or a length of time; give one", o.Ops, o.Duration)
	}
	switch o.Workload {
	case wPut, wGet, wExist, wMixed, wPrefix:
	default:
		return o, fmt.Errorf("--workload %q: valid workloads are put, get, exist, mixed, prefix", o.Workload)
	}
	o.Fill = o.Workload == wGet || o.Workload == wExist || o.Workload == wMixed
	if c.IsSet("fill") {
		o.Fill = c.Bool("fill")
	}
	if o.Workload == wPrefix {
		o.Fill = true // the stored sequences are the workload's premise
	}
	size, err := config.ParseSize(c.String("value-size"))
	if err != nil {
		return o, fmt.Errorf("--value-size: %v", err)
	}
	if size == 0 || size > 1<<30 {
		return o, fmt.Errorf("--value-size %s: want 1 byte to 1GiB", c.String("value-size"))
	}
	o.ValueSize = int(size)
	switch o.Protocol {
	case "dfkv":
		if c.IsSet("addr") {
			return o, fmt.Errorf("--addr is for --protocol redis|memcache; give dfkv nodes with --members")
		}
		if size > cfg.Server.MaxBlockBytes {
			return o, fmt.Errorf("--value-size %s exceeds max_block_bytes %s (DFKV_MAX_BLOCK_BYTES, --max-block-bytes)", config.FormatSize(size), config.FormatSize(cfg.Server.MaxBlockBytes))
		}
		o.Target = strings.Join(cfg.Client.Members, ",")
		if len(cfg.Client.MDS) > 0 {
			o.Target = "members from MDS " + strings.Join(cfg.Client.MDS, ",")
		}
	case "redis", "memcache":
		o.Target = c.String("addr")
		if _, _, err := net.SplitHostPort(o.Target); err != nil || o.Target == "" {
			return o, fmt.Errorf("--protocol %s needs --addr host:port of the server (got %q)", o.Protocol, o.Target)
		}
	default:
		return o, fmt.Errorf("--protocol %q: valid protocols are dfkv, redis, memcache", o.Protocol)
	}
	switch {
	case o.Keys < 1:
		return o, fmt.Errorf("--keys %d: want at least 1", o.Keys)
	case o.Concurrency < 1 || o.Concurrency > 4096:
		return o, fmt.Errorf("--concurrency %d: want 1..4096", o.Concurrency)
	case o.Ops < 0:
		return o, fmt.Errorf("--ops %d: want 0 (use --duration) or more", o.Ops)
	case o.Ops == 0 && o.Duration <= 0:
		return o, fmt.Errorf("--duration %s: want a positive duration, or give --ops", o.Duration)
	case o.Warmup < 0:
		return o, fmt.Errorf("--warmup %s: want 0 or more", o.Warmup)
	case o.GetRatio < 0 || o.GetRatio > 1:
		return o, fmt.Errorf("--mixed-get-ratio %g: want 0..1", o.GetRatio)
	case o.Sequences < 1:
		return o, fmt.Errorf("--sequences %d: want at least 1", o.Sequences)
	case o.PagesPerSeq < 1 || o.PagesPerSeq > 4096:
		return o, fmt.Errorf("--pages-per-seq %d: want 1..4096", o.PagesPerSeq)
	case o.SharedPrefix < 0 || o.SharedPrefix > 1:
		return o, fmt.Errorf("--shared-prefix %g: want 0..1", o.SharedPrefix)
	case o.KeyPrefix == "":
		return o, fmt.Errorf("--key-prefix must not be empty")
	}
	if c.String("json") == "-" && c.String("html") == "-" {
		return o, fmt.Errorf("--json - and --html - would both write to stdout; send one of them to a file")
	}
	if strings.ContainsFunc(o.KeyPrefix, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return o, fmt.Errorf("--key-prefix %q: spaces and control characters are not allowed (memcached keys cannot hold them)", o.KeyPrefix)
	}
	if len(o.KeyPrefix) > 200 {
		return o, fmt.Errorf("--key-prefix is %d bytes; keep it under 200 (memcached keys hold at most 250)", len(o.KeyPrefix))
	}
	return o, nil
}

// execute runs o against t: fill, warm-up, measured stage. progress, if
// not nil, gets a live one-line progress display (a terminal). The error
// is for a run that could not start; failed operations are counted in
// the Result, not returned.
func execute(ctx context.Context, o Options, t target, progress io.Writer) (*Result, error) {
	r := newRun(o, t)
	started := time.Now()
	var fillKeys int
	var fillTime time.Duration
	if o.Fill {
		if progress != nil {
			fmt.Fprintf(progress, "filling %d keys of %s (unmeasured)...", len(r.fillKeys()), config.FormatSize(uint64(o.ValueSize)))
		}
		var err error
		fillKeys, fillTime, err = r.fill(ctx)
		if progress != nil {
			fmt.Fprint(progress, "\r\033[K")
		}
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
	}
	if progress != nil {
		r.progress = progressBar(progress, o)
		if o.Warmup > 0 {
			fmt.Fprintf(progress, "warming up for %s (unmeasured)...", o.Warmup)
		}
	}
	var elapsed time.Duration
	var series []Sample
	if ctx.Err() == nil {
		var err error
		elapsed, series, err = r.measure(ctx)
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
	}
	if progress != nil {
		fmt.Fprint(progress, "\r\033[K")
	}
	return r.result(started, fillKeys, fillTime, elapsed, series, ctx.Err() != nil), nil
}

// progressBar returns the progress callback drawing one terminal line.
func progressBar(w io.Writer, o Options) func(time.Duration, uint64, uint64, uint64) {
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
		line := fmt.Sprintf("\r[%s] %3.0f%% %5.1fs %s ops/s %s GB/s", bar, 100*frac, el.Seconds(), sig3(float64(ops)/secs), sig3(float64(bytes)/secs/1e9))
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
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
