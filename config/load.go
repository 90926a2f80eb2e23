package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/engine/iobuf"
)

// Load resolves the configuration of role ("server", "mds", "smoke", "bench"
// or "ctl") from, later winning: the defaults, the TOML file (--config, else
// DFKV_CONFIG), DFKV_* variables read through lookup, and the flags the user
// set in c (c.IsSet: a flag left alone never overrides anything). The roles
// call it first thing, with os.LookupEnv; lookup is a parameter so nothing
// reads the process environment behind a test's back (nil = empty).
//
// Only the role's own settings are read from env and flags, checked and
// printed; the rest of Config keeps its defaults. Every key in the file must
// still be a known setting, since one file is shared by all roles and a typo
// in it must not pass unnoticed just because this role skips that key.
//
// Load also reads os.Environ() to warn about DFKV_* variables that no dfkv
// part reads (Resolved.Warnings); a mistyped variable is a warning, not an
// error, because the environment is often shared with other tools.
//
// The error, if any, names each setting that failed, its env name, the layer
// it came from and what is allowed; the role prints it and exits 2.
func Load(c *cli.Context, role string, lookup func(string) (string, bool)) (*Config, *Resolved, error) {
	bit, ok := roleBit(role)
	if !ok {
		return nil, nil, unknownRole(role)
	}
	in := input{role: role, lookup: lookup, flags: map[string][]string{}, environ: os.Environ()}
	for i := range settings {
		s := &settings[i]
		if s.roles&bit == 0 || !c.IsSet(s.flag) {
			continue
		}
		if s.value.list() {
			in.flags[s.flag] = c.StringSlice(s.flag)
		} else {
			in.flags[s.flag] = []string{c.String(s.flag)}
		}
	}
	if c.IsSet(flagConfig) {
		in.file, in.fileSet = c.String(flagConfig), true
	}
	return load(in)
}

// LoadFrom is Load without cli, for tests and embedders. file plays the part
// of --config: "" means none was given, and then DFKV_CONFIG (through lookup)
// may still name one; nil lookup is an empty environment. flags holds the
// values of the flags the user set, by flag name without dashes: one element
// for a scalar (the last wins if there are more, as on a command line), the
// elements of a list (they replace the list; they are not split on commas).
// A name that is not a setting flag of role is an error. LoadFrom does not
// look for unknown DFKV_* variables, having no environment list; Load does.
func LoadFrom(role, file string, lookup func(string) (string, bool), flags map[string][]string) (*Config, *Resolved, error) {
	return load(input{role: role, file: file, fileSet: file != "", lookup: lookup, flags: flags})
}

// LoadText is LoadFrom with the configuration file's content given as
// TOML text (an embedder's configuration string, in the layout of
// dfkv.toml); name stands for the file in messages and --print-config.
// DFKV_CONFIG is not consulted.
func LoadText(role, name, text string, lookup func(string) (string, bool), flags map[string][]string) (*Config, *Resolved, error) {
	return load(input{role: role, file: name, fileSet: true, text: &text, lookup: lookup, flags: flags})
}

// input is everything one load reads.
type input struct {
	role    string
	text    *string // the file's content, when given rather than read from file
	file    string
	fileSet bool // file came from --config, even if empty ("no file, whatever DFKV_CONFIG says")
	lookup  func(string) (string, bool)
	flags   map[string][]string
	environ []string // nil: do not look for unknown DFKV_* variables
}

func unknownRole(role string) error {
	return fmt.Errorf("config: unknown role %q; valid roles are %s", role, validRoles())
}

func load(in input) (*Config, *Resolved, error) {
	bit, ok := roleBit(in.role)
	if !ok {
		return nil, nil, unknownRole(in.role)
	}
	l := newLoader(in, bit)
	// A value that does not parse is an error even if a later layer
	// overrides it: the layer is broken and will bite once the override
	// goes. Ranges and allowed values are checked once, on the merged result.
	if err := l.readFile(); err != nil {
		return nil, nil, err
	}
	l.readEnv()
	if err := l.readFlags(); err != nil {
		return nil, nil, err
	}
	if err := l.validate(); err != nil {
		return nil, nil, err
	}
	l.warn()
	l.r.cfg = l.cfg.clone()
	return l.cfg, l.r, nil
}

