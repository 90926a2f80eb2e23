"""ctypes client over libdfkv.so (contrib/libdfkv/dfkv.h)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import threading
from ctypes import POINTER, byref, c_char_p, c_int32, c_uint64, c_void_p
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _lib
from ._buffers import Pinned
from .errors import InvalidArgument, Status, error_for, unreachable_error
from .chain import ChainKeys
from .identity import NamespaceDescriptor

Key = Union[bytes, bytearray, memoryview, str]

__all__ = ["Client", "key_bytes", "namespace_bytes"]


def key_bytes(key: Key) -> bytes:
    """Object key bytes: bytes as given (NUL bytes included), str as UTF-8.
    Keys are small (<= 4 KiB), so other buffers are copied to bytes."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"object key must be bytes or str, not {type(key).__name__}")


def namespace_bytes(namespace: Union[bytes, bytearray, memoryview, str, NamespaceDescriptor]) -> bytes:
    """Namespace bytes: a NamespaceDescriptor encoded (its canonical
    DFKVNS form), bytes-like as given (NUL bytes included), str as UTF-8,
    which is what `dfkv ctl --namespace NAME` sends for the same text.
    Anything else is a TypeError (bytes(5) would be five NUL bytes)."""
    if isinstance(namespace, NamespaceDescriptor):
        return namespace.encode()
    if isinstance(namespace, str):
        return namespace.encode("utf-8")
    if isinstance(namespace, (bytes, bytearray, memoryview)):
        return bytes(namespace)
    raise TypeError(f"namespace must be bytes, str or a NamespaceDescriptor, not {type(namespace).__name__}")


def _token_bytes(token: Union[str, bytes, bytearray, None]) -> Optional[bytes]:
    """The token for dfkv_client_options_v2.token: None (or empty) leaves
    it to libdfkv, which then reads $DFKV_CLIENT_TOKEN, else $DFKV_TOKEN,
    at open. Messages never repeat it."""
    if token is None:
        return None
    if isinstance(token, str):
        b = token.encode("utf-8")
    elif isinstance(token, (bytes, bytearray)):
        b = bytes(token)
    else:
        raise TypeError(f"token must be str or bytes, not {type(token).__name__}")
    if b"\0" in b:
        # C would end the string there and present a different token.
        raise InvalidArgument("token holds a NUL byte; a token is 16..256 bytes without spaces or control characters")
    return b or None


def _tls_mode(tls: Any) -> int:
    """dfkv_client_options_v2.tls for Client(tls=): None leaves it to
    $DFKV_CLIENT_TLS, True and False decide."""
    if tls is None or isinstance(tls, bool):
        return _lib.TLS_MODES[tls]
    if isinstance(tls, int) and tls in (0, 1):
        return _lib.TLS_MODES[bool(tls)]
    raise TypeError(f"tls must be True, False or None (take $DFKV_CLIENT_TLS), not {tls!r}")


def _path_bytes(name: str, path: Any) -> Optional[bytes]:
    """A TLS file (or the server name) for libdfkv: None or "" leaves it to
    the environment variable libdfkv reads."""
    if path is None:
        return None
    if isinstance(path, (str, bytes, os.PathLike)):
        b = os.fsencode(path)
    else:
        raise TypeError(f"{name} must be a path (str, bytes or os.PathLike), not {type(path).__name__}")
    if b"\0" in b:
        raise InvalidArgument(f"{name} holds a NUL byte")
    return b or None


# How messages name the options: libdfkv's fields (and the values of
# tls), and what sets them from Python (the arguments, or a connector's
# dfkv_<name>).
_C_FIELD = re.compile(r"dfkv_client_options_v2\.(token|tls_ca_file|tls_cert_file|tls_key_file|tls_server_name|tls)\b")
_PY_FIELD = {"token": "token", "tls": "tls", "tls_ca_file": "tls_ca", "tls_cert_file": "tls_cert",
             "tls_key_file": "tls_key", "tls_server_name": "tls_server_name"}
_C_TLS_MODE = re.compile(r"\bDFKV_TLS_(ENV|ON|OFF)\b")
_PY_TLS_MODE = {"ENV": "None", "ON": "True", "OFF": "False"}


def _python_names(msg: str) -> str:
    """libdfkv's message with its option names as Python spells them."""
    msg = _C_FIELD.sub(lambda m: f"Client({_PY_FIELD[m.group(1)]}=) / dfkv_{_PY_FIELD[m.group(1)]}", msg)
    return _C_TLS_MODE.sub(lambda m: _PY_TLS_MODE[m.group(1)], msg)


