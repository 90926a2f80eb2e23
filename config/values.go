package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/wire"
)

// value is how one setting reads, checks and prints its field of Config.
// Every layer's input goes through set (so a default is parsed exactly like a
// flag); check runs once, on the merged Config.
//
// Errors from set and check are bare problems phrased to follow the quoted
// value ("is out of range", "has an empty element 2"); the loader puts the
// setting's key, env name, source and allowed values around them.
type value interface {
	// set parses vals and stores the result. A scalar gets exactly one
	// element; a list gets its elements, which replace the old list.
	set(c *Config, vals []string) error
	// check reports whether the merged value is allowed.
	check(c *Config) error
	// format writes the field as a TOML value, for --print-config.
	format(c *Config) string
	// allowed says in a few words what check accepts.
	allowed() string
	// list reports whether the setting is a list: a TOML array of strings,
	// a comma list in env, a repeatable flag.
	list() bool
}

var errOutOfRange = errors.New("is out of range")

// sizeValue is a byte size; see ParseSize.
type sizeValue struct {
	field    func(*Config) *uint64
	min, max uint64
	multiple uint64 // when not 0, a value other than 0 must be a multiple of it
	note     string // allowed text, when min..max does not say it all
}

func (v sizeValue) set(c *Config, vals []string) error {
	n, err := parseSize(vals[0])
	if err != nil {
		return err
	}
	*v.field(c) = n
	return nil
}

func (v sizeValue) check(c *Config) error {
	if n := *v.field(c); n < v.min || n > v.max || v.multiple != 0 && n%v.multiple != 0 {
		return errOutOfRange
	}
	return nil
}

func (v sizeValue) format(c *Config) string { return tomlSize(*v.field(c)) }

// tomlSize writes n as FormatSize does, as a TOML integer when it has no
// unit and fits one (an int64), and a string otherwise.
func tomlSize(n uint64) string {
	s := FormatSize(n)
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return s
	}
	return tomlString(s)
}

func (v sizeValue) allowed() string {
	if v.note != "" {
		return v.note
	}
	return FormatSize(v.min) + ".." + FormatSize(v.max)
}

func (sizeValue) list() bool { return false }

// SizeAuto is the value of an autoSizeValue field left on "auto": the
// component it configures picks the size itself.
const SizeAuto int64 = -1

// autoSizeValue is a byte size or the word auto (SizeAuto). It is a kind
// of its own because for the settings that use it 0 already means
// something ("none"), so "let dfkv choose" needs a word, not a number.
type autoSizeValue struct {
	field func(*Config) *int64
	max   uint64 // at most math.MaxInt64
	note  string // allowed text
}

func (v autoSizeValue) set(c *Config, vals []string) error {
	if strings.EqualFold(strings.TrimSpace(vals[0]), "auto") {
		*v.field(c) = SizeAuto
		return nil
	}
	n, err := parseSize(vals[0])
	if err != nil {
		return err
	}
	if n > math.MaxInt64 {
		return errOutOfRange
	}
	*v.field(c) = int64(n)
	return nil
}

func (v autoSizeValue) check(c *Config) error {
	if n := *v.field(c); n != SizeAuto && (n < 0 || uint64(n) > v.max) {
		return errOutOfRange
	}
	return nil
}

func (v autoSizeValue) format(c *Config) string {
	n := *v.field(c)
	if n == SizeAuto {
		return tomlString("auto")
	}
	return tomlSize(uint64(n))
}

func (v autoSizeValue) allowed() string { return v.note }
func (autoSizeValue) list() bool        { return false }

// intValue is a count.
type intValue struct {
	field    func(*Config) *int
	min, max int
}

func (v intValue) set(c *Config, vals []string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(vals[0]), 10, 64)
	if err != nil || n < math.MinInt || n > math.MaxInt {
		return errors.New("is not a whole number")
	}
	*v.field(c) = int(n)
	return nil
}

func (v intValue) check(c *Config) error {
	if n := *v.field(c); n < v.min || n > v.max {
		return errOutOfRange
	}
	return nil
}

func (v intValue) format(c *Config) string { return strconv.Itoa(*v.field(c)) }
func (v intValue) allowed() string         { return fmt.Sprintf("%d..%d", v.min, v.max) }
func (intValue) list() bool                { return false }

// millisValue is a duration written as whole milliseconds, the unit the
// DFKV_*_MS variables use; the field holds a time.Duration.
type millisValue struct {
	field    func(*Config) *time.Duration
	min, max int64 // milliseconds
	note     string
}

