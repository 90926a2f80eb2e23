// Package smoke is `dfkv smoke`: an end-to-end check of a running cluster.
// It exercises every op at several sizes (one byte, a non-aligned size, the
// maximum block size), the range contract, the batch forms and the input a
// node must refuse, compares every byte, prints one line per check and a
// summary, and exits non-zero on any failure. A member that does not
// answer PING ends the run at once, with one line saying which and why.
package smoke

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/embed"
	"github.com/dfkv/dfkv/roles/internal/rolekit"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// Command is `dfkv smoke`.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "smoke",
		Usage: "check a running cluster end to end (every op, several sizes, byte-exact)",
		Flags: append(config.Flags("smoke"),
			&cli.BoolFlag{Name: "keep", Usage: "leave the smoke keys stored (they are removed by default)"},
			&cli.StringFlag{Name: "run-id", Usage: "key prefix of this run (default: time and pid)"},
		),
		Action: func(c *cli.Context) error {
			cfg, res, log, done, err := rolekit.LoadResolved(c, "smoke")
			if err != nil || done {
				return err
			}
			// Each failed check says why; a log.level given keeps the
			// client's warnings.
			log = rolekit.ToolLogger(c, "smoke", cfg, res, log)
			cl, err := embed.ToolClient(cfg, c.String("config"), log)
			if err != nil {
				// The settings were checked when loaded: a cluster that
				// does not answer is a failed run (1), an embedded
				// store's configuration a usage error (2).
				code := 1
				if _, bad := errors.AsType[*rolekit.ConfigError](err); bad || cfg.Client.Embedded == 1 {
					code = 2
				}
				return cli.Exit(fmt.Sprintf("dfkv smoke: %v", err), code)
			}
			defer cl.Close()
			runID := c.String("run-id")
			if runID == "" {
				runID = fmt.Sprintf("%d-%d", time.Now().UnixNano(), os.Getpid())
			}
			r := &Runner{Client: cl, Out: c.App.Writer, RunID: runID, MaxBlock: cfg.Server.MaxBlockBytes, Members: cl.Members(), Keep: c.Bool("keep")}
			pass, fail, err := r.Run(c.Context)
			if err != nil {
				return cli.Exit(fmt.Sprintf("dfkv smoke: %v", err), 1)
			}
			fmt.Fprintf(c.App.Writer, "smoke: %d passed, %d failed\n", pass, fail)
			if fail > 0 {
				return cli.Exit("", 1)
			}
			return nil
		},
	}
}

// Runner runs the smoke checks against one client.
type Runner struct {
	Client   *client.Client
	Out      io.Writer
	RunID    string
	MaxBlock uint64
	Members  []string
	Keep     bool

	pass, fail int
}

func (r *Runner) check(name string, err error) bool {
	if err != nil {
		r.fail++
		fmt.Fprintf(r.Out, "FAIL %-40s %v\n", name, err)
		return false
	}
	r.pass++
	fmt.Fprintf(r.Out, "ok   %s\n", name)
	return true
}

func (r *Runner) key(name string) []byte { return []byte("smoke/" + r.RunID + "/" + name) }

// payload returns n deterministic pseudo-random bytes for a key, so a
// mix-up of two values is always visible.
func payload(n int, seed uint64) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	for i := 0; i+8 <= n; i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func expectStatus(err error, want wire.Status) error {
	if got := wire.StatusOf(err); got != want {
		return fmt.Errorf("want %s, got %v", want, err)
	}
	return nil
}

// Run pings every member, then performs every check and returns the
// counts. A member that does not answer PING stops the run there, with
// an error naming it and why: every later check would fail for the same
// reason, and a page of them hides it.
func (r *Runner) Run(ctx context.Context) (pass, fail int, err error) {
	cl := r.Client
	for _, m := range r.Members {
		if err := cl.Ping(ctx, m); err != nil {
			r.fail++
			return r.pass, r.fail, fmt.Errorf("member %s does not answer PING: %w; no other check was run", m, err)
		}
		r.check("ping "+m, nil)
	}
	// The edge sizes a node's max_block_bytes allows (it may be as low
	// as 4 KiB), and the largest it allows.
	var sizes []int
	for _, n := range []int{1, 4095, 4096, 65537, 1 << 20, 1<<20 + 3} {
		if r.MaxBlock == 0 || uint64(n) <= r.MaxBlock {
			sizes = append(sizes, n)
		}
	}
	if r.MaxBlock > 0 && r.MaxBlock < 1<<30 && uint64(sizes[len(sizes)-1]) < r.MaxBlock {
		sizes = append(sizes, int(r.MaxBlock))
	}
	for i, n := range sizes {
		r.scalar(ctx, n, uint64(i+1))
	}
	r.batch(ctx)
	r.refusals(ctx)
	return r.pass, r.fail, nil
}