// loader layers defaults, file, environment and flags onto one Config,
// remembering where each value came from and every problem found.
type loader struct {
	in     input
	bit    role
	lookup func(string) (string, bool)
	cfg    *Config
	r      *Resolved
	errs   []error
	failed map[*setting]bool // not range-checked: the field holds an older layer's value
}

// newLoader starts from the defaults of every row, so the Config is whole
// whatever the role.
func newLoader(in input, bit role) *loader {
	l := &loader{in: in, bit: bit, lookup: in.lookup, cfg: defaultConfig(),
		r: &Resolved{role: in.role}, failed: map[*setting]bool{}}
	if l.lookup == nil {
		l.lookup = func(string) (string, bool) { return "", false }
	}
	for i := range settings {
		s := &settings[i]
		if s.roles&bit != 0 {
			l.r.values = append(l.r.values, resolvedValue{s: s, src: source{kind: fromDefault}, raw: strconv.Quote(s.def)})
		}
	}
	return l
}

func (l *loader) fail(err error, s *setting) {
	l.errs = append(l.errs, err)
	l.failed[s] = true
}

// apply sets one layer's value of rv, or records why it could not.
func (l *loader) apply(rv *resolvedValue, src source, vals []string, raw string) {
	if rv.s.secret() && len(vals) == 1 {
		raw = redact(vals[0])
	}
	if err := rv.s.value.set(l.cfg, vals); err != nil {
		l.fail(rv.s.errorf(src, raw, err), rv.s)
		return
	}
	rv.src, rv.raw = src, raw
}

// readFile applies the TOML file named by --config, else DFKV_CONFIG.
func (l *loader) readFile() error {
	path, from := l.in.file, "--"+flagConfig
	if !l.in.fileSet {
		if v, ok := l.lookup(envConfig); ok {
			path, from = v, envConfig
		}
	} else if v, ok := l.lookup(envConfig); ok && v != l.in.file {
		l.r.warnings = append(l.r.warnings, fmt.Sprintf("%s=%s is ignored because --%s %s was given", envConfig, Echo(v), flagConfig, Echo(l.in.file)))
	}
	if path == "" {
		return nil
	}
	l.r.file, l.r.fileFrom = path, from
	var doc map[string]any
	var err error
	if l.in.text != nil {
		l.r.fileFrom = "text"
		doc, err = decodeFile(*l.in.text, path)
	} else {
		doc, err = readFile(path, from)
	}
	if err != nil {
		return err
	}
	for i := range l.r.values {
		rv := &l.r.values[i]
		v, ok := doc[rv.s.key]
		if !ok {
			continue
		}
		src := source{kind: fromFile, where: path}
		vals, raw, err := fromTOML(rv.s, v)
		if err != nil {
			l.fail(rv.s.errorf(src, raw, err), rv.s)
			continue
		}
		l.apply(rv, src, vals, raw)
	}
	return nil
}

// readEnv applies DFKV_* variables: a setting's own name, else the
// earlier name it still accepts.
func (l *loader) readEnv() {
	for i := range l.r.values {
		rv := &l.r.values[i]
		name := rv.s.env
		v, ok := l.lookup(name)
		if old := rv.s.oldEnv; old != "" {
			if ov, set := l.lookup(old); set && !ok {
				name, v, ok = old, ov, true
			} else if set && ov != v {
				shown, showOld := Echo(v), Echo(ov)
				if rv.s.secret() {
					shown, showOld = redact(v), redact(ov)
				}
				l.r.warnings = append(l.r.warnings, fmt.Sprintf("%s=%s is ignored because %s=%s is set (both name %s)", old, showOld, rv.s.env, shown, rv.s.key))
			}
		}
		if ok {
			src := source{kind: fromEnv}
			if name != rv.s.env {
				src.where = name // say which spelling set it
			}
			l.apply(rv, src, splitEnv(rv.s, v), Echo(v))
		}
	}
}

// readFlags applies the flags the user set, by name or earlier name.
func (l *loader) readFlags() error {
	flags, err := canonicalFlags(l.in.flags, l.bit, l.in.role)
	if err != nil {
		return err
	}
	for i := range l.r.values {
		rv := &l.r.values[i]
		vals, ok := flags[rv.s.flag]
		if !ok {
			continue
		}
		src := source{kind: fromFlag, where: rv.s.flag}
		if rv.s.value.list() {
			l.apply(rv, src, vals, echoList(vals))
			continue
		}
		if len(vals) == 0 {
			l.fail(fmt.Errorf("flag --%s was set without a value; give it one", rv.s.flag), rv.s)
			continue
		}
		v := vals[len(vals)-1]
		l.apply(rv, src, []string{v}, Echo(v))
	}
	return nil
}

