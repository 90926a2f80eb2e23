// Package config is the one loader every dfkv role uses. Values are layered
// in a fixed order, later layers winning:
//
//	defaults < TOML file (--config or DFKV_CONFIG) < DFKV_* environment < flags the user set
//
// Every setting is one row of a single table (settings.go): its TOML key,
// environment name, flag name, default, parser and validator. The TOML
// decoding, the environment and flag bindings, the resolved-config printout
// and the test that keeps dfkv.example.toml complete all come from that table.
//
// A role uses it like this:
//
//	cmd := &cli.Command{Name: "server", Flags: config.Flags("server"), Action: func(c *cli.Context) error {
//		cfg, res, err := config.Load(c, "server", os.LookupEnv)
//		if err != nil {
//			return cli.Exit(err, 2)
//		}
//		if c.Bool(config.FlagPrintConfig) {
//			_, err := res.WriteTo(c.App.Writer)
//			return err
//		}
//		for _, w := range res.Warnings() {
//			logger.Warn(w)
//		}
//		…
//	}}
//
// Sizes are read by ParseSize (64MiB, 500GB, 4096); durations are whole
// milliseconds in settings named *_ms, Go durations (10s, 1m30s) in the
// bench's stage lengths, and time.Duration in Config.
package config

import "time"

// Config is the resolved configuration of one process. Roles read the part
// they need; nothing here is read from globals.
type Config struct {
	// Group names the cluster a node or client belongs to.
	Group string

	Server Server
	Client Client
	MDS    MDS
	Bench  Bench
	Log    Log
}

// Server configures a cache node (dfkv server).
type Server struct {
	ID                  string        // stable node identity; derived from host and listen address when empty
	Listen              string        // data-plane TCP address
	HTTPListen          string        // metrics and health address
	HTTPTokenFile       string        // bearer token /metrics requires; empty = none
	TLSCert             string        // data port TLS certificate; empty = plain TCP
	TLSKey              string        // its key
	TLSClientCA         string        // CA of client certificates (mutual TLS); empty = none
	TLSMinVersion       string        // "1.3" or "1.2"
	HTTPTLS             int           // 1 = the HTTP side over TLS with TLSCert
	MDSTLSCA            string        // CA of the MDS's certificate; non-empty = register over TLS
	AdvertiseAddr       string        // address registered with the MDS; empty = Listen
	Weight              int           // ring weight registered with the MDS
	MDS                 []string      // MDS addresses; empty = static membership
	Disks               []string      // one directory per disk
	DiskCapacityBytes   uint64        // per disk; 0 = sized from the filesystem at startup
	StoreEngine         string        // "slab" (default) or "file" (diagnostic)
	SlabExtentBytes     uint64        // slab extent size; 0 = from the capacity (slab.ExtentFor)
	ScrubBytesPerSecond uint64        // slab scrub read rate per disk; 0 = no scrub
	ScrubIntervalHours  int           // hours between full scrub passes; 0 = only after an unclean stop
	URing               int           // 1 = small slab payload I/O through io_uring
	PProf               int           // 1 = /debug/pprof/ on the HTTP listener
	RAMTier             int           // 1 = RAM tier on
	RAMTierBytes        uint64        // arena + large reserve
	RAMWriteMode        string        // writeback | writearound
	PutAckMode          string        // ram | disk (writeback only)
	RAMFlushThreads     int           // 0 = 4 per disk, at most 16
	RAMFlushDelay       time.Duration // how long a write-back value stays dirty before its flush
	RAMTierShards       int           // metadata lock shards, 1..64 (the tier may use fewer)
	RAMTierNUMA         string        // interleave | off
	ReadCoalesce        int           // 1 = identical concurrent RAM-tier misses share one disk read
	RAMTierLargeReserve int64         // bytes of RAMTierBytes for values over one extent; SizeAuto = two extents, 0 = none
	MaxBlockBytes       uint64        // largest value a PUT may store and the largest frame body
	MaxBatchItems       int           // items in one batch frame
	MaxConns            int           // open data-plane connections; past it new ones are refused
	BufferBudgetBytes   uint64        // payload buffer bytes all connections may hold; 0 = the server's automatic size
	SocketBufferBytes   uint64        // SO_SNDBUF/SO_RCVBUF per connection; 0 = kernel autotuning
	FirstRequest        time.Duration // how long a new connection may take to send its first request; 0 = no limit
	BodyTimeout         time.Duration // how long a request's body may take after its header
	Drain               time.Duration // after SIGTERM, how long a registered node serves once it left the MDS
	ShutdownTimeout     time.Duration // how long SIGTERM waits for in-flight requests
	MetricsFirstRequest time.Duration // HTTP header deadline (server.metrics_first_request_ms); 0 = off
	ShmSocket           string        // Unix socket of the lease protocol for clients on this host; empty = off
	ShmSocketMode       string        // its file mode, octal
	Lease               time.Duration // how long a lease lives unless released
	LeaseMax            int           // most leases live at once
	ShmStagingBytes     uint64        // each shared-memory connection's staging region

	S3Endpoint         string        // object store host:port; empty = no object store tier
	S3Bucket           string        // its bucket
	S3Prefix           string        // object names start "<prefix>/v1/"
	S3Region           string        // signing region
	S3BucketLookup     string        // auto | path | virtual
	S3TLS              int           // 1 = https
	S3CredentialsFile  string        // AWS shared credentials file; empty = the usual places
	S3Profile          string        // its profile
	S3Write            string        // async | sync | off
	S3Exist            string        // remote | local
	S3Timeout          time.Duration // one object store call
	S3UploadWorkers    int           // uploads in flight
	S3UploadQueueBytes uint64        // bytes waiting for upload

	TenantQuotasFile        string // TOML file of per-tenant quotas; empty = none
	TenantDefaultQuotaBytes uint64 // quota of tenants the file does not list; 0 = unlimited
	CredentialsFile         string // tenant credentials clients authenticate against; empty = open
	MDSToken                string // secret presented to the MDS when registering; never printed
}

