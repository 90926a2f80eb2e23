package objtier

import (
	"log/slog"
	"testing"
	"time"
)

// Reads coming back let writes probe at once (probeNow); while a write
// probe is in flight that is deferred, not dropped: when that probe
// (sent while the bucket was still down) fails, the next write need not
// wait out the back-off its failure set. The order is callCtx's: failure,
// then probed.
func TestReadsBackDuringAWriteProbeStillLetWritesProbeOnceItEnds(t *testing.T) {
	o := newOutage(slog.New(slog.DiscardHandler), "b")
	h := newHealth("writes", o, time.Hour)
	now := time.Now()
	markDown(h, now) // retry time: now
	ok, probe := h.allow(now)
	if !ok || !probe {
		t.Fatal("no probe allowed at the retry time")
	}
	h.probeNow(now) // reads came back while the write probe is out
	later := now.Add(time.Millisecond)
	h.failure(now, later, "put", errDown) // the probe, sent while the bucket was down, fails
	h.probed(later)
	if ok, _ := h.allow(later); !ok {
		t.Fatalf("after the write probe ended, the next write waits %v of back-off although reads came back while the probe was out: "+
			"probeNow during the probe was dropped rather than applied when it ended", h.wait(later))
	}
}
