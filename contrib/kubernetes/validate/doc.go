// Package validate checks the Kubernetes manifests of contrib/kubernetes
// offline, in its test: each kustomization is rendered in process with
// kustomize's Go API (krusty), every rendered object is decoded strictly
// into its Kubernetes API type (an unknown field fails), and the dfkv
// containers' configuration (the ConfigMap's dfkv.toml, the DFKV_*
// variables, the flags) is resolved by dfkv's own config package exactly as
// the role would at start, so a setting renamed in dfkv breaks the test
// rather than a deployment.
//
// It is a module of its own so that the main module takes no Kubernetes
// dependency; go.mod points github.com/dfkv/dfkv at this checkout.
//
//	cd contrib/kubernetes/validate && go test ./...
package validate
