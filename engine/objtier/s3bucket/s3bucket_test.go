package s3bucket_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/engine/objtier"
	"github.com/dfkv/dfkv/engine/objtier/s3bucket"
	"github.com/dfkv/dfkv/engine/objtier/s3test"
)

func openBucket(t *testing.T, s *s3test.Server, mutate func(*s3bucket.Options)) (*s3bucket.Bucket, error) {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", s.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.SecretKey)
	o := s3bucket.Options{Endpoint: s.Endpoint, Bucket: s.Bucket, Lookup: "path"}
	if mutate != nil {
		mutate(&o)
	}
	return s3bucket.Open(context.Background(), o)
}

func TestAgainstRealS3(t *testing.T) {
	s := s3test.Start(t)
	b, err := openBucket(t, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	body := bytes.Repeat([]byte("dfkv"), 300000)
	if err := b.Put(ctx, "a/b/obj", body); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Head(ctx, "a/b/obj"); err != nil || n != int64(len(body)) {
		t.Fatalf("Head = %d, %v", n, err)
	}
	got, err := b.Get(ctx, "a/b/obj", 1<<30, func(n int) []byte { return make([]byte, n) })
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Get: %v", err)
	}
	if _, err := b.Get(ctx, "a/b/obj", 100, func(n int) []byte { return make([]byte, n) }); !errors.Is(err, objtier.ErrTooLarge) {
		t.Fatalf("Get over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := b.Get(ctx, "a/b/none", 1<<30, func(n int) []byte { return make([]byte, n) }); !errors.Is(err, objtier.ErrNotExist) {
		t.Fatalf("Get of a missing object: %v, want ErrNotExist", err)
	}
	if _, err := b.Head(ctx, "a/b/none"); !errors.Is(err, objtier.ErrNotExist) {
		t.Fatalf("Head of a missing object: %v, want ErrNotExist", err)
	}
	if err := b.Delete(ctx, "a/b/obj"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "a/b/obj"); err != nil {
		t.Fatalf("deleting a missing object: %v", err)
	}
	if _, err := b.Head(ctx, "a/b/obj"); !errors.Is(err, objtier.ErrNotExist) {
		t.Fatalf("Head after Delete: %v", err)
	}
}

func TestOpenRefusesWhatCannotWork(t *testing.T) {
	s := s3test.Start(t)
	cases := []struct {
		name   string
		mutate func(*s3bucket.Options)
		env    string
		want   []string
	}{
		{"missing bucket", func(o *s3bucket.Options) { o.Bucket = "no-such-bucket" }, "", []string{"no-such-bucket", s.Endpoint, "does not exist"}},
		{"wrong secret", nil, "wrong", []string{s.Bucket, s.Endpoint, "access denied"}},
		{"bad lookup", func(o *s3bucket.Options) { o.Lookup = "sideways" }, "", []string{"sideways"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := openBucket(t, s, func(o *s3bucket.Options) {
				if c.mutate != nil {
					c.mutate(o)
				}
			})
			if c.env != "" {
				t.Setenv("AWS_SECRET_ACCESS_KEY", c.env)
				_, err = s3bucket.Open(context.Background(), s3bucket.Options{Endpoint: s.Endpoint, Bucket: s.Bucket, Lookup: "path"})
			}
			if err == nil {
				t.Fatal("opened")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), s.SecretKey) || strings.Contains(err.Error(), "wrong") && c.env != "" && strings.Contains(err.Error(), "="+c.env) {
				t.Errorf("error prints a credential: %q", err)
			}
		})
	}
}
