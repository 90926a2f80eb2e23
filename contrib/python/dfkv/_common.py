"""Helpers shared by the engine connectors."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from .errors import DfkvError, Unavailable

logger = logging.getLogger("dfkv")


class NotConnected(Unavailable):
    """A connector has no client to give: another thread is opening one,
    an open failed less than the reopen interval ago, or the connector
    was closed. The open that failed said why, once; callers turn this
    into misses without saying it again."""


class ClientSlot:
    """A connector's client, opened on first use and again after a failure.

    One thread opens, outside the lock: with an MDS an open is network
    I/O, up to the dial timeout per MDS address. Every other caller,
    meanwhile and for reopen_s after a failed open (counted from when it
    failed), gets NotConnected at once, which the connectors turn into
    misses. So an MDS that does not answer costs an engine's threads one
    open at a time, never a queue of them.

    A client belongs to the key it was opened for (what its namespace was
    computed from, e.g. the engine's layout): asking with another key
    closes it and opens anew. reset() drops the client because its
    namespace changed; an open in progress then is thrown away when it
    returns. close() drops it for good: later calls open nothing.
    """

    def __init__(self, owner: str, reopen_s: float) -> None:
        self.owner = owner
        self.reopen_s = float(reopen_s)
        if not math.isfinite(self.reopen_s) or self.reopen_s < 0:
            raise ValueError(f"{owner}: dfkv_reopen_interval_s {reopen_s!r}: want a number of seconds, 0 or more "
                             f"(how long to wait after a failed open before the next)")
        self._lock = threading.Lock()
        self._current: Optional[Tuple[Any, Any]] = None  # (client, key), replaced whole
        self._generation = 0  # bumped by reset() and close()
        self._opening = False
        self._failed_at = 0.0
        self._closed = False

    @property
    def current(self) -> Any:
        """The open client, or None; never opens one."""
        cur = self._current
        return None if cur is None else cur[0]

    @property
    def closed(self) -> bool:
        return self._closed

    def get(self, open_fn: Callable[[], Any], key: Any = None) -> Any:
        """The client opened for key, calling open_fn to open one if needed."""
        cur = self._current
        if cur is not None and cur[1] == key:
            return cur[0]
        with self._lock:
            if self._closed:
                # A call still running when the engine closed the connector
                # must not open a client nobody will close.
                raise NotConnected(f"{self.owner}: closed")
            cur = self._current
            if cur is not None and cur[1] == key:
                return cur[0]
            if self._opening or (self._failed_at and time.monotonic() - self._failed_at < self.reopen_s):
                raise NotConnected(f"{self.owner}: not connected (an open is in progress or recently failed; "
                                   f"retrying every {self.reopen_s:g} s)")
            self._opening = True
            generation = self._generation
            self._current = None
        if cur is not None:  # opened for another key
            self._close(cur[0])
        opened = None
        try:
            opened = open_fn()
        except Exception:
            with self._lock:
                if generation == self._generation:
                    self._failed_at = time.monotonic()
            raise
        finally:
            with self._lock:
                self._opening = False
                if opened is not None and generation == self._generation:
                    self._current, opened = (opened, key), None
                    self._failed_at = 0.0
                    mine = self._current[0]
        if opened is not None:
            self._close(opened)
            why = "closed" if self._closed else "not connected (its settings changed during the open)"
            raise NotConnected(f"{self.owner}: {why}")
        return mine

    def reset(self) -> None:
        """Drop the client: the namespace it was opened for changed."""
        self._drop(closing=False)

    def close(self) -> None:
        """Drop the client for good."""
        self._drop(closing=True)

    def _drop(self, closing: bool) -> None:
        with self._lock:
            self._closed = self._closed or closing
            self._generation += 1
            cur, self._current = self._current, None
            self._failed_at = 0.0
        if cur is not None:
            self._close(cur[0])

    def _close(self, client: Any) -> None:
        # An engine's close or re-registration must not fail because the
        # cache's did (an embedded store whose flush to disk failed): say
        # so, and go on.
        try:
            client.close()
        except DfkvError as e:
            logger.warning("%s: closing its dfkv client failed: %s", self.owner, e)


class RawBuffer:
    """A (pointer, length) span of engine memory (e.g. one page of SGLang's
    host pool from get_page_buffer_meta), shaped like a tensor so
    dfkv.Client reads or writes it in place. The caller guarantees the
    memory outlives the call."""

    __slots__ = ("_ptr", "nbytes")

    def __init__(self, ptr: int, nbytes: int) -> None:
        self._ptr, self.nbytes = int(ptr), int(nbytes)

    def data_ptr(self) -> int:
        return self._ptr

    def is_contiguous(self) -> bool:
        return True


def escape_key_part(s: Any) -> str:
    """An engine's hash as an object-key field: '%', '|' and '=' are
    percent-escaped so any engine string is a valid, unambiguous field."""
    s = s if isinstance(s, str) else str(s)
    return s.replace("%", "%25").replace("|", "%7C").replace("=", "%3D")


def dtype_name(dtype: Any) -> str:
    """torch.bfloat16 -> "bfloat16"; strings pass through."""
    s = str(dtype)
    return s[len("torch."):] if s.startswith("torch.") else s


# The environment names of the client settings, as the dfkv binary reads
# them (DFKV_ and the TOML key), each followed by the earlier name that is
# still accepted.
ENV_MDS = ("DFKV_CLIENT_MDS", "DFKV_MDS_ADDRS")
ENV_MEMBERS = ("DFKV_CLIENT_MEMBERS", "DFKV_MEMBERS")
# The token's: libdfkv reads them itself when no token is given, so a
# refusal's message can name the variable the token came from.
ENV_TOKEN = ("DFKV_CLIENT_TOKEN", "DFKV_TOKEN")
# The TLS settings: dfkv_<name> in the extra config is dfkv.Client's
# <name> argument; unset, libdfkv reads its variable (DFKV_CLIENT_TLS,
# DFKV_CLIENT_TLS_CA, ...) when the client opens, so its messages can name
# where a setting came from.
TLS_SETTINGS = ("tls", "tls_ca", "tls_cert", "tls_key", "tls_server_name")


def switch(value: Any, name: str, who: str) -> Optional[bool]:
    """An on/off setting as the dfkv binary reads one: 1/0, true/false,
    yes/no, on/off (or a bool); None or "" is unset (None)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text == "":
        return None
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{who}: {name} is {value!r}: want 1 or 0 (also true/false, yes/no, on/off)")


def setting(extra: Optional[Dict[str, Any]], name: str, env: Any = None, default: Any = None) -> Any:
    """extra_config[name], else the first set of the environment variables
    env names (one name or a tuple of them), else default."""
    if extra and extra.get(name) not in (None, ""):
        return extra[name]
    for var in (env,) if isinstance(env, str) else (env or ()):
        if os.environ.get(var):
            return os.environ[var]
    return default


class Endpoints:
    """Where a connector finds its nodes: an MDS list (the node set follows
    the directory, so adding or replacing a node needs no engine restart)
    or, as the fallback, a static member list. From the engine's extra
    config (dfkv_mds, dfkv_members, dfkv_group) or the environment
    (DFKV_CLIENT_MDS, DFKV_CLIENT_MEMBERS, DFKV_GROUP; the earlier
    DFKV_MDS_ADDRS and DFKV_MEMBERS still count); an MDS wins over static
    members when both are set, as in every dfkv role.

    The token for nodes that require credentials is dfkv_token in the
    extra config, else $DFKV_CLIENT_TOKEN, else $DFKV_TOKEN (the
    environment is read by libdfkv when the client opens). Engines print
    their configuration when they start, so the environment is the place
    that keeps it out of their logs. It is never part of repr().

    TLS with the nodes (and the MDS) is dfkv_tls (1/0), dfkv_tls_ca,
    dfkv_tls_cert, dfkv_tls_key and dfkv_tls_server_name in the extra
    config, each else its environment variable ($DFKV_CLIENT_TLS,
    $DFKV_CLIENT_TLS_CA, ...), read by libdfkv at open (dfkv.Client's tls
    arguments say what each means)."""

    __slots__ = ("mds", "members", "group", "embedded", "_token", "tls")

    def __init__(self, mds: Optional[str], members: Optional[str], group: Optional[str],
                 embedded: Optional[str] = None, token: Optional[str] = None,
                 tls: Optional[Dict[str, Any]] = None) -> None:
        self.mds, self.members, self.group = mds or None, members or None, group or None
        # members == "embedded": the process's embedded store, configured
        # by this TOML (dfkv_embedded_config / $DFKV_EMBEDDED_CONFIG).
        self.embedded = embedded
        # dfkv_token; None leaves it to the environment (ENV_TOKEN).
        self._token = token or None
        # The dfkv.Client TLS arguments set in the extra config (tls,
        # tls_ca, ...); those absent are left to the environment.
        self.tls = dict(tls or {})

    @classmethod
    def from_settings(cls, extra: Optional[Dict[str, Any]], who: str, *, members: Optional[str] = None,
                      mds: Optional[str] = None) -> "Endpoints":
        """members/mds given here (e.g. from a URL) come before extra and
        the environment. Raises ValueError naming the settings when there
        is neither, so an engine refuses to start rather than running
        without its cache tier unnoticed."""
        mds = mds or setting(extra, "dfkv_mds", ENV_MDS)
        members = members or setting(extra, "dfkv_members", ENV_MEMBERS)
        group = setting(extra, "dfkv_group", "DFKV_GROUP")
        token = setting(extra, "dfkv_token")
        if token is not None and not isinstance(token, (str, bytes)):
            raise ValueError(f"{who}: dfkv_token must be a string, not {type(token).__name__}")
        tls: Dict[str, Any] = {}
        for name in TLS_SETTINGS:
            v = setting(extra, "dfkv_" + name)
            if name == "tls":
                v = switch(v, "dfkv_tls", who)
            elif v is not None and not isinstance(v, (str, os.PathLike)):
                raise ValueError(f"{who}: dfkv_{name} must be a string, not {type(v).__name__}")
            if v is not None:
                tls[name] = v
        if not mds and not members:
            raise ValueError(f"{who}: no dfkv nodes configured; set dfkv_mds (an MDS list, host:port,...) "
                             "or dfkv_members (static nodes, or \"embedded\" for a store inside the engine's "
                             "process) in the engine's extra config, "
                             "or DFKV_CLIENT_MDS / DFKV_CLIENT_MEMBERS in its environment")
        members = _join(members)
        if members == "embedded":
            if mds:
                raise ValueError(f"{who}: dfkv_members is \"embedded\" and an MDS is set too; "
                                 "an embedded store is its own single member: unset dfkv_mds / DFKV_CLIENT_MDS")
            cfg = setting(extra, "dfkv_embedded_config", "DFKV_EMBEDDED_CONFIG", "")
            return cls(None, members, None, cfg if isinstance(cfg, str) else _server_toml(cfg), token=token, tls=tls)
        return cls(_join(mds), members, str(group) if group else None, token=token, tls=tls)

    def client_kwargs(self) -> Dict[str, Any]:
        """Arguments for dfkv.Client: (members, mds=..., group=...). The
        group names an MDS group, so it goes with an MDS only (libdfkv
        refuses a group with static members)."""
        if self.mds:
            return {"members": None, "mds": self.mds, "group": self.group}
        return {"members": self.members, "mds": None, "group": None}

    def static_fallback(self) -> Optional["Endpoints"]:
        """The static members to use when the MDS cannot be reached, or
        None when there are none (or no MDS to fall back from)."""
        if self.mds and self.members:
            return Endpoints(None, self.members, None, token=self._token, tls=self.tls)
        return None

    def open_client(self, namespace: Any, who: str, log: Optional[logging.Logger] = None, **opts: Any) -> Any:
        """A dfkv.Client on namespace (opts go to it too): through the MDS
        when there is one; when the MDS cannot be used and static members
        are set, on those, with one warning (the node set is then fixed
        until the connector opens its client again), logged on log (the
        connector's logger). Errors are dfkv.DfkvError."""
        from .client import Client
        from .errors import DfkvError
        kw = self.client_kwargs()
        opts.setdefault("token", self._token)
        for name, value in self.tls.items():
            opts.setdefault(name, value)
        if self.embedded is not None:
            return Client(None, namespace, embedded=self.embedded, **opts)
        try:
            return Client(kw["members"], namespace, mds=kw["mds"], group=kw["group"], **opts)
        except DfkvError as err:
            fallback = self.static_fallback()
            if fallback is None:
                raise
            (log or logger).warning("%s: MDS %s could not be used (%s); falling back to the static members %s, a fixed "
                           "node set until the connector opens its client again", who, self.mds, err, self.members)
            return Client(fallback.members, namespace, **opts)

    def __repr__(self) -> str:
        if self.embedded is not None:
            return "embedded store"
        if self.mds:
            return f"mds={self.mds!r}" + (f" group={self.group!r}" if self.group else "")
        return f"members={self.members!r}"


def _join(v: Any) -> Optional[str]:
    if v is None or v == "":
        return None
    return v if isinstance(v, str) else ",".join(str(x) for x in v)


def _server_toml(settings: Any) -> str:
    from .client import server_toml
    return server_toml(settings)
