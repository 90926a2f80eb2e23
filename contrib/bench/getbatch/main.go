// Command getbatch measures the Go client's GetBatch throughput, the
// baseline that contrib/python/bench_dfkv.py compares the Python client
// (through libdfkv.so) against on the same server and keys:
//
//	go run ./contrib/bench/getbatch -members 127.0.0.1:7600 -namespace-hex 6e73 -prefix bench/ -n 64 -size 1048576 -seconds 3
//
// The keys are prefix+decimal index and must already hold size-byte
// values (bench_dfkv.py writes them). It prints one JSON line.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dfkv/dfkv/wire/client"
)

func main() {
	members := flag.String("members", "127.0.0.1:7600", "comma-separated host:port list")
	nsHex := flag.String("namespace-hex", "", "namespace bytes in hex")
	prefix := flag.String("prefix", "bench/", "key prefix")
	n := flag.Int("n", 64, "keys per batch")
	size := flag.Int("size", 1<<20, "value size in bytes")
	seconds := flag.Float64("seconds", 3, "measuring time")
	flag.Parse()
	if err := run(*members, *nsHex, *prefix, *n, *size, *seconds); err != nil {
		fmt.Fprintln(os.Stderr, "getbatch:", err)
		os.Exit(1)
	}
}

func run(members, nsHex, prefix string, n, size int, seconds float64) error {
	ns, err := hex.DecodeString(nsHex)
	if err != nil {
		return fmt.Errorf("-namespace-hex: %w", err)
	}
	c, err := client.Open(client.Options{Namespace: ns, Members: strings.Split(members, ",")})
	if err != nil {
		return err
	}
	defer c.Close()
	keys := make([][]byte, n)
	dsts := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "%s%d", prefix, i)
		dsts[i] = make([]byte, size)
	}
	ctx := context.Background()
	check := func() error {
		for i, r := range c.GetBatch(ctx, keys, dsts) {
			if r.Err != nil || len(r.Data) != size {
				return fmt.Errorf("key %q: %d bytes, %v", keys[i], len(r.Data), r.Err)
			}
		}
		return nil
	}
	if err := check(); err != nil { // warm the connections
		return err
	}
	batches := 0
	start := time.Now()
	for time.Since(start).Seconds() < seconds {
		if err := check(); err != nil {
			return err
		}
		batches++
	}
	el := time.Since(start).Seconds()
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"batches": batches, "seconds": el,
		"gb_per_s":      float64(batches*n*size) / el / 1e9,
		"batch_ms":      el * 1000 / float64(batches),
		"items_per_sec": float64(batches*n) / el,
	})
}
