package validate

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// TestManifests renders every kustomization under contrib/kubernetes (and
// every component on top of base and etcd), decodes each object strictly
// and checks the objects against each other and the dfkv containers
// against dfkv's own configuration loader.
func TestManifests(t *testing.T) {
	builds, components := kustomizations(t)
	var secrets []secretRef
	peerSeen := map[string]bool{}
	for _, b := range builds {
		t.Run(b, func(t *testing.T) {
			objs := render(t, filepath.Join(manifestsDir, b))
			secrets = append(secrets, checkBuild(t, objs, peerSeen)...)
		})
	}
	for _, c := range components {
		t.Run(c, func(t *testing.T) {
			objs := render(t, componentOverlay(t, c))
			secrets = append(secrets, checkBuild(t, objs, peerSeen)...)
		})
	}
	t.Run("secrets documented", func(t *testing.T) { checkSecretsDocumented(t, secrets) })
	for key, seen := range peerSeen {
		if !seen {
			t.Errorf("%s, which no build that has the policy has", key)
		}
	}
}

// workload is a DaemonSet, Deployment or StatefulSet, reduced to what the
// checks read.
type workload struct {
	kind, name string
	replicas   int32 // 0 for a DaemonSet
	selector   *metav1.LabelSelector
	template   *corev1.PodTemplateSpec
	stsService string   // a StatefulSet's serviceName
	claims     []string // a StatefulSet's volumeClaimTemplates
}

// build indexes one rendered kustomization.
type build struct {
	workloads  []workload
	services   map[string]*corev1.Service
	configMaps map[string]*corev1.ConfigMap
	objs       []object
}

func index(objs []object) *build {
	b := &build{services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{}, objs: objs}
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *appsv1.DaemonSet:
			b.workloads = append(b.workloads, workload{kind: "DaemonSet", name: v.Name, selector: v.Spec.Selector, template: &v.Spec.Template})
		case *appsv1.Deployment:
			b.workloads = append(b.workloads, workload{kind: "Deployment", name: v.Name, replicas: replicas(v.Spec.Replicas), selector: v.Spec.Selector, template: &v.Spec.Template})
		case *appsv1.StatefulSet:
			w := workload{kind: "StatefulSet", name: v.Name, replicas: replicas(v.Spec.Replicas), selector: v.Spec.Selector, template: &v.Spec.Template, stsService: v.Spec.ServiceName}
			for _, pvc := range v.Spec.VolumeClaimTemplates {
				w.claims = append(w.claims, pvc.Name)
			}
			b.workloads = append(b.workloads, w)
		case *corev1.Service:
			b.services[v.Name] = v
		case *corev1.ConfigMap:
			b.configMaps[v.Name] = v
		}
	}
	return b
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// selects reports whether sel selects a pod labelled lbls.
func selects(sel *metav1.LabelSelector, lbls map[string]string) (bool, error) {
	if sel == nil {
		return false, fmt.Errorf("no selector")
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	if s.Empty() {
		return false, fmt.Errorf("empty selector selects every pod")
	}
	return s.Matches(labels.Set(lbls)), nil
}

// podsSelectedBy returns the workloads whose pods sel selects.
func (b *build) podsSelectedBy(sel *metav1.LabelSelector) ([]workload, error) {
	var out []workload
	for _, w := range b.workloads {
		ok, err := selects(sel, w.template.Labels)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, w)
		}
	}
	return out, nil
}

// checkBuild runs every check on one rendered kustomization and returns
// the Secrets its pods use, which are created by hand.
func checkBuild(t *testing.T, objs []object, peerSeen map[string]bool) []secretRef {
	t.Helper()
	b := index(objs)
	var secrets []secretRef
	for _, w := range b.workloads {
		t.Run(w.kind+"/"+w.name, func(t *testing.T) {
			checkWorkload(t, b, w)
			for _, c := range w.template.Spec.Containers {
				if isImage(c.Image, "dfkv") {
					t.Run(c.Name, func(t *testing.T) { checkDfkvContainer(t, b, w, c) })
				}
			}
		})
		secrets = append(secrets, secretsOf(w)...)
	}
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *corev1.Service:
			checkService(t, b, v)
		case *policyv1.PodDisruptionBudget:
			ws, err := b.podsSelectedBy(v.Spec.Selector)
			if err != nil || len(ws) == 0 {
				t.Errorf("PodDisruptionBudget %s selects no pod of this build (%v)", v.Name, err)
			}
			checkPDBController(t, v, ws)
		case *networkingv1.NetworkPolicy:
			checkNetworkPolicy(t, b, v, peerSeen)
		}
	}
	return secrets
}

// isImage reports whether image (registry/path/name:tag@digest) is named name.
func isImage(image, name string) bool {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		image = image[:i]
	}
	return image == name || strings.HasSuffix(image, "/"+name)
}

