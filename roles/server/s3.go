package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/objtier"
	"github.com/dfkv/dfkv/engine/objtier/s3bucket"
)

// openObjectTier puts the object-store tier (server.s3_*) over backing,
// after checking that its bucket exists and the credentials may use it:
// a tier that cannot work refuses the start, naming endpoint and bucket.
func openObjectTier(sc config.Server, backing engine.StoreEngine, clock engine.Clock, log *slog.Logger, m *s3Metrics) (*objtier.Tier, error) {
	write, err := objtier.ParseWriteMode(sc.S3Write)
	if err != nil {
		return nil, err
	}
	exist, err := objtier.ParseExistMode(sc.S3Exist)
	if err != nil {
		return nil, err
	}
	b, err := s3bucket.Open(context.Background(), s3bucket.Options{
		Endpoint: sc.S3Endpoint, Bucket: sc.S3Bucket, Region: sc.S3Region, Lookup: sc.S3BucketLookup, TLS: sc.S3TLS == 1,
		CredentialsFile: sc.S3CredentialsFile, Profile: sc.S3Profile, CheckTimeout: max(sc.S3Timeout, 5*time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("%w (server.s3_endpoint, server.s3_bucket)", err)
	}
	marks := ""
	if len(sc.Disks) > 0 {
		marks = filepath.Join(sc.Disks[0], objtier.MarksFileName)
	} else if write != objtier.WriteOff {
		log.Warn("object store tier: no disk to keep its pending deletes on; a block removed while the object store is unreachable can be read back from it after a restart")
	}
	t, err := objtier.Open(objtier.Options{
		Backing: backing, Bucket: b, Prefix: sc.S3Prefix, Write: write, Exist: exist, Timeout: sc.S3Timeout,
		Workers: sc.S3UploadWorkers, QueueBytes: int64(sc.S3UploadQueueBytes), MaxValueBytes: sc.MaxBlockBytes,
		DrainTimeout: sc.ShutdownTimeout, Logger: log, Clock: clock, Observe: m.observe, MarksFile: marks,
	})
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	log.Info("object store tier on", "bucket", b.String(), "prefix", sc.S3Prefix, "write", write.String(), "exist", exist.String())
	return t, nil
}

// s3Metrics are the object-store tier's series: the call durations it
// observes as they happen, and its counters read at each scrape.
type s3Metrics struct {
	tier     *objtier.Tier
	duration *prometheus.HistogramVec
}

func newS3Metrics() *s3Metrics {
	return &s3Metrics{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "dfkv_s3_request_duration_seconds",
		Help:    "Duration of object store calls by operation (skipped calls during an outage are not observed).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"op"})}
}

func (m *s3Metrics) observe(op objtier.Op, st objtier.CallStatus, d time.Duration) {
	if st != objtier.CallSkipped {
		m.duration.WithLabelValues(op.String()).Observe(d.Seconds())
	}
}

func s3Desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("dfkv_s3_"+name, help, labels, nil)
}

var (
	descS3Requests    = s3Desc("requests_total", "Object store calls by operation and outcome (ok, not_found, error, timeout, skipped during an outage).", "op", "status")
	descS3Bytes       = s3Desc("bytes_total", "Object bytes (headers included) read from and written to the object store.", "direction")
	descS3ReadThrough = s3Desc("read_through_total", "Reads of the object store for RAM and disk misses (identical misses at once share one), by result: hit (an object served, or a value still in the upload queue) or miss.", "result")
	descS3Promoted    = s3Desc("promoted_total", "Objects read through and written into the disks.")
	descS3Ignored     = s3Desc("ignored_objects_total", "Objects whose checksum, length, key or layout did not match: served as misses.")
	descS3QueueItems  = s3Desc("upload_queue_items", "Values waiting for (or in) an async upload.")
	descS3QueueBytes  = s3Desc("upload_queue_bytes", "Bytes waiting for (or in) an async upload.")
	descS3Uploaded    = s3Desc("uploads_total", "Async uploads completed.")
	descS3Drops       = s3Desc("upload_drops_total", "Async uploads dropped, by reason (queue_full, failed).", "reason")
	descS3Pending     = s3Desc("pending_deletes", "Keys whose object must be deleted (REMOVE during an outage, dropped uploads); never read back meanwhile.")
	descS3Reachable   = s3Desc("reachable", "1 while the object store answers; 0 during an outage.")
	descS3Outages     = s3Desc("outages_total", "Object store outages (a failed call after a success).")
)

// s3Collector exports the tier's counters; registered only with the tier on.
type s3Collector struct{ m *s3Metrics }

func (c *s3Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descS3Requests, descS3Bytes, descS3ReadThrough, descS3Promoted, descS3Ignored,
		descS3QueueItems, descS3QueueBytes, descS3Uploaded, descS3Drops, descS3Pending, descS3Reachable, descS3Outages} {
		ch <- d
	}
	c.m.duration.Describe(ch)
}

func (c *s3Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.tier.TierStats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	for _, cc := range st.Calls {
		counter(descS3Requests, cc.Count, cc.Op, cc.Status)
	}
	counter(descS3Bytes, st.BytesRead, "read")
	counter(descS3Bytes, st.BytesWritten, "written")
	counter(descS3ReadThrough, st.ReadThroughHits, "hit")
	counter(descS3ReadThrough, st.ReadThroughMisses, "miss")
	counter(descS3Promoted, st.Promoted)
	counter(descS3Ignored, st.Ignored)
	gauge(descS3QueueItems, float64(st.QueueItems))
	gauge(descS3QueueBytes, float64(st.QueueBytes))
	counter(descS3Uploaded, st.Uploaded)
	counter(descS3Drops, st.UploadDrops, "queue_full")
	counter(descS3Drops, st.UploadFailed, "failed")
	gauge(descS3Pending, float64(st.PendingDeletes))
	reachable := 0.0
	if st.Reachable {
		reachable = 1
	}
	gauge(descS3Reachable, reachable)
	counter(descS3Outages, st.Outages)
	c.m.duration.Collect(ch)
}
