package main

/*
#include <stdlib.h>
#define DFKV_INTERNAL_NO_PROTOTYPES 1
#include "dfkv.h"
*/
import "C"

import (
	"fmt"
	"runtime/debug"
	"unsafe"

	"github.com/dfkv/dfkv/wire"
)

// Exports. Each one: preset the output slots to failure, defer guard (a
// panic becomes DFKV_INTERNAL with a message, never a crash of the host),
// turn C spans into Go slices, call the plain function in ops.go, write
// the outputs. The header declares `dfkv_client*` and `const` pointers;
// cgo cannot spell const, so the prototypes are hidden from this file by
// DFKV_INTERNAL_NO_PROTOTYPES and the token travels as uintptr_t, which
// has the same size and calling convention as a pointer on every platform
// Go's c-shared mode supports.

const (
	stOK       = C.int(wire.StatusOK)
	stInvalid  = C.int(wire.StatusInvalid)
	stInternal = C.int(wire.StatusInternal)
	// maxBatch bounds n of a batch call, so a garbage n cannot make the
	// library allocate gigabytes of slice headers.
	maxBatch = 1 << 20
	// maxSGParts bounds the buffers of one scatter-gather call.
	maxSGParts = 1 << 16
)

// guard is deferred by every export: it turns a panic into DFKV_INTERNAL
// and records the fault in the handle's (or the global) last error.
func guard(fn string, h C.uintptr_t, rc *C.int) {
	if r := recover(); r != nil {
		err := errInternal(fn, r, debug.Stack())
		if s, e := lookup(uintptr(h)); e == nil {
			s.setErr(err)
		} else {
			setGlobalErr(err)
		}
		*rc = stInternal
	}
}

// ret records err (if any) and returns its status.
func (s *state) ret(err error) C.int {
	if err == nil {
		return stOK
	}
	s.setErr(err)
	return C.int(statusOf(err))
}

// badHandle is handleErr for batch calls: every item is INVALID too.
func badHandle(statuses []C.int32_t, err error) C.int {
	for i := range statuses {
		statuses[i] = C.int32_t(stInvalid)
	}
	return handleErr(err)
}

// handleErr is the return of a call on a bad handle.
func handleErr(err error) C.int {
	setGlobalErr(err)
	return C.int(statusOf(err))
}

func keySpan(p unsafe.Pointer, n C.uint64_t) ([]byte, error) {
	switch {
	case p == nil:
		return nil, fmt.Errorf("object key pointer is NULL (length %d): %w", uint64(n), wire.StatusInvalid)
	case n == 0:
		return nil, fmt.Errorf("object key is zero-length: %w", wire.StatusInvalid)
	case uint64(n) > wire.MaxObjectKeyBytes:
		return nil, fmt.Errorf("object key is %d bytes, over the %d-byte limit: %w", uint64(n), wire.MaxObjectKeyBytes, wire.StatusInvalid)
	}
	return unsafe.Slice((*byte)(p), int(n)), nil
}

func valueSpan(p unsafe.Pointer, n C.uint64_t, max uint64) ([]byte, error) {
	switch {
	case n == 0:
		return nil, fmt.Errorf("zero-byte value: dfkv stores only non-empty values: %w", wire.StatusInvalid)
	case p == nil:
		return nil, fmt.Errorf("value pointer is NULL (length %d): %w", uint64(n), wire.StatusInvalid)
	case uint64(n) > max:
		return nil, fmt.Errorf("value of %d bytes exceeds max_block_bytes %d: %w", uint64(n), max, wire.StatusTooLarge)
	}
	return unsafe.Slice((*byte)(p), int(n)), nil
}

// dstSpan views a destination buffer. A buffer longer than max_block_bytes
// is cut to it: no stored value can be longer.
func dstSpan(p unsafe.Pointer, n C.uint64_t, max uint64) ([]byte, error) {
	switch {
	case p == nil:
		return nil, fmt.Errorf("destination buffer is NULL (length %d): %w", uint64(n), wire.StatusInvalid)
	case n == 0:
		return nil, fmt.Errorf("destination buffer is zero-length: %w", wire.StatusInvalid)
	}
	l := uint64(n)
	if l > max {
		l = max
	}
	return unsafe.Slice((*byte)(p), int(l)), nil
}

func checkN(n C.uint64_t, limit uint64, what string) error {
	if uint64(n) > limit {
		return fmt.Errorf("%s count %d is over the limit %d: %w", what, uint64(n), limit, wire.StatusInvalid)
	}
	return nil
}

func ptrs(p *unsafe.Pointer, n C.uint64_t, what string) ([]unsafe.Pointer, error) {
	if n == 0 {
		return nil, nil
	}
	if p == nil {
		return nil, fmt.Errorf("%s array is NULL with n=%d: %w", what, uint64(n), wire.StatusInvalid)
	}
	return unsafe.Slice(p, int(n)), nil
}