// checkWorkload checks what the API server or the scheduler would refuse or
// get wrong: a selector that does not match the pod template, a volume
// mounted but not declared, a ConfigMap of the build named wrong.
func checkWorkload(t *testing.T, b *build, w workload) {
	if ok, err := selects(w.selector, w.template.Labels); err != nil || !ok {
		t.Errorf("the selector does not select the pod template's labels %v (%v)", w.template.Labels, err)
	}
	spec := &w.template.Spec
	vols := map[string]*corev1.Volume{}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if vols[v.Name] != nil {
			t.Errorf("volume %s declared twice", v.Name)
		}
		vols[v.Name] = v
		if v.ConfigMap != nil && b.configMaps[v.ConfigMap.Name] == nil {
			t.Errorf("volume %s names ConfigMap %s, which this build does not have (has %v)", v.Name, v.ConfigMap.Name, keys(b.configMaps))
		}
	}
	for _, pvc := range w.claims {
		vols[pvc] = &corev1.Volume{Name: pvc}
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if vols[m.Name] == nil {
				t.Errorf("container %s mounts volume %s, which the pod does not declare", c.Name, m.Name)
			}
		}
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Exec != nil && isImage(c.Image, "dfkv") {
			t.Errorf("container %s: a preStop exec hook cannot run in the dfkv image (it has no shell)", c.Name)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkService: its selector reaches pods of the build, and each target
// port is a port those pods' containers declare.
func checkService(t *testing.T, b *build, s *corev1.Service) {
	ws, err := b.podsSelectedBy(&metav1.LabelSelector{MatchLabels: s.Spec.Selector})
	if err != nil || len(ws) == 0 {
		t.Errorf("Service %s selects no pod of this build (%v)", s.Name, err)
		return
	}
	for _, p := range s.Spec.Ports {
		target := p.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(p.Port)
		}
		for _, w := range ws {
			if _, ok := containerPort(w.template.Spec.Containers, target); !ok {
				t.Errorf("Service %s port %s: target port %s is not a port of %s %s", s.Name, p.Name, target.String(), w.kind, w.name)
			}
		}
	}
}

func checkNetworkPolicy(t *testing.T, b *build, np *networkingv1.NetworkPolicy, peerSeen map[string]bool) {
	ws, err := b.podsSelectedBy(&np.Spec.PodSelector)
	if err != nil || len(ws) == 0 {
		t.Errorf("NetworkPolicy %s selects no pod of this build (%v)", np.Name, err)
		return
	}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port == nil {
				continue
			}
			for _, w := range ws {
				if _, ok := containerPort(w.template.Spec.Containers, *p.Port); !ok {
					t.Errorf("NetworkPolicy %s: port %s is not a port of %s %s", np.Name, p.Port.String(), w.kind, w.name)
				}
			}
		}
		for _, peer := range rule.From {
			if peer.PodSelector == nil || peer.NamespaceSelector != nil {
				continue
			}
			// The pods a policy admits may come from another directory
			// (etcd admits the MDS of base): TestManifests fails on a
			// peer that no build that has the policy also has.
			key := fmt.Sprintf("NetworkPolicy %s admits pods %v", np.Name, peer.PodSelector.MatchLabels)
			peers, err := b.podsSelectedBy(peer.PodSelector)
			if err != nil {
				t.Errorf("%s: %v", key, err)
			}
			peerSeen[key] = peerSeen[key] || len(peers) > 0
		}
	}
}

// containerPort resolves a port by number or name among containers' ports.
func containerPort(cs []corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, c := range cs {
		for _, cp := range c.Ports {
			if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

// secretRef is a Secret a pod reads, which the operator creates by hand.
type secretRef struct{ name, usedBy string }

func secretsOf(w workload) []secretRef {
	var out []secretRef
	who := w.kind + "/" + w.name
	for _, v := range w.template.Spec.Volumes {
		if v.Secret != nil {
			out = append(out, secretRef{v.Secret.SecretName, who})
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.Secret != nil {
					out = append(out, secretRef{s.Secret.Name, who})
				}
			}
		}
	}
	for _, c := range w.template.Spec.Containers {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				out = append(out, secretRef{e.ValueFrom.SecretKeyRef.Name, who})
			}
		}
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil {
				out = append(out, secretRef{e.SecretRef.Name, who})
			}
		}
	}
	return out
}

