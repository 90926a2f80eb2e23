package config

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// role is a bit per dfkv role, so a setting can name the roles that take it.
type role uint8

const (
	roleServer role = 1 << iota
	roleMDS
	roleSmoke
	roleBench
	roleCtl

	roleTools = roleSmoke | roleBench | roleCtl
	roleAll   = roleServer | roleMDS | roleTools
)

// roleNames lists the roles in the order help text and errors show them.
var roleNames = []struct {
	name string
	bit  role
}{
	{"server", roleServer}, {"mds", roleMDS}, {"smoke", roleSmoke}, {"bench", roleBench}, {"ctl", roleCtl},
}

func roleBit(name string) (role, bool) {
	for _, r := range roleNames {
		if r.name == name {
			return r.bit, true
		}
	}
	return 0, false
}

func (r role) String() string {
	var names []string
	for _, n := range roleNames {
		if r&n.bit != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ", ")
}

func validRoles() string { return roleAll.String() }

// setting is one row of the table. The TOML decode, the DFKV_* and flag
// bindings, --print-config and the dfkv.example.toml test all read it, so a
// setting added here is everywhere at once.
//
// The env and flag names follow from the key (envName, flagName), so one
// spelling serves everywhere. Names a setting had before that rule are
// kept in oldEnv and oldFlag and still accepted, so no deployment breaks;
// oldFlag also holds a one-letter short form (bench's -c).
type setting struct {
	key     string // TOML key, dotted: "server.listen"; a top-level key has no dot
	env     string // environment variable: envName(key)
	flag    string // flag name without dashes: flagName(key)
	oldEnv  string // earlier environment variable, still read when env is unset
	oldFlag string // earlier or one-letter flag name, still accepted as an alias
	roles   role   // roles that take it; only they read, check and print it
	def     string // default, in the syntax of the env variable (a list: comma list)
	help    string // one line for flag help and dfkv.example.toml
	value   value  // parser, validator and printer of the Config field
}

