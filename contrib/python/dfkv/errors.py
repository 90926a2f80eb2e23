"""Status codes and exceptions. The numbers are wire.Status values
(wire/status.go) and the C ABI return codes of dfkv.h."""

from __future__ import annotations

import enum
from typing import Dict, Type


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


class DfkvError(Exception):
    """A failed dfkv call. ``status`` is the Status; the message is
    libdfkv's last-error text, naming what failed."""

    status = Status.INTERNAL

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


_BY_STATUS: Dict[int, Type[DfkvError]] = {
    c.status: c for c in (NotFound, InvalidArgument, QuotaExceeded, CacheFull, DfkvIOError, Timeout,
                          Unavailable, Unsupported, EpochMismatch, TooLarge, Internal)
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