func u64s(p *C.uint64_t, n C.uint64_t, what string) ([]C.uint64_t, error) {
	if n == 0 {
		return nil, nil
	}
	if p == nil {
		return nil, fmt.Errorf("%s array is NULL with n=%d: %w", what, uint64(n), wire.StatusInvalid)
	}
	return unsafe.Slice(p, int(n)), nil
}

// batchKeys views n keys. Items whose span is bad get their error in
// local[i] and a nil key, which wire/client also fails closed.
func batchKeys(n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t) ([][]byte, []error, error) {
	if err := checkN(n, maxBatch, "batch"); err != nil {
		return nil, nil, err
	}
	kp, err := ptrs(keys, n, "keys")
	if err != nil {
		return nil, nil, err
	}
	kl, err := u64s(keyLens, n, "key_lens")
	if err != nil {
		return nil, nil, err
	}
	out := make([][]byte, n)
	local := make([]error, n)
	for i := range out {
		out[i], local[i] = keySpan(kp[i], kl[i])
	}
	return out, local, nil
}

// finish writes per-item statuses and returns the call's status: OK, or
// the first failed item's status (recorded as the last error).
func (s *state) finish(statuses []C.int32_t, errs []error) C.int {
	var first error
	for i, err := range errs {
		statuses[i] = C.int32_t(statusOf(err))
		if err != nil && first == nil {
			first = itemErr(i, err)
		}
	}
	return s.ret(first)
}

// storedSlots presets a batch's stored-length outputs to 0 (whenever the
// array and n are usable, even if the statuses array is not, so no slot
// keeps a caller's stale value) and returns them; nil when there are none.
func storedSlots(p *C.uint64_t, n C.uint64_t) []C.uint64_t {
	if p == nil || n == 0 || n > maxBatch {
		return nil
	}
	sl := unsafe.Slice(p, int(n))
	for i := range sl {
		sl[i] = 0
	}
	return sl
}

// statusSlots views and presets the statuses array.
func statusSlots(p *C.int32_t, n C.uint64_t) ([]C.int32_t, error) {
	if err := checkN(n, maxBatch, "batch"); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	if p == nil {
		return nil, fmt.Errorf("statuses array is NULL with n=%d: %w", uint64(n), wire.StatusInvalid)
	}
	st := unsafe.Slice(p, int(n))
	for i := range st {
		st[i] = C.int32_t(stInternal)
	}
	return st, nil
}

// badCall marks every item invalid for a call-level argument error.
func (s *state) badCall(statuses []C.int32_t, err error) C.int {
	for i := range statuses {
		statuses[i] = C.int32_t(stInvalid)
	}
	return s.ret(err)
}