// validate checks the merged values and reports every problem at once.
func (l *loader) validate() error {
	for i := range l.r.values {
		rv := &l.r.values[i]
		if l.failed[rv.s] {
			continue
		}
		if err := rv.s.value.check(l.cfg); err != nil {
			l.errs = append(l.errs, rv.s.errorf(rv.src, rv.raw, err))
		}
	}
	if len(l.errs) == 0 {
		l.errs = crossCheck(l.cfg, l.bit)
	}
	if l.bit&roleServer != 0 {
		if err := rdmaAsked(l.lookup); err != nil {
			l.errs = append(l.errs, err)
		}
	}
	return errors.Join(l.errs...)
}

// warn collects what is valid but probably not what the operator meant.
func (l *loader) warn() {
	l.r.warnings = append(l.r.warnings, noEffect(l.cfg, l.r.values)...)
	if l.bit&roleServer != 0 {
		l.r.warnings = append(l.r.warnings, loopbackRegistered(&l.cfg.Server)...)
	} else if l.in.environ != nil {
		// Client roles read DFKV_RDMA themselves (rdma.ClientFromEnv) and
		// warn when it cannot run.
	}
	if l.in.environ != nil {
		l.r.warnings = append(l.r.warnings, unknownEnv(l.in.environ)...)
	}
}

// tlsPairs checks a listener's TLS settings: a certificate and key go
// together, and a client CA or TLS on the HTTP side needs them.
func tlsPairs(section, cert, key, clientCA string, httpTLS int) []error {
	var errs []error
	if (cert == "") != (key == "") {
		errs = append(errs, fmt.Errorf("%s.tls_cert and %s.tls_key go together: give both, or neither", section, section))
	}
	if cert == "" && clientCA != "" {
		errs = append(errs, fmt.Errorf("%s.tls_client_ca needs %s.tls_cert and %s.tls_key: client certificates are asked for in a TLS handshake", section, section, section))
	}
	if cert == "" && httpTLS == 1 {
		errs = append(errs, fmt.Errorf("%s.http_tls = 1 needs %s.tls_cert and %s.tls_key", section, section, section))
	}
	return errs
}

// crossCheck finds settings that are each valid but cannot work together,
// so --print-config, which operators use to check a configuration, reports
// them too, rather than the node after it opened its disks.
// ObjectHeaderBytes is the header the object store tier puts before each
// value (objtier.HeaderLen, which a test there holds equal): the upload
// queue holds whole objects. Not imported, so that config stays free of
// the tier's dependencies.
const ObjectHeaderBytes = 64

// ramExtentBytes is the RAM tier's arena extent: its budget, less the
// large-value reserve, must hold one.
const ramExtentBytes = 16 << 20

