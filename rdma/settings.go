package rdma

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrNotBuilt is the reason a binary built without the "ibverbs" tag (or
// without cgo) cannot use RDMA hardware: it has no verbs library. The
// transport still runs over a Provider given in its options (the Fake).
var ErrNotBuilt = errors.New("this dfkv is built without RDMA: build it with `go build -tags ibverbs` (cgo, with libibverbs-dev installed)")

// DefaultProvider is the verbs library of this build: libibverbs in a
// build with -tags ibverbs, otherwise none (ErrNotBuilt).
func DefaultProvider() (Provider, error) { return defaultProvider() }

// Check reports why this binary cannot serve RDMA on device dev (""
// the first with an ACTIVE port), or nil: it opens the device and closes
// it again. The config calls it when DFKV_RDMA asks for the transport.
func Check(dev string) error {
	p, err := defaultProvider()
	if err != nil {
		return err
	}
	d, err := p.Open(dev)
	if err != nil {
		return err
	}
	return d.Close()
}

// The transport's settings come from the environment, under the names
// nodes and clients have always read (DFKV_RDMA, DFKV_RDMA_DEV,
// DFKV_RDMA_OP_TIMEOUT_MS, DFKV_RDMA_BATCH_OP_TIMEOUT_MS). They are not
// rows of the config table (server.*): the server role does not start the
// transport yet, and a row would print and accept settings no node acts
// on. Whoever starts the transport reads them with FromEnv.
const (
	EnvSwitch         = "DFKV_RDMA"
	EnvDevice         = "DFKV_RDMA_DEV"
	EnvOpTimeout      = "DFKV_RDMA_OP_TIMEOUT_MS"
	EnvBatchOpTimeout = "DFKV_RDMA_BATCH_OP_TIMEOUT_MS"
)

// DefaultOpTimeout bounds one RDMA operation when DFKV_RDMA_OP_TIMEOUT_MS
// is unset (the client's default request time).
const DefaultOpTimeout = 10 * time.Second

// Settings are the transport's settings from the environment.
type Settings struct {
	Enabled bool   // DFKV_RDMA: 1 turns the transport on
	Device  string // DFKV_RDMA_DEV: "" the first device with an ACTIVE port
	// OpTimeout bounds a one-item call, BatchOpTimeout a call of several
	// items (unset: OpTimeout), each as one absolute deadline over the
	// control exchange and every completion of the call.
	OpTimeout      time.Duration
	BatchOpTimeout time.Duration
}

// FromEnv reads the settings with lookup (os.LookupEnv in production).
// A malformed value is an error naming the variable.
func FromEnv(lookup func(string) (string, bool)) (Settings, error) {
	s := Settings{OpTimeout: DefaultOpTimeout}
	var errs []error
	if v, ok := lookup(EnvSwitch); ok {
		on, known := ParseSwitch(v)
		if !known {
			errs = append(errs, fmt.Errorf("%s=%q is not a boolean (1/0, true/false, yes/no, on/off)", EnvSwitch, v))
		}
		s.Enabled = on
	}
	if v, ok := lookup(EnvDevice); ok {
		s.Device = strings.TrimSpace(v)
		if len(s.Device) > maxDeviceName {
			errs = append(errs, fmt.Errorf("%s=%q: device names of at most %d bytes fit the bootstrap frame; give the device a shorter name (rdma dev set %s name SHORT)", EnvDevice, v, maxDeviceName, s.Device))
		}
	}
	ms := func(name string, dst *time.Duration) {
		v, ok := lookup(name)
		if !ok || strings.TrimSpace(v) == "" {
			return
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
		if err != nil || n == 0 || n > 3600000 {
			errs = append(errs, fmt.Errorf("%s=%q: want milliseconds from 1 to 3600000", name, v))
			return
		}
		*dst = time.Duration(n) * time.Millisecond
	}
	ms(EnvOpTimeout, &s.OpTimeout)
	s.BatchOpTimeout = s.OpTimeout // unset follows the one-item bound
	ms(EnvBatchOpTimeout, &s.BatchOpTimeout)
	return s, errors.Join(errs...)
}

// ParseSwitch reads an on/off variable: strconv.ParseBool's forms,
// yes/no, on/off, or empty for off.
func ParseSwitch(v string) (on, known bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "no", "off":
		return false, true
	case "yes", "on":
		return true, true
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	return b, err == nil
}

// ClientFromEnv returns the client options DFKV_RDMA asks for (with
// lookup, os.LookupEnv in production), or nil when it is off or cannot
// run here; then why says which, for the caller to warn once (empty when
// it is simply off). A client without RDMA speaks TCP.
func ClientFromEnv(lookup func(string) (string, bool)) (opts *ClientOptions, why string) {
	s, err := FromEnv(lookup)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("RDMA settings ignored, using TCP: %v", err)
	case !s.Enabled:
		return nil, ""
	}
	if err := Check(s.Device); err != nil {
		return nil, fmt.Sprintf("%s asks for RDMA, which cannot run here (%v); using TCP", EnvSwitch, err)
	}
	return &ClientOptions{Device: s.Device, OpTimeout: s.OpTimeout, BatchOpTimeout: s.BatchOpTimeout}, ""
}