//export dfkv_open_v2
func dfkv_open_v2(opts *C.dfkv_client_options_v2, out *C.uintptr_t) (rc C.int) {
	defer guard("dfkv_open_v2", 0, &rc)
	if out != nil {
		*out = 0
	}
	fail := func(err error) C.int {
		setGlobalErr(err)
		return C.int(statusOf(err))
	}
	if out == nil {
		return fail(fmt.Errorf("dfkv_open_v2: out is NULL: %w", wire.StatusInvalid))
	}
	if opts == nil {
		return fail(fmt.Errorf("dfkv_open_v2: opts is NULL: %w", wire.StatusInvalid))
	}
	const known = uint64(C.sizeof_dfkv_client_options_v2)
	// firstV2 is the struct as first published (up to max_block_bytes):
	// a caller built against it passes that size, and its later fields
	// are read as 0.
	firstV2 := uint64(unsafe.Offsetof(opts.shm))
	size := uint64(opts.struct_size)
	switch {
	case size < firstV2:
		return fail(fmt.Errorf("dfkv_open_v2: struct_size %d is smaller than dfkv_client_options_v2 (%d bytes); set it to sizeof(dfkv_client_options_v2): %w", size, known, wire.StatusInvalid))
	case size > 1<<16:
		return fail(fmt.Errorf("dfkv_open_v2: struct_size %d is implausibly large (max 65536): %w", size, wire.StatusInvalid))
	case size > known:
		// A newer caller: accept only if every field this build does not
		// know is zero, i.e. asks for nothing it cannot do.
		tail := unsafe.Slice((*byte)(unsafe.Pointer(opts)), int(size))[known:]
		for i, b := range tail {
			if b != 0 {
				return fail(fmt.Errorf("dfkv_open_v2: struct_size %d: byte %d past the %d bytes this libdfkv knows is non-zero; a newer option is set that this build does not support: %w", size, known+uint64(i), known, wire.StatusUnsupported))
			}
		}
	}
	o := openOptions{
		members:          C.GoString(opts.members),
		mds:              C.GoString(opts.mds_addrs),
		group:            C.GoString(opts.group),
		batchConcurrency: uint32(opts.batch_concurrency),
		poolSize:         uint32(opts.pool_size),
		timeoutMS:        uint64(opts.timeout_ms),
		dialTimeoutMS:    uint64(opts.dial_timeout_ms),
		maxBlockBytes:    uint64(opts.max_block_bytes),
	}
	// has reports whether the caller's struct holds the field at off of
	// n bytes: one built before the field was appended ends above it.
	has := func(off, n uintptr) bool { return size >= uint64(off+n) }
	if has(unsafe.Offsetof(opts.reserved0), unsafe.Sizeof(opts.reserved0)) {
		o.shm = uint32(opts.shm)
		if opts.reserved0 != 0 {
			return fail(fmt.Errorf("dfkv_open_v2: reserved0 is %d; it must be 0: %w", uint32(opts.reserved0), wire.StatusInvalid))
		}
	}
	if has(unsafe.Offsetof(opts.embedded_config), unsafe.Sizeof(opts.embedded_config)) && opts.embedded_config != nil {
		text := C.GoString(opts.embedded_config)
		o.embedded = &text
	}
	var token string
	if has(unsafe.Offsetof(opts.token), unsafe.Sizeof(opts.token)) && opts.token != nil {
		token = C.GoString(opts.token)
	}
	// The environment as the host process has it now (getenv), not as Go
	// copied it when the library was loaded: an engine may set the
	// variable after loading libdfkv. The client's connection variables
	// are not for an embedded store, which has no connection: a value
	// meant for the engine's remote clients must not fail its open.
	env := cEnv
	if o.embedded != nil {
		env = func(string) (string, bool) { return "", false }
	}
	o.token, o.tokenFrom = resolveToken(token, env)
	var tf tlsFields
	if has(unsafe.Offsetof(opts.reserved1), unsafe.Sizeof(opts.reserved1)) {
		tf.mode = uint32(opts.tls)
		if opts.reserved1 != 0 {
			return fail(fmt.Errorf("dfkv_open_v2: reserved1 is %d; it must be 0: %w", uint32(opts.reserved1), wire.StatusInvalid))
		}
	}
	// Each string only when the caller's struct holds it: reading past a
	// shorter struct could touch memory that is not there.
	if has(unsafe.Offsetof(opts.tls_ca_file), unsafe.Sizeof(opts.tls_ca_file)) && opts.tls_ca_file != nil {
		tf.ca = C.GoString(opts.tls_ca_file)
	}
	if has(unsafe.Offsetof(opts.tls_cert_file), unsafe.Sizeof(opts.tls_cert_file)) && opts.tls_cert_file != nil {
		tf.cert = C.GoString(opts.tls_cert_file)
	}
	if has(unsafe.Offsetof(opts.tls_key_file), unsafe.Sizeof(opts.tls_key_file)) && opts.tls_key_file != nil {
		tf.key = C.GoString(opts.tls_key_file)
	}
	if has(unsafe.Offsetof(opts.tls_server_name), unsafe.Sizeof(opts.tls_server_name)) && opts.tls_server_name != nil {
		tf.serverName = C.GoString(opts.tls_server_name)
	}
	// The environment through getenv, as for the token.
	tlsSet, err := resolveTLS(tf, env)
	if err != nil {
		return fail(err)
	}
	o.tls = tlsSet
	nsLen := uint64(opts.namespace_len)
	switch {
	case opts.namespace_ptr == nil && nsLen > 0:
		return fail(fmt.Errorf("dfkv_open_v2: namespace_ptr is NULL with namespace_len %d: %w", nsLen, wire.StatusInvalid))
	case nsLen > wire.MaxNamespaceBytes:
		return fail(fmt.Errorf("dfkv_open_v2: namespace is %d bytes, over the %d-byte limit: %w", nsLen, wire.MaxNamespaceBytes, wire.StatusInvalid))
	case nsLen > 0:
		o.namespace = unsafe.Slice((*byte)(opts.namespace_ptr), int(nsLen))
	}
	h, err := open(o)
	if err != nil {
		return fail(err)
	}
	*out = C.uintptr_t(h)
	return stOK
}

// cEnv looks name up in the process environment through C's getenv.
func cEnv(name string) (string, bool) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	v := C.getenv(cs)
	if v == nil {
		return "", false
	}
	return C.GoString(v), true
}

//export dfkv_close
func dfkv_close(h C.uintptr_t) (rc C.int) {
	defer guard("dfkv_close", 0, &rc)
	s, err := release(uintptr(h))
	if err != nil {
		return handleErr(fmt.Errorf("dfkv_close: %w", err))
	}
	if err := s.close(); err != nil {
		// The handle is gone: its message goes where a caller can still
		// read it, the process-wide slot.
		return handleErr(fmt.Errorf("dfkv_close: %w", err))
	}
	return stOK
}

//export dfkv_last_error
func dfkv_last_error(h C.uintptr_t, buf *C.char, capacity C.size_t) (n C.size_t) {
	defer func() {
		if recover() != nil {
			n = 0
		}
	}()
	var msg string
	if h == 0 {
		msg = globalErr()
	} else if s, err := lookup(uintptr(h)); err != nil {
		msg = err.Error()
	} else {
		msg = s.getErr()
	}
	if buf != nil && capacity > 0 {
		// View only what is written: a huge cap must not overflow int.
		k := len(msg)
		if uint64(capacity) <= uint64(k) {
			k = int(capacity) - 1
		}
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), k+1)
		copy(dst, msg[:k])
		dst[k] = 0
	}
	return C.size_t(len(msg))
}

