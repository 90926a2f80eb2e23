"""Loading libdfkv.so and declaring its prototypes (dfkv.h)."""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import POINTER, c_char_p, c_int, c_int32, c_size_t, c_uint32, c_uint64, c_void_p

_lock = threading.Lock()
_lib = None


class ClientOptionsV2(ctypes.Structure):
    """dfkv_client_options_v2, field for field."""

    _fields_ = [
        ("struct_size", c_uint64),
        ("members", c_char_p),
        ("mds_addrs", c_char_p),
        ("group", c_char_p),
        ("namespace_ptr", c_void_p),
        ("namespace_len", c_uint64),
        ("batch_concurrency", c_uint32),
        ("pool_size", c_uint32),
        ("timeout_ms", c_uint64),
        ("dial_timeout_ms", c_uint64),
        ("max_block_bytes", c_uint64),
        ("shm", c_uint32),
        ("reserved0", c_uint32),
        ("embedded_config", c_char_p),
        ("token", c_char_p),
        ("tls", c_uint32),
        ("reserved1", c_uint32),
        ("tls_ca_file", c_char_p),
        ("tls_cert_file", c_char_p),
        ("tls_key_file", c_char_p),
        ("tls_server_name", c_char_p),
    ]


# ClientOptionsV2.shm
SHM_MODES = {"auto": 0, "off": 1, "on": 2}
# ClientOptionsV2.tls (DFKV_TLS_ENV, DFKV_TLS_ON, DFKV_TLS_OFF): None leaves
# it to $DFKV_CLIENT_TLS.
TLS_MODES = {None: 0, True: 1, False: 2}


def candidates():
    """Where libdfkv.so is looked for, in order: $DFKV_LIBRARY, inside this
    package, next to it, build/ at the repository root (scripts/build-lib.sh's
    default)."""
    env = os.environ.get("DFKV_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [
        os.path.join(here, "libdfkv.so"),
        os.path.join(os.path.dirname(here), "libdfkv.so"),
        os.path.normpath(os.path.join(here, "..", "..", "..", "build", "libdfkv.so")),
    ]


def _declare(lib):
    u64, vp, i = c_uint64, c_void_p, c_int
    pvp, pu64, pi32 = POINTER(c_void_p), POINTER(c_uint64), POINTER(c_int32)
    sig = {
        "dfkv_open_v2": (i, [POINTER(ClientOptionsV2), POINTER(c_void_p)]),
        "dfkv_close": (i, [vp]),
        "dfkv_last_error": (c_size_t, [vp, c_char_p, c_size_t]),
        "dfkv_status_name": (c_char_p, [i]),
        "dfkv_put": (i, [vp, vp, u64, vp, u64]),
        "dfkv_get": (i, [vp, vp, u64, vp, u64, pu64]),
        "dfkv_get_range": (i, [vp, vp, u64, u64, u64, vp, u64, pu64, pu64]),
        "dfkv_exist": (i, [vp, vp, u64, pu64]),
        "dfkv_remove": (i, [vp, vp, u64]),
        "dfkv_put_sg": (i, [vp, vp, u64, u64, pvp, pu64]),
        "dfkv_get_sg": (i, [vp, vp, u64, u64, pvp, pu64, pu64]),
        "dfkv_put_batch": (i, [vp, u64, pvp, pu64, pvp, pu64, pi32]),
        "dfkv_get_batch": (i, [vp, u64, pvp, pu64, pvp, pu64, pu64, pi32]),
        "dfkv_exist_batch": (i, [vp, u64, pvp, pu64, pu64, pi32]),
        "dfkv_exist_batch_pin": (i, [vp, u64, pvp, pu64, pu64, pi32]),
        "dfkv_remove_batch": (i, [vp, u64, pvp, pu64, pi32]),
        "dfkv_exist_prefix": (i, [vp, u64, pvp, pu64, pu64]),
        "dfkv_exist_prefix_pin": (i, [vp, u64, pvp, pu64, pu64]),
        "dfkv_put_batch_sg": (i, [vp, u64, pvp, pu64, pu64, pvp, pu64, pi32]),
        "dfkv_get_batch_sg": (i, [vp, u64, pvp, pu64, pu64, pvp, pu64, pu64, pi32]),
        "dfkv_get_batch_range_sg": (i, [vp, u64, pvp, pu64, pu64, pu64, pvp, pu64, pu64, pi32]),
        "dfkv_stats": (i, [vp, c_char_p, u64, pu64]),
        "dfkv_chain_keys": (i, [u64, vp, u64, u64, vp, u64, pu64, vp, vp, pu64]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


# The pid of the process that loaded the library, which started its Go
# runtime; None before the first load.
_loaded_by: int | None = None

FORK_ADVICE = ("libdfkv's Go runtime does not survive fork(), so a process forked after it was loaded can "
               "open no client: start workers with multiprocessing's 'spawn' or 'forkserver' method, or import "
               "and use dfkv only in the workers")


def inherited() -> bool:
    """Whether the library was loaded by a process this one was forked from:
    then its runtime is a dead copy, and opening a client would block."""
    return _loaded_by is not None and _loaded_by != os.getpid()


def load(path: str | None = None):
    """Load (once) and return the library. ctypes.CDLL releases the GIL for
    every call, so batch calls from several threads run in parallel."""
    global _lib, _loaded_by
    with _lock:
        if _lib is not None and path is None:
            return _lib
        tried = []
        for p in ([path] if path else candidates()):
            if not os.path.exists(p):
                tried.append(f"{p} (missing)")
                continue
            lib = ctypes.CDLL(p)
            if _loaded_by is None:
                _loaded_by = os.getpid()
            _declare(lib)
            if path is None:
                _lib = lib
            return lib
        raise OSError("libdfkv.so not found; build it with scripts/build-lib.sh and/or set DFKV_LIBRARY. Tried: "
                      + "; ".join(tried))
