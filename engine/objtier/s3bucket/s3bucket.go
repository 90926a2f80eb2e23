// Package s3bucket is the object tier's Bucket on an S3-compatible service
// (AWS S3, MinIO, Ceph RGW, Cloudflare R2, GCS's XML API, versitygw),
// through the minio-go client.
//
// minio-go rather than aws-sdk-go-v2: it is one module with a handful of
// dependencies (the AWS SDK is a tree of modules with its own middleware
// stack), it is written for S3-compatible services first (path-style
// addressing, regions that do not exist on AWS), and it does not add the
// newer AWS checksum headers that several compatible servers reject. Its
// own retries are off: the tier has one timeout per call and backs off
// as a whole during an outage, which the client's ten silent retries
// would defeat.
//
// Credentials come from the usual places, first found wins: the
// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN), then a shared credentials file (Options.CredentialsFile,
// else AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials; profile
// Options.Profile, else AWS_PROFILE, else "default"), then MinIO's
// MINIO_ACCESS_KEY and MINIO_SECRET_KEY. No credential ever reaches a log
// line or an error.
package s3bucket

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/dfkv/dfkv/engine/objtier"
)

// Options say which bucket of which service to use.
type Options struct {
	Endpoint string // host:port, no scheme
	Bucket   string
	Region   string // default us-east-1
	// Lookup is how the bucket is addressed: "auto" (virtual-host on
	// AWS, path-style elsewhere), "path" or "virtual".
	Lookup          string
	TLS             bool
	CredentialsFile string
	Profile         string
	// CheckTimeout bounds the check Open makes (default 10s).
	CheckTimeout time.Duration
}

// Bucket is an objtier.Bucket on one S3 bucket.
type Bucket struct {
	tr     *http.Transport
	c      *minio.Client
	core   minio.Core // for GetObject in one request
	bucket string
	desc   string
}

// Open connects to the service and checks that the bucket exists and
// the credentials may use it, so a misconfigured tier is refused at start
// with the endpoint and bucket named rather than failing every call later.
func Open(ctx context.Context, o Options) (*Bucket, error) {
	scheme := "http"
	if o.TLS {
		scheme = "https"
	}
	desc := fmt.Sprintf("s3://%s at %s://%s", o.Bucket, scheme, o.Endpoint)
	if o.Endpoint == "" || o.Bucket == "" {
		return nil, fmt.Errorf("object store: an endpoint and a bucket are both needed (got %q and %q)", o.Endpoint, o.Bucket)
	}
	var lookup minio.BucketLookupType
	switch o.Lookup {
	case "", "auto":
		lookup = minio.BucketLookupAuto
	case "path":
		lookup = minio.BucketLookupPath
	case "virtual":
		lookup = minio.BucketLookupDNS
	default:
		return nil, fmt.Errorf("object store %s: unknown bucket lookup %q; valid: auto, path, virtual", desc, o.Lookup)
	}
	region := o.Region
	if region == "" {
		region = "us-east-1"
	}
	tr, err := minio.DefaultTransport(o.TLS)
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", desc, err)
	}
	// The tier runs up to its workers plus the node's readers at once;
	// keep their connections instead of opening one per call.
	tr.MaxIdleConnsPerHost = 256
	tr.ResponseHeaderTimeout = 0 // each call has its own deadline
	creds := credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{Filename: o.CredentialsFile, Profile: o.Profile},
		&credentials.EnvMinio{},
	})
	c, err := minio.New(o.Endpoint, &minio.Options{
		Creds: creds, Secure: o.TLS, Region: region, BucketLookup: lookup,
		Transport: tr, MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", desc, err)
	}
	b := &Bucket{tr: tr, c: c, core: minio.Core{Client: c}, bucket: o.Bucket, desc: desc}
	timeout := o.CheckTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ok, err := c.BucketExists(cctx, o.Bucket)
	if err != nil {
		return nil, fmt.Errorf("object store %s: checking the bucket: %s", desc, explain(err))
	}
	if !ok {
		return nil, fmt.Errorf("object store %s: the bucket does not exist; create it (dfkv never creates buckets: their lifecycle and access policies are the operator's)", desc)
	}
	return b, nil
}

// explain turns a client error into what an operator can act on.
func explain(err error) string {
	r := minio.ToErrorResponse(err)
	switch {
	case r.StatusCode == http.StatusForbidden || r.Code == "AccessDenied" || r.Code == "InvalidAccessKeyId" || r.Code == "SignatureDoesNotMatch":
		return fmt.Sprintf("access denied (%s): check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the credentials file and profile) and the bucket's policy", codeOr(r, err))
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time: is the endpoint right and reachable?"
	}
	return err.Error()
}

func codeOr(r minio.ErrorResponse, err error) string {
	if r.Code != "" {
		return r.Code
	}
	return err.Error()
}

func notExist(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == "NoSuchKey" || r.Code == "NotFound" || r.StatusCode == http.StatusNotFound && r.Code != "NoSuchBucket"
}

// wrap maps a missing object to objtier.ErrNotExist.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	if notExist(err) {
		return objtier.ErrNotExist
	}
	return err
}

// Get reads the whole object with one GET (minio.Client's GetObject
// would HEAD first to learn the size; the GET's own answer carries it).
func (b *Bucket) Get(ctx context.Context, name string, limit int64, alloc func(n int) []byte) ([]byte, error) {
	body, info, _, err := b.core.GetObject(ctx, b.bucket, name, minio.GetObjectOptions{})
	if err != nil {
		return nil, wrap(err)
	}
	defer body.Close()
	if info.Size < 0 || info.Size > limit {
		return nil, fmt.Errorf("%s is %d bytes (limit %d): %w", name, info.Size, limit, objtier.ErrTooLarge)
	}
	buf := alloc(int(info.Size))
	if _, err := io.ReadFull(body, buf); err != nil {
		return nil, wrap(err)
	}
	// Read on to the end of the body: net/http reuses a connection only
	// after its response body reached EOF, and a new connection per GET
	// costs a dial (and a TLS handshake) per block.
	var tail [1]byte
	if n, err := body.Read(tail[:]); n != 0 || err != io.EOF {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("%s: more bytes than the %d its size said", name, info.Size)
		}
		return nil, wrap(err)
	}
	return buf, nil
}

// Head returns the object's size.
func (b *Bucket) Head(ctx context.Context, name string) (int64, error) {
	info, err := b.c.StatObject(ctx, b.bucket, name, minio.StatObjectOptions{})
	if err != nil {
		return 0, wrap(err)
	}
	return info.Size, nil
}

// Put stores body as one object in one request.
func (b *Bucket) Put(ctx context.Context, name string, body []byte) error {
	_, err := b.c.PutObject(ctx, b.bucket, name, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{
		ContentType: "application/octet-stream",
		// The object carries its own CRC-32C; signing the payload too
		// would hash every byte once more for nothing.
		DisableContentSha256: true,
		DisableMultipart:     true,
	})
	return err
}

// Delete removes the object; a missing object is not an error.
func (b *Bucket) Delete(ctx context.Context, name string) error {
	err := b.c.RemoveObject(ctx, b.bucket, name, minio.RemoveObjectOptions{})
	if notExist(err) {
		return nil
	}
	return err
}

// Close closes the kept-alive connections to the service, so a node
// that stops leaves none open behind it (a service draining for a
// restart would wait on them).
func (b *Bucket) Close() error {
	b.tr.CloseIdleConnections()
	return nil
}

// String names the bucket and endpoint.
func (b *Bucket) String() string { return b.desc }

var _ objtier.Bucket = (*Bucket)(nil)