//export dfkv_put
func dfkv_put(h C.uintptr_t, key unsafe.Pointer, keyLen C.uint64_t, value unsafe.Pointer, valueLen C.uint64_t) (rc C.int) {
	defer guard("dfkv_put", h, &rc)
	s, err := lookup(uintptr(h))
	if err != nil {
		return handleErr(err)
	}
	k, err := keySpan(key, keyLen)
	if err != nil {
		return s.ret(err)
	}
	v, err := valueSpan(value, valueLen, s.maxBlock)
	if err != nil {
		return s.ret(err)
	}
	return s.ret(s.put(k, v))
}

//export dfkv_get
func dfkv_get(h C.uintptr_t, key unsafe.Pointer, keyLen C.uint64_t, buf unsafe.Pointer, bufLen C.uint64_t, storedLen *C.uint64_t) (rc C.int) {
	defer guard("dfkv_get", h, &rc)
	if storedLen != nil {
		*storedLen = 0
	}
	s, err := lookup(uintptr(h))
	if err != nil {
		return handleErr(err)
	}
	if storedLen == nil {
		return s.ret(fmt.Errorf("dfkv_get: stored_len is NULL: %w", wire.StatusInvalid))
	}
	k, err := keySpan(key, keyLen)
	if err != nil {
		return s.ret(err)
	}
	dst, err := dstSpan(buf, bufLen, s.maxBlock)
	if err != nil {
		return s.ret(err)
	}
	stored, err := s.get(k, dst)
	*storedLen = C.uint64_t(stored)
	return s.ret(s.overLimit(err, stored))
}

// overLimit rewrites a TOO_LARGE read of a value longer than this
// handle's max_block_bytes (another writer's limit was higher): the
// destination was cut to the limit, so a larger buffer cannot help, and
// the message must not say it would.
func (s *state) overLimit(err error, stored uint64) error {
	if err == nil || stored <= s.maxBlock || wire.StatusOf(err) != wire.StatusTooLarge {
		return err
	}
	return fmt.Errorf("the %d-byte value exceeds this client's max_block_bytes %d; a larger buffer will not help, "+
		"open the client with max_block_bytes of at least %d: %w", stored, s.maxBlock, stored, wire.StatusTooLarge)
}

//export dfkv_get_range
func dfkv_get_range(h C.uintptr_t, key unsafe.Pointer, keyLen C.uint64_t, offset, length C.uint64_t, buf unsafe.Pointer, bufLen C.uint64_t, bytesRead, storedLen *C.uint64_t) (rc C.int) {
	defer guard("dfkv_get_range", h, &rc)
	if bytesRead != nil {
		*bytesRead = 0
	}
	if storedLen != nil {
		*storedLen = 0
	}
	s, err := lookup(uintptr(h))
	if err != nil {
		return handleErr(err)
	}
	if bytesRead == nil || storedLen == nil {
		return s.ret(fmt.Errorf("dfkv_get_range: bytes_read or stored_len is NULL: %w", wire.StatusInvalid))
	}
	k, err := keySpan(key, keyLen)
	if err != nil {
		return s.ret(err)
	}
	dst, err := dstSpan(buf, bufLen, s.maxBlock)
	if err != nil {
		return s.ret(err)
	}
	n, stored, err := s.getRange(k, uint64(offset), uint64(length), dst)
	*bytesRead = C.uint64_t(n)
	*storedLen = C.uint64_t(stored)
	return s.ret(err)
}

//export dfkv_exist
func dfkv_exist(h C.uintptr_t, key unsafe.Pointer, keyLen C.uint64_t, storedLen *C.uint64_t) (rc C.int) {
	defer guard("dfkv_exist", h, &rc)
	if storedLen != nil {
		*storedLen = 0
	}
	s, err := lookup(uintptr(h))
	if err != nil {
		return handleErr(err)
	}
	k, err := keySpan(key, keyLen)
	if err != nil {
		return s.ret(err)
	}
	stored, err := s.exist(k)
	if storedLen != nil {
		*storedLen = C.uint64_t(stored)
	}
	return s.ret(err)
}

//export dfkv_remove
func dfkv_remove(h C.uintptr_t, key unsafe.Pointer, keyLen C.uint64_t) (rc C.int) {
	defer guard("dfkv_remove", h, &rc)
	s, err := lookup(uintptr(h))
	if err != nil {
		return handleErr(err)
	}
	k, err := keySpan(key, keyLen)
	if err != nil {
		return s.ret(err)
	}
	return s.ret(s.remove(k))
}

