package config

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runRole runs `dfkv ROLE args...` through a cli.App built from Flags(role),
// and returns what Load made of it.
func runRole(t *testing.T, role string, args []string, lookup func(string) (string, bool)) (*Config, *Resolved, error) {
	t.Helper()
	var (
		cfg  *Config
		r    *Resolved
		lerr error
		ran  bool
	)
	app := &cli.App{
		Name:      "dfkv",
		Writer:    io.Discard,
		ErrWriter: io.Discard,
		Commands: []*cli.Command{{
			Name:  role,
			Flags: Flags(role),
			Action: func(c *cli.Context) error {
				ran = true
				cfg, r, lerr = Load(c, role, lookup)
				return nil
			},
		}},
	}
	if err := app.Run(append([]string{"dfkv", role}, args...)); err != nil {
		t.Fatalf("dfkv %s %q: %v", role, args, err)
	}
	if !ran {
		t.Fatalf("dfkv %s %q: action did not run", role, args)
	}
	return cfg, r, lerr
}

// TestFlagsPerRole: each role gets the flags of exactly its settings, as the
// brief's table assigns them, plus --config and --print-config.
// listFlags are the repeatable flags.
var listFlags = map[string]bool{"disks": true, "members": true, "mds": true, "etcd-endpoints": true}

func TestFlagsPerRole(t *testing.T) {
	tools := []string{"group", "max-block-bytes", "members", "mds", "mds-poll-ms", "namespace", "token", "tls", "tls-ca", "tls-cert", "tls-key", "tls-server-name", "timeout-ms", "dial-timeout-ms",
		"pool-size", "shm", "embedded", "batch-concurrency", "log-level", "log-format", "config", "print-config"}
	want := map[string][]string{
		"server": {"group", "id", "listen", "http-listen", "http-token-file", "tls-cert", "tls-key", "tls-client-ca", "tls-min-version", "http-tls", "mds-tls-ca", "advertise-addr", "weight", "mds", "mds-token", "disks", "disk-capacity-bytes", "store-engine", "slab-extent-bytes", "scrub-bytes-per-second", "scrub-interval-hours", "uring", "pprof", "ram-tier", "ram-tier-bytes", "ram-write-mode", "put-ack-mode", "ram-flush-threads", "ram-flush-delay-ms",
			"ram-tier-shards", "ram-tier-large-reserve-bytes", "ram-tier-numa", "read-coalesce", "shm-socket", "shm-socket-mode", "lease-ms", "lease-max", "shm-staging-bytes", "s3-endpoint", "s3-bucket", "s3-prefix", "s3-region", "s3-bucket-lookup", "s3-tls", "s3-credentials-file", "s3-profile", "s3-write", "s3-exist", "s3-timeout-ms", "s3-upload-workers", "s3-upload-queue-bytes", "max-block-bytes",
			"max-batch-items", "max-conns", "buffer-budget-bytes", "socket-buffer-bytes", "first-request-ms", "body-timeout-ms", "metrics-first-request-ms", "drain-ms", "shutdown-timeout-ms", "credentials-file", "tenant-quotas-file", "tenant-default-quota-bytes", "log-level", "log-format",
			"config", "print-config"},
		"mds": {"group", "listen", "http-listen", "http-token-file", "tls-cert", "tls-key", "tls-client-ca", "tls-min-version", "http-tls", "node-credentials-file", "members-need-token", "etcd-endpoints", "etcd-prefix", "db-path", "heartbeat-ttl-ms", "first-request-ms",
			"metrics-first-request-ms", "probe-cache-ms", "log-level", "log-format", "config", "print-config"},
		"smoke": tools,
		"bench": append(append(tools[:18:18], "workload", "protocol", "addr", "value-size", "keys", "concurrency", "duration", "ops", "warmup",
			"sweep", "fill", "mixed-get-ratio", "sequences", "pages-per-seq", "shared-prefix", "key-prefix", "seed"), tools[18:]...),
		"ctl": tools,
	}
	for _, rn := range roleNames {
		var got []string
		for _, fl := range Flags(rn.name) {
			name := fl.Names()[0]
			got = append(got, name)
			switch f := fl.(type) {
			case *cli.StringSliceFlag:
				if !listFlags[name] {
					t.Errorf("%s: --%s is a list flag", rn.name, name)
				}
				if f.Value != nil || len(f.EnvVars) != 0 || !onlyOldName(f.Aliases, name) {
					t.Errorf("%s: --%s has a value, env vars or aliases; Load layers those itself", rn.name, name)
				}
			case *cli.StringFlag:
				if listFlags[name] {
					t.Errorf("%s: --%s is not a list flag", rn.name, name)
				}
				if f.Value != "" || len(f.EnvVars) != 0 || !onlyOldName(f.Aliases, name) {
					t.Errorf("%s: --%s has a value, env vars or aliases; Load layers those itself", rn.name, name)
				}
			case *cli.GenericFlag:
				switch flagSetting(name, rn.bit).value.(type) {
				case switchValue, onOffValue:
				default:
					t.Errorf("%s: --%s is a switch flag", rn.name, name)
				}
				if f.Value.String() != "" || len(f.EnvVars) != 0 || !onlyOldName(f.Aliases, name) {
					t.Errorf("%s: --%s has a value, env vars or aliases; Load layers those itself", rn.name, name)
				}
			case *cli.BoolFlag:
				if name != FlagPrintConfig {
					t.Errorf("%s: --%s is a bool flag", rn.name, name)
				}
			default:
				t.Errorf("%s: --%s is a %T", rn.name, name, fl)
			}
		}
		if !reflect.DeepEqual(got, want[rn.name]) {
			t.Errorf("Flags(%q):\n got %q\nwant %q", rn.name, got, want[rn.name])
		}
	}
}

