package sim_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
)

// logHandler puts a process's warnings and errors in the event log. File
// offsets in them are written as N: where an engine placed a value may
// depend on which of a batch's items, run in parallel, reached its
// allocator first, and a replay's log must be the same bytes.
type logHandler struct {
	w     *world
	who   string
	attrs []slog.Attr
}

var fileOffset = regexp.MustCompile(`offset [0-9]+`)

func (w *world) logger(who string) *slog.Logger { return slog.New(&logHandler{w: w, who: who}) }

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || *infoFlag
}

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "log %s %q", r.Level, r.Message)
	add := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%q", a.Key, a.Value.String())
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.w.log.add(h.w.now(), h.who, fileOffset.ReplaceAllString(b.String(), "offset N"))
	return nil
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{w: h.w, who: h.who, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

func (h *logHandler) WithGroup(string) slog.Handler { return h }
