// Package heaptest measures the Go heap for tests that bound what a
// misbehaving client can make a node or MDS hold.
package heaptest

import "runtime"

// Live returns the bytes of heap in use after a garbage collection, so
// two readings differ by what is still referenced between them.
func Live() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