func (v millisValue) set(c *Config, vals []string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(vals[0]), 10, 64)
	if err != nil {
		return errors.New("is not a whole number of milliseconds")
	}
	// Refuse what time.Duration cannot hold rather than wrap around
	// into a value that check would then judge.
	if n > math.MaxInt64/int64(time.Millisecond) || n < math.MinInt64/int64(time.Millisecond) {
		return errOutOfRange
	}
	*v.field(c) = time.Duration(n) * time.Millisecond
	return nil
}

func (v millisValue) check(c *Config) error {
	d := *v.field(c)
	if d%time.Millisecond != 0 || d < time.Duration(v.min)*time.Millisecond || d > time.Duration(v.max)*time.Millisecond {
		return errOutOfRange
	}
	return nil
}

func (v millisValue) format(c *Config) string {
	return strconv.FormatInt(int64(*v.field(c)/time.Millisecond), 10)
}

func (v millisValue) allowed() string {
	s := fmt.Sprintf("%d..%d milliseconds", v.min, v.max)
	if v.note != "" {
		s += " (" + v.note + ")"
	}
	return s
}

func (millisValue) list() bool { return false }

// stringValue is a string with its own check.
type stringValue struct {
	field func(*Config) *string
	ok    func(string) error
	text  string // what ok accepts
}

func (v stringValue) set(c *Config, vals []string) error {
	*v.field(c) = vals[0]
	return nil
}

func (v stringValue) check(c *Config) error { return v.ok(*v.field(c)) }
func (v stringValue) format(c *Config) string {
	return tomlString(*v.field(c))
}
func (v stringValue) allowed() string { return v.text }
func (stringValue) list() bool        { return false }

// secretValue is a string that must never be shown: --print-config and
// every error or warning about it say only whether it is set and how
// long it is.
type secretValue struct {
	field func(*Config) *string
}

func (v secretValue) set(c *Config, vals []string) error {
	*v.field(c) = vals[0]
	return nil
}

func (v secretValue) check(c *Config) error {
	t := *v.field(c)
	if t == "" {
		return nil
	}
	if len(t) < minTokenBytes || len(t) > wire.MaxTokenBytes {
		return fmt.Errorf("is %d bytes", len(t))
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] == 0x7f {
			return fmt.Errorf("holds a space or control character at byte %d", i+1)
		}
	}
	return nil
}

func (v secretValue) format(c *Config) string { return tomlString(redact(*v.field(c))) }
func (v secretValue) allowed() string {
	return fmt.Sprintf("empty, or %d..%d bytes without spaces or control characters (e.g. openssl rand -hex 32)", minTokenBytes, wire.MaxTokenBytes)
}
func (secretValue) list() bool { return false }

// checkTLSVersion accepts the minimum TLS versions dfkv offers.
func checkTLSVersion(s string) error {
	if s != "1.3" && s != "1.2" {
		return errors.New("is not a TLS version dfkv accepts")
	}
	return nil
}

// minTokenBytes is the shortest token accepted: anything shorter is
// too easy to guess to protect a tenant.
const minTokenBytes = 16

// redact is how a secret shows: that it is set and its length.
func redact(s string) string {
	if s == "" {
		return ""
	}
	return fmt.Sprintf("(secret, %d bytes)", len(s))
}

// listValue is a list of strings. An empty element is refused when it is
// read, not dropped: "a,,b" is more likely a mistake than a wish for two.
type listValue struct {
	field func(*Config) *[]string
	ok    func([]string) error
	text  string
	// optional lists may be empty: a single empty value ("" in the env or
	// default, --flag "") means no elements.
	optional bool
}

func (v listValue) set(c *Config, vals []string) error {
	if len(vals) == 1 && strings.TrimSpace(vals[0]) == "" {
		if v.optional {
			*v.field(c) = nil
			return nil
		}
		return errors.New("is empty")
	}
	for i, e := range vals {
		if strings.TrimSpace(e) == "" {
			return fmt.Errorf("has an empty element %d", i+1)
		}
	}
	*v.field(c) = append([]string(nil), vals...)
	return nil
}

func (v listValue) check(c *Config) error { return v.ok(*v.field(c)) }

func (v listValue) format(c *Config) string { return tomlArray(*v.field(c)) }
func (v listValue) allowed() string         { return v.text }
func (listValue) list() bool                { return true }

