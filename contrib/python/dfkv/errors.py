"""Status codes and exceptions. The numbers are wire.Status values
(wire/status.go) and the C ABI return codes of dfkv.h."""

from __future__ import annotations

import enum
import re
from typing import Dict, Optional, Type


class Status(enum.IntEnum):
    OK = 0
    NOT_FOUND = 1
    INVALID = 2
    QUOTA_EXCEEDED = 3
    CACHE_FULL = 4
    IO_ERROR = 5
    TIMEOUT = 6
    UNAVAILABLE = 7
    UNSUPPORTED = 8
    EPOCH_MISMATCH = 9
    TOO_LARGE = 10
    INTERNAL = 11
    UNAUTHENTICATED = 12
    FORBIDDEN = 13


class DfkvError(Exception):
    """A failed dfkv call. ``status`` is the Status; the message is
    libdfkv's last-error text, naming what failed. ``address`` is the node
    that could not be reached when the client knows it (a read of an
    unreachable node), else None."""

    status = Status.INTERNAL
    address: Optional[str] = None

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            try:
                self.status = Status(status)
            except ValueError:
                self.status = status  # an unknown code from a newer library


class NotFound(DfkvError, KeyError):
    status = Status.NOT_FOUND

    def __str__(self) -> str:  # KeyError would repr() the message
        return Exception.__str__(self)


class InvalidArgument(DfkvError, ValueError):
    status = Status.INVALID


class QuotaExceeded(DfkvError):
    status = Status.QUOTA_EXCEEDED


class CacheFull(DfkvError):
    status = Status.CACHE_FULL


class DfkvIOError(DfkvError, OSError):
    status = Status.IO_ERROR


class Timeout(DfkvError, TimeoutError):
    status = Status.TIMEOUT


class Unavailable(DfkvError, ConnectionError):
    status = Status.UNAVAILABLE


class Unsupported(DfkvError, NotImplementedError):
    status = Status.UNSUPPORTED


class EpochMismatch(DfkvError):
    status = Status.EPOCH_MISMATCH


class TooLarge(DfkvError, ValueError):
    status = Status.TOO_LARGE


class Internal(DfkvError):
    status = Status.INTERNAL


class Unauthenticated(DfkvError, PermissionError):
    """The node requires a token and refused this one (or none was given)."""
    status = Status.UNAUTHENTICATED


class Forbidden(DfkvError, PermissionError):
    """The token does not grant this op on this namespace's tenant."""
    status = Status.FORBIDDEN


_BY_STATUS: Dict[int, Type[DfkvError]] = {
    c.status: c for c in (NotFound, InvalidArgument, QuotaExceeded, CacheFull, DfkvIOError, Timeout,
                          Unavailable, Unsupported, EpochMismatch, TooLarge, Internal, Unauthenticated, Forbidden)
}


def status_name(status: int) -> str:
    """A status's name ("CACHE_FULL"), or STATUS_<n> for one this version does not know."""
    return Status(status).name if status in Status._value2member_map_ else f"STATUS_{status}"


def error_for(status: int, message: str) -> DfkvError:
    """The DfkvError subclass for a status (DfkvError itself for an unknown one)."""
    cls = _BY_STATUS.get(int(status), DfkvError)
    name = status_name(status)
    # libdfkv messages end in ": <STATUS>" (Go's %w of the status); it is
    # already the prefix here.
    if message.endswith(": " + name):
        message = message[: -len(name) - 2]
    return cls(f"{name}: {message}" if message else name, status)


# libdfkv answers a read (get, exist and their forms) of a node it cannot
# reach with DFKV_NOT_FOUND, as engines want, and says so in the last
# error, which dfkv.h promises contains "unreachable, answered as a miss"
# (wire/client words it "dfkv node ADDR unreachable, answered as a miss:
# CAUSE").
UNREACHABLE_MARK = "unreachable, answered as a miss"
_UNREACHABLE = re.compile(r"dfkv node (\S+) unreachable, answered as a miss: (.*)", re.S)


def unreachable_error(what: str, message: str) -> Optional[DfkvError]:
    """For the last error of a read that returned NOT_FOUND: None when it
    was a real miss; when libdfkv answered an unreachable node as a miss,
    the error a write there raises: Timeout when the node did not answer in
    time, else Unavailable, naming the node (also in ``address``) and the
    cause."""
    if UNREACHABLE_MARK not in message:
        return None
    m = _UNREACHABLE.search(message)
    addr, cause = (m.group(1), m.group(2)) if m else (None, message)
    status = Status.TIMEOUT if cause.endswith(": " + Status.TIMEOUT.name) else Status.UNAVAILABLE
    node = f"dfkv node {addr}" if addr else "a dfkv node"
    # What libdfkv put before the node's words (the TLS settings in force
    # when TLS is on) stays, before the cause.
    context = message[:m.start()] if m else ""
    err = error_for(status, f"{what}: {node} could not be reached, so whether the key is stored is unknown: "
                            f"{context}{cause}")
    err.address = addr
    return err
