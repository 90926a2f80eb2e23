package validate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// manifestsDir is contrib/kubernetes, seen from this package's directory,
// where go test runs.
const manifestsDir = ".."

// object is one rendered Kubernetes object, decoded into its API type.
type object struct {
	kind string // apiVersion/kind, e.g. "apps/v1/DaemonSet"
	name string
	obj  any // *appsv1.DaemonSet, *corev1.Service, ...
}

// decoders names every kind the manifests may contain and the type it is
// decoded into. A kind missing here fails the test: add its type, so that
// it is decoded strictly like the rest.
var decoders = map[string]func() any{
	"v1/ConfigMap":                            func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                               func() any { return new(corev1.Secret) },
	"v1/Service":                              func() any { return new(corev1.Service) },
	"v1/Namespace":                            func() any { return new(corev1.Namespace) },
	"apps/v1/DaemonSet":                       func() any { return new(appsv1.DaemonSet) },
	"apps/v1/Deployment":                      func() any { return new(appsv1.Deployment) },
	"apps/v1/StatefulSet":                     func() any { return new(appsv1.StatefulSet) },
	"policy/v1/PodDisruptionBudget":           func() any { return new(policyv1.PodDisruptionBudget) },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return new(networkingv1.NetworkPolicy) },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return new(monitoringv1.ServiceMonitor) },
	"monitoring.coreos.com/v1/PodMonitor":     func() any { return new(monitoringv1.PodMonitor) },
}

// decodeStrict decodes one object's YAML into its API type, failing on a
// field the type does not have (a typo, or a field of another API
// version) and on a field given twice.
func decodeStrict(apiVersion, kind string, doc []byte) (object, error) {
	gvk := apiVersion + "/" + kind
	mk, ok := decoders[gvk]
	if !ok {
		return object{}, fmt.Errorf("no strict decoder for %s: add its Go type to decoders in render_test.go", gvk)
	}
	v := mk()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return object{}, fmt.Errorf("%s: %w", gvk, err)
	}
	return object{kind: gvk, obj: v}, nil
}

// render builds the kustomization in dir in process, as
// `kubectl apply -k dir` would, and decodes every object strictly.
func render(t *testing.T, dir string) []object {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []object
	for _, r := range m.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %s/%s as YAML: %v", dir, r.GetKind(), r.GetName(), err)
		}
		o, err := decodeStrict(r.GetApiVersion(), r.GetKind(), doc)
		if err != nil {
			t.Errorf("%s: %s %s: %v", dir, r.GetKind(), r.GetName(), err)
			continue
		}
		o.name = r.GetName()
		objs = append(objs, o)
	}
	if len(objs) == 0 {
		t.Fatalf("%s renders no objects", dir)
	}
	return objs
}

// kustomizations returns, relative to manifestsDir, the directories that
// can be built (kind Kustomization) and the components (kind Component),
// which are built on top of what they patch (componentOverlay).
func kustomizations(t *testing.T) (builds, components []string) {
	t.Helper()
	err := filepath.WalkDir(manifestsDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "validate" {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "kustomization.yaml" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(data, &head); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		rel, _ := filepath.Rel(manifestsDir, filepath.Dir(path))
		if head.Kind == "Component" {
			components = append(components, rel)
		} else {
			builds = append(builds, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(builds)
	sort.Strings(components)
	for _, want := range []string{"base", "etcd", "monitoring"} {
		if !contains(builds, want) {
			t.Fatalf("no kustomization in %s/%s (found %v)", manifestsDir, want, builds)
		}
	}
	return builds, components
}

// componentOverlay writes a kustomization that puts component on top of
// base and etcd (a component under monitoring/: on top of monitoring), in a
// directory of its own, and returns that directory.
func componentOverlay(t *testing.T, component string) string {
	t.Helper()
	dir := t.TempDir()
	// kustomize takes no absolute path as a resource: name each directory
	// relative to the overlay.
	abs := func(p string) string {
		a, err := filepath.Abs(filepath.Join(manifestsDir, p))
		if err == nil {
			a, err = filepath.Rel(dir, a)
		}
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n")
	if strings.HasPrefix(component, "monitoring"+string(filepath.Separator)) {
		fmt.Fprintf(&b, "resources:\n- %s\n", abs("monitoring"))
	} else {
		fmt.Fprintf(&b, "resources:\n- %s\n- %s\n", abs("base"), abs("etcd"))
	}
	fmt.Fprintf(&b, "components:\n- %s\n", abs(component))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestDecodeStrictRefusesUnknownFields makes sure the decoding the other
// tests rely on does fail on a misspelt field.
func TestDecodeStrictRefusesUnknownFields(t *testing.T) {
	doc := []byte("apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      terminationGracePeriodSecond: 10\n")
	if _, err := decodeStrict("apps/v1", "DaemonSet", doc); err == nil || !strings.Contains(err.Error(), "terminationGracePeriodSecond") {
		t.Fatalf("a misspelt field decoded without an error naming it: %v", err)
	}
	doc = []byte("apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata:\n  name: x\nspec:\n  podMetricEndpoints: []\n")
	if _, err := decodeStrict("monitoring.coreos.com/v1", "PodMonitor", doc); err == nil {
		t.Fatal("a PodMonitor with a misspelt field decoded without an error")
	}
}