// sgParts views n caller buffers; each must be non-NULL and non-empty.
func sgParts(n C.uint64_t, bufs *unsafe.Pointer, lens *C.uint64_t) ([][]byte, error) {
	if n == 0 {
		return nil, fmt.Errorf("scatter-gather call with no buffers: %w", wire.StatusInvalid)
	}
	if err := checkN(n, maxSGParts, "scatter-gather buffer"); err != nil {
		return nil, err
	}
	bp, err := ptrs(bufs, n, "bufs")
	if err != nil {
		return nil, err
	}
	bl, err := u64s(lens, n, "lens")
	if err != nil {
		return nil, err
	}
	parts := make([][]byte, n)
	var total uint64
	for i := range parts {
		switch {
		case bp[i] == nil:
			return nil, fmt.Errorf("scatter-gather buffer %d is NULL: %w", i, wire.StatusInvalid)
		case bl[i] == 0:
			return nil, fmt.Errorf("scatter-gather buffer %d is zero-length: %w", i, wire.StatusInvalid)
		}
		if uint64(bl[i]) > 1<<40-total { // compared before adding: a sum must not wrap
			return nil, fmt.Errorf("scatter-gather buffers total over 1 TiB at buffer %d: %w", i, wire.StatusTooLarge)
		}
		total += uint64(bl[i])
		parts[i] = unsafe.Slice((*byte)(bp[i]), int(bl[i]))
	}
	return parts, nil
}

//export dfkv_put_sg
func dfkv_put_sg(h C.uintptr_t, key unsafe.Pointer, keyLen C.uint64_t, n C.uint64_t, bufs *unsafe.Pointer, lens *C.uint64_t) (rc C.int) {
	defer guard("dfkv_put_sg", h, &rc)
	s, err := lookup(uintptr(h))
	if err != nil {
		return handleErr(err)
	}
	k, err := keySpan(key, keyLen)
	if err != nil {
		return s.ret(err)
	}
	parts, err := sgParts(n, bufs, lens)
	if err != nil {
		return s.ret(err)
	}
	return s.ret(s.putSG(k, parts))
}

//export dfkv_get_sg
func dfkv_get_sg(h C.uintptr_t, key unsafe.Pointer, keyLen C.uint64_t, n C.uint64_t, bufs *unsafe.Pointer, lens *C.uint64_t, storedLen *C.uint64_t) (rc C.int) {
	defer guard("dfkv_get_sg", h, &rc)
	if storedLen != nil {
		*storedLen = 0
	}
	s, err := lookup(uintptr(h))
	if err != nil {
		return handleErr(err)
	}
	if storedLen == nil {
		return s.ret(fmt.Errorf("dfkv_get_sg: stored_len is NULL: %w", wire.StatusInvalid))
	}
	k, err := keySpan(key, keyLen)
	if err != nil {
		return s.ret(err)
	}
	parts, err := sgParts(n, bufs, lens)
	if err != nil {
		return s.ret(err)
	}
	stored, err := s.getSG(k, parts)
	*storedLen = C.uint64_t(stored)
	return s.ret(err)
}

//export dfkv_put_batch
func dfkv_put_batch(h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, values *unsafe.Pointer, valueLens *C.uint64_t, statuses *C.int32_t) (rc C.int) {
	defer guard("dfkv_put_batch", h, &rc)
	st, stErr := statusSlots(statuses, n)
	s, err := lookup(uintptr(h))
	if err != nil {
		return badHandle(st, err)
	}
	if stErr != nil {
		return s.ret(fmt.Errorf("dfkv_put_batch: %w", stErr))
	}
	ks, local, err := batchKeys(n, keys, keyLens)
	if err != nil {
		return s.badCall(st, fmt.Errorf("dfkv_put_batch: %w", err))
	}
	vp, err := ptrs(values, n, "values")
	if err != nil {
		return s.badCall(st, fmt.Errorf("dfkv_put_batch: %w", err))
	}
	vl, err := u64s(valueLens, n, "value_lens")
	if err != nil {
		return s.badCall(st, fmt.Errorf("dfkv_put_batch: %w", err))
	}
	vs := make([][]byte, n)
	for i := range vs {
		if local[i] != nil {
			continue
		}
		if vs[i], local[i] = valueSpan(vp[i], vl[i], s.maxBlock); local[i] != nil {
			ks[i] = nil
		}
	}
	errs := s.putBatch(ks, vs)
	for i, e := range local {
		if e != nil {
			errs[i] = e
		}
	}
	return s.finish(st, errs)
}

//export dfkv_get_batch
func dfkv_get_batch(h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, bufs *unsafe.Pointer, bufLens *C.uint64_t, storedLens *C.uint64_t, statuses *C.int32_t) (rc C.int) {
	defer guard("dfkv_get_batch", h, &rc)
	st, stErr := statusSlots(statuses, n)
	sl := storedSlots(storedLens, n)
	s, err := lookup(uintptr(h))
	if err != nil {
		return badHandle(st, err)
	}
	if stErr != nil {
		return s.ret(fmt.Errorf("dfkv_get_batch: %w", stErr))
	}
	if storedLens == nil && n > 0 {
		return s.badCall(st, fmt.Errorf("dfkv_get_batch: stored_lens is NULL: %w", wire.StatusInvalid))
	}
	ks, local, err := batchKeys(n, keys, keyLens)
	if err != nil {
		return s.badCall(st, fmt.Errorf("dfkv_get_batch: %w", err))
	}
	bp, err := ptrs(bufs, n, "bufs")
	if err != nil {
		return s.badCall(st, fmt.Errorf("dfkv_get_batch: %w", err))
	}
	bl, err := u64s(bufLens, n, "buf_lens")
	if err != nil {
		return s.badCall(st, fmt.Errorf("dfkv_get_batch: %w", err))
	}
	dsts := make([][]byte, n)
	for i := range dsts {
		if local[i] != nil {
			continue
		}
		// A nil dst would make wire/client allocate; a bad buffer
		// therefore also drops the key so the item fails locally.
		if dsts[i], local[i] = dstSpan(bp[i], bl[i], s.maxBlock); local[i] != nil {
			ks[i] = nil
		}
	}
	res := s.getBatch(ks, dsts)
	errs := make([]error, n)
	for i, r := range res {
		errs[i] = s.overLimit(r.Err, r.Stored)
		if local[i] != nil {
			errs[i] = local[i]
			continue
		}
		sl[i] = C.uint64_t(r.Stored)
	}
	return s.finish(st, errs)
}