// envName is the environment variable of a TOML key: DFKV_ and the key in
// upper case with dots as underscores (server.max_conns is
// DFKV_SERVER_MAX_CONNS).
func envName(key string) string {
	return "DFKV_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// flagName is the flag of a TOML key: its name inside its table with
// dashes for underscores (server.max_conns is --max-conns), since a role's
// flags are its own table's; the log table's keep their table's name
// (--log-level), which every role shares.
func flagName(key string) string {
	section, leaf, found := strings.Cut(key, ".")
	if !found {
		leaf = section
	}
	flag := strings.ReplaceAll(leaf, "_", "-")
	if section == "log" {
		flag = "log-" + flag
	}
	return flag
}

func init() {
	for i := range settings {
		settings[i].env = envName(settings[i].key)
		settings[i].flag = flagName(settings[i].key)
	}
}

// section is the TOML table a setting lives in ("" for top level), leaf its
// name inside it.
func (s *setting) section() string {
	if i := strings.IndexByte(s.key, '.'); i >= 0 {
		return s.key[:i]
	}
	return ""
}

// secret reports whether the setting's value must never be shown.
func (s *setting) secret() bool { _, ok := s.value.(secretValue); return ok }

func (s *setting) leaf() string { return s.key[strings.IndexByte(s.key, '.')+1:] }

// defaults splits def like an env value, so defaults go through set exactly
// as user input does.
func (s *setting) defaults() []string { return splitEnv(s, s.def) }

// splitEnv turns an env value into set's input: a list is a comma list whose
// elements are trimmed (empty ones are kept, for set to refuse).
func splitEnv(s *setting, v string) []string {
	if !s.value.list() {
		return []string{v}
	}
	parts := strings.Split(v, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

const hour = 3600000 // milliseconds

// settings is the table. Keep rows grouped by TOML section, in the order
// dfkv.example.toml and --print-config show them.
var settings = []setting{
	{
		key: "group", roles: roleServer | roleMDS | roleTools,
		def:   "default",
		help:  "cluster group a node or client belongs to; nodes and clients of different groups never mix",
		value: stringValue{field: func(c *Config) *string { return &c.Group }, ok: checkName(64), text: "1-64 characters of A-Z a-z 0-9 . _ -"},
	},

	{
		key: "server.id", roles: roleServer,
		def:   "",
		help:  "stable node identity; empty derives it from the host and listen address",
		value: stringValue{field: func(c *Config) *string { return &c.Server.ID }, ok: checkServerID, text: "empty, or up to 255 bytes without spaces or control characters"},
	},
	{
		key: "server.listen", oldEnv: "DFKV_LISTEN", roles: roleServer,
		def:   "127.0.0.1:7600",
		help:  "data-plane TCP address",
		value: stringValue{field: func(c *Config) *string { return &c.Server.Listen }, ok: checkListen, text: "host:port with port 0..65535 (0 picks a free port)"},
	},
	{
		key: "server.http_listen", oldEnv: "DFKV_HTTP_LISTEN", roles: roleServer,
		def:   "127.0.0.1:7680",
		help:  "metrics and health HTTP address; empty turns it off",
		value: stringValue{field: func(c *Config) *string { return &c.Server.HTTPListen }, ok: checkHTTPListen, text: "host:port with port 0..65535, or empty for off"},
	},
	{
		key: "server.http_token_file", roles: roleServer,
		def:   "",
		help:  "file whose first line is a bearer token that /metrics (and /debug/pprof/) then require (they name tenants); /healthz and /readyz stay open for probes; reread when it changes; empty: no token",
		value: stringValue{field: func(c *Config) *string { return &c.Server.HTTPTokenFile }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "server.tls_cert", roles: roleServer,
		def:   "",
		help:  "PEM certificate (chain) the data port serves TLS with; reloaded on SIGHUP and when it changes; empty: plain TCP",
		value: stringValue{field: func(c *Config) *string { return &c.Server.TLSCert }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "server.tls_key", roles: roleServer,
		def:   "",
		help:  "PEM private key of server.tls_cert",
		value: stringValue{field: func(c *Config) *string { return &c.Server.TLSKey }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "server.tls_client_ca", roles: roleServer,
		def:   "",
		help:  "PEM CA bundle clients' certificates must chain to (mutual TLS): a client without one is refused; a credential may name a certificate instead of a token (cert_common_name); empty: no client certificates",
		value: stringValue{field: func(c *Config) *string { return &c.Server.TLSClientCA }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "server.tls_min_version", roles: roleServer,
		def:   "1.3",
		help:  "lowest TLS version accepted: 1.3, or 1.2 for clients that lack 1.3",
		value: stringValue{field: func(c *Config) *string { return &c.Server.TLSMinVersion }, ok: checkTLSVersion, text: "1.3 or 1.2"},
	},
	{
		key: "server.http_tls", roles: roleServer,
		def:   "0",
		help:  "1: serve /metrics, /healthz and /readyz over TLS with server.tls_cert (probes then use HTTPS); the flag alone means 1",
		value: onOffValue{field: func(c *Config) *int { return &c.Server.HTTPTLS }},
	},
	{
		key: "server.mds_tls_ca", roles: roleServer,
		def:   "",
		help:  "PEM CA bundle of the MDS's certificate: registering with the MDS then speaks TLS (presenting server.tls_cert as the client certificate when the MDS asks for one); empty: plain TCP",
		value: stringValue{field: func(c *Config) *string { return &c.Server.MDSTLSCA }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "server.advertise_addr", oldEnv: "DFKV_ADVERTISE_ADDR", roles: roleServer,
		def:   "",
		help:  "host:port clients reach this node at, registered with the MDS; empty = the listen address",
		value: stringValue{field: func(c *Config) *string { return &c.Server.AdvertiseAddr }, ok: checkAdvertise, text: "empty, or host:port with a host and port 1..65535"},
	},
	{
		key: "server.weight", roles: roleServer,
		def:   "1",
		help:  "relative share of blocks this node takes on the ring (registered with the MDS)",
		value: intValue{field: func(c *Config) *int { return &c.Server.Weight }, min: 1, max: wire.MaxMemberWeight},
	},
	{
		key: "server.mds", oldEnv: "DFKV_MDS_ADDRS", roles: roleServer,
		def:   "",
		help:  "MDS addresses to register with and heartbeat to (env: comma list; flag: repeat it); empty = static membership",
		value: listValue{field: func(c *Config) *[]string { return &c.Server.MDS }, ok: checkAddrs, text: "empty, or host:port addresses, none named twice", optional: true},
	},
	{
		key: "server.mds_token", roles: roleServer,
		def:   "",
		help:  "secret token the node presents to the MDS (server.mds) when it registers, for an MDS with mds.node_credentials_file; never printed; empty: none",
		value: secretValue{field: func(c *Config) *string { return &c.Server.MDSToken }},
	},
	{
		key: "server.disks", oldEnv: "DFKV_DISKS", oldFlag: "disk", roles: roleServer,
		def:   "./dfkv-data/disk0",
		help:  "data directories, one per disk (env: comma list; flag: repeat it)",
		value: listValue{field: func(c *Config) *[]string { return &c.Server.Disks }, ok: checkDisks, text: "one or more directories, none empty, none named twice"},
	},
	{
		key: "server.disk_capacity_bytes", oldEnv: "DFKV_DISK_CAPACITY_BYTES", oldFlag: "disk-capacity", roles: roleServer,
		def:   "0",
		help:  "bytes each disk may hold (the slab engine preallocates them); 0 sizes it at startup",
		value: sizeValue{field: func(c *Config) *uint64 { return &c.Server.DiskCapacityBytes }, min: 0, max: math.MaxUint64, note: "0 (size from the filesystem) or a size such as 512GiB"},
	},
	{
		key: "server.store_engine", oldEnv: "DFKV_STORE_ENGINE", roles: roleServer,
		def:   "slab",
		help:  "storage engine: slab (production: preallocated extents, checksummed values, warm restart even after a crash) or file (diagnostic: one file per block)",
		value: stringValue{field: func(c *Config) *string { return &c.Server.StoreEngine }, ok: oneOf("file", "slab"), text: "file, slab"},
	},
	{
		key: "server.slab_extent_bytes", oldEnv: "DFKV_SLAB_EXTENT_BYTES", roles: roleServer,
		def:   "0",
		help:  "slab engine extent size; 0 = from the disk's capacity (a power of two giving 256 extents, 1MiB to 64MiB; a formatted disk keeps its own). Larger values are stored in extent-sized pieces. Part of the on-disk geometry: changing it needs an empty disk",
		value: sizeValue{field: func(c *Config) *uint64 { return &c.Server.SlabExtentBytes }, min: 0, max: 1 << 30, multiple: 4 << 10, note: "0 (automatic) or a multiple of 4KiB up to 1GiB, such as 64MiB"},
	},
	{
		key: "server.scrub_bytes_per_second", oldEnv: "DFKV_SCRUB_BYTES_PER_SECOND", oldFlag: "scrub-rate", roles: roleServer,
		def:   "64MiB",
		help:  "slab engine: the background scrub's read rate per disk (it verifies every value's checksum and drops the corrupt); 0 turns it off",
		value: sizeValue{field: func(c *Config) *uint64 { return &c.Server.ScrubBytesPerSecond }, min: 0, max: 1 << 40, note: "0 (off) or a rate such as 64MiB"},
	},
	{
		key: "server.scrub_interval_hours", oldEnv: "DFKV_SCRUB_INTERVAL_HOURS", roles: roleServer,
		def:   "168",
		help:  "slab engine: hours from the start of one full scrub pass over a disk to the next; 0 scrubs only after an unclean stop (which always starts a pass)",
		value: intValue{field: func(c *Config) *int { return &c.Server.ScrubIntervalHours }, min: 0, max: 8760},
	},
	{
		key: "server.uring", roles: roleServer,
		def:   "1",
		help:  "slab engine: 1 submits payload reads and writes of up to 256KiB through one io_uring ring per disk (pread/pwrite where the kernel refuses it, said once in the log); 0 always uses pread/pwrite",
		value: intValue{field: func(c *Config) *int { return &c.Server.URing }, min: 0, max: 1},
	},
	{
		key: "server.pprof", oldEnv: "DFKV_PPROF", roles: roleServer,
		def:   "0",
		help:  "1 serves the Go profiler under /debug/pprof/ on http_listen, for chasing a hot spot (a CPU profile costs CPU while it runs; ask for ?seconds=10 or less, the HTTP write timeout is 30s); 0 leaves it out",
		value: intValue{field: func(c *Config) *int { return &c.Server.PProf }, min: 0, max: 1},
	},
	{
		key: "server.ram_tier", oldEnv: "DFKV_RAM_TIER", roles: roleServer,
		def:   "0",
		help:  "1 puts a RAM arena of ram_tier_bytes in front of the disks; 0 leaves it out entirely",
		value: intValue{field: func(c *Config) *int { return &c.Server.RAMTier }, min: 0, max: 1},
	},
	{
		key: "server.ram_tier_bytes", oldEnv: "DFKV_RAM_TIER_BYTES", roles: roleServer,
		def:   "0",
		help:  "bytes of the RAM tier (arena and large-value reserve), allocated and touched at startup",
		value: sizeValue{field: func(c *Config) *uint64 { return &c.Server.RAMTierBytes }, min: 0, max: 1 << 44, note: "a size such as 8GiB; required when ram_tier = 1"},
	},
	{
		key: "server.ram_write_mode", oldEnv: "DFKV_RAM_WRITE_MODE", roles: roleServer,
		def:   "writeback",
		help:  "writeback: a PUT lands in RAM and is flushed by workers; writearound: PUTs go to disk and a later whole-value GET fills RAM",
		value: stringValue{field: func(c *Config) *string { return &c.Server.RAMWriteMode }, ok: oneOf("writeback", "writearound"), text: "writeback, writearound"},
	},
	{
		key: "server.put_ack_mode", oldEnv: "DFKV_PUT_ACK_MODE", roles: roleServer,
		def:   "ram",
		help:  "with the RAM tier in writeback: ram acknowledges a PUT once it is in RAM, disk once it is on disk",
		value: stringValue{field: func(c *Config) *string { return &c.Server.PutAckMode }, ok: oneOf("ram", "disk"), text: "ram, disk"},
	},
	{
		key: "server.ram_flush_threads", oldEnv: "DFKV_RAM_FLUSH_THREADS", roles: roleServer,
		def:   "0",
		help:  "RAM tier flush workers; 0 = 4 per disk, at most 16",
		value: intValue{field: func(c *Config) *int { return &c.Server.RAMFlushThreads }, min: 0, max: 64},
	},
	{
		key: "server.ram_flush_delay_ms", oldEnv: "DFKV_RAM_FLUSH_DELAY_MS", roles: roleServer,
		def:   "0",
		help:  "milliseconds a write-back value stays dirty before its flush starts, so a key rewritten or removed meanwhile is written to disk once or not at all; waived past half the dirty watermark, on shutdown and with put_ack_mode = disk; 0 flushes at once",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.Server.RAMFlushDelay }, min: 0, max: hour},
	},
	{
		key: "server.ram_tier_shards", oldEnv: "DFKV_RAM_TIER_SHARDS", roles: roleServer,
		def:   "8",
		help:  "metadata lock shards of the RAM tier; halved automatically while a shard would hold fewer than 32 extents",
		value: intValue{field: func(c *Config) *int { return &c.Server.RAMTierShards }, min: 1, max: 64},
	},
	{
		key: "server.ram_tier_large_reserve_bytes", oldEnv: "DFKV_RAM_TIER_LARGE_RESERVE_BYTES", roles: roleServer,
		def:   "auto",
		help:  "part of ram_tier_bytes kept for values larger than one 16MiB arena extent; auto = two extents, 0 = none (such values bypass RAM and go to disk)",
		value: autoSizeValue{field: func(c *Config) *int64 { return &c.Server.RAMTierLargeReserve }, max: 1 << 44, note: "auto (two extents), 0 (none) or a size such as 64MiB"},
	},
	{
		key: "server.ram_tier_numa", oldEnv: "DFKV_RAM_TIER_NUMA", roles: roleServer,
		def:   "interleave",
		help:  "memory policy of the RAM arena: interleave spreads its pages over every online NUMA node; off leaves the kernel's default",
		value: stringValue{field: func(c *Config) *string { return &c.Server.RAMTierNUMA }, ok: oneOf("interleave", "off"), text: "interleave, off"},
	},
	{
		key: "server.read_coalesce", oldEnv: "DFKV_READ_COALESCE", roles: roleServer,
		def:   "1",
		help:  "1: identical concurrent whole-value RAM-tier misses share one disk read; 0: each reads the disk itself",
		value: intValue{field: func(c *Config) *int { return &c.Server.ReadCoalesce }, min: 0, max: 1},
	},
	{
		key: "server.shm_socket", roles: roleServer,
		def:   "",
		help:  "path of a Unix socket on which clients on this host read resident values straight out of the RAM arena under leases; empty: off",
		value: stringValue{field: func(c *Config) *string { return &c.Server.ShmSocket }, ok: checkSocketPath, text: "empty, or an absolute path of at most 107 bytes"},
	},
	{
		key: "server.shm_socket_mode", roles: roleServer,
		def:   "0600",
		help:  "file mode of the shared-memory socket: whoever can open it can read every tenant's resident values",
		value: stringValue{field: func(c *Config) *string { return &c.Server.ShmSocketMode }, ok: checkFileMode, text: "an octal file mode such as 0600 or 0660"},
	},
	{
		key: "server.lease_ms", roles: roleServer,
		def:   "2000",
		help:  "milliseconds a lease on a resident value lives unless its client releases it first",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.Server.Lease }, min: 10, max: 600000},
	},
	{
		key: "server.lease_max", roles: roleServer,
		def:   "65536",
		help:  "most leases live at once; one connection holds at most an eighth of them, covering at most an eighth of the RAM arena; past either bound values are sent on the socket instead",
		value: intValue{field: func(c *Config) *int { return &c.Server.LeaseMax }, min: 1, max: 1 << 24},
	},
	{
		key: "server.shm_staging_bytes", roles: roleServer,
		def:   "64MiB",
		help:  "each shared-memory connection's staging region: the most value bytes one of its PUT frames carries",
		value: sizeValue{field: func(c *Config) *uint64 { return &c.Server.ShmStagingBytes }, min: 4096, max: 1 << 34, note: "a size such as 64MiB"},
	},
	{
		key: "server.s3_endpoint", roles: roleServer,
		def:   "",
		help:  "host:port of an S3-compatible object store kept below the disks: every value is uploaded there too, and a RAM and disk miss reads through to it; empty: no object store",
		value: stringValue{field: func(c *Config) *string { return &c.Server.S3Endpoint }, ok: checkS3Endpoint, text: "empty, or host:port without a scheme (s3_tls chooses https)"},
	},
	{
		key: "server.s3_bucket", roles: roleServer,
		def:   "",
		help:  "bucket of the object store; it must exist (dfkv never creates one)",
		value: stringValue{field: func(c *Config) *string { return &c.Server.S3Bucket }, ok: func(string) error { return nil }, text: "a bucket name"},
	},
	{
		key: "server.s3_prefix", roles: roleServer,
		def:   "dfkv",
		help:  "object names start \"<prefix>/v1/\"; empty: at the bucket's root",
		value: stringValue{field: func(c *Config) *string { return &c.Server.S3Prefix }, ok: checkS3Prefix, text: "empty, or a name without a leading or trailing slash"},
	},
	{
		key: "server.s3_region", roles: roleServer,
		def:   "us-east-1",
		help:  "region the object store signs requests for",
		value: stringValue{field: func(c *Config) *string { return &c.Server.S3Region }, ok: func(string) error { return nil }, text: "a region name such as us-east-1"},
	},
	{
		key: "server.s3_bucket_lookup", roles: roleServer,
		def:   "auto",
		help:  "how the bucket is addressed: path (endpoint/bucket/object, most self-hosted stores), virtual (bucket.endpoint/object) or auto (virtual on AWS, path elsewhere)",
		value: stringValue{field: func(c *Config) *string { return &c.Server.S3BucketLookup }, ok: oneOf("auto", "path", "virtual"), text: "auto, path, virtual"},
	},
	{
		key: "server.s3_tls", roles: roleServer,
		def:   "1",
		help:  "1 talks to the object store over https, 0 over plain http (a store on the same host or a private network)",
		value: intValue{field: func(c *Config) *int { return &c.Server.S3TLS }, min: 0, max: 1},
	},
	{
		key: "server.s3_credentials_file", roles: roleServer,
		def:   "",
		help:  "AWS shared credentials file, used when AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set; empty: AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials. Credentials are never printed",
		value: stringValue{field: func(c *Config) *string { return &c.Server.S3CredentialsFile }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "server.s3_profile", roles: roleServer,
		def:   "",
		help:  "profile of the credentials file; empty: AWS_PROFILE or default",
		value: stringValue{field: func(c *Config) *string { return &c.Server.S3Profile }, ok: func(string) error { return nil }, text: "a profile name, or empty"},
	},
	{
		key: "server.s3_write", roles: roleServer,
		def:   "async",
		help:  "async: upload after the disk stored a value, from a bounded queue (a full queue drops the upload, never the PUT); sync: acknowledge a PUT only once its object is stored; off: never write or delete objects (read a bucket others fill; PUT and REMOVE change this node's disks alone, and a later miss reads the bucket's copy)",
		value: stringValue{field: func(c *Config) *string { return &c.Server.S3Write }, ok: oneOf("async", "sync", "off"), text: "async, sync, off"},
	},
	{
		key: "server.s3_exist", roles: roleServer,
		def:   "remote",
		help:  "remote: EXIST and prefix counts read each key this node lacks through from the object store (verified and promoted, so the GET after the lookup finds it on disk), so engines that look before they load find what a crashed or replaced node left there; local: answer from RAM and disk only",
		value: stringValue{field: func(c *Config) *string { return &c.Server.S3Exist }, ok: oneOf("remote", "local"), text: "remote, local"},
	},
	{
		key: "server.s3_timeout_ms", roles: roleServer,
		def:   "5000",
		help:  "milliseconds one object store call may take; after a failure calls are skipped with back-off until one succeeds",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.Server.S3Timeout }, min: 50, max: 600000},
	},
	{
		key: "server.s3_upload_workers", roles: roleServer,
		def:   "8",
		help:  "uploads in flight at once (async writes), and parallel uploads of a sync batch",
		value: intValue{field: func(c *Config) *int { return &c.Server.S3UploadWorkers }, min: 1, max: 256},
	},
	{
		key: "server.s3_upload_queue_bytes", roles: roleServer,
		def:   "256MiB",
		help:  "bytes of values waiting for an async upload; past it uploads are dropped and counted",
		value: sizeValue{field: func(c *Config) *uint64 { return &c.Server.S3UploadQueueBytes }, min: 1 << 20, max: 1 << 40, note: "a size such as 256MiB"},
	},
	{
		key: "server.max_block_bytes", oldEnv: "DFKV_MAX_BLOCK_BYTES", roles: roleServer | roleTools,
		def:   "64MiB",
		help:  "largest value a PUT may store, and the largest frame body",
		value: sizeValue{field: func(c *Config) *uint64 { return &c.Server.MaxBlockBytes }, min: 4 * kib, max: gib},
	},
	{
		key: "server.max_batch_items", oldEnv: "DFKV_MAX_BATCH_ITEMS", roles: roleServer,
		def:   "4096",
		help:  "items in one batch frame",
		value: intValue{field: func(c *Config) *int { return &c.Server.MaxBatchItems }, min: 1, max: 65536},
	},
	{
		key: "server.max_conns", oldEnv: "DFKV_MAX_CONNS", roles: roleServer,
		def:   "4096",
		help:  "open data-plane connections; past it new ones are refused",
		value: intValue{field: func(c *Config) *int { return &c.Server.MaxConns }, min: 1, max: 1000000},
	},
	{
		key: "server.buffer_budget_bytes", oldEnv: "DFKV_BUFFER_BUDGET_BYTES", oldFlag: "buffer-budget", roles: roleServer,
		def:   "0",
		help:  "bytes of payload buffers all connections may hold at once (PUT bodies being received, GET values being sent from disk); past it requests wait for one (small ones may use a reserve of an eighth on top). 0 = max(1GiB, twice max_block_bytes rounded up to a power of two)",
		value: sizeValue{field: func(c *Config) *uint64 { return &c.Server.BufferBudgetBytes }, min: 0, max: 1 << 50, note: "0 (automatic) or a size such as 2GiB"},
	},
	{
		key: "server.socket_buffer_bytes", oldEnv: "DFKV_SOCKET_BUFFER_BYTES", oldFlag: "socket-buffer", roles: roleServer,
		def:   "0",
		help:  "SO_SNDBUF and SO_RCVBUF of each data connection; 0 leaves the kernel's autotuning on",
		value: sizeValue{field: func(c *Config) *uint64 { return &c.Server.SocketBufferBytes }, min: 0, max: 1 << 30, note: "0 (kernel autotuning) or a size such as 4MiB"},
	},
	{
		key: "server.first_request_ms", oldEnv: "DFKV_TCP_FIRST_REQ_MS", roles: roleServer,
		def:   "30000",
		help:  "milliseconds a new connection may take to send its first request; 0 waits forever",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.Server.FirstRequest }, min: 0, max: hour, note: "0 = off"},
	},
	{
		key: "server.body_timeout_ms", oldEnv: "DFKV_TCP_BODY_TIMEOUT_MS", roles: roleServer,
		def:   "60000",
		help:  "milliseconds a request's body (a PUT's value, a batch) may take to arrive after its header, so a stalled client cannot hold a RAM-tier slot or buffer",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.Server.BodyTimeout }, min: 1, max: hour},
	},
	{
		key: "server.metrics_first_request_ms", oldEnv: "DFKV_METRICS_FIRST_REQ_MS", roles: roleServer,
		def:   "30000",
		help:  "milliseconds an HTTP (metrics/health) connection may take to send its request headers; 0 waits forever",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.Server.MetricsFirstRequest }, min: 0, max: hour, note: "0 = off"},
	},
	{
		key: "server.drain_ms", roles: roleServer,
		def:   "2000",
		help:  "milliseconds a node registered with an MDS keeps serving after SIGTERM once it has left the MDS, so clients (which poll the MDS every client.mds_poll_ms) move off before it stops accepting; 0: stop at once",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.Server.Drain }, min: 0, max: 10 * 60000},
	},
	{
		key: "server.shutdown_timeout_ms", oldEnv: "DFKV_SHUTDOWN_TIMEOUT_MS", roles: roleServer,
		def:   "30000",
		help:  "milliseconds SIGTERM waits for in-flight requests",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.Server.ShutdownTimeout }, min: 1, max: hour},
	},
	{
		key: "server.credentials_file", roles: roleServer,
		def:   "",
		help:  "TOML file of [[credential]] tables (token_sha256, tenants, allow) that clients must authenticate against before they address any tenant; reread on SIGHUP and when it changes; empty: the data port is open to any client for every tenant",
		value: stringValue{field: func(c *Config) *string { return &c.Server.CredentialsFile }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "server.tenant_quotas_file", oldEnv: "DFKV_TENANT_QUOTAS_FILE", roles: roleServer,
		def:   "",
		help:  "TOML file of per-tenant byte quotas for this node ([tenants] name = size); empty = none",
		value: stringValue{field: func(c *Config) *string { return &c.Server.TenantQuotasFile }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "server.tenant_default_quota_bytes", oldEnv: "DFKV_TENANT_DEFAULT_QUOTA_BYTES", oldFlag: "tenant-default-quota", roles: roleServer,
		def:   "0",
		help:  "byte quota per node of every tenant the quotas file does not list; 0 = unlimited",
		value: sizeValue{field: func(c *Config) *uint64 { return &c.Server.TenantDefaultQuotaBytes }, min: 0, max: math.MaxUint64, note: "0 (unlimited) or a size such as 100GiB"},
	},

	{
		key: "client.members", oldEnv: "DFKV_MEMBERS", roles: roleTools,
		def:   "127.0.0.1:7600",
		help:  "static member list of cache nodes (env and flag: comma list; the flag may repeat)",
		value: listValue{field: func(c *Config) *[]string { return &c.Client.Members }, ok: checkMembers, text: "one or more host:port with port 1..65535, none named twice"},
	},
	{
		key: "client.mds", oldEnv: "DFKV_MDS_ADDRS", roles: roleTools,
		def:   "",
		help:  "MDS addresses to discover members from; when set, client.members is ignored (env: comma list)",
		value: listValue{field: func(c *Config) *[]string { return &c.Client.MDS }, ok: checkAddrs, text: "empty, or host:port addresses, none named twice", optional: true},
	},
	{
		key: "client.mds_poll_ms", oldEnv: "DFKV_MDS_POLL_MS", roles: roleTools,
		def:   "500",
		help:  "milliseconds between member-list checks with the MDS",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.Client.MDSPoll }, min: 50, max: 60000},
	},
	{
		key: "client.namespace", oldEnv: "DFKV_NAMESPACE", roles: roleTools,
		def:   "dfkv-tools",
		help:  "namespace bytes the tools address blocks in",
		value: stringValue{field: func(c *Config) *string { return &c.Client.Namespace }, ok: checkNamespace, text: fmt.Sprintf("1..%d bytes", wire.MaxNamespaceBytes)},
	},
	{
		key: "client.token", oldEnv: "DFKV_TOKEN", roles: roleTools,
		def:   "",
		help:  "secret token the tools present to nodes that require credentials (server.credentials_file); never printed; empty: none",
		value: secretValue{field: func(c *Config) *string { return &c.Client.Token }},
	},
	{
		key: "client.tls", roles: roleTools,
		def:   "0",
		help:  "1: speak TLS with the nodes and the MDS (their server.tls_cert / mds.tls_cert), verifying them with client.tls_ca; the flag alone means 1",
		value: onOffValue{field: func(c *Config) *int { return &c.Client.TLS }},
	},
	{
		key: "client.tls_ca", roles: roleTools,
		def:   "",
		help:  "PEM CA bundle that signs the nodes' and MDS's certificates; empty: the system's roots",
		value: stringValue{field: func(c *Config) *string { return &c.Client.TLSCA }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "client.tls_cert", roles: roleTools,
		def:   "",
		help:  "PEM client certificate for nodes or an MDS that require one (mutual TLS); empty: none",
		value: stringValue{field: func(c *Config) *string { return &c.Client.TLSCert }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "client.tls_key", roles: roleTools,
		def:   "",
		help:  "PEM private key of client.tls_cert",
		value: stringValue{field: func(c *Config) *string { return &c.Client.TLSKey }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "client.tls_server_name", roles: roleTools,
		def:   "",
		help:  "name the servers' certificates are verified against; empty: the host of each address dialed",
		value: stringValue{field: func(c *Config) *string { return &c.Client.TLSServerName }, ok: func(string) error { return nil }, text: "a DNS name, or empty"},
	},
	{
		key: "client.timeout_ms", roles: roleTools,
		def:   "10000",
		help:  "milliseconds one request may take",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.Client.Timeout }, min: 1, max: hour},
	},
	{
		key: "client.dial_timeout_ms", roles: roleTools,
		def:   "2000",
		help:  "milliseconds a connect may take",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.Client.DialTimeout }, min: 1, max: 600000},
	},
	{
		key: "client.pool_size", roles: roleTools,
		def:   "16",
		help:  "idle connections kept per node",
		value: intValue{field: func(c *Config) *int { return &c.Client.PoolSize }, min: 1, max: 1024},
	},
	{
		key: "client.shm", roles: roleTools,
		def:   "auto",
		help:  "shared memory with nodes on this host: auto uses it where a node offers it, off never, on requires it",
		value: stringValue{field: func(c *Config) *string { return &c.Client.Shm }, ok: oneOf("auto", "off", "on"), text: "auto, off, on"},
	},
	{
		key: "client.embedded", roles: roleTools,
		def:   "0",
		help:  "1 runs the tool against an embedded store inside its own process instead of the cluster: the [server] table of the config file and DFKV_SERVER_* configure it (no disk unless server.disks names one, the RAM tier on), and members and mds are not used; the flag alone means 1",
		value: onOffValue{field: func(c *Config) *int { return &c.Client.Embedded }},
	},
	{
		key: "client.batch_concurrency", oldEnv: "DFKV_BATCH_CONCURRENCY", roles: roleTools,
		def:   "8",
		help:  "nodes one batch talks to at once",
		value: intValue{field: func(c *Config) *int { return &c.Client.BatchConcurrency }, min: 1, max: 256},
	},

	{
		key: "mds.listen", roles: roleMDS,
		def:   "127.0.0.1:7700",
		help:  "address of the MDS control protocol",
		value: stringValue{field: func(c *Config) *string { return &c.MDS.Listen }, ok: checkListen, text: "host:port (port 0..65535)"},
	},
	{
		key: "mds.http_listen", roles: roleMDS,
		def:   "127.0.0.1:7780",
		help:  "address of the MDS /healthz, /readyz, /members and /metrics; empty = off",
		value: stringValue{field: func(c *Config) *string { return &c.MDS.HTTPListen }, ok: checkHTTPListen, text: "empty, or host:port (port 0..65535)"},
	},
	{
		key: "mds.http_token_file", roles: roleMDS,
		def:   "",
		help:  "file whose first line is a bearer token that /members and /metrics then require; /healthz and /readyz stay open for probes; reread when it changes; empty: no token",
		value: stringValue{field: func(c *Config) *string { return &c.MDS.HTTPTokenFile }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "mds.tls_cert", roles: roleMDS,
		def:   "",
		help:  "PEM certificate (chain) the control port serves TLS with; reloaded on SIGHUP and when it changes; empty: plain TCP",
		value: stringValue{field: func(c *Config) *string { return &c.MDS.TLSCert }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "mds.tls_key", roles: roleMDS,
		def:   "",
		help:  "PEM private key of mds.tls_cert",
		value: stringValue{field: func(c *Config) *string { return &c.MDS.TLSKey }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "mds.tls_client_ca", roles: roleMDS,
		def:   "",
		help:  "PEM CA bundle the certificates of nodes and clients must chain to (mutual TLS); empty: no client certificates",
		value: stringValue{field: func(c *Config) *string { return &c.MDS.TLSClientCA }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "mds.tls_min_version", roles: roleMDS,
		def:   "1.3",
		help:  "lowest TLS version accepted: 1.3, or 1.2 for clients that lack 1.3",
		value: stringValue{field: func(c *Config) *string { return &c.MDS.TLSMinVersion }, ok: checkTLSVersion, text: "1.3 or 1.2"},
	},
	{
		key: "mds.http_tls", roles: roleMDS,
		def:   "0",
		help:  "1: serve /members, /metrics, /healthz and /readyz over TLS with mds.tls_cert; the flag alone means 1",
		value: onOffValue{field: func(c *Config) *int { return &c.MDS.HTTPTLS }},
	},
	{
		key: "mds.node_credentials_file", roles: roleMDS,
		def:   "",
		help:  "TOML file of [[credential]] tables (token_sha256, nodes = node id patterns, groups = group patterns (unset: all), members) without which no node may register, heartbeat or deregister; reread on SIGHUP and when it changes; empty: any client may register, replace or remove any node",
		value: stringValue{field: func(c *Config) *string { return &c.MDS.NodeCredentialsFile }, ok: func(string) error { return nil }, text: "a file path, or empty"},
	},
	{
		key: "mds.members_need_token", roles: roleMDS,
		def:   "0",
		help:  "1: MEMBERS (the member list clients route by) requires a token whose credential in mds.node_credentials_file has members = true; the flag alone means 1",
		value: onOffValue{field: func(c *Config) *int { return &c.MDS.MembersNeedToken }},
	},
	{
		key: "mds.etcd_endpoints", oldEnv: "DFKV_ETCD_ENDPOINTS", oldFlag: "etcd", roles: roleMDS,
		def:   "",
		help:  "etcd endpoints holding the directory (production); empty = an embedded bbolt file at mds.db_path",
		value: listValue{field: func(c *Config) *[]string { return &c.MDS.EtcdEndpoints }, ok: checkEtcdEndpoints, text: "empty, or host:port / http(s)://host:port endpoints", optional: true},
	},
	{
		key: "mds.etcd_prefix", oldEnv: "DFKV_ETCD_PREFIX", roles: roleMDS,
		def:   "/dfkv",
		help:  "etcd key prefix under which the directory lives",
		value: stringValue{field: func(c *Config) *string { return &c.MDS.EtcdPrefix }, ok: checkEtcdPrefix, text: "a path starting with / and not ending with /"},
	},
	{
		key: "mds.db_path", oldEnv: "DFKV_MDS_DB", oldFlag: "db", roles: roleMDS,
		def:   "./dfkv-data/mds.db",
		help:  "bbolt file of the directory when no etcd endpoints are set",
		value: stringValue{field: func(c *Config) *string { return &c.MDS.DBPath }, ok: checkNonEmpty, text: "a file path"},
	},
	{
		key: "mds.heartbeat_ttl_ms", roles: roleMDS,
		def:   "10000",
		help:  "milliseconds a node may stay silent before the directory drops it; nodes heartbeat at a third of it",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.MDS.HeartbeatTTL }, min: 2000, max: 600000},
	},
	{
		key: "mds.first_request_ms", oldEnv: "DFKV_MDS_FIRST_REQ_MS", roles: roleMDS,
		def:   "30000",
		help:  "milliseconds a control connection may take to send each request whole (the first, and every one after it); 0 waits forever",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.MDS.FirstRequest }, min: 0, max: hour, note: "0 = off"},
	},
	{
		key: "mds.metrics_first_request_ms", oldEnv: "DFKV_METRICS_FIRST_REQ_MS", roles: roleMDS,
		def:   "30000",
		help:  "milliseconds an HTTP connection to the MDS may take to send its request headers; 0 waits forever",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.MDS.MetricsFirstRequest }, min: 0, max: hour, note: "0 = off"},
	},
	{
		key: "mds.probe_cache_ms", roles: roleMDS,
		def:   "2500",
		help:  "milliseconds /readyz reuses an etcd reachability probe; 0 probes on every request",
		value: millisValue{field: func(c *Config) *time.Duration { return &c.MDS.ProbeCache }, min: 0, max: 600000, note: "0 = probe every request"},
	},

	{
		key: "bench.workload", roles: roleBench,
		def:   "put",
		help:  "put, get, exist, mixed (GET with probability mixed_get_ratio, else PUT) or prefix (sequences of pages sharing a prefix, looked up as an inference engine does)",
		value: stringValue{field: func(c *Config) *string { return &c.Bench.Workload }, ok: oneOfKind("workload", "put", "get", "exist", "mixed", "prefix"), text: "put, get, exist, mixed, prefix"},
	},
	{
		key: "bench.protocol", roles: roleBench,
		def:   "dfkv",
		help:  "dfkv (the cluster of client.members or client.mds), redis or memcache (the server at bench.addr, for comparison)",
		value: stringValue{field: func(c *Config) *string { return &c.Bench.Protocol }, ok: oneOfKind("protocol", "dfkv", "redis", "memcache"), text: "dfkv, redis, memcache"},
	},
	{
		key: "bench.addr", roles: roleBench,
		def:   "",
		help:  "host:port of the redis or memcached server; only with protocol redis or memcache",
		value: stringValue{field: func(c *Config) *string { return &c.Bench.Addr }, ok: checkPeerAddr, text: "empty, or host:port with port 1..65535"},
	},
	{
		key: "bench.value_size", roles: roleBench,
		def:   "1MiB",
		help:  "bytes per value (the page size of the prefix workload); with protocol dfkv at most server.max_block_bytes",
		value: sizeValue{field: func(c *Config) *uint64 { return &c.Bench.ValueSize }, min: 1, max: gib},
	},
	{
		key: "bench.keys", roles: roleBench,
		def:   "1024",
		help:  "distinct keys, chosen uniformly at random (built before the run: about 50 bytes of the tool's memory each)",
		value: intValue{field: func(c *Config) *int { return &c.Bench.Keys }, min: 1, max: 100000000},
	},
	{
		key: "bench.concurrency", oldFlag: "c", roles: roleBench,
		def:   "16",
		help:  "workers, each with its own connection (dfkv: the client pool grows to at least this)",
		value: intValue{field: func(c *Config) *int { return &c.Bench.Concurrency }, min: 1, max: 4096},
	},
	{
		key: "bench.duration", roles: roleBench,
		def:   "10s",
		help:  "length of the measured stage, such as 10s or 2m; of it and ops, the one given in the later layer counts (flags over env over the file), and both in one layer are refused",
		value: durationValue{field: func(c *Config) *time.Duration { return &c.Bench.Duration }, min: time.Millisecond, max: 720 * time.Hour},
	},
	{
		key: "bench.ops", roles: roleBench,
		def:   "0",
		help:  "measure this many operations (all workers together) instead of a duration; 0 measures for bench.duration",
		value: intValue{field: func(c *Config) *int { return &c.Bench.Ops }, min: 0, max: 1000000000000},
	},
	{
		key: "bench.warmup", roles: roleBench,
		def:   "1s",
		help:  "unmeasured warm-up before the measured stage, such as 1s; 0 skips it",
		value: durationValue{field: func(c *Config) *time.Duration { return &c.Bench.Warmup }, min: 0, max: 720 * time.Hour},
	},
	{
		key: "bench.sweep", roles: roleBench,
		def:   "",
		help:  "measure a stage per value of one setting, such as concurrency=1,4,16,64 or value_size=4KiB,64KiB,1MiB (one dimension per run; it replaces that setting), and mark the knee: the first step whose p99 grew more than its throughput, each relative to the step before",
		value: sweepValue{field: func(c *Config) *Sweep { return &c.Bench.Sweep }},
	},
	{
		key: "bench.fill", roles: roleBench,
		def:   "auto",
		help:  "PUT every key once before measuring, unmeasured; auto fills for get, exist and mixed (prefix always stores its sequences); the flag alone means true, --fill=false skips",
		value: switchValue{field: func(c *Config) *Switch { return &c.Bench.Fill }},
	},
	{
		key: "bench.mixed_get_ratio", roles: roleBench,
		def:   "0.9",
		help:  "fraction of GETs in the mixed workload",
		value: floatValue{field: func(c *Config) *float64 { return &c.Bench.MixedGetRatio }, min: 0, max: 1},
	},
	{
		key: "bench.sequences", roles: roleBench,
		def:   "64",
		help:  "prefix workload: number of sequences (the even ones are stored)",
		value: intValue{field: func(c *Config) *int { return &c.Bench.Sequences }, min: 1, max: 1 << 20},
	},
	{
		key: "bench.pages_per_seq", roles: roleBench,
		def:   "16",
		help:  "prefix workload: pages per sequence",
		value: intValue{field: func(c *Config) *int { return &c.Bench.PagesPerSeq }, min: 1, max: 4096},
	},
	{
		key: "bench.shared_prefix", roles: roleBench,
		def:   "0.5",
		help:  "prefix workload: fraction of each sequence's leading pages shared by all sequences",
		value: floatValue{field: func(c *Config) *float64 { return &c.Bench.SharedPrefix }, min: 0, max: 1},
	},
	{
		key: "bench.key_prefix", roles: roleBench,
		def:   "bench/",
		help:  "prefix of every key bench writes",
		value: stringValue{field: func(c *Config) *string { return &c.Bench.KeyPrefix }, ok: checkKeyPrefix, text: "1..200 bytes without spaces or control characters"},
	},
	{
		key: "bench.seed", roles: roleBench,
		def:   "1",
		help:  "seed of key choice and value bytes",
		value: uintValue{field: func(c *Config) *uint64 { return &c.Bench.Seed }, min: 0, max: math.MaxUint64},
	},

	{
		key: "log.level", roles: roleAll,
		def:   "info",
		help:  "least severe log level written",
		value: stringValue{field: func(c *Config) *string { return &c.Log.Level }, ok: oneOf("debug", "info", "warn", "error"), text: "debug, info, warn, error"},
	},
	{
		key: "log.format", roles: roleAll,
		def:   "text",
		help:  "log line format",
		value: stringValue{field: func(c *Config) *string { return &c.Log.Format }, ok: oneOf("text", "json"), text: "text, json"},
	},
}

