package wire

import (
	"errors"
	"fmt"
)

// Status is the one-byte result code carried in every response prefix and
// returned unchanged by the C ABI. The numbers are part of the wire format
// and must not be renumbered.
type Status uint8

const (
	StatusOK            Status = 0
	StatusNotFound      Status = 1
	StatusInvalid       Status = 2
	StatusQuotaExceeded Status = 3
	StatusCacheFull     Status = 4
	StatusIOError       Status = 5
	StatusTimeout       Status = 6
	StatusUnavailable   Status = 7
	StatusUnsupported   Status = 8
	StatusEpochMismatch Status = 9
	StatusTooLarge      Status = 10
	StatusInternal      Status = 11
	// StatusUnauthenticated: the node requires credentials and the
	// connection has not presented a valid token (AUTH), or the token was
	// withdrawn since. The connection is closed after it.
	StatusUnauthenticated Status = 12
	// StatusForbidden: the connection's credential does not grant this
	// op on this tenant. Nothing was read, written or removed, and the
	// answer is the same whether the key exists or not.
	StatusForbidden Status = 13

	// LastStatus is the highest status this build knows.
	LastStatus = StatusForbidden
)

var statusNames = [...]string{
	StatusOK:              "OK",
	StatusNotFound:        "NOT_FOUND",
	StatusInvalid:         "INVALID",
	StatusQuotaExceeded:   "QUOTA_EXCEEDED",
	StatusCacheFull:       "CACHE_FULL",
	StatusIOError:         "IO_ERROR",
	StatusTimeout:         "TIMEOUT",
	StatusUnavailable:     "UNAVAILABLE",
	StatusUnsupported:     "UNSUPPORTED",
	StatusEpochMismatch:   "EPOCH_MISMATCH",
	StatusTooLarge:        "TOO_LARGE",
	StatusInternal:        "INTERNAL",
	StatusUnauthenticated: "UNAUTHENTICATED",
	StatusForbidden:       "FORBIDDEN",
}

// String returns the upper-case name used in logs, metrics labels and the C header.
func (s Status) String() string {
	if int(s) < len(statusNames) && statusNames[s] != "" {
		return statusNames[s]
	}
	return fmt.Sprintf("STATUS_%d", uint8(s))
}

// Error lets a Status be returned (and wrapped with %w) as an error, so the
// engines, the server and the client share one mapping from failure to code.
func (s Status) Error() string { return s.String() }

// Known reports whether s is a status this build understands.
func (s Status) Known() bool { return int(s) < len(statusNames) && statusNames[s] != "" }

// StatusOf maps an error to the status a client should see: nil is OK, any
// error wrapping a Status is that Status, and anything else is INTERNAL.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	if s, ok := err.(Status); ok {
		return s // an engine's miss: no errors.As, no allocation
	}
	var s Status
	if errors.As(err, &s) {
		return s
	}
	return StatusInternal
}

// StatusError is a Status with the human message the peer sent along with
// it (a non-OK response may carry a short UTF-8 explanation as its body).
type StatusError struct {
	Status  Status
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return e.Status.String()
	}
	return e.Status.String() + ": " + e.Message
}

// Unwrap makes errors.Is(err, wire.StatusNotFound) work on a StatusError.
func (e *StatusError) Unwrap() error { return e.Status }
