package validate

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/dfkv/dfkv/config"
)

// Sample values of the downward API for resolving a pod's environment as
// the kubelet would.
var fieldSamples = map[string]string{
	"status.podIP":       "10.244.3.17",
	"status.hostIP":      "10.0.0.21",
	"spec.nodeName":      "gpu-node-07",
	"metadata.name":      "dfkv-pod-x7k2p",
	"metadata.namespace": "dfkv",
}

// sampleSecret stands for a Secret's value in the environment (a token:
// dfkv wants at least 16 bytes).
const sampleSecret = "0123456789abcdef0123456789abcdef"

// Sizing rules of contrib/kubernetes/README.md, "Sizing".
const (
	// memoryHeadroom is what the node needs beside the RAM tier and the
	// payload buffers: Go heap, indexes, connections.
	memoryHeadroom = 1 << 30
	// flushBytesPerSecond is a conservative NVMe write rate for the RAM
	// tier's flush at shutdown.
	flushBytesPerSecond = 500e6
	// graceMargin is added to the drain and the flush.
	graceMargin = 30 * time.Second
)

// imageEnv returns the environment scripts/build-image.sh bakes into the
// image: the lowest layer of every dfkv container's environment.
func imageEnv(t *testing.T) []corev1.EnvVar {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(manifestsDir, "..", "..", "scripts", "build-image.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var env []corev1.EnvVar
	for _, m := range regexp.MustCompile(`--env (DFKV_[A-Z0-9_]+)=(\S+)`).FindAllStringSubmatch(string(data), -1) {
		env = append(env, corev1.EnvVar{Name: m[1], Value: m[2]})
	}
	if len(env) == 0 {
		t.Fatal("scripts/build-image.sh sets no DFKV_* variable (--env NAME=VALUE); the image's environment is part of what this test resolves")
	}
	return env
}

// expandEnv resolves a container's env list as the kubelet does: each
// $(NAME) of a variable defined earlier in the list is replaced by its
// value, $$ is a literal $, and anything else is left as written.
func expandEnv(t *testing.T, b *build, c corev1.Container) (map[string]string, []string) {
	vals := map[string]string{}
	var names []string
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom == nil:
			v = expandRefs(v, vals)
		case e.ValueFrom.FieldRef != nil:
			s, ok := fieldSamples[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Errorf("env %s: no sample value for fieldRef %s; add one to fieldSamples", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			v = s
		case e.ValueFrom.SecretKeyRef != nil:
			v = sampleSecret
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm := b.configMaps[ref.Name]
			if cm == nil {
				t.Errorf("env %s: ConfigMap %s is not in this build", e.Name, ref.Name)
				continue
			}
			v = cm.Data[ref.Key]
		default:
			t.Errorf("env %s: a valueFrom this test cannot resolve", e.Name)
			continue
		}
		vals[e.Name] = v
		names = append(names, e.Name)
	}
	if len(c.EnvFrom) > 0 {
		t.Errorf("envFrom hides variable names from these checks: list each variable under env")
	}
	return vals, names
}

var envRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

func expandRefs(s string, vals map[string]string) string {
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := vals[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// podFile is a file a volume puts into the container.
type podFile struct {
	content *string // known content (a ConfigMap key); nil = a Secret's
	volume  *corev1.Volume
	mount   corev1.VolumeMount
}

// podFiles lists the files the container's volumes provide, by path, and
// the mounts by path for the paths whose files are not known one by one
// (a hostPath, an emptyDir, a Secret without items).
func podFiles(b *build, spec *corev1.PodSpec, c corev1.Container) (map[string]podFile, map[string]podFile) {
	vols := map[string]*corev1.Volume{}
	for i := range spec.Volumes {
		vols[spec.Volumes[i].Name] = &spec.Volumes[i]
	}
	files, dirs := map[string]podFile{}, map[string]podFile{}
	for _, m := range c.VolumeMounts {
		v := vols[m.Name]
		if v == nil {
			continue
		}
		add := func(key, rel string, content *string) {
			if m.SubPath != "" {
				if key == m.SubPath {
					files[m.MountPath] = podFile{content, v, m}
				}
				return
			}
			files[path.Join(m.MountPath, rel)] = podFile{content, v, m}
		}
		switch {
		case v.ConfigMap != nil:
			cm := b.configMaps[v.ConfigMap.Name]
			if cm == nil {
				continue
			}
			if len(v.ConfigMap.Items) > 0 {
				for _, it := range v.ConfigMap.Items {
					if d, ok := cm.Data[it.Key]; ok {
						add(it.Key, it.Path, &d)
					}
				}
				continue
			}
			for k, d := range cm.Data {
				add(k, k, &d)
			}
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				var items []corev1.KeyToPath
				switch {
				case src.Secret != nil:
					items = src.Secret.Items
				case src.ConfigMap != nil:
					items = src.ConfigMap.Items
				}
				if len(items) == 0 {
					dirs[m.MountPath] = podFile{nil, v, m}
				}
				for _, it := range items {
					add(it.Key, it.Path, nil)
				}
			}
		case v.Secret != nil && len(v.Secret.Items) > 0:
			for _, it := range v.Secret.Items {
				add(it.Key, it.Path, nil)
			}
		default:
			dirs[m.MountPath] = podFile{nil, v, m}
		}
	}
	return files, dirs
}

// under returns the mount of dirs that holds p.
func under(dirs map[string]podFile, p string) (podFile, bool) {
	for d, f := range dirs {
		if p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/") {
			return f, true
		}
	}
	return podFile{}, false
}

// loaded is a dfkv container's configuration as its role resolves it.
type loaded struct {
	cfg      *config.Config
	printed  map[string]printedSetting // key → the --print-config line
	tomlKeys []string                  // the keys the config file sets
	file     string                    // the config file's path in the container
	warnings []string                  // what the role warns about at start
}

type printedSetting struct{ source, env string }

// loadRole resolves the configuration of role as `dfkv <role> args...`
// would in a container whose environment is env and whose files are files:
// through config.Flags and config.Load, the role's own entry points, with
// the process environment set to env alone (Load reads it for unknown
// DFKV_* variables).
func loadRole(t *testing.T, role string, args []string, env map[string]string, files map[string]podFile) (*loaded, error) {
	t.Helper()
	tmp := t.TempDir()
	l := &loaded{printed: map[string]printedSetting{}}
	// The config file, wherever it is named, is read from a copy of the
	// ConfigMap's key.
	host := func(p string) (string, error) {
		f, ok := files[p]
		if !ok || f.content == nil {
			return "", fmt.Errorf("the config file %s is not a ConfigMap key mounted in the container", p)
		}
		if l.file != "" && l.file != p {
			return "", fmt.Errorf("two config files: %s and %s", l.file, p)
		}
		l.file = p
		hp := filepath.Join(tmp, "dfkv.toml")
		return hp, os.WriteFile(hp, []byte(*f.content), 0o644)
	}
	args = append([]string(nil), args...)
	for i := 0; i < len(args); i++ {
		var err error
		switch {
		case args[i] == "--config" && i+1 < len(args):
			args[i+1], err = host(args[i+1])
			i++
		case strings.HasPrefix(args[i], "--config="):
			var hp string
			hp, err = host(strings.TrimPrefix(args[i], "--config="))
			args[i] = "--config=" + hp
		}
		if err != nil {
			return nil, err
		}
	}
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "DFKV_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	for k, v := range env {
		if k == "DFKV_CONFIG" {
			hp, err := host(v)
			if err != nil {
				return nil, err
			}
			v = hp
		}
		t.Setenv(k, v)
	}
	if l.file != "" {
		f := files[l.file]
		var doc map[string]any
		md, err := toml.Decode(*f.content, &doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l.file, err)
		}
		for _, k := range md.Keys() {
			if md.Type(k...) != "Hash" {
				l.tomlKeys = append(l.tomlKeys, k.String())
			}
		}
	}

	var res *config.Resolved
	var loadErr error
	app := &cli.App{
		Name:      "dfkv-" + role,
		Flags:     config.Flags(role),
		Writer:    io.Discard,
		ErrWriter: io.Discard,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("arguments after the flags: %v", c.Args().Slice())
			}
			l.cfg, res, loadErr = config.Load(c, role, os.LookupEnv)
			return nil
		},
	}
	if err := app.Run(append([]string{"dfkv-" + role}, args...)); err != nil {
		return nil, fmt.Errorf("dfkv %s %s: %w", role, strings.Join(args, " "), err)
	}
	if loadErr != nil {
		return nil, loadErr
	}
	l.warnings = res.Warnings()
	var out bytes.Buffer
	if _, err := res.WriteTo(&out); err != nil {
		return nil, err
	}
	// key = value  # source[, auto (= ...)] (ENV)
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndex(line, "  # ")
		j := strings.Index(line, " = ")
		if i < 0 || j < 0 {
			return nil, fmt.Errorf("--print-config line %q: not key = value  # source (ENV)", line)
		}
		rest := line[i+4:]
		open := strings.LastIndex(rest, " (")
		if open < 0 || !strings.HasSuffix(rest, ")") {
			return nil, fmt.Errorf("--print-config line %q: no (ENV) at its end", line)
		}
		src, _, _ := strings.Cut(rest[:open], ",")
		l.printed[line[:j]] = printedSetting{source: src, env: rest[open+2 : len(rest)-1]}
	}
	return l, nil
}