// oneOf returns a check that accepts exactly the given words.
func oneOf(words ...string) func(string) error {
	return func(s string) error {
		for _, w := range words {
			if s == w {
				return nil
			}
		}
		return errors.New("is not a known value")
	}
}

// checkName accepts 1..max characters of [A-Za-z0-9._-]: names that are safe
// in file names, metric labels and etcd keys.
func checkName(max int) func(string) error {
	return func(s string) error {
		if s == "" {
			return errors.New("is empty")
		}
		if len(s) > max {
			return fmt.Errorf("is %d characters long", len(s))
		}
		for i := 0; i < len(s); i++ {
			c := s[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return fmt.Errorf("has character %q at byte %d", c, i+1)
			}
		}
		return nil
	}
}

// checkServerID accepts "" (derive it) or up to 255 bytes of printable
// non-space text: the ID is logged, labelled and compared, never parsed.
func checkServerID(s string) error {
	if len(s) > 255 {
		return fmt.Errorf("is %d bytes long", len(s))
	}
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	for i, r := range s {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("has a space or control character at byte %d", i+1)
		}
	}
	return nil
}

// checkHostPort accepts host:port with a numeric port in minPort..65535. A
// listener may use port 0 (the kernel picks one; tests rely on it), a peer
// address may not.
func checkHostPort(s string, minPort int, needHost bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return fmt.Errorf("is not host:port (%s)", ae.Err)
		}
		return fmt.Errorf("is not host:port (%v)", err)
	}
	if needHost && host == "" {
		return errors.New("has no host")
	}
	if strings.ContainsAny(host, " \t\r\n") {
		return errors.New("has a space in the host")
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("has port %s that is not a number", Echo(port))
	}
	if p < minPort || p > 65535 {
		return fmt.Errorf("has port %d out of range", p)
	}
	return nil
}

func checkListen(s string) error { return checkHostPort(s, 0, false) }

// checkAddrs accepts an empty list or host:port addresses (port 1..65535),
// none twice: the MDS addresses of nodes and clients.
func checkAddrs(addrs []string) error {
	if len(addrs) == 0 {
		return nil
	}
	return checkMembers(addrs)
}

// checkAdvertise accepts empty (advertise the listen address) or host:port
// with a host and a real port.
func checkAdvertise(s string) error {
	if s == "" {
		return nil
	}
	return checkHostPort(s, 1, true)
}

// checkEtcdEndpoints accepts an empty list (then the MDS uses bbolt) or
// host:port / http(s)://host:port endpoints.
func checkEtcdEndpoints(eps []string) error {
	for i, e := range eps {
		hp := strings.TrimPrefix(strings.TrimPrefix(e, "http://"), "https://")
		if err := checkHostPort(hp, 1, true); err != nil {
			return fmt.Errorf("has element %d %s that %v", i+1, Echo(e), err)
		}
	}
	return nil
}

func checkEtcdPrefix(s string) error {
	if !strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") || strings.ContainsAny(s, " \t\n") {
		return errors.New("must start with / and not end with /, without spaces")
	}
	return nil
}

func checkNonEmpty(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	return nil
}

func checkHTTPListen(s string) error {
	if s == "" {
		return nil
	}
	return checkListen(s)
}

// checkNamespace accepts what the client library accepts (wire.NewKeyMapper):
// 1 to wire.MaxNamespaceBytes bytes, so a namespace an engine uses can be
// looked into with the tools.
func checkNamespace(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	if len(s) > wire.MaxNamespaceBytes {
		return fmt.Errorf("is %d bytes long", len(s))
	}
	return nil
}

func checkDisks(disks []string) error {
	if len(disks) == 0 {
		return errors.New("is empty")
	}
	seen := make(map[string]int, len(disks))
	for i, d := range disks {
		if strings.TrimSpace(d) == "" {
			return fmt.Errorf("has an empty element %d", i+1)
		}
		clean := filepath.Clean(d)
		if j, ok := seen[clean]; ok {
			return fmt.Errorf("names one directory twice (elements %d and %d are both %s)", j+1, i+1, clean)
		}
		seen[clean] = i
	}
	return nil
}

func checkMembers(members []string) error {
	if len(members) == 0 {
		return errors.New("is empty")
	}
	seen := make(map[string]int, len(members))
	for i, m := range members {
		if err := checkHostPort(m, 1, true); err != nil {
			return fmt.Errorf("has element %d %s that %v", i+1, Echo(m), err)
		}
		if j, ok := seen[m]; ok {
			return fmt.Errorf("names one member twice (elements %d and %d are both %s)", j+1, i+1, m)
		}
		seen[m] = i
	}
	return nil
}

