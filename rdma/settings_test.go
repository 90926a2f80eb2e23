package rdma

// Not hardware tests: the transport's settings from the environment.

import (
	"strings"
	"testing"
	"time"
)

func TestFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(name string) (string, bool) {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == name {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	f := func(want Settings, kv ...string) {
		t.Helper()
		got, err := FromEnv(env(kv...))
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", kv, got, err, want)
		}
	}
	f(Settings{OpTimeout: DefaultOpTimeout, BatchOpTimeout: DefaultOpTimeout})
	f(Settings{Enabled: true, Device: "mlx5_1", OpTimeout: 250 * time.Millisecond, BatchOpTimeout: 250 * time.Millisecond},
		"DFKV_RDMA", "1", "DFKV_RDMA_DEV", "mlx5_1", "DFKV_RDMA_OP_TIMEOUT_MS", "250")
	f(Settings{Enabled: true, OpTimeout: time.Second, BatchOpTimeout: 5 * time.Second},
		"DFKV_RDMA", "on", "DFKV_RDMA_OP_TIMEOUT_MS", "1000", "DFKV_RDMA_BATCH_OP_TIMEOUT_MS", "5000")
	bad := func(want string, kv ...string) {
		t.Helper()
		if _, err := FromEnv(env(kv...)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %s", kv, err, want)
		}
	}
	bad("DFKV_RDMA=", "DFKV_RDMA", "maybe")
	bad("DFKV_RDMA_OP_TIMEOUT_MS", "DFKV_RDMA_OP_TIMEOUT_MS", "0")
	bad("DFKV_RDMA_BATCH_OP_TIMEOUT_MS", "DFKV_RDMA_BATCH_OP_TIMEOUT_MS", "1s")
	bad("shorter name", "DFKV_RDMA_DEV", "mlx5_bond_0")
}

// TestClientFromEnv: a client asked for RDMA where it cannot run (this
// default build, without the ibverbs tag) gets no options and one reason to
// warn with; off, neither; malformed, the reason names the variable.
func TestClientFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	if o, why := ClientFromEnv(env()); o != nil || why != "" {
		t.Fatalf("off: %+v %q", o, why)
	}
	if o, why := ClientFromEnv(env(EnvSwitch, "1", EnvOpTimeout, "soon")); o != nil || !strings.Contains(why, EnvOpTimeout) {
		t.Fatalf("malformed: %+v %q", o, why)
	}
	o, why := ClientFromEnv(env(EnvSwitch, "1"))
	if _, err := DefaultProvider(); err == nil {
		t.Skip("a build with the ibverbs tag and a working provider: nothing to refuse")
	}
	if o != nil || !strings.Contains(why, "using TCP") {
		t.Fatalf("on, unbuildable: %+v %q", o, why)
	}
}
