package objtier

import (
	"context"
	"errors"
)

// ErrNotExist is wrapped by a Bucket's error for an object that is not
// there: an ordinary miss, not an outage.
var ErrNotExist = errors.New("object does not exist")

// ErrTooLarge is wrapped by Get's error for an object larger than the
// caller's limit; the tier treats it as a value of another layout.
var ErrTooLarge = errors.New("object larger than the limit")

// Bucket is the object store under the tier, one bucket and prefix of an
// S3-compatible service in production (package s3bucket) and an in-memory
// map in the unit tests. Every method honours ctx's deadline; the tier
// gives each call its own timeout. Implementations are safe for
// concurrent use.
type Bucket interface {
	// Get reads the whole object name. Once it knows the object's size n
	// (at most max, else ErrTooLarge) it asks alloc for a buffer of
	// length n, fills it and returns it.
	Get(ctx context.Context, name string, max int64, alloc func(n int) []byte) ([]byte, error)
	// Head returns the object's size, or ErrNotExist.
	Head(ctx context.Context, name string) (int64, error)
	// Put stores body as object name, replacing any previous object.
	Put(ctx context.Context, name string, body []byte) error
	// Delete removes object name; deleting a missing object succeeds.
	Delete(ctx context.Context, name string) error
	// String names the bucket for logs: endpoint and bucket, never a
	// credential.
	String() string
	// Close lets go of the bucket's connections; the tier calls it last.
	Close() error
}