// checkSecretsDocumented: every Secret a manifest reads is created by a
// `kubectl create secret` command in contrib/kubernetes/README.md.
func checkSecretsDocumented(t *testing.T, refs []secretRef) {
	readme, err := os.ReadFile(filepath.Join(manifestsDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range refs {
		if seen[r.name] {
			continue
		}
		seen[r.name] = true
		re := regexp.MustCompile(`kubectl(?: -n \S+)? create secret (?:generic|tls) ` + regexp.QuoteMeta(r.name) + `\b`)
		if !re.Match(readme) {
			t.Errorf("Secret %s (read by %s) has no `kubectl create secret ... %s` in contrib/kubernetes/README.md", r.name, r.usedBy, r.name)
		}
	}
}

// TestMonitoringTargetsBase checks the ServiceMonitor and PodMonitor of
// contrib/kubernetes/monitoring against base: they select its objects and
// name ports those have.
func TestMonitoringTargetsBase(t *testing.T) {
	base := index(render(t, filepath.Join(manifestsDir, "base")))
	mon := render(t, filepath.Join(manifestsDir, "monitoring"))
	var sms, pms int
	for _, o := range mon {
		switch v := o.obj.(type) {
		case *monitoringv1.ServiceMonitor:
			sms++
			var svc *corev1.Service
			for _, s := range base.services {
				if ok, _ := selects(&v.Spec.Selector, s.Labels); ok {
					svc = s
				}
			}
			if svc == nil {
				t.Errorf("ServiceMonitor %s selects no Service of base", v.Name)
				continue
			}
			for _, ep := range v.Spec.Endpoints {
				if !servicePortNamed(svc, ep.Port) {
					t.Errorf("ServiceMonitor %s: Service %s has no port named %q", v.Name, svc.Name, ep.Port)
				}
				if ep.Path != "/metrics" {
					t.Errorf("ServiceMonitor %s scrapes %q, not /metrics", v.Name, ep.Path)
				}
			}
		case *monitoringv1.PodMonitor:
			pms++
			ws, err := base.podsSelectedBy(&v.Spec.Selector)
			if err != nil || len(ws) == 0 {
				t.Errorf("PodMonitor %s selects no pod of base (%v)", v.Name, err)
				continue
			}
			for _, ep := range v.Spec.PodMetricsEndpoints {
				if ep.Port == nil {
					t.Errorf("PodMonitor %s: an endpoint without a port name", v.Name)
					continue
				}
				for _, w := range ws {
					if _, ok := containerPort(w.template.Spec.Containers, intstr.FromString(*ep.Port)); !ok {
						t.Errorf("PodMonitor %s: %s %s has no port named %q", v.Name, w.kind, w.name, *ep.Port)
					}
				}
				if ep.Path != "/metrics" {
					t.Errorf("PodMonitor %s scrapes %q, not /metrics", v.Name, ep.Path)
				}
			}
		}
	}
	if sms == 0 || pms == 0 {
		t.Errorf("monitoring has %d ServiceMonitors and %d PodMonitors; want the MDS's and the nodes'", sms, pms)
	}
}

func servicePortNamed(s *corev1.Service, name string) bool {
	for _, p := range s.Spec.Ports {
		if p.Name == name {
			return true
		}
	}
	return false
}

// TestREADMEPaths: each contrib/kubernetes/... directory the README names exists.
func TestREADMEPaths(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(manifestsDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`contrib/kubernetes/([A-Za-z0-9_./-]+)`).FindAllStringSubmatch(string(readme), -1) {
		p := strings.TrimRight(m[1], "./")
		if _, err := os.Stat(filepath.Join(manifestsDir, p)); err != nil {
			t.Errorf("README.md names contrib/kubernetes/%s, which does not exist", p)
		}
	}
}

// splitHostPort parses a listen address; the port must be a number.
func splitHostPort(addr string) (string, int32, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, err
	}
	return h, int32(n), nil
}

// checkPDBController: the disruption controller computes maxUnavailable
// (and a percentage minAvailable) from the expected pod count, which it
// reads from the owning controller's scale subresource (Deployment,
// ReplicaSet, StatefulSet, ReplicationController, or a kind with
// /scale). A DaemonSet has none: the controller's sync fails with
// "daemonsets.apps does not implement the scale subresource", the budget
// stays at disruptionsAllowed 0 (condition SyncFailed), and every eviction
// of the pods it selects is refused (HTTP 429) instead of one at a time.
// Only an integer minAvailable is computed without the scale.
func checkPDBController(t *testing.T, pdb *policyv1.PodDisruptionBudget, ws []workload) {
	t.Helper()
	needsScale := pdb.Spec.MaxUnavailable != nil ||
		(pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.String)
	if !needsScale {
		return
	}
	for _, w := range ws {
		switch w.kind {
		case "Deployment", "StatefulSet":
			continue
		}
		t.Errorf("PodDisruptionBudget %s sets maxUnavailable (or a percentage minAvailable) over the pods of %s %s, which has no scale subresource: "+
			"the disruption controller cannot count the expected pods, keeps disruptionsAllowed at 0 and refuses every eviction of them; "+
			"use an integer minAvailable, or no budget", pdb.Name, w.kind, w.name)
	}
}
