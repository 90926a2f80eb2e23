//go:build !(rdma && linux && cgo)

package rdma

// defaultProvider is the libibverbs provider in an rdma build; this
// build has none.
func defaultProvider() (Provider, error) { return nil, ErrNotBuilt }