def _key_arrays(keys: Sequence[Key]):
    ks = [key_bytes(k) for k in keys]
    n = len(ks)
    arr = (c_char_p * n)(*ks)
    lens = (c_uint64 * n)(*[len(k) for k in ks])
    # The c_char_p array points into the bytes objects in ks; ks must stay
    # alive for the call, hence it is returned too.
    return n, ctypes.cast(arr, POINTER(c_void_p)), lens, (ks, arr)


# members=EMBEDDED (or $DFKV_CLIENT_MEMBERS=embedded in a connector) opens
# the process's embedded store, configured by $DFKV_EMBEDDED_CONFIG.
EMBEDDED = "embedded"

# Counts the forks this process descends from (os.fork and multiprocessing
# run the hook). libdfkv's Go runtime does not survive fork: a child that
# called into a client its parent opened would block for ever, even to
# close it, so a client remembers the count it was opened under and, in a
# child, refuses calls and lets go of its handle without closing it (the
# parent owns it).
_forks = 0


def _after_fork_in_child() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


def server_toml(settings: Dict[str, Any]) -> str:
    """The [server] table of a dfkv.toml holding settings (names as in
    dfkv.example.toml: {"ram_tier_bytes": "8GiB", "disks": ["/nvme/dfkv"]}),
    for Client(embedded=...)."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "1" if v else "0"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            if any(ord(c) < 0x20 for c in v):
                raise InvalidArgument(f"embedded setting value {v!r} holds a control character")
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        raise InvalidArgument(f"embedded setting value {v!r}: want a string, an integer or a list of them")
    lines = ["[server]"]
    for k, v in settings.items():
        if not isinstance(k, str) or not k.replace("_", "").isalnum():
            raise InvalidArgument(f"embedded setting name {k!r}: want a [server] key such as ram_tier_bytes")
        lines.append(f"{k} = {value(v)}")
    return "\n".join(lines) + "\n"


class Client:
    """A dfkv client on one namespace.

    ``members`` is a "host:port,host:port" string or a list of addresses;
    ``namespace`` is the namespace's bytes (any bytes: a plain name such as
    b"my-namespace" is enough; str is taken as UTF-8, as `dfkv ctl
    --namespace` takes its argument) or a NamespaceDescriptor, which is
    encoded here into the canonical form the engine connectors use. Two
    clients share blocks exactly when their namespace bytes are equal.
    Safe to share between threads: every call releases the GIL inside
    libdfkv.

    ``embedded`` opens a store inside this process instead of connecting
    to nodes: a whole cache node (RAM tier, optional disk, optional object
    store) with the same calls and no server or port. It is the [server]
    table of a dfkv.toml, as TOML text or a dict ({"ram_tier_bytes":
    "8GiB", "disks": ["/nvme/dfkv"]}; {} or "" for the defaults: a 1 GiB
    RAM tier and no disk). ``members="embedded"`` does the same with the
    TOML in $DFKV_EMBEDDED_CONFIG, which is how the connectors are pointed
    at it. Clients of one configuration in a process share its store; a
    disk has one owning process (another gets an error naming it), and
    processes share blocks through the object store.

    ``token`` is the secret presented to nodes that require credentials
    (a node's server.credentials_file): 16..256 bytes without spaces or
    control characters. None (the default) or "" takes $DFKV_CLIENT_TOKEN,
    else $DFKV_TOKEN, as read when the client opens; with neither, no
    token is sent (a node without credentials needs none and accepts any).
    libdfkv copies it at open; the client does not keep it, and no message,
    exception or repr shows it. A refused or missing token raises
    Unauthenticated, and a token that does not grant an op on this
    namespace's tenant Forbidden (both PermissionErrors, from the calls
    that raise; batch calls report them as item statuses).

    ``tls`` speaks TLS 1.3 with every node and MDS, for nodes started with
    server.tls_cert (`dfkv server --tls-cert`): True or False, or None (the
    default) for $DFKV_CLIENT_TLS (1/0; unset: off). ``tls_ca`` is the PEM
    CA bundle node certificates must chain to (else $DFKV_CLIENT_TLS_CA,
    else the system's roots); ``tls_cert`` and ``tls_key`` a client
    certificate and its key for nodes that require one (server.
    tls_client_ca), both or neither (else $DFKV_CLIENT_TLS_CERT and
    $DFKV_CLIENT_TLS_KEY); a node's credentials may grant the
    certificate's common name what a token grants. ``tls_server_name`` is
    the name verified instead of each address's host (else
    $DFKV_CLIENT_TLS_SERVER_NAME). A file that cannot be read, half a
    client certificate, or a file given while TLS is off (tls None and
    $DFKV_CLIENT_TLS not 1) raise InvalidArgument naming the setting and
    the path. A TLS client of a node without TLS fails with a message
    saying the node "does not speak TLS"; a node with TLS answers a client
    without it with EpochMismatch ("requires TLS"); a certificate that does
    not verify fails its calls as Unavailable, with the x509 reason.

    Names follow the C ABI (dfkv.h) and `dfkv ctl`: the C function
    dfkv_<name> is the method <name>, and the CLI verbs put, get, exist and
    rm are methods too. Where this package first used other names, those
    stay as aliases:

        C ABI / CLI                     method (alias)
        dfkv_put, ctl put               put
        ctl get                         get (a new bytearray, None on a miss)
        dfkv_get                        get_into (into a caller buffer)
        dfkv_get_range                  get_range
        dfkv_exist, ctl exist           exist (exists), stored_length
        dfkv_remove, ctl rm             remove (rm)
        dfkv_put_sg, dfkv_get_sg        put_sg, get_sg
        dfkv_put_batch                  put_batch (batch_put)
        dfkv_get_batch                  get_batch (batch_get_into)
        dfkv_exist_batch                exist_batch (batch_exist)
        dfkv_remove_batch               remove_batch (batch_remove)
        dfkv_put_batch_sg               put_batch_sg (batch_put_sg)
        dfkv_get_batch_sg               get_batch_sg (batch_get_sg)
        dfkv_get_batch_range_sg         get_batch_range_sg (batch_get_range_sg)
        dfkv_exist_prefix               exist_prefix
        dfkv_exist_batch_pin            exist_batch_pin (batch_exist(pin=True))
        dfkv_exist_prefix_pin           exist_prefix_pin (exist_prefix(pin=True))
        dfkv_stats, dfkv_close          stats, close

    batch_get (values as new bytearrays) and batch_exists (bools) have no
    C counterpart. dfkv_chain_keys takes no handle: it is the function
    dfkv.chain_keys, and stored_chain_prefix is exist_prefix over the
    keys of its result.

    Errors raise a DfkvError subclass per status (NotFound, InvalidArgument,
    Unavailable, TooLarge, ...) whose message is libdfkv's last error. Batch
    calls never raise for per-item failures: they return per-item statuses.

    A missing key is an answer, not an error: get and stored_length return
    None, exist returns False (get_into, get_range and get_sg, which fill a
    caller's buffer, raise NotFound). A node that cannot be reached is an
    error: the one-key reads raise Unavailable (Timeout when it did not
    answer in time) naming the node, as writes do. libdfkv itself answers
    such reads as misses (dfkv.h, "Unreachable nodes"), which is what an
    engine wants, and so do this class's batch reads (the item's status is
    NOT_FOUND) and exist_prefix (the count stops there); the engine
    connectors also turn every failure into a miss, with a log line.
    libdfkv keeps the last-error text per handle and calling thread, so
    with one Client shared by many threads each failure's message (and
    the unreachable-or-missing decision made from it) is the call's own.
    """

    def __init__(self, members: Union[str, Sequence[str], None],
                 namespace: Union[bytes, bytearray, memoryview, str, NamespaceDescriptor], *,
                 mds: Union[str, Sequence[str], None] = None, group: Optional[str] = None,
                 batch_concurrency: int = 0, pool_size: int = 0, timeout_ms: int = 0, dial_timeout_ms: int = 0,
                 max_block_bytes: int = 0, shm: Optional[str] = None, library: Optional[str] = None,
                 embedded: Union[str, Dict[str, Any], None] = None,
                 token: Union[str, bytes, None] = None, tls: Optional[bool] = None,
                 tls_ca: Union[str, os.PathLike, None] = None, tls_cert: Union[str, os.PathLike, None] = None,
                 tls_key: Union[str, os.PathLike, None] = None, tls_server_name: Optional[str] = None) -> None:
        self._h: Optional[int] = None
        self._forks, self._pid = _forks, os.getpid()
        if _lib.inherited():
            raise InvalidArgument(f"dfkv client: libdfkv was loaded by process {_lib._loaded_by}, which this one "
                                  f"(pid {os.getpid()}) was forked from; {_lib.FORK_ADVICE}")
        self._lib = _lib.load(library)
        ns = namespace_bytes(namespace)
        self.namespace = ns

        def join(v):
            if v is None:
                return None
            return (v if isinstance(v, str) else ",".join(v)).encode()

        if members == EMBEDDED and embedded is None:
            embedded = os.environ.get("DFKV_EMBEDDED_CONFIG", "")
        self._embedded_b = None
        if embedded is not None:
            if members not in (None, EMBEDDED) or mds:
                raise InvalidArgument("embedded: an embedded store is its own single member; "
                                      "pass members=None (or 'embedded') and no mds")
            members = None
            self._embedded_b = (embedded if isinstance(embedded, str) else server_toml(embedded)).encode()
            if shm is None:
                shm = "off"
        self.embedded = self._embedded_b is not None
        self._members_b = join(members)
        o = _lib.ClientOptionsV2()
        o.struct_size = ctypes.sizeof(_lib.ClientOptionsV2)
        o.members = self._members_b
        o.mds_addrs = join(mds)
        o.group = group.encode() if group else None
        nsbuf = ctypes.create_string_buffer(ns, len(ns)) if ns else None
        o.namespace_ptr = ctypes.cast(nsbuf, c_void_p) if nsbuf is not None else None
        o.namespace_len = len(ns)
        o.batch_concurrency = batch_concurrency
        o.pool_size = pool_size
        o.timeout_ms = timeout_ms
        o.dial_timeout_ms = dial_timeout_ms
        o.max_block_bytes = max_block_bytes
        mode = shm if shm is not None else os.environ.get("DFKV_CLIENT_SHM", "auto")
        if mode not in _lib.SHM_MODES:
            raise ValueError(f"shm={mode!r}: want 'auto' (shared memory with nodes on this host that offer it), 'off' or 'on'")
        o.shm = _lib.SHM_MODES[mode]
        o.embedded_config = self._embedded_b
        # Only in the options struct, which goes when this call returns:
        # the client keeps no copy of the token.
        o.token = _token_bytes(token)
        o.tls = _tls_mode(tls)
        o.tls_ca_file = _path_bytes("tls_ca", tls_ca)
        o.tls_cert_file = _path_bytes("tls_cert", tls_cert)
        o.tls_key_file = _path_bytes("tls_key", tls_key)
        o.tls_server_name = _path_bytes("tls_server_name", tls_server_name)
        h = c_void_p()
        rc = self._lib.dfkv_open_v2(byref(o), byref(h))
        del o, token
        if rc != 0:
            raise error_for(rc, self._last_error(None))
        self._h = h.value
        self._close_lock = threading.Lock()
        # get()'s first read size: the size of the last value this thread
        # read. Per thread, so threads reading values of different sizes
        # through one client do not each allocate (and zero) the other's.
        self._get_hint = threading.local()

    # -- plumbing --------------------------------------------------------

    def _last_error(self, h) -> str:
        cap = 1024
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = self._lib.dfkv_last_error(h, buf, cap)
            if n < cap:
                # libdfkv names the options' C fields; here they are arguments.
                return _python_names(buf.value.decode("utf-8", "replace"))
            cap = n + 1

    def _handle(self) -> int:
        h = self._h
        if h is None:
            raise InvalidArgument("dfkv client is closed")
        if self._forks != _forks:
            raise InvalidArgument(f"dfkv client was opened in process {self._pid}, which this one (pid "
                                  f"{os.getpid()}) was forked from; {_lib.FORK_ADVICE}")
        return h

    def _raise(self, rc: int, what: str):
        raise error_for(rc, f"{what}: {self._last_error(self._h)}")

    def _check_miss(self, what: str) -> None:
        """After a one-key read returned NOT_FOUND: return when the key is
        not stored; raise Unavailable or Timeout when libdfkv answered an
        unreachable node as a miss. The last error is kept per thread, so
        it is this call's."""
        err = unreachable_error(what, self._last_error(self._h))
        if err is not None:
            raise err

    def close(self) -> None:
        """Close the client; later calls raise InvalidArgument. Idempotent.
        Raises DfkvError when libdfkv's close failed (an embedded store
        whose flush to disk failed); the client is closed all the same. In
        a forked child a client opened by the parent is only let go of."""
        if self._forks != _forks:
            self._h = None  # the parent's to close; its lock may be held by a thread the fork left behind
            return
        with self._close_lock:
            h, self._h = self._h, None
        if h is not None:
            rc = self._lib.dfkv_close(h)
            if rc:
                raise error_for(rc, f"close: {self._last_error(None)}")

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -- scalar ----------------------------------------------------------

    def put(self, key: Key, value: Any) -> None:
        """Store value (bytes-like or CPU tensor, read in place) under key."""
        h, k = self._handle(), key_bytes(key)
        with Pinned() as p:
            addr, n = p.addr(value, False, "value")
            rc = self._lib.dfkv_put(h, k, len(k), addr, n)
        if rc:
            self._raise(rc, "put")

    def get_into(self, key: Key, buf: Any) -> int:
        """Read key's whole value into buf (writable buffer or CPU tensor) and
        return its stored length. Raises NotFound on a miss, TooLarge when
        buf is smaller than the value (buf then holds its first bytes), and
        Unavailable or Timeout when the node cannot be reached."""
        h, k = self._handle(), key_bytes(key)
        stored = c_uint64()
        with Pinned() as p:
            addr, n = p.addr(buf, True, "destination")
            rc = self._lib.dfkv_get(h, k, len(k), addr, n, byref(stored))
        if rc == Status.NOT_FOUND:
            self._check_miss(f"get_into {key!r}")
            # A miss is the common answer, not a failure to explain: the
            # key is enough.
            raise error_for(rc, f"get_into {key!r}: not stored")
        if rc == Status.TOO_LARGE:
            msg = self._last_error(h)
            if n < stored.value and "max_block_bytes" not in msg:
                msg = f"destination buffer smaller than the stored value ({n} bytes for {stored.value})"
            raise error_for(rc, f"get_into {key!r}: {msg}")
        if rc:
            self._raise(rc, f"get_into {key!r}")
        return stored.value

    def get(self, key: Key) -> Optional[bytearray]:
        """The value of key as a new bytearray, or None when it is not
        stored. Raises Unavailable or Timeout when the node holding it
        cannot be reached. One round trip when the value is no larger than
        the last one this thread read, else two."""
        h, k = self._handle(), key_bytes(key)
        stored = c_uint64()
        hint = self._get_hint
        for _ in range(3):
            buf = bytearray(getattr(hint, "n", 64 << 10))
            with Pinned() as p:
                addr, n = p.addr(buf, True, "destination")
                rc = self._lib.dfkv_get(h, k, len(k), addr, n, byref(stored))
            if rc == Status.OK:
                hint.n = max(stored.value, 1)
                del buf[stored.value:]
                return buf
            if rc == Status.NOT_FOUND:
                self._check_miss(f"get {key!r}")
                return None
            if rc != Status.TOO_LARGE or n >= stored.value:
                # A TOO_LARGE with room for the value: over this client's
                # max_block_bytes, which no retry mends.
                self._raise(rc, f"get {key!r}")
            hint.n = stored.value
        self._raise(rc, "get (value kept growing)")

    def get_range(self, key: Key, offset: int, length: int, buf: Any) -> Tuple[int, int]:
        """Read length bytes at offset into buf; returns (bytes_read,
        stored_length). Raises NotFound on a miss, Unavailable or Timeout
        when the node cannot be reached."""
        if offset < 0 or length < 0:
            # ctypes would wrap them around to 2**64 - n silently.
            raise InvalidArgument(f"get_range {key!r}: offset {offset} and length {length} must not be negative")
        h, k = self._handle(), key_bytes(key)
        nread, stored = c_uint64(), c_uint64()
        with Pinned() as p:
            addr, n = p.addr(buf, True, "destination")
            rc = self._lib.dfkv_get_range(h, k, len(k), offset, length, addr, n, byref(nread), byref(stored))
        if rc == Status.NOT_FOUND:
            self._check_miss(f"get_range {key!r}")
        if rc:
            self._raise(rc, f"get_range {key!r}")
        return nread.value, stored.value

    def stored_length(self, key: Key) -> Optional[int]:
        """The stored length of key, or None when it is not stored. Raises
        Unavailable or Timeout when the node holding it cannot be reached."""
        h, k = self._handle(), key_bytes(key)
        stored = c_uint64()
        rc = self._lib.dfkv_exist(h, k, len(k), byref(stored))
        if rc == Status.NOT_FOUND:
            self._check_miss(f"exist {key!r}")
            return None
        if rc:
            self._raise(rc, f"exist {key!r}")
        return stored.value

    def exist(self, key: Key) -> bool:
        """True when key is stored, False when it is not (dfkv_exist,
        `dfkv ctl exist`). Raises Unavailable or Timeout when the node
        holding it cannot be reached."""
        return self.stored_length(key) is not None

    def exists(self, key: Key) -> bool:
        """Alias of exist(), the name this package used first."""
        return self.exist(key)

    def remove(self, key: Key) -> bool:
        """Remove key; False when it was not stored (dfkv_remove)."""
        h, k = self._handle(), key_bytes(key)
        rc = self._lib.dfkv_remove(h, k, len(k))
        if rc == Status.NOT_FOUND:
            return False
        if rc:
            self._raise(rc, "remove")
        return True

    def rm(self, key: Key) -> bool:
        """Alias of remove(), named like `dfkv ctl rm`."""
        return self.remove(key)

    # -- scatter-gather --------------------------------------------------

    def _sg(self, bufs: Sequence[Any], writable: bool, p: Pinned):
        n = len(bufs)
        addrs = (c_void_p * n)()
        lens = (c_uint64 * n)()
        for i, b in enumerate(bufs):
            addrs[i], lens[i] = p.addr(b, writable, f"buffer {i}")
        return n, addrs, lens

    def put_sg(self, key: Key, bufs: Sequence[Any]) -> None:
        """Store the concatenation of bufs as one value."""
        h, k = self._handle(), key_bytes(key)
        with Pinned() as p:
            n, addrs, lens = self._sg(bufs, False, p)
            rc = self._lib.dfkv_put_sg(h, k, len(k), n, addrs, lens)
        if rc:
            self._raise(rc, "put_sg")

    def get_sg(self, key: Key, bufs: Sequence[Any]) -> int:
        """Fill bufs in order from key's value; returns the stored length.
        Raises NotFound on a miss, Unavailable or Timeout when the node
        cannot be reached."""
        h, k = self._handle(), key_bytes(key)
        stored = c_uint64()
        with Pinned() as p:
            n, addrs, lens = self._sg(bufs, True, p)
            rc = self._lib.dfkv_get_sg(h, k, len(k), n, addrs, lens, byref(stored))
        if rc == Status.NOT_FOUND:
            self._check_miss(f"get_sg {key!r}")
        if rc:
            self._raise(rc, f"get_sg {key!r}")
        return stored.value

    # -- batch -----------------------------------------------------------

    def batch_put(self, keys: Sequence[Key], values: Sequence[Any]) -> List[Status]:
        """Store values[i] under keys[i]; one Status per item."""
        if len(keys) != len(values):
            raise InvalidArgument(f"batch_put: {len(keys)} keys but {len(values)} values")
        h = self._handle()
        n, karr, klens, keep = _key_arrays(keys)
        st = (c_int32 * n)()
        with Pinned() as p:
            vaddr = (c_void_p * n)()
            vlens = (c_uint64 * n)()
            for i, v in enumerate(values):
                vaddr[i], vlens[i] = p.addr(v, False, f"value {i}")
            self._lib.dfkv_put_batch(h, n, karr, klens, vaddr, vlens, st)
        return [Status(s) for s in st]

    def batch_get_into(self, keys: Sequence[Key], bufs: Sequence[Any]) -> Tuple[List[Status], List[int]]:
        """Read keys[i] into bufs[i]; returns (statuses, stored_lengths)."""
        if len(keys) != len(bufs):
            raise InvalidArgument(f"batch_get_into: {len(keys)} keys but {len(bufs)} buffers")
        h = self._handle()
        n, karr, klens, keep = _key_arrays(keys)
        st = (c_int32 * n)()
        stored = (c_uint64 * n)()
        with Pinned() as p:
            baddr = (c_void_p * n)()
            blens = (c_uint64 * n)()
            for i, b in enumerate(bufs):
                baddr[i], blens[i] = p.addr(b, True, f"destination {i}")
            self._lib.dfkv_get_batch(h, n, karr, klens, baddr, blens, stored, st)
        return [Status(s) for s in st], list(stored)

    def batch_exist(self, keys: Sequence[Key], *, pin: bool = False) -> Tuple[List[Status], List[int]]:
        """Per-item (status, stored length): OK or NOT_FOUND, or the error.
        An unreachable node's items are NOT_FOUND, as libdfkv answers them.
        pin=True also asks each node to keep the values it finds (RAM or disk)
        until a GET of the key or its lease time (server.lease_ms), so what
        was found is still there when it is loaded (dfkv_exist_batch_pin)."""
        h = self._handle()
        n, karr, klens, keep = _key_arrays(keys)
        st = (c_int32 * n)()
        stored = (c_uint64 * n)()
        fn = self._lib.dfkv_exist_batch_pin if pin else self._lib.dfkv_exist_batch
        fn(h, n, karr, klens, stored, st)
        return [Status(s) for s in st], list(stored)

    def batch_exists(self, keys: Sequence[Key], *, pin: bool = False) -> List[bool]:
        """True per stored key; a failed lookup counts as not stored."""
        st, _ = self.batch_exist(keys, pin=pin)
        return [s == Status.OK for s in st]

    def batch_get(self, keys: Sequence[Key]) -> List[Optional[bytearray]]:
        """Values as new bytearrays (None for a miss or a failed item)."""
        st, sizes = self.batch_exist(keys)
        out: List[Optional[bytearray]] = [None] * len(keys)
        idx = [i for i, s in enumerate(st) if s == Status.OK]
        if not idx:
            return out
        bufs = [bytearray(sizes[i]) for i in idx]
        gst, gstored = self.batch_get_into([keys[i] for i in idx], bufs)
        for j, i in enumerate(idx):
            if gst[j] == Status.OK:
                del bufs[j][gstored[j]:]
                out[i] = bufs[j]
        return out

    def _batch_sg_arrays(self, items: Sequence[Sequence[Any]], writable: bool, p: Pinned):
        n = len(items)
        counts = (c_uint64 * n)(*[len(parts) for parts in items])
        total = sum(counts)
        addrs = (c_void_p * total)()
        lens = (c_uint64 * total)()
        j = 0
        for i, parts in enumerate(items):
            for b in parts:
                addrs[j], lens[j] = p.addr(b, writable, f"item {i} buffer")
                j += 1
        return counts, addrs, lens

    def batch_put_sg(self, keys: Sequence[Key], items: Sequence[Sequence[Any]]) -> List[Status]:
        """Store, per key, the concatenation of its buffers (items[i])."""
        if len(keys) != len(items):
            raise InvalidArgument(f"batch_put_sg: {len(keys)} keys but {len(items)} buffer lists")
        h = self._handle()
        n, karr, klens, keep = _key_arrays(keys)
        st = (c_int32 * n)()
        with Pinned() as p:
            counts, addrs, lens = self._batch_sg_arrays(items, False, p)
            self._lib.dfkv_put_batch_sg(h, n, karr, klens, counts, addrs, lens, st)
        return [Status(s) for s in st]

    def batch_get_sg(self, keys: Sequence[Key], items: Sequence[Sequence[Any]]) -> Tuple[List[Status], List[int]]:
        """Fill, per key, its buffers (items[i]) in order; returns
        (statuses, stored_lengths)."""
        if len(keys) != len(items):
            raise InvalidArgument(f"batch_get_sg: {len(keys)} keys but {len(items)} buffer lists")
        h = self._handle()
        n, karr, klens, keep = _key_arrays(keys)
        st = (c_int32 * n)()
        stored = (c_uint64 * n)()
        with Pinned() as p:
            counts, addrs, lens = self._batch_sg_arrays(items, True, p)
            self._lib.dfkv_get_batch_sg(h, n, karr, klens, counts, addrs, lens, stored, st)
        return [Status(s) for s in st], list(stored)

    def batch_get_range_sg(self, keys: Sequence[Key], offsets: Sequence[int],
                           items: Sequence[Sequence[Any]]) -> Tuple[List[Status], List[int]]:
        """Fill, per key, its buffers (items[i]) in order from byte
        offsets[i] of its value: a byte range of each value, e.g. one
        layer of blocks stored layer after layer. Returns (statuses,
        stored_lengths), the whole stored length of each value. The bytes
        read are min(stored - offset, the buffers' total): a value ending
        inside the range fills a prefix with OK (check the stored length),
        an offset equal to the stored length reads nothing with OK, and an
        offset past it is INVALID for that item."""
        if len(keys) != len(items) or len(keys) != len(offsets):
            raise InvalidArgument(f"batch_get_range_sg: {len(keys)} keys, {len(offsets)} offsets "
                                  f"and {len(items)} buffer lists")
        h = self._handle()
        n, karr, klens, keep = _key_arrays(keys)
        st = (c_int32 * n)()
        stored = (c_uint64 * n)()
        for i, o in enumerate(offsets):
            # ctypes would wrap a negative offset around silently.
            if not isinstance(o, int) or not 0 <= o < 1 << 64:
                raise InvalidArgument(f"batch_get_range_sg: offset {i} is {o!r}, not an integer in [0, 2**64)")
        offs = (c_uint64 * n)(*offsets)
        with Pinned() as p:
            counts, addrs, lens = self._batch_sg_arrays(items, True, p)
            self._lib.dfkv_get_batch_range_sg(h, n, karr, klens, offs, counts, addrs, lens, stored, st)
        return [Status(s) for s in st], list(stored)

    def batch_remove(self, keys: Sequence[Key]) -> List[Status]:
        """Remove keys[i]; one Status per item (NOT_FOUND when not stored)."""
        h = self._handle()
        n, karr, klens, keep = _key_arrays(keys)
        st = (c_int32 * n)()
        self._lib.dfkv_remove_batch(h, n, karr, klens, st)
        return [Status(s) for s in st]

    # The batch calls under their C names (dfkv_<op>_batch[_sg]); the
    # batch_<op> names above came first and stay.

    def put_batch(self, keys: Sequence[Key], values: Sequence[Any]) -> List[Status]:
        """dfkv_put_batch: batch_put under its C name."""
        return self.batch_put(keys, values)

    def get_batch(self, keys: Sequence[Key], bufs: Sequence[Any]) -> Tuple[List[Status], List[int]]:
        """dfkv_get_batch: batch_get_into under its C name (reads into
        caller buffers; batch_get allocates the values)."""
        return self.batch_get_into(keys, bufs)

    def exist_batch(self, keys: Sequence[Key]) -> Tuple[List[Status], List[int]]:
        """dfkv_exist_batch: batch_exist under its C name."""
        return self.batch_exist(keys)

    def remove_batch(self, keys: Sequence[Key]) -> List[Status]:
        """dfkv_remove_batch: batch_remove under its C name."""
        return self.batch_remove(keys)

    def put_batch_sg(self, keys: Sequence[Key], items: Sequence[Sequence[Any]]) -> List[Status]:
        """dfkv_put_batch_sg: batch_put_sg under its C name."""
        return self.batch_put_sg(keys, items)

    def get_batch_sg(self, keys: Sequence[Key], items: Sequence[Sequence[Any]]) -> Tuple[List[Status], List[int]]:
        """dfkv_get_batch_sg: batch_get_sg under its C name."""
        return self.batch_get_sg(keys, items)

    def get_batch_range_sg(self, keys: Sequence[Key], offsets: Sequence[int],
                           items: Sequence[Sequence[Any]]) -> Tuple[List[Status], List[int]]:
        """dfkv_get_batch_range_sg: batch_get_range_sg under its C name."""
        return self.batch_get_range_sg(keys, offsets, items)

    def exist_batch_pin(self, keys: Sequence[Key]) -> Tuple[List[Status], List[int]]:
        """dfkv_exist_batch_pin: batch_exist(keys, pin=True)."""
        return self.batch_exist(keys, pin=True)

    def exist_prefix_pin(self, keys: Sequence[Key], *, raise_on_error: bool = False) -> int:
        """dfkv_exist_prefix_pin: exist_prefix(keys, pin=True)."""
        return self.exist_prefix(keys, raise_on_error=raise_on_error, pin=True)

    def exist_prefix(self, keys: Sequence[Key], *, raise_on_error: bool = False, pin: bool = False) -> int:
        """How many consecutive keys from keys[0] are stored (one parallel
        lookup, cut at the first miss; an unreachable node's keys are
        misses, even with raise_on_error). Another error (an invalid key, a
        node answering with an error) also cuts the count; with
        raise_on_error it raises instead. pin=True pins what it finds, as
        batch_exist does."""
        h = self._handle()
        n, karr, klens, keep = _key_arrays(keys)
        hits = c_uint64()
        fn = self._lib.dfkv_exist_prefix_pin if pin else self._lib.dfkv_exist_prefix
        rc = fn(h, n, karr, klens, byref(hits))
        if rc and raise_on_error:
            self._raise(rc, "exist_prefix")
        return hits.value

    def stored_chain_prefix(self, chain: Union[ChainKeys, Sequence[Key]], *, raise_on_error: bool = False,
                            pin: bool = False) -> int:
        """How many leading blocks of a chain (dfkv.chain_keys) are stored:
        exist_prefix over chain.object_keys(), one batched lookup. When
        every block and then the tail's key are found, the count includes
        the tail, which may hold another prompt's tokens after the same
        blocks: compare the digest stored with it to chain.tail.digest
        before using it. A list of chain object keys is taken as is."""
        keys = chain.object_keys() if isinstance(chain, ChainKeys) else chain
        return self.exist_prefix(keys, raise_on_error=raise_on_error, pin=pin)

    def stats(self) -> dict:
        """{member address: that node's STATS document or {"error": ...}}."""
        h = self._handle()
        need = c_uint64()
        cap = 1 << 16
        for _ in range(3):
            buf = ctypes.create_string_buffer(cap)
            rc = self._lib.dfkv_stats(h, buf, cap, byref(need))
            if rc == Status.OK:
                return json.loads(buf.raw[:need.value])
            if rc != Status.TOO_LARGE:
                self._raise(rc, "stats")
            cap = need.value + 1
        self._raise(rc, "stats")