//export dfkv_exist_batch
func dfkv_exist_batch(h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, storedLens *C.uint64_t, statuses *C.int32_t) (rc C.int) {
	defer guard("dfkv_exist_batch", h, &rc)
	return existBatch(h, n, keys, keyLens, storedLens, statuses, false)
}

//export dfkv_exist_batch_pin
func dfkv_exist_batch_pin(h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, storedLens *C.uint64_t, statuses *C.int32_t) (rc C.int) {
	defer guard("dfkv_exist_batch_pin", h, &rc)
	return existBatch(h, n, keys, keyLens, storedLens, statuses, true)
}

func existBatch(h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, storedLens *C.uint64_t, statuses *C.int32_t, pin bool) C.int {
	st, stErr := statusSlots(statuses, n)
	sl := storedSlots(storedLens, n)
	s, err := lookup(uintptr(h))
	if err != nil {
		return badHandle(st, err)
	}
	if stErr != nil {
		return s.ret(fmt.Errorf("dfkv_exist_batch: %w", stErr))
	}
	ks, local, err := batchKeys(n, keys, keyLens)
	if err != nil {
		return s.badCall(st, fmt.Errorf("dfkv_exist_batch: %w", err))
	}
	res := s.existBatch(ks, pin)
	errs := make([]error, n)
	for i, r := range res {
		errs[i] = s.overLimit(r.Err, r.Stored)
		if local[i] != nil {
			errs[i] = local[i]
			continue
		}
		if sl != nil {
			sl[i] = C.uint64_t(r.Stored)
		}
	}
	return s.finish(st, errs)
}

//export dfkv_remove_batch
func dfkv_remove_batch(h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, statuses *C.int32_t) (rc C.int) {
	defer guard("dfkv_remove_batch", h, &rc)
	st, stErr := statusSlots(statuses, n)
	s, err := lookup(uintptr(h))
	if err != nil {
		return badHandle(st, err)
	}
	if stErr != nil {
		return s.ret(fmt.Errorf("dfkv_remove_batch: %w", stErr))
	}
	ks, local, err := batchKeys(n, keys, keyLens)
	if err != nil {
		return s.badCall(st, fmt.Errorf("dfkv_remove_batch: %w", err))
	}
	errs := s.removeBatch(ks)
	for i, e := range local {
		if e != nil {
			errs[i] = e
		}
	}
	return s.finish(st, errs)
}

//export dfkv_exist_prefix
func dfkv_exist_prefix(h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, hits *C.uint64_t) (rc C.int) {
	defer guard("dfkv_exist_prefix", h, &rc)
	return existPrefix(h, n, keys, keyLens, hits, false)
}

//export dfkv_exist_prefix_pin
func dfkv_exist_prefix_pin(h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, hits *C.uint64_t) (rc C.int) {
	defer guard("dfkv_exist_prefix_pin", h, &rc)
	return existPrefix(h, n, keys, keyLens, hits, true)
}

func existPrefix(h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, hits *C.uint64_t, pin bool) C.int {
	if hits != nil {
		*hits = 0
	}
	s, err := lookup(uintptr(h))
	if err != nil {
		return handleErr(err)
	}
	if hits == nil {
		return s.ret(fmt.Errorf("dfkv_exist_prefix: hits is NULL: %w", wire.StatusInvalid))
	}
	ks, local, err := batchKeys(n, keys, keyLens)
	if err != nil {
		return s.ret(fmt.Errorf("dfkv_exist_prefix: %w", err))
	}
	// A bad span cuts the prefix there, like any other error; keys after
	// it are not looked up at all.
	for i, e := range local {
		if e != nil {
			ks = ks[:i]
			break
		}
	}
	count, err := s.existPrefix(ks, pin)
	if err == nil && len(ks) < int(n) && int(count) == len(ks) {
		// Every key before the bad one is stored: the prefix ends at
		// the bad key, which is the error. A miss before it ends the
		// prefix with no error, as if the bad key were not there.
		err = local[len(ks)]
	}
	*hits = C.uint64_t(count)
	if err != nil {
		err = itemErr(count, err)
	}
	return s.ret(err)
}