// checkDfkvContainer resolves a dfkv container's configuration with dfkv's
// own loader and checks the pod around it against it.
func checkDfkvContainer(t *testing.T, b *build, w workload, c corev1.Container) {
	spec := &w.template.Spec
	if len(c.Command) > 0 {
		t.Errorf("command %v replaces the image's entrypoint (/usr/local/bin/dfkv): give the role and flags as args", c.Command)
	}
	if len(c.Args) == 0 {
		t.Fatalf("no args: the first must be the role (server or mds)")
	}
	role := c.Args[0]
	if role != "server" && role != "mds" {
		t.Fatalf("role %q: these manifests run server or mds", role)
	}
	env := map[string]string{}
	for _, e := range imageEnv(t) {
		env[e.Name] = e.Value
	}
	own, ownNames := expandEnv(t, b, c)
	for k, v := range own {
		env[k] = v
		if strings.HasPrefix(k, "DFKV_") && envRef.MatchString(v) {
			t.Errorf("env %s=%s refers to a variable not defined above it", k, v)
		}
	}
	files, dirs := podFiles(b, spec, c)
	l, err := loadRole(t, role, c.Args[1:], env, files)
	if err != nil {
		t.Fatalf("dfkv %s refuses to start with this configuration:\n%v", role, err)
	}
	// A warning is a setting or variable that does nothing (a DFKV_*
	// variable dfkv does not know, a RAM tier setting with the tier off):
	// the role starts, but not as the manifest says.
	for _, w := range l.warnings {
		t.Errorf("dfkv %s warns at start: %s", role, w)
	}
	if l.file == "" {
		t.Errorf("no config file: pass the ConfigMap's dfkv.toml with --config")
	}

	// Every DFKV_* variable the manifest sets is one this role reads, and
	// nothing later (a flag) overrides it.
	for _, name := range ownNames {
		if !strings.HasPrefix(name, "DFKV_") || name == "DFKV_CONFIG" {
			continue
		}
		found := false
		for key, p := range l.printed {
			if p.env == name {
				found = true
				if p.source != "env" {
					t.Errorf("env %s (%s) is overridden: %s comes from %s", name, key, key, p.source)
				}
			}
		}
		if !found {
			t.Errorf("env %s is not a setting of dfkv %s (an old name, another role's setting, or renamed): the role ignores it", name, role)
		}
	}
	// Every key of the config file this role reads takes effect: no
	// variable of the image or the pod overrides it.
	for _, key := range l.tomlKeys {
		if p, ok := l.printed[key]; ok && p.source != "file" {
			t.Errorf("%s sets %s, but %s overrides it from %s (%s): remove one", l.file, key, role, p.source, p.env)
		}
	}

	var listen, httpListen string
	var httpTLS int
	var pathSettings map[string]string
	switch role {
	case "server":
		sc := l.cfg.Server
		listen, httpListen, httpTLS = sc.Listen, sc.HTTPListen, sc.HTTPTLS
		pathSettings = map[string]string{
			"server.http_token_file": sc.HTTPTokenFile, "server.tls_cert": sc.TLSCert, "server.tls_key": sc.TLSKey,
			"server.tls_client_ca": sc.TLSClientCA, "server.mds_tls_ca": sc.MDSTLSCA, "server.credentials_file": sc.CredentialsFile,
			"server.tenant_quotas_file": sc.TenantQuotasFile, "server.s3_credentials_file": sc.S3CredentialsFile,
		}
		checkNode(t, b, w, c, l.cfg, dirs)
	case "mds":
		m := l.cfg.MDS
		listen, httpListen, httpTLS = m.Listen, m.HTTPListen, m.HTTPTLS
		pathSettings = map[string]string{
			"mds.http_token_file": m.HTTPTokenFile, "mds.tls_cert": m.TLSCert, "mds.tls_key": m.TLSKey,
			"mds.tls_client_ca": m.TLSClientCA, "mds.node_credentials_file": m.NodeCredentialsFile,
		}
		checkMDS(t, b, w, l.cfg, dirs)
	}

	// Listeners on every address of the pod, on the container's ports.
	want := map[int32]string{}
	for _, a := range []struct{ key, addr string }{{role + ".listen", listen}, {role + ".http_listen", httpListen}} {
		h, p, err := splitHostPort(a.addr)
		if err != nil || p == 0 {
			t.Errorf("%s %q: a pod needs a fixed port (%v)", a.key, a.addr, err)
			continue
		}
		if h != "" && h != "0.0.0.0" && h != "::" {
			t.Errorf("%s %q listens on %s only: a pod must listen on 0.0.0.0 to be reached", a.key, a.addr, h)
		}
		want[p] = a.key
	}
	have := map[int32]bool{}
	for _, cp := range c.Ports {
		have[cp.ContainerPort] = true
		if want[cp.ContainerPort] == "" {
			t.Errorf("container port %s %d is not a port dfkv %s listens on (%v)", cp.Name, cp.ContainerPort, role, want)
		}
		if spec.HostNetwork && cp.HostPort != 0 && cp.HostPort != cp.ContainerPort {
			t.Errorf("host network: port %s has hostPort %d != containerPort %d", cp.Name, cp.HostPort, cp.ContainerPort)
		}
	}
	for p, key := range want {
		if !have[p] {
			t.Errorf("%s listens on port %d, which the container does not declare", key, p)
		}
	}
	_, httpPort, _ := splitHostPort(httpListen)

	// Probes: the HTTP listener's health endpoints, in its scheme.
	scheme := corev1.URISchemeHTTP
	if httpTLS == 1 {
		scheme = corev1.URISchemeHTTPS
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
		need  bool
	}{{"readinessProbe", c.ReadinessProbe, "/readyz", true}, {"livenessProbe", c.LivenessProbe, "/healthz", true}, {"startupProbe", c.StartupProbe, "/healthz", false}} {
		if p.probe == nil {
			if p.need {
				t.Errorf("no %s", p.name)
			}
			continue
		}
		g := p.probe.HTTPGet
		if g == nil {
			t.Errorf("%s is not an httpGet of %s", p.name, p.path)
			continue
		}
		if g.Path != p.path {
			t.Errorf("%s path %q, want %s", p.name, g.Path, p.path)
		}
		if port, ok := containerPort([]corev1.Container{c}, g.Port); !ok || port != httpPort {
			t.Errorf("%s port %s is not %s.http_listen's port %d", p.name, g.Port.String(), role, httpPort)
		}
		s := g.Scheme
		if s == "" {
			s = corev1.URISchemeHTTP
		}
		if s != scheme {
			t.Errorf("%s scheme %s, but %s.http_tls = %d serves %s", p.name, s, role, httpTLS, scheme)
		}
	}

	// Files the configuration names are in a volume of the container.
	names := keys(pathSettings)
	sort.Strings(names)
	for _, key := range names {
		p := pathSettings[key]
		if p == "" {
			continue
		}
		if _, ok := files[p]; ok {
			continue
		}
		if _, ok := under(dirs, p); !ok {
			t.Errorf("%s %s is not a file of any volume mounted in the container", key, p)
		}
	}

	// Not root, read-only image, no privilege escalation.
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	nonRoot := csc.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = psc.RunAsNonRoot
	}
	uid := csc.RunAsUser
	if uid == nil {
		uid = psc.RunAsUser
	}
	if nonRoot == nil || !*nonRoot || uid == nil || *uid != 65532 {
		t.Errorf("runAsNonRoot and runAsUser 65532 (the image's user) are not both set")
	}
	if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		t.Errorf("readOnlyRootFilesystem is not true: dfkv writes only to its volumes")
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Errorf("allowPrivilegeEscalation is not false")
	}
}