func crossCheck(cfg *Config, bit role) []error {
	var errs []error
	if bit&roleServer != 0 {
		sc := &cfg.Server
		if sc.RAMTier == 1 && sc.RAMTierBytes == 0 {
			errs = append(errs, errors.New("server.ram_tier = 1 needs server.ram_tier_bytes (DFKV_SERVER_RAM_TIER_BYTES, --ram-tier-bytes), e.g. 8GiB"))
		}
		if sc.RAMTier == 1 && sc.RAMTierBytes != 0 {
			// The tier's arena is whole 16MiB extents after the reserve.
			reserve := uint64(max(sc.RAMTierLargeReserve, 0))
			if sc.RAMTierLargeReserve == SizeAuto {
				reserve = 2 * ramExtentBytes
			}
			if sc.RAMTierBytes < reserve+ramExtentBytes {
				errs = append(errs, fmt.Errorf("server.ram_tier_bytes (DFKV_SERVER_RAM_TIER_BYTES) %s leaves no %s arena extent after the %s large-value reserve (server.ram_tier_large_reserve_bytes): raise ram_tier_bytes to at least %s, or lower the reserve",
					FormatSize(sc.RAMTierBytes), FormatSize(ramExtentBytes), FormatSize(reserve), FormatSize(reserve+ramExtentBytes)))
			}
		}
		// The queue holds whole objects: a value and its header.
		if need := sc.MaxBlockBytes + ObjectHeaderBytes; sc.S3Endpoint != "" && sc.S3Write != "sync" && sc.S3Write != "off" && sc.S3UploadQueueBytes < need {
			errs = append(errs, fmt.Errorf("server.s3_upload_queue_bytes (DFKV_SERVER_S3_UPLOAD_QUEUE_BYTES) %s cannot hold the largest object (server.max_block_bytes %s and a %d-byte header): such values would never be uploaded; raise it to at least %d bytes",
				FormatSize(sc.S3UploadQueueBytes), FormatSize(sc.MaxBlockBytes), ObjectHeaderBytes, need))
		}
		if sc.S3Endpoint != "" && sc.S3Bucket == "" {
			errs = append(errs, errors.New("server.s3_endpoint is set but server.s3_bucket (DFKV_SERVER_S3_BUCKET, --s3-bucket) is empty: name the bucket to use"))
		}
		if sc.S3Endpoint != "" && sc.S3Write == "sync" && sc.RAMTier == 1 && sc.RAMWriteMode == "writeback" && sc.PutAckMode == "ram" {
			errs = append(errs, errors.New("server.s3_write = sync acknowledges a PUT only once its object is stored, but the RAM tier acknowledges write-back PUTs from RAM: set server.put_ack_mode = disk (or s3_write = async)"))
		}
		errs = append(errs, tlsPairs("server", sc.TLSCert, sc.TLSKey, sc.TLSClientCA, sc.HTTPTLS)...)
		if sc.TLSCert != "" && sc.ShmSocket != "" && sc.TLSClientCA != "" {
			errs = append(errs, errors.New("server.tls_client_ca and server.shm_socket cannot be on together: a shared-memory client is not asked for a certificate; unset server.shm_socket"))
		}
		if sc.MDSToken != "" && len(sc.MDS) == 0 {
			errs = append(errs, errors.New("server.mds_token is set but server.mds is empty: the token is for registering with an MDS; set server.mds or unset the token"))
		}
		if sc.CredentialsFile != "" && sc.ShmSocket != "" {
			errs = append(errs, errors.New("server.credentials_file and server.shm_socket cannot be on together: a shared-memory client maps the whole RAM arena, which no credential can confine to its tenants; unset server.shm_socket (DFKV_SERVER_SHM_SOCKET) on a node that requires credentials"))
		}
		if sameListener(sc.Listen, sc.HTTPListen) {
			errs = append(errs, fmt.Errorf("server.http_listen (DFKV_SERVER_HTTP_LISTEN) %s takes the port of server.listen (DFKV_SERVER_LISTEN) %s; give the metrics and health endpoints a port of their own (default 127.0.0.1:7680)", Echo(sc.HTTPListen), Echo(sc.Listen)))
		}
		if b, need := sc.BufferBudgetBytes, uint64(iobuf.SizeFor(int(sc.MaxBlockBytes))); b != 0 && b < need {
			errs = append(errs, fmt.Errorf("server.buffer_budget_bytes (DFKV_SERVER_BUFFER_BUDGET_BYTES) %s is less than one buffer for the largest value (server.max_block_bytes %s needs %s): raise it, or set 0 for the automatic size",
				FormatSize(b), FormatSize(sc.MaxBlockBytes), FormatSize(need)))
		}
		if sc.AdvertiseAddr != "" && unspecifiedHost(sc.AdvertiseAddr) {
			errs = append(errs, fmt.Errorf("server.advertise_addr (DFKV_SERVER_ADVERTISE_ADDR) %s is not an address clients can dial: set it to this host's address on the clients' network, e.g. 10.0.0.21:7600", Echo(sc.AdvertiseAddr)))
		}
		if len(sc.MDS) > 0 && sc.AdvertiseAddr == "" && unspecifiedHost(sc.Listen) {
			errs = append(errs, fmt.Errorf("server.listen (DFKV_SERVER_LISTEN) %s is not an address clients can dial, and the node registers with the MDS (server.mds): set server.advertise_addr (DFKV_SERVER_ADVERTISE_ADDR) to the address clients should use", Echo(sc.Listen)))
		}
	}
	if bit&roleMDS != 0 {
		m := cfg.MDS
		errs = append(errs, tlsPairs("mds", m.TLSCert, m.TLSKey, m.TLSClientCA, m.HTTPTLS)...)
	}
	if bit&roleTools != 0 {
		cc := cfg.Client
		if cc.TLS != 1 && (cc.TLSCA != "" || cc.TLSCert != "" || cc.TLSKey != "" || cc.TLSServerName != "") {
			errs = append(errs, errors.New("client.tls_ca, tls_cert, tls_key or tls_server_name is set but client.tls is off: set client.tls = 1 (--tls) to speak TLS"))
		}
		if (cc.TLSCert == "") != (cc.TLSKey == "") {
			errs = append(errs, errors.New("client.tls_cert and client.tls_key go together: give both, or neither"))
		}
	}
	if bit&roleMDS != 0 && cfg.MDS.MembersNeedToken == 1 && cfg.MDS.NodeCredentialsFile == "" {
		errs = append(errs, errors.New("mds.members_need_token = 1 needs mds.node_credentials_file (DFKV_MDS_NODE_CREDENTIALS_FILE): the credentials with members = true are listed there"))
	}
	if bit&roleMDS != 0 && sameListener(cfg.MDS.Listen, cfg.MDS.HTTPListen) {
		errs = append(errs, fmt.Errorf("mds.http_listen (DFKV_MDS_HTTP_LISTEN) %s takes the port of mds.listen (DFKV_MDS_LISTEN) %s; give the HTTP endpoints a port of their own", Echo(cfg.MDS.HTTPListen), Echo(cfg.MDS.Listen)))
	}
	return errs
}