// onlyOldName reports whether aliases is exactly the earlier name of the
// setting flag name, if it has one.
func onlyOldName(aliases []string, name string) bool {
	s := flagSetting(name, roleAll)
	if s == nil || s.oldFlag == "" {
		return len(aliases) == 0
	}
	return len(aliases) == 1 && aliases[0] == s.oldFlag
}

func TestFlagsUnknownRolePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Flags(\"proxy\") did not panic")
		}
	}()
	Flags("proxy")
}

// TestLoadCLI runs Load behind a real command line: only flags the user set
// override, --disks repeats and replaces the list, --config names the file.
func TestLoadCLI(t *testing.T) {
	path := writeTOML(t, "[server]\nlisten = \"10.0.0.1:1\"\nmax_conns = 7\ndisks = [\"/file\"]\n")
	env := envOf(map[string]string{"DFKV_SERVER_MAX_CONNS": "8", "DFKV_SERVER_DISKS": "/env"})

	cfg, r, err := runRole(t, "server", []string{"--config", path}, env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.Listen != "10.0.0.1:1" || cfg.Server.MaxConns != 8 || !reflect.DeepEqual(cfg.Server.Disks, []string{"/env"}) {
		t.Fatalf("no flags set: listen %q max_conns %d disks %q; want file, env, env", cfg.Server.Listen, cfg.Server.MaxConns, cfg.Server.Disks)
	}
	if sourceOf(t, r, "server.listen") != fromFile || sourceOf(t, r, "server.max_conns") != fromEnv {
		t.Fatal("sources wrong without flags")
	}

	cfg, r, err = runRole(t, "server", []string{"--config", path, "--max-conns", "9", "--disks", "/f1", "--disks", "/f2,/f3", "--listen", ":0"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.MaxConns != 9 || !reflect.DeepEqual(cfg.Server.Disks, []string{"/f1", "/f2", "/f3"}) || cfg.Server.Listen != ":0" {
		t.Fatalf("flags set: max_conns %d disks %q listen %q", cfg.Server.MaxConns, cfg.Server.Disks, cfg.Server.Listen)
	}
	for _, key := range []string{"server.max_conns", "server.disks", "server.listen"} {
		if got := sourceOf(t, r, key); got != fromFlag {
			t.Errorf("%s source %s; want flag", key, got)
		}
	}

	// --config "" names no file, even when DFKV_CONFIG names a missing one.
	missing := filepath.Join(t.TempDir(), "missing.toml")
	if _, _, err := runRole(t, "server", []string{"--config", ""}, envOf(map[string]string{"DFKV_CONFIG": missing})); err != nil {
		t.Fatalf("--config \"\": %v", err)
	}
	if _, _, err := runRole(t, "server", nil, envOf(map[string]string{"DFKV_CONFIG": missing})); err == nil || !strings.Contains(err.Error(), "(from DFKV_CONFIG): no such file") {
		t.Fatalf("missing DFKV_CONFIG file: %v", err)
	}

	// A bad flag value is reported like any other source.
	if _, _, err := runRole(t, "ctl", []string{"--members", "a:1,,b:2"}, nil); err == nil ||
		!strings.Contains(err.Error(), `client.members (DFKV_CLIENT_MEMBERS) from flag --members: ["a:1", "", "b:2"] has an empty element 2`) {
		t.Fatalf("bad --members: %v", err)
	}

	// --print-config is a flag the role acts on; Load accepts it.
	if _, _, err := runRole(t, "mds", []string{"--print-config", "--log-level", "debug"}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestLoadUsesLookupOnly: LoadFrom reads nothing from the process
// environment behind its lookup (tailscale envknob).
func TestLoadUsesLookupOnly(t *testing.T) {
	t.Setenv("DFKV_SERVER_LISTEN", "10.9.9.9:1")
	cfg, _, err := LoadFrom("server", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.Listen != "127.0.0.1:7600" {
		t.Fatalf("LoadFrom read the process environment: listen %q", cfg.Server.Listen)
	}
	cfg, _, err = LoadFrom("server", "", os.LookupEnv, nil)
	if err != nil || cfg.Server.Listen != "10.9.9.9:1" {
		t.Fatalf("LoadFrom(os.LookupEnv): listen %q, %v", cfg.Server.Listen, err)
	}
}

// TestEarlierNamesStillAccepted: a deployment written with a setting's
// earlier env or flag name keeps working, the current name wins when both
// are given, and the earlier one is then reported as ignored.
func TestEarlierNamesStillAccepted(t *testing.T) {
	env := map[string]string{"DFKV_LISTEN": "127.0.0.1:7611", "DFKV_MDS_ADDRS": "10.0.0.9:7700"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, r, err := runRole(t, "server", []string{"--disk", "/d/a", "--disk", "/d/b", "--scrub-rate", "1MiB"}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.Listen != "127.0.0.1:7611" || !reflect.DeepEqual(cfg.Server.MDS, []string{"10.0.0.9:7700"}) {
		t.Errorf("earlier env names: listen %q, mds %q", cfg.Server.Listen, cfg.Server.MDS)
	}
	if !reflect.DeepEqual(cfg.Server.Disks, []string{"/d/a", "/d/b"}) || cfg.Server.ScrubBytesPerSecond != 1<<20 {
		t.Errorf("earlier flag names: disks %q, scrub rate %d", cfg.Server.Disks, cfg.Server.ScrubBytesPerSecond)
	}
	var b strings.Builder
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `server.listen = "127.0.0.1:7611"  # env DFKV_LISTEN (DFKV_SERVER_LISTEN)`) {
		t.Errorf("--print-config does not say the earlier name set server.listen:\n%s", b.String())
	}

	env["DFKV_SERVER_LISTEN"] = "127.0.0.1:7622"
	cfg, r, err = runRole(t, "server", nil, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.Listen != "127.0.0.1:7622" {
		t.Errorf("with both names set, listen = %q; want the current name's value", cfg.Server.Listen)
	}
	if w := strings.Join(r.Warnings(), "\n"); !strings.Contains(w, `DFKV_LISTEN="127.0.0.1:7611" is ignored because DFKV_SERVER_LISTEN="127.0.0.1:7622" is set`) {
		t.Errorf("warnings %q do not report the ignored earlier name", w)
	}

	// The MDS role reads the same earlier spelling for its own setting.
	_, _, err = runRole(t, "mds", []string{"--db", "/tmp/x.db", "--etcd", "127.0.0.1:2379"}, nil)
	if err != nil {
		t.Errorf("mds with earlier flag names: %v", err)
	}
}

// An on/off setting's flag may stand alone, or say 0/1 or a boolean.
func TestOnOffFlagStandsAlone(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{{[]string{"--embedded"}, 1}, {[]string{"--embedded=false"}, 0}, {[]string{"--embedded=1"}, 1}, {nil, 0}} {
		var got int
		app := &cli.App{Flags: Flags("smoke"), Action: func(ctx *cli.Context) error {
			cfg, _, err := Load(ctx, "smoke", func(string) (string, bool) { return "", false })
			if err != nil {
				return err
			}
			got = cfg.Client.Embedded
			return nil
		}}
		if err := app.Run(append([]string{"smoke"}, c.args...)); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if got != c.want {
			t.Errorf("%v: client.embedded = %d, want %d", c.args, got, c.want)
		}
	}
}