// tomlString quotes s as a TOML basic string. Invalid UTF-8 cannot be written
// in TOML at all, so such bytes print as U+FFFD.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func tomlArray(vals []string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = tomlString(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// uintValue is a count too large for an int, such as a random seed.
type uintValue struct {
	field    func(*Config) *uint64
	min, max uint64
}

func (v uintValue) set(c *Config, vals []string) error {
	t := strings.TrimSpace(vals[0])
	if strings.HasPrefix(t, "-") {
		return errors.New("is negative")
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return errors.New("is not a whole number")
	}
	*v.field(c) = n
	return nil
}

func (v uintValue) check(c *Config) error {
	if n := *v.field(c); n < v.min || n > v.max {
		return errOutOfRange
	}
	return nil
}

// format writes a TOML integer, or a string past what TOML integers hold
// (int64), so --print-config output still loads.
func (v uintValue) format(c *Config) string {
	n := *v.field(c)
	if n > math.MaxInt64 {
		return tomlString(strconv.FormatUint(n, 10))
	}
	return strconv.FormatUint(n, 10)
}

func (v uintValue) allowed() string { return fmt.Sprintf("%d..%d", v.min, v.max) }
func (uintValue) list() bool        { return false }

// floatValue is a fraction or ratio. A TOML file may give it as a float
// or an integer.
type floatValue struct {
	field    func(*Config) *float64
	min, max float64
}

func (v floatValue) set(c *Config, vals []string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(vals[0]), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return errors.New("is not a number")
	}
	*v.field(c) = f
	return nil
}

func (v floatValue) check(c *Config) error {
	if f := *v.field(c); f < v.min || f > v.max {
		return errOutOfRange
	}
	return nil
}

func (v floatValue) format(c *Config) string { return strconv.FormatFloat(*v.field(c), 'g', -1, 64) }
func (v floatValue) allowed() string         { return fmt.Sprintf("%g..%g", v.min, v.max) }
func (floatValue) list() bool                { return false }

// durationValue is a duration written as Go writes one (10s, 1m30s,
// 500ms; a bare 0 too), for settings that are not *_ms: the bench's
// stage lengths, which people think of in seconds and minutes.
type durationValue struct {
	field    func(*Config) *time.Duration
	min, max time.Duration
}

func (v durationValue) set(c *Config, vals []string) error {
	d, err := time.ParseDuration(strings.TrimSpace(vals[0]))
	if err != nil {
		return errors.New("is not a duration such as 10s, 1m30s or 500ms")
	}
	*v.field(c) = d
	return nil
}

func (v durationValue) check(c *Config) error {
	if d := *v.field(c); d < v.min || d > v.max {
		return errOutOfRange
	}
	return nil
}

func (v durationValue) format(c *Config) string { return tomlString(formatDuration(*v.field(c))) }
func (v durationValue) allowed() string {
	return formatDuration(v.min) + ".." + formatDuration(v.max)
}
func (durationValue) list() bool { return false }

// formatDuration is time.Duration's String without the zero minutes and
// seconds it appends to whole hours and minutes (24h, not 24h0m0s), which
// time.ParseDuration reads back the same.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Switch is a setting that is on, off, or left to the role (auto), such
// as whether bench fills the key space: by default that depends on the
// workload, and the operator can still force it either way.
type Switch int8

const (
	SwitchAuto Switch = iota // the role decides
	SwitchOff
	SwitchOn
)

// Or resolves s, with auto meaning def.
func (s Switch) Or(def bool) bool {
	switch s {
	case SwitchOn:
		return true
	case SwitchOff:
		return false
	}
	return def
}

// switchValue is a Switch: auto, or a boolean in any of the forms
// rdma.ParseSwitch reads (true/false, 1/0, yes/no, on/off). A TOML file may
// give it as a boolean; its flag may stand alone (--fill is --fill=true).
type switchValue struct {
	field func(*Config) *Switch
}

func (v switchValue) set(c *Config, vals []string) error {
	t := strings.TrimSpace(vals[0])
	if strings.EqualFold(t, "auto") {
		*v.field(c) = SwitchAuto
		return nil
	}
	on, known := rdma.ParseSwitch(t)
	switch {
	case t == "":
		return errors.New("is empty")
	case !known:
		return errors.New("is not auto or a boolean")
	case on:
		*v.field(c) = SwitchOn
	default:
		*v.field(c) = SwitchOff
	}
	return nil
}