// ramTierOnly are the server settings that only the RAM tier reads.
var ramTierOnly = map[string]bool{
	"server.ram_tier_bytes": true, "server.ram_write_mode": true, "server.put_ack_mode": true,
	"server.ram_flush_threads": true, "server.ram_flush_delay_ms": true, "server.ram_tier_shards": true,
	"server.ram_tier_numa": true, "server.ram_tier_large_reserve_bytes": true, "server.read_coalesce": true,
}

// slabOnly are the server settings that only the slab engine reads.
var slabOnly = map[string]bool{
	"server.slab_extent_bytes": true, "server.scrub_bytes_per_second": true, "server.scrub_interval_hours": true,
	"server.uring": true,
}

// noEffect warns about settings given (not defaults) that the rest of the
// configuration makes moot, so an operator who set one learns it does
// nothing rather than trusting it: the RAM tier's settings with the tier
// off, a static member list beside an MDS.
func noEffect(cfg *Config, values []resolvedValue) []string {
	var warns []string
	var def *Config
	for _, rv := range values {
		if rv.src.kind == fromDefault {
			continue
		}
		// A file that spells out a default (dfkv.example.toml lists every
		// setting with its default) sets nothing an operator chose.
		if def == nil {
			def = defaultConfig()
		}
		if rv.s.value.format(cfg) == rv.s.value.format(def) {
			continue
		}
		switch {
		case ramTierOnly[rv.s.key] && cfg.Server.RAMTier != 1:
			warns = append(warns, fmt.Sprintf("%s (%s) is set from %s but has no effect: server.ram_tier is 0 (the RAM tier is off)", rv.s.key, rv.s.env, rv.src))
		case slabOnly[rv.s.key] && cfg.Server.StoreEngine != "slab":
			warns = append(warns, fmt.Sprintf("%s (%s) is set from %s but has no effect: server.store_engine is %q (only the slab engine has it)", rv.s.key, rv.s.env, rv.src, cfg.Server.StoreEngine))
		case rv.s.key == "client.members" && len(cfg.Client.MDS) > 0:
			warns = append(warns, fmt.Sprintf("client.members (%s) is set from %s but has no effect: client.mds is set, and members come from the MDS", rv.s.env, rv.src))
		}
	}
	return warns
}

// Defaults returns the configuration of defaults alone, for a role that
// needs to tell a setting left at its default from one given.
func Defaults() *Config { return defaultConfig() }