//export dfkv_stats
func dfkv_stats(h C.uintptr_t, buf *C.char, capacity C.uint64_t, length *C.uint64_t) (rc C.int) {
	defer guard("dfkv_stats", h, &rc)
	if length != nil {
		*length = 0
	}
	s, err := lookup(uintptr(h))
	if err != nil {
		return handleErr(err)
	}
	if length == nil {
		return s.ret(fmt.Errorf("dfkv_stats: len is NULL: %w", wire.StatusInvalid))
	}
	doc, err := s.stats()
	if err != nil {
		return s.ret(err)
	}
	*length = C.uint64_t(len(doc))
	if buf == nil || uint64(capacity) < uint64(len(doc))+1 {
		return s.ret(fmt.Errorf("dfkv_stats: document is %d bytes, buffer holds %d (need %d with the NUL): %w", len(doc), uint64(capacity), len(doc)+1, wire.StatusTooLarge))
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), len(doc)+1)
	copy(dst, doc)
	dst[len(doc)] = 0
	return stOK
}

// batchSGParts views the flattened buffers of a batch scatter-gather call.
// An item with a bad buffer gets its error in local[i]; a bad array or
// count fails the whole call.
func batchSGParts(n C.uint64_t, counts *C.uint64_t, bufs *unsafe.Pointer, lens *C.uint64_t, local []error) ([][][]byte, error) {
	cs, err := u64s(counts, n, "counts")
	if err != nil {
		return nil, err
	}
	var total uint64
	for i, c := range cs {
		if uint64(c) > maxBatch*16-total { // compared before adding: a sum must not wrap
			return nil, fmt.Errorf("counts sum past %d buffers at item %d: %w", maxBatch*16, i, wire.StatusInvalid)
		}
		total += uint64(c)
	}
	bp, err := ptrs(bufs, C.uint64_t(total), "bufs")
	if err != nil {
		return nil, err
	}
	bl, err := u64s(lens, C.uint64_t(total), "lens")
	if err != nil {
		return nil, err
	}
	parts := make([][][]byte, n)
	off := 0
	for i, c := range cs {
		if c == 0 && local[i] == nil {
			local[i] = fmt.Errorf("item has no buffers (counts[%d] = 0): %w", i, wire.StatusInvalid)
		}
		ps := make([][]byte, c)
		for j := range ps {
			p, l := bp[off+j], bl[off+j]
			switch {
			case local[i] != nil:
			case p == nil:
				local[i] = fmt.Errorf("buffer %d of the item is NULL: %w", j, wire.StatusInvalid)
			case l == 0:
				local[i] = fmt.Errorf("buffer %d of the item is zero-length: %w", j, wire.StatusInvalid)
			case uint64(l) > 1<<40:
				local[i] = fmt.Errorf("buffer %d of the item is %d bytes: %w", j, uint64(l), wire.StatusTooLarge)
			default:
				ps[j] = unsafe.Slice((*byte)(p), int(l))
			}
		}
		parts[i] = ps
		off += int(c)
	}
	return parts, nil
}

//export dfkv_put_batch_sg
func dfkv_put_batch_sg(h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, counts *C.uint64_t, bufs *unsafe.Pointer, lens *C.uint64_t, statuses *C.int32_t) (rc C.int) {
	defer guard("dfkv_put_batch_sg", h, &rc)
	st, stErr := statusSlots(statuses, n)
	s, err := lookup(uintptr(h))
	if err != nil {
		return badHandle(st, err)
	}
	if stErr != nil {
		return s.ret(fmt.Errorf("dfkv_put_batch_sg: %w", stErr))
	}
	ks, local, err := batchKeys(n, keys, keyLens)
	if err != nil {
		return s.badCall(st, fmt.Errorf("dfkv_put_batch_sg: %w", err))
	}
	parts, err := batchSGParts(n, counts, bufs, lens, local)
	if err != nil {
		return s.badCall(st, fmt.Errorf("dfkv_put_batch_sg: %w", err))
	}
	s.putBatchSG(ks, parts, local)
	return s.finish(st, local)
}

//export dfkv_get_batch_sg
func dfkv_get_batch_sg(h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, counts *C.uint64_t, bufs *unsafe.Pointer, lens *C.uint64_t, storedLens *C.uint64_t, statuses *C.int32_t) (rc C.int) {
	defer guard("dfkv_get_batch_sg", h, &rc)
	return getBatchSG("dfkv_get_batch_sg", h, n, keys, keyLens, false, nil, counts, bufs, lens, storedLens, statuses)
}

//export dfkv_get_batch_range_sg
func dfkv_get_batch_range_sg(h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, offsets *C.uint64_t, counts *C.uint64_t, bufs *unsafe.Pointer, lens *C.uint64_t, storedLens *C.uint64_t, statuses *C.int32_t) (rc C.int) {
	defer guard("dfkv_get_batch_range_sg", h, &rc)
	return getBatchSG("dfkv_get_batch_range_sg", h, n, keys, keyLens, true, offsets, counts, bufs, lens, storedLens, statuses)
}