func (v switchValue) check(c *Config) error {
	if s := *v.field(c); s != SwitchAuto && s != SwitchOn && s != SwitchOff {
		return errOutOfRange
	}
	return nil
}

func (v switchValue) format(c *Config) string {
	switch *v.field(c) {
	case SwitchOn:
		return "true"
	case SwitchOff:
		return "false"
	}
	return tomlString("auto")
}

func (switchValue) allowed() string { return "auto, true or false (also 1/0, yes/no, on/off)" }
func (switchValue) list() bool      { return false }

// oneOfKind is oneOf whose error names the kind of value and lists the
// valid ones ("is not a workload; valid workloads are put, get"), for
// settings whose values are words a user picks from a short list.
func oneOfKind(kind string, words ...string) func(string) error {
	ok := oneOf(words...)
	return func(s string) error {
		if ok(s) != nil {
			return fmt.Errorf("is not a %s; valid %ss are %s", kind, kind, strings.Join(words, ", "))
		}
		return nil
	}
}

// checkPeerAddr accepts empty (no peer) or host:port with a real port.
func checkPeerAddr(s string) error {
	if s == "" {
		return nil
	}
	return checkHostPort(s, 1, false)
}

// checkKeyPrefix accepts 1..200 bytes without spaces or control
// characters: the bench's keys must be valid memcached keys (at most 250
// bytes, nothing below '!'), and the prefix leaves room for the rest.
func checkKeyPrefix(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	if len(s) > 200 {
		return fmt.Errorf("is %d bytes long (memcached keys hold at most 250)", len(s))
	}
	for i, r := range s {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("has a space or control character at byte %d (memcached keys cannot hold them)", i+1)
		}
	}
	return nil
}

// checkSocketPath accepts empty (off) or an absolute path that fits a
// Unix socket address (107 bytes on Linux).
func checkSocketPath(s string) error {
	switch {
	case s == "":
		return nil
	case !strings.HasPrefix(s, "/"):
		return errors.New("is not an absolute path")
	case len(s) > 107:
		return fmt.Errorf("is %d bytes; a Unix socket path holds at most 107", len(s))
	}
	return nil
}

// checkFileMode accepts an octal permission mode (0 to 0777).
func checkFileMode(s string) error {
	if _, err := ParseFileMode(s); err != nil {
		return err
	}
	return nil
}

// ParseFileMode parses an octal permission mode such as "0600".
func ParseFileMode(s string) (os.FileMode, error) {
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o777 {
		return 0, errors.New("is not an octal file mode between 0000 and 0777")
	}
	return os.FileMode(v), nil
}

// checkS3Endpoint accepts an empty endpoint (no object store) or
// host:port without a scheme: the scheme is s3_tls's to choose, and a URL
// here would otherwise be taken as a host name.
func checkS3Endpoint(s string) error {
	switch {
	case s == "":
		return nil
	case strings.Contains(s, "://"):
		return errors.New("has a scheme; give host:port and choose https with s3_tls")
	case strings.ContainsAny(s, "/ "):
		return errors.New("is not host:port")
	}
	return nil
}

// checkS3Prefix accepts a prefix that joins object names with exactly
// one slash.
func checkS3Prefix(s string) error {
	if strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") || strings.Contains(s, "//") {
		return errors.New("has a leading, trailing or doubled slash")
	}
	return nil
}

// onOffValue is a 0/1 setting whose flag may stand alone, as a switch's
// does (--embedded means 1); every layer also takes true/false, yes/no
// and on/off.
type onOffValue struct {
	field func(*Config) *int
}

func (v onOffValue) set(c *Config, vals []string) error {
	val := strings.TrimSpace(vals[0])
	if val == "" {
		// An unset shell variable or --tls= is a mistake, not "off": it
		// would turn off what the file asked for.
		return errors.New("is empty; want 0 or 1")
	}
	on, known := rdma.ParseSwitch(val)
	if !known {
		return errors.New("is not 0 or 1")
	}
	*v.field(c) = 0
	if on {
		*v.field(c) = 1
	}
	return nil
}

func (v onOffValue) check(c *Config) error {
	if n := *v.field(c); n != 0 && n != 1 {
		return errOutOfRange
	}
	return nil
}

func (v onOffValue) format(c *Config) string { return strconv.Itoa(*v.field(c)) }
func (onOffValue) allowed() string           { return "0 or 1 (also true/false, yes/no, on/off)" }
func (onOffValue) list() bool                { return false }
