// Internal to libdfkv (not part of the ABI in dfkv.h): see fork.c.
#ifndef DFKV_FORK_H
#define DFKV_FORK_H
__attribute__((visibility("hidden"))) void dfkv_note_lock(int fd, int held);
#endif