// FlagPrintConfig is the bool flag every role takes to print its resolved
// configuration (Resolved.WriteTo) and exit 0 instead of running; the role
// checks c.Bool(config.FlagPrintConfig) after Load succeeds.
const FlagPrintConfig = "print-config"

// The other meta flag, and its env fallback.
const (
	flagConfig = "config"
	envConfig  = "DFKV_CONFIG"
)

// otherEnv lists DFKV_* variables that are not rows of the table but are
// read elsewhere (the config file path, the Python package's library path,
// build switches of scripts/), so Load does not call them unknown.
var otherEnv = []string{
	envConfig,
	"DFKV_LIBRARY", // path to libdfkv.so for the Python package
	// build switches read by scripts/
	"DFKV_WITH_URING", "DFKV_WITH_RDMA",
	// the test harness: the binary and checkout the tests use
	"DFKV_BIN", "DFKV_SOURCE",
}

// testEnvPrefix marks variables of the tests and scripts/test.sh
// (DFKV_TEST_OUT, DFKV_TEST_SIGKILLS, …): a test run's environment is
// inherited by the processes it starts, which must not warn about them.
const testEnvPrefix = "DFKV_TEST_"

// notBuiltEnv lists the variables of features this build does not have
// yet (the RDMA transport's receive chunks and NUMA placement, a legacy
// MDS framing). Setting one is not a
// typo, but it does nothing yet, and Load says so in a warning rather than
// letting an operator believe it took effect. When a feature lands, its
// variable becomes a row above and leaves this list.
var notBuiltEnv = []string{
	// a legacy MDS framing: dfkv has no legacy peers.
	"DFKV_MDS_ACCEPT_LEGACY",
	// tuning of the RDMA transport that it does not have (rdmaEnv lists
	// the variables it reads)
	"DFKV_RDMA_NUMA", "DFKV_RDMA_MAX_BLOCK_BYTES", "DFKV_RDMA_RECV_SEGMENT_SIZE", "DFKV_RDMA_RECV_CHUNK_IDLE_MS",
}

// lookupKey returns the row with TOML key key, or nil.
func lookupKey(key string) *setting {
	for i := range settings {
		if settings[i].key == key {
			return &settings[i]
		}
	}
	return nil
}

// sections returns the TOML tables of the table, in first-use order.
func sections() []string {
	var out []string
	seen := map[string]bool{"": true}
	for i := range settings {
		if sec := settings[i].section(); !seen[sec] {
			seen[sec] = true
			out = append(out, sec)
		}
	}
	return out
}

func isSection(name string) bool {
	for _, s := range sections() {
		if s == name {
			return true
		}
	}
	return false
}
