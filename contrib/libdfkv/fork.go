package main

/*
#include "fork.h"
*/
import "C"

import "github.com/dfkv/dfkv/engine/slab"

// The embedded store's disk locks are noted where fork.c's handler closes
// them in a forked child.
func init() {
	slab.LockNotify = func(fd uintptr, held bool) {
		h := C.int(0)
		if held {
			h = 1
		}
		C.dfkv_note_lock(C.int(fd), h)
	}
}