// getBatchSG is the body of dfkv_get_batch_sg and, ranged (with an
// offsets array, required), of dfkv_get_batch_range_sg; name is the
// export, for messages. The caller's deferred guard turns a panic here
// into a status.
func getBatchSG(name string, h C.uintptr_t, n C.uint64_t, keys *unsafe.Pointer, keyLens *C.uint64_t, ranged bool, offsets *C.uint64_t, counts *C.uint64_t, bufs *unsafe.Pointer, lens *C.uint64_t, storedLens *C.uint64_t, statuses *C.int32_t) C.int {
	st, stErr := statusSlots(statuses, n)
	sl := storedSlots(storedLens, n)
	s, err := lookup(uintptr(h))
	if err != nil {
		return badHandle(st, err)
	}
	if stErr != nil {
		return s.ret(fmt.Errorf("%s: %w", name, stErr))
	}
	if storedLens == nil && n > 0 {
		return s.badCall(st, fmt.Errorf("%s: stored_lens is NULL: %w", name, wire.StatusInvalid))
	}
	ks, local, err := batchKeys(n, keys, keyLens)
	if err != nil {
		return s.badCall(st, fmt.Errorf("%s: %w", name, err))
	}
	var at []uint64
	if ranged {
		offs, err := u64s(offsets, n, "offsets")
		if err != nil {
			return s.badCall(st, fmt.Errorf("%s: %w", name, err))
		}
		at = make([]uint64, len(offs))
		for i, o := range offs {
			at[i] = uint64(o)
		}
	}
	parts, err := batchSGParts(n, counts, bufs, lens, local)
	if err != nil {
		return s.badCall(st, fmt.Errorf("%s: %w", name, err))
	}
	stored := s.getBatchSG(ks, at, parts, local)
	for i := range sl {
		sl[i] = C.uint64_t(stored[i])
	}
	return s.finish(st, local)
}

//export dfkv_chain_keys
func dfkv_chain_keys(fingerprint C.uint64_t, tokens *C.uint32_t, nTokens C.uint64_t, blockTokens C.uint64_t,
	outHashes *C.uint8_t, outCapacityBlocks C.uint64_t, nBlocks *C.uint64_t,
	tailName, tailDigest *C.uint8_t, tailTokens *C.uint64_t) (rc C.int) {
	defer guard("dfkv_chain_keys", 0, &rc)
	// Preset every output but out_hashes, which is written only on
	// success (zeroing a caller's large buffer would cost for nothing).
	if nBlocks != nil {
		*nBlocks = 0
	}
	if tailTokens != nil {
		*tailTokens = 0
	}
	name, digest := hash32(tailName), hash32(tailDigest)
	for _, h := range [...]*[wire.ChainHashSize]byte{name, digest} {
		if h != nil {
			*h = [wire.ChainHashSize]byte{}
		}
	}
	fail := func(err error) C.int {
		setGlobalErr(fmt.Errorf("dfkv_chain_keys: %w", err))
		return C.int(statusOf(err))
	}
	switch {
	case nBlocks == nil:
		return fail(fmt.Errorf("n_blocks is NULL: %w", wire.StatusInvalid))
	case tailName == nil || tailDigest == nil || tailTokens == nil:
		return fail(fmt.Errorf("tail_name, tail_digest or tail_tokens is NULL: %w", wire.StatusInvalid))
	case tokens == nil && nTokens > 0:
		return fail(fmt.Errorf("tokens is NULL with n_tokens %d: %w", uint64(nTokens), wire.StatusInvalid))
	case outHashes == nil && outCapacityBlocks > 0:
		return fail(fmt.Errorf("out_hashes is NULL with out_capacity_blocks %d: %w", uint64(outCapacityBlocks), wire.StatusInvalid))
	}
	n, err := chainCount(uint64(nTokens), uint64(blockTokens), uint64(outCapacityBlocks))
	if err != nil {
		if wire.StatusOf(err) == wire.StatusTooLarge {
			*nBlocks = C.uint64_t(n)
		}
		return fail(err)
	}
	var toks []uint32
	if nTokens > 0 {
		toks = unsafe.Slice((*uint32)(unsafe.Pointer(tokens)), int(nTokens))
	}
	var hashes [][wire.ChainHashSize]byte
	if n > 0 {
		// Only the n hashes written are viewed, whatever the capacity.
		hashes = unsafe.Slice((*[wire.ChainHashSize]byte)(unsafe.Pointer(outHashes)), int(n))
	}
	tail, err := chainInto(uint64(fingerprint), toks, uint64(blockTokens), hashes)
	if err != nil {
		return fail(err)
	}
	*nBlocks = C.uint64_t(n)
	if tail != nil {
		*name, *digest = tail.Name, tail.Digest
		*tailTokens = C.uint64_t(tail.Tokens)
	}
	return stOK
}

// hash32 views a caller's 32-byte hash output, or nil.
func hash32(p *C.uint8_t) *[wire.ChainHashSize]byte {
	return (*[wire.ChainHashSize]byte)(unsafe.Pointer(p))
}
