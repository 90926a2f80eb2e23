// Command libdfkv is the C ABI of dfkv, built as a shared library:
//
//	go build -buildmode=c-shared -o build/libdfkv.so ./contrib/libdfkv
//
// (scripts/build-lib.sh does this and installs the hand-written dfkv.h next
// to it). The header is the contract: every function, status code, output
// slot and ownership rule is documented there. This package only adapts it
// to wire/client.
//
// Layout: exports.go holds the //export functions, each a thin wrapper
// that presets its output slots, recovers panics into DFKV_INTERNAL and
// calls a plain Go function in ops.go that returns an error wrapping a
// wire.Status; handle.go maps the
// opaque dfkv_client tokens to client state with runtime/cgo.Handle, so no
// Go pointer ever reaches C. Two files are C: status.c holds
// dfkv_status_name (it returns static strings), and fork.c closes the
// embedded store's disk locks in a child forked from the host process.
//
// C memory (keys, values, destination buffers) is viewed through
// unsafe.Slice only for the duration of a call; wire/client finishes every
// goroutine of a batch before the call returns, so nothing keeps a view of
// caller memory afterwards. The namespace is copied at open.
package main

func main() {}
