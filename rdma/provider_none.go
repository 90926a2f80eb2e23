//go:build !(ibverbs && linux && cgo)

package rdma

// defaultProvider is the libibverbs provider in an ibverbs build; this
// build has none.
func defaultProvider() (Provider, error) { return nil, ErrNotBuilt }
