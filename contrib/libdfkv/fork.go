package main

/*
#include "fork.h"
*/
import "C"

import "github.com/dfkv/dfkv/engine"

// The embedded store's file locks (its disks, its object store marks) are
// noted where fork.c's handler closes them in a forked child.
func init() {
	engine.LockNotify = func(fd uintptr, held bool) {
		h := C.int(0)
		if held {
			h = 1
		}
		C.dfkv_note_lock(C.int(fd), h)
	}
}