func (r *Runner) scalar(ctx context.Context, n int, seed uint64) {
	cl := r.Client
	k := r.key(fmt.Sprintf("scalar-%d", n))
	v := payload(n, seed)
	tag := fmt.Sprintf("%dB", n)
	if !r.check("put "+tag, cl.Put(ctx, k, v)) {
		return
	}
	stored, err := cl.Exist(ctx, k)
	if err == nil && stored != uint64(n) {
		err = fmt.Errorf("exist reports %d bytes, stored %d", stored, n)
	}
	r.check("exist "+tag, err)

	dst := make([]byte, n)
	got, stored, err := cl.Get(ctx, k, dst)
	if err == nil && (got != n || stored != uint64(n) || !bytes.Equal(dst, v)) {
		err = fmt.Errorf("get returned %d bytes (stored %d) that differ from what was put", got, stored)
	}
	r.check("get "+tag+" byte-exact", err)

	auto, err := cl.GetAuto(ctx, k)
	if err == nil && !bytes.Equal(auto, v) {
		err = fmt.Errorf("getauto returned %d bytes that differ", len(auto))
	}
	r.check("getauto "+tag+" byte-exact", err)

	if n > 1 {
		small := make([]byte, n-1)
		_, stored, err := cl.Get(ctx, k, small)
		if errors.Is(err, client.ErrBufferTooSmall) && stored == uint64(n) && bytes.Equal(small, v[:n-1]) {
			err = nil
		} else if err == nil {
			err = errors.New("a too-small buffer was accepted")
		}
		r.check("get "+tag+" into a short buffer reports the stored length", err)
	}
	r.rangeContract(ctx, k, v, tag)

	if r.Keep {
		return
	}
	r.check("remove "+tag, cl.Remove(ctx, k))
	_, err = cl.Exist(ctx, k)
	r.check("exist after remove "+tag+" is NOT_FOUND", expectStatus(err, wire.StatusNotFound))
	_, _, err = cl.Get(ctx, k, dst)
	r.check("get after remove "+tag+" is NOT_FOUND", expectStatus(err, wire.StatusNotFound))
	r.check("remove again "+tag+" is NOT_FOUND", expectStatus(cl.Remove(ctx, k), wire.StatusNotFound))
}

// rangeContract checks the range contract (wire/doc.go) on one stored value.
func (r *Runner) rangeContract(ctx context.Context, k, v []byte, tag string) {
	cl := r.Client
	n := uint64(len(v))
	buf := make([]byte, len(v)+16)
	type tc struct {
		name        string
		off, length uint64
		want        []byte
		status      wire.Status
	}
	mid := n / 3
	inner := max((n-mid)/2, 1)
	cases := []tc{
		{"length 0 fills the buffer from the offset", mid, 0, v[mid:], wire.StatusOK},
		{"inner window", mid, inner, v[mid : mid+inner], wire.StatusOK},
		{"oversized length is clamped", mid, n * 4, v[mid:], wire.StatusOK},
		{"offset == stored length reads zero bytes", n, 0, nil, wire.StatusOK},
		{"offset > stored length is INVALID", n + 1, 0, nil, wire.StatusInvalid},
	}
	for _, c := range cases {
		// length 0 asks the whole remainder, which GetRange expresses as
		// len(dst); give it exactly room for the remainder.
		dst := buf
		if c.length == 0 && c.off <= n {
			dst = buf[:max(n-c.off, 1)]
		}
		got, stored, err := cl.GetRange(ctx, k, c.off, c.length, dst)
		var cerr error
		switch {
		case c.status != wire.StatusOK:
			cerr = expectStatus(err, c.status)
		case err != nil:
			cerr = err
		case stored != n:
			cerr = fmt.Errorf("stored length %d, want %d", stored, n)
		case !bytes.Equal(dst[:got], c.want):
			cerr = fmt.Errorf("read %d bytes, want %d matching", got, len(c.want))
		}
		r.check("range "+tag+": "+c.name, cerr)
	}
}