// checkNode checks a cache node's pod: its disks on a host directory, its
// memory limit above the RAM tier, a grace period that covers the drain
// and the flush, and an MDS address that is a Service of the build.
func checkNode(t *testing.T, b *build, w workload, c corev1.Container, cfg *config.Config, dirs map[string]podFile) {
	sc := cfg.Server
	if w.kind != "DaemonSet" {
		t.Errorf("a node is a %s; nodes run one per host from a DaemonSet", w.kind)
	}
	for _, d := range sc.Disks {
		f, ok := under(dirs, d)
		switch {
		case !ok:
			t.Errorf("disk %s is in no volume: its blocks would be lost with the container", d)
		case f.volume.HostPath == nil:
			t.Errorf("disk %s is on volume %s, not a hostPath: its blocks would not outlive the pod", d, f.volume.Name)
		case f.mount.ReadOnly:
			t.Errorf("disk %s is on a read-only mount", d)
		}
	}
	if sc.RAMTier == 1 {
		lim, req := c.Resources.Limits.Memory(), c.Resources.Requests.Memory()
		budget := sc.BufferBudgetBytes
		if budget == 0 { // the server's automatic size
			budget = max(1<<30, uint64(1)<<bits.Len64(2*sc.MaxBlockBytes-1))
		}
		need := sc.RAMTierBytes + budget + budget/8 + memoryHeadroom
		switch {
		case lim.IsZero():
			t.Errorf("no memory limit: with a %s RAM tier set one of at least %s", config.FormatSize(sc.RAMTierBytes), config.HumanSize(need))
		case uint64(lim.Value()) < need:
			t.Errorf("memory limit %s < server.ram_tier_bytes %s + buffers %s + %s: the node refuses a RAM tier its limit cannot hold, or is OOM-killed",
				lim.String(), config.FormatSize(sc.RAMTierBytes), config.FormatSize(budget+budget/8), config.FormatSize(memoryHeadroom))
		}
		if req.Cmp(*lim) != 0 {
			t.Errorf("memory request %s != limit %s: reserve what the RAM tier takes at start", req.String(), lim.String())
		}
	}
	grace := 30 * time.Second
	if g := w.template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	var flush time.Duration
	if sc.RAMTier == 1 {
		flush = time.Duration(float64(sc.RAMTierBytes) / flushBytesPerSecond * float64(time.Second))
	}
	var drain time.Duration
	if len(sc.MDS) > 0 {
		drain = sc.Drain // only a node registered with an MDS drains
	}
	if need := drain + sc.ShutdownTimeout + flush + graceMargin; grace < need {
		t.Errorf("terminationGracePeriodSeconds %v < server.drain_ms %v + server.shutdown_timeout_ms %v + RAM tier flush %v + %v: the kubelet kills the node before its RAM tier is on disk",
			grace, drain, sc.ShutdownTimeout, flush.Round(time.Second), graceMargin)
	}
	for _, addr := range sc.MDS {
		checkServiceAddr(t, b, "server.mds", addr)
	}
	if sc.ID == "" {
		t.Errorf("server.id is empty: the node derives it from the pod's name, which changes on every restart; set DFKV_SERVER_ID from spec.nodeName")
	}
	if len(sc.MDS) > 0 && sc.AdvertiseAddr == "" {
		t.Errorf("server.advertise_addr is empty: set DFKV_SERVER_ADVERTISE_ADDR to $(POD_IP):port")
	}
}

