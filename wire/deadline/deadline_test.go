package deadline

import (
	"testing"
	"time"
)

// TestMove: a deadline is kept while the next one is at most slack later,
// and moved to any earlier one or one further out. The two sequences are
// the client's (deadlines from Timeout, then one from a context: no
// slack) and the node's (WriteTimeout from a clock that also steps back).
func TestMove(t *testing.T) {
	const slack = 100 * time.Millisecond
	t0 := time.Unix(1000, 0)
	type step struct {
		d     time.Time
		slack time.Duration
		move  bool
	}
	for name, steps := range map[string][]step{
		"client": {
			{t0, slack, true}, // first deadline
			{t0.Add(50 * time.Millisecond), slack, false}, // within slack: kept
			{t0.Add(100 * time.Millisecond), slack, false},
			{t0.Add(150 * time.Millisecond), slack, true}, // beyond slack
			{t0.Add(100 * time.Millisecond), slack, true}, // earlier: always
			{t0.Add(101 * time.Millisecond), 0, true},     // no slack (a context's deadline)
		},
		"node": {
			{t0, slack, true},
			{t0.Add(60 * time.Millisecond), slack, false},  // within the slack: kept
			{t0.Add(100 * time.Millisecond), slack, false}, // exactly the slack
			{t0.Add(101 * time.Millisecond), slack, true},  // past it
			{t0.Add(-899 * time.Millisecond), slack, true}, // clock stepped back: earlier
			{t0.Add(-799 * time.Millisecond), slack, false},
		},
	} {
		var l Lazy
		for i, s := range steps {
			if got := l.Move(s.d, s.slack); got != s.move {
				t.Fatalf("%s step %d: Move = %v, want %v", name, i, got, s.move)
			}
			if s.move && !l.at.Equal(s.d) {
				t.Fatalf("%s step %d: kept %v, want %v", name, i, l.at, s.d)
			}
		}
	}
}

func TestSlack(t *testing.T) {
	for _, c := range []struct{ timeout, want time.Duration }{
		{time.Minute, 100 * time.Millisecond},
		{5 * time.Second, 78125 * time.Microsecond},
		{640 * time.Millisecond, 10 * time.Millisecond},
		{0, 0},
	} {
		if got := Slack(c.timeout); got != c.want {
			t.Errorf("Slack(%v) = %v, want %v", c.timeout, got, c.want)
		}
	}
}