// defaultConfig is the configuration of defaults alone.
func defaultConfig() *Config {
	c := new(Config)
	for i := range settings {
		if err := settings[i].value.set(c, settings[i].defaults()); err != nil {
			panic(fmt.Sprintf("BUG: config: default of %s %q %v", settings[i].key, settings[i].def, err))
		}
	}
	return c
}

// sameListener reports two listen addresses that would collide: the same
// host and a fixed port (port 0 picks a free port each time).
func sameListener(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	na, errPA := strconv.Atoi(pa)
	nb, errPB := strconv.Atoi(pb)
	if errA != nil || errB != nil || errPA != nil || errPB != nil {
		return false
	}
	// A wildcard address takes its port on every interface, so it clashes
	// with any address on that port (0.0.0.0:7600 and 127.0.0.1:7600).
	return na == nb && na != 0 && (ha == hb || unspecifiedHost(a) || unspecifiedHost(b))
}

// loopbackRegistered warns when a node registers a loopback address with
// an MDS that is not itself on loopback: a cluster on one host is fine,
// but on a fleet only the node's own host could reach it (a
// `$(hostname -i)` that resolves to 127.0.x.x does this), and clients
// elsewhere would route to it and miss.
func loopbackRegistered(sc *Server) []string {
	if len(sc.MDS) == 0 || allLoopback(sc.MDS) {
		return nil
	}
	addr, key := sc.AdvertiseAddr, "server.advertise_addr"
	if addr == "" {
		addr, key = sc.Listen, "server.listen"
	}
	if !isLoopback(addr) {
		return nil
	}
	return []string{fmt.Sprintf("%s %s is a loopback address that clients on other hosts cannot dial; set server.advertise_addr", key, Echo(addr))}
}

func isLoopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(h)
	return (ip != nil && ip.IsLoopback()) || h == "localhost"
}

func allLoopback(addrs []string) bool {
	for _, a := range addrs {
		if !isLoopback(a) {
			return false
		}
	}
	return true
}

// unspecifiedHost reports a listen address on every interface ("",
// 0.0.0.0, ::), which is not one to register for clients to dial.
func unspecifiedHost(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(h)
	return h == "" || (ip != nil && ip.IsUnspecified())
}

// errorf is the one shape of a bad value: what, from where, what is wrong,
// what would be right. For example:
//
//	server.max_block_bytes (DFKV_SERVER_MAX_BLOCK_BYTES) from env: "9TiB" is out of range; allowed 4KiB..1GiB
//
// A problem that already ends with what is allowed ("is not a workload;
// valid workloads are put, get, …") is not followed by it a second time.
func (s *setting) errorf(src source, raw string, problem error) error {
	if s.secret() {
		raw = "the value (a secret, not shown)"
	}
	msg := fmt.Sprintf("%s (%s) from %s: %s %v", s.key, s.env, src, raw, problem)
	if allowed := s.value.allowed(); !strings.HasSuffix(problem.Error(), allowed) {
		msg += "; allowed " + allowed
	}
	return errors.New(msg)
}

// canonicalFlags returns flags keyed by each setting's current flag name,
// with earlier names mapped to it (the current name wins when both are
// given), or an error naming every flag that is not a setting flag of the
// role.
func canonicalFlags(flags map[string][]string, bit role, roleName string) (map[string][]string, error) {
	out := make(map[string][]string, len(flags))
	var bad []string
	for name, vals := range flags {
		if s := flagSetting(name, bit); s != nil {
			if _, both := flags[s.flag]; both && name != s.flag {
				continue
			}
			out[s.flag] = vals
		} else {
			bad = append(bad, "--"+name)
		}
	}
	if len(bad) == 0 {
		return out, nil
	}
	sort.Strings(bad)
	return nil, fmt.Errorf("config: %s: not a setting flag of role %s", strings.Join(bad, ", "), roleName)
}

// flagSetting returns the row of role bit whose flag, or earlier flag, is
// name, or nil.
func flagSetting(name string, bit role) *setting {
	for i := range settings {
		s := &settings[i]
		if s.roles&bit != 0 && (s.flag == name || s.oldFlag == name) {
			return s
		}
	}
	return nil
}

// clone copies c deep enough that changing the copy's lists leaves c alone.
func (c *Config) clone() *Config {
	d := *c
	d.Server.Disks = append([]string(nil), c.Server.Disks...)
	d.Client.Members = append([]string(nil), c.Client.Members...)
	return &d
}