// checkServiceAddr: host:port names a Service of the build with that port,
// when the build has a Service by that name.
func checkServiceAddr(t *testing.T, b *build, key, addr string) {
	h, p, err := splitHostPort(addr)
	if err != nil {
		t.Errorf("%s %q: %v", key, addr, err)
		return
	}
	svc := b.services[strings.SplitN(h, ".", 2)[0]]
	if svc == nil {
		if len(b.services) > 0 && !strings.Contains(h, ".") {
			t.Errorf("%s %q: no Service %s in this build", key, addr, h)
		}
		return
	}
	for _, sp := range svc.Spec.Ports {
		if sp.Port == p {
			return
		}
	}
	t.Errorf("%s %q: Service %s has no port %d", key, addr, svc.Name, p)
}

// checkMDS checks the MDS's directory: an MDS without etcd must be the only
// one, and etcd endpoints must be the members of the build's etcd.
func checkMDS(t *testing.T, b *build, w workload, cfg *config.Config, dirs map[string]podFile) {
	m := cfg.MDS
	if len(m.EtcdEndpoints) == 0 {
		if w.replicas > 1 {
			t.Errorf("%d MDS replicas without mds.etcd_endpoints: each would keep a directory of its own in a bbolt file", w.replicas)
		}
		if f, ok := under(dirs, m.DBPath); !ok || f.mount.ReadOnly {
			t.Errorf("mds.db_path %s is not on a writable volume", m.DBPath)
		}
		return
	}
	for _, e := range b.workloads {
		if e.kind != "StatefulSet" {
			continue
		}
		var etcd *corev1.Container
		for i, c := range e.template.Spec.Containers {
			if isImage(c.Image, "etcd") {
				etcd = &e.template.Spec.Containers[i]
			}
		}
		if etcd == nil {
			continue
		}
		client, ok := containerPort([]corev1.Container{*etcd}, intstr.FromString("client"))
		if !ok {
			t.Errorf("etcd StatefulSet %s has no port named client", e.name)
			continue
		}
		want := map[string]bool{}
		for i := int32(0); i < e.replicas; i++ {
			want[fmt.Sprintf("%s-%d.%s:%d", e.name, i, e.stsService, client)] = true
		}
		got := map[string]bool{}
		for _, ep := range m.EtcdEndpoints {
			got[strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")] = true
		}
		if fmt.Sprint(sortedKeys(want)) != fmt.Sprint(sortedKeys(got)) {
			t.Errorf("mds.etcd_endpoints %v are not the members of StatefulSet %s (%v)", m.EtcdEndpoints, e.name, sortedKeys(want))
		}
		if b.services[e.stsService] == nil {
			t.Errorf("StatefulSet %s names serviceName %s, which this build does not have", e.name, e.stsService)
		}
		for _, ev := range etcd.Env {
			if ev.Name == "ETCD_INITIAL_CLUSTER" {
				if n := len(strings.Split(ev.Value, ",")); int32(n) != e.replicas {
					t.Errorf("ETCD_INITIAL_CLUSTER lists %d members, the StatefulSet runs %d", n, e.replicas)
				}
			}
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