func (r *Runner) batch(ctx context.Context) {
	cl := r.Client
	const n = 24
	keys := make([][]byte, n)
	vals := make([][]byte, n)
	sizes := []int{1, 4097, 65536, 300001}
	for i := range keys {
		keys[i] = r.key(fmt.Sprintf("batch-%d", i))
		size := sizes[i%len(sizes)]
		if r.MaxBlock > 0 && uint64(size) > r.MaxBlock {
			size = int(r.MaxBlock)
		}
		vals[i] = payload(size, uint64(1000+i))
	}
	err := allItems(cl.PutBatch(ctx, keys, vals), n, func(_ int, e error) error { return e })
	if !r.check(fmt.Sprintf("batch put %d items", n), err) {
		if !r.Keep {
			// The items that were stored go, as after a passing run.
			cl.RemoveBatch(ctx, keys)
		}
		return
	}
	err = allItems(cl.GetBatch(ctx, keys, nil), n, func(i int, res client.GetResult) error {
		if res.Err != nil || !bytes.Equal(res.Data, vals[i]) || res.Stored != uint64(len(vals[i])) {
			return fmt.Errorf("%v (got %d bytes, want %d)", res.Err, len(res.Data), len(vals[i]))
		}
		return nil
	})
	r.check(fmt.Sprintf("batch get %d items byte-exact", n), err)

	// A miss in the middle: exist-prefix stops there.
	probe := append(append([][]byte{}, keys[:5]...), r.key("batch-missing"))
	probe = append(probe, keys[5:]...)
	err = allItems(cl.ExistBatch(ctx, probe), len(probe), func(i int, e client.ExistResult) error {
		want := wire.StatusOK
		if i == 5 {
			want = wire.StatusNotFound
		}
		if wire.StatusOf(e.Err) != want {
			return fmt.Errorf("want %s, got %v", want, e.Err)
		}
		return nil
	})
	r.check("batch exist with a miss", err)
	cnt, err := cl.ExistPrefix(ctx, probe)
	if err == nil && cnt != 5 {
		err = fmt.Errorf("prefix length %d, want 5", cnt)
	}
	r.check("exist prefix stops at the first miss", err)

	if r.Keep {
		return
	}
	err = allItems(cl.RemoveBatch(ctx, keys), n, func(_ int, e error) error { return e })
	r.check(fmt.Sprintf("batch remove %d items", n), err)
	// Every key, not a prefix: a node that acknowledged a remove it did
	// not do would keep some.
	err = allItems(cl.ExistBatch(ctx, keys), n, func(_ int, e client.ExistResult) error {
		if wire.StatusOf(e.Err) != wire.StatusNotFound {
			return fmt.Errorf("still there after the remove (%v)", e.Err)
		}
		return nil
	})
	r.check("batch exist after remove finds nothing", err)
}

// allItems checks each of a batch's n results with check and reports the
// first that fails, or a batch answered with another number of results.
func allItems[T any](results []T, n int, check func(i int, res T) error) error {
	if len(results) != n {
		return fmt.Errorf("%d results for %d items", len(results), n)
	}
	for i, res := range results {
		if err := check(i, res); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
	}
	return nil
}

// refusals checks input that must be refused. The client refuses a
// zero-byte value, an empty key and a value over its own max_block_bytes
// before sending anything, so those checks are of the client a user's
// code meets (the node's own refusals of such frames are tested in its
// package and fuzzed); a value over the node's smaller max_block_bytes
// reaches the node.
func (r *Runner) refusals(ctx context.Context) {
	cl := r.Client
	r.check("client: zero-byte value is INVALID", expectStatus(cl.Put(ctx, r.key("empty"), nil), wire.StatusInvalid))
	r.check("client: empty key is INVALID", expectStatus(cl.Put(ctx, nil, []byte("x")), wire.StatusInvalid))
	if r.MaxBlock > 0 && r.MaxBlock < 1<<30 {
		big := make([]byte, r.MaxBlock+1)
		r.check("value over max_block_bytes is TOO_LARGE", expectStatus(cl.Put(ctx, r.key("big"), big), wire.StatusTooLarge))
	}
	nul := []byte("smoke/" + r.RunID + "/nul\x00a")
	nul2 := []byte("smoke/" + r.RunID + "/nul\x00b")
	err := cl.Put(ctx, nul, []byte("A"))
	if err == nil {
		err = cl.Put(ctx, nul2, []byte("B"))
	}
	if err == nil {
		a, e1 := cl.GetAuto(ctx, nul)
		b, e2 := cl.GetAuto(ctx, nul2)
		err = errors.Join(e1, e2)
		if err == nil && (string(a) != "A" || string(b) != "B") {
			err = fmt.Errorf("keys differing after a NUL byte read %q and %q", a, b)
		}
	}
	r.check("NUL bytes in keys are identity bytes", err)
	if !r.Keep {
		cl.RemoveBatch(ctx, [][]byte{nul, nul2})
	}
}
