package smoke

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/roles/internal/roletest"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// failLines is smoke's FAIL lines and its summary.
func failLines(out string) string {
	var fails []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "smoke:") {
			fails = append(fails, l)
		}
	}
	return strings.Join(fails, "\n")
}

// leftKeys lists the smoke batch keys of runID still stored on addr.
func leftKeys(t *testing.T, addr, runID string) []string {
	cl, err := client.Open(client.Options{Members: []string{addr}, Namespace: []byte("dfkv-tools"), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var left []string
	for i := 0; i < 24; i++ {
		k := fmt.Sprintf("smoke/%s/batch-%d", runID, i)
		if _, err := cl.Exist(context.Background(), []byte(k)); wire.StatusOf(err) != wire.StatusNotFound {
			left = append(left, k)
		}
	}
	return left
}

// TestSmokeSmallMaxBlock: max_block_bytes may be anything from 4KiB to
// 1GiB; a node and smoke both configured with 256KiB pass, smoke's sizes
// kept within the limit.
func TestSmokeSmallMaxBlock(t *testing.T) {
	addr, _ := roletest.StartNode(t, map[string][]string{"store-engine": {"file"}, "max-block-bytes": {"256KiB"}})
	code, out, errs := runSmoke(t, "--members", addr, "--max-block-bytes", "256KiB", "--run-id", "small")
	if code != 0 {
		t.Fatalf("smoke against a node and a tool both at max_block_bytes 256KiB: exit %d\n%s\n%s", code, failLines(out), errs)
	}
}

// TestSmokeLeavesNoBatchKeys: without --keep smoke removes what it
// wrote, also when an item of its batch PUT fails (here the node's
// max_block_bytes, 256KiB, is below smoke's default 64MiB, which smoke
// rightly reports as failures) and the other items were stored.
func TestSmokeLeavesNoBatchKeys(t *testing.T) {
	addr, _ := roletest.StartNode(t, map[string][]string{"store-engine": {"file"}, "max-block-bytes": {"256KiB"}})
	code, out, errs := runSmoke(t, "--members", addr, "--run-id", "leak")
	t.Logf("smoke: exit %d\n%s\n%s", code, failLines(out), errs)
	if left := leftKeys(t, addr, "leak"); len(left) > 0 {
		t.Fatalf("smoke (without --keep) left %d keys on the node: %v", len(left), left)
	}
}
