// A process that forks without exec (a Python engine's workers, a torch
// DataLoader) gives each child the descriptors of the disk locks its
// embedded store holds, and with them the locks: a flock belongs to the
// open file, which parent and child share. The child can never use the
// store (the Go runtime does not survive fork), yet it would keep the
// parent's disks locked after the parent closed them, until it exits. So
// the library keeps the lock descriptors here, where a fork handler can
// reach them without Go, and the child closes its copies right after fork;
// the parent's locks stay as they are.
#include <pthread.h>
#include <unistd.h>

#include "fork.h"

#define LOCK_SLOTS 256

// Each slot holds a lock descriptor plus one; 0 is free.
static int lock_fds[LOCK_SLOTS];

static void close_locks_in_child(void) {
    for (int i = 0; i < LOCK_SLOTS; i++) {
        int v = __atomic_load_n(&lock_fds[i], __ATOMIC_ACQUIRE);
        if (v > 0) {
            close(v - 1);
            // Forget it: the child's next file may get this number, and
            // the child's own children must not close that.
            __atomic_store_n(&lock_fds[i], 0, __ATOMIC_RELEASE);
        }
    }
}

__attribute__((constructor)) static void register_fork_handler(void) {
    pthread_atfork(NULL, NULL, close_locks_in_child);
}

void dfkv_note_lock(int fd, int held) {
    int from = held ? 0 : fd + 1, to = held ? fd + 1 : 0;
    for (int i = 0; i < LOCK_SLOTS; i++) {
        int expect = from;
        if (__atomic_compare_exchange_n(&lock_fds[i], &expect, to, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            return;
        }
    }
    // More disks than slots: the rest stay with a forked child, as
    // without this file.
}