// Client configures the tools' (and embedders') view of a cluster.
type Client struct {
	Members          []string      // static member list host:port
	MDS              []string      // MDS addresses; when set, Members is ignored
	MDSPoll          time.Duration // interval of member-list checks
	Namespace        string        // namespace bytes the tools use
	Token            string        // secret presented to nodes that require credentials; never printed
	TLS              int           // 1 = TLS with nodes and MDS
	TLSCA            string        // CA of their certificates; empty = system roots
	TLSCert          string        // client certificate (mutual TLS)
	TLSKey           string
	TLSServerName    string        // name to verify; empty = each address's host
	Timeout          time.Duration // one request, end to end
	DialTimeout      time.Duration // one connect
	PoolSize         int           // idle connections kept per peer
	BatchConcurrency int           // nodes a batch talks to at once
	Shm              string        // auto | off | on: shared memory with nodes on this host
	Embedded         int           // 1 = an embedded store in the tool's own process
}

// MDS configures the membership directory (dfkv mds).
type MDS struct {
	Listen        string
	HTTPListen    string
	HTTPTokenFile string // bearer token /members and /metrics require; empty = none
	// NodeCredentialsFile binds tokens to the node ids they may register;
	// empty = any client may register, replace or remove any node.
	NodeCredentialsFile string
	MembersNeedToken    int // 1 = MEMBERS requires a credential with members = true
	TLSCert             string
	TLSKey              string
	TLSClientCA         string
	TLSMinVersion       string
	HTTPTLS             int
	EtcdEndpoints       []string // empty = bbolt at DBPath
	EtcdPrefix          string
	DBPath              string
	HeartbeatTTL        time.Duration
	FirstRequest        time.Duration
	ProbeCache          time.Duration
	// MetricsFirstRequest bounds how long an HTTP client may take to send
	// its headers (mds.metrics_first_request_ms); 0 = off.
	MetricsFirstRequest time.Duration
}

// Bench configures the load generator (dfkv bench). The checks that
// involve other settings (addr only with redis or memcache, value size
// within server.max_block_bytes, ops or duration) are bench's own.
type Bench struct {
	Workload      string        // put, get, exist, mixed, prefix
	Protocol      string        // dfkv, redis, memcache
	Addr          string        // redis or memcached server; empty for dfkv
	ValueSize     uint64        // bytes per value (page size of the prefix workload)
	Keys          int           // distinct keys
	Concurrency   int           // workers, one connection each
	Duration      time.Duration // measured stage; ignored when Ops > 0 (bench settles the two by layer)
	Ops           int           // measured operations; 0 = measure for Duration
	Warmup        time.Duration // unmeasured warm-up; 0 = none
	Sweep         Sweep         // one setting varied, a measured stage per value; empty = one stage
	Fill          Switch        // unmeasured fill; auto = for get, exist and mixed
	MixedGetRatio float64       // fraction of GETs of the mixed workload
	Sequences     int           // prefix: sequences
	PagesPerSeq   int           // prefix: pages per sequence
	SharedPrefix  float64       // prefix: fraction of leading pages all sequences share
	KeyPrefix     string        // prefix of every key
	Seed          uint64        // seed of key choice and value bytes
}

// Log configures log/slog output.
type Log struct {
	Level  string // debug, info, warn, error
	Format string // text or json
}
