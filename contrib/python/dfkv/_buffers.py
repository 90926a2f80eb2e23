"""Addresses of caller memory, without copying it.

Accepted: bytes (read-only), bytearray, memoryview, array.array, numpy
arrays and anything else with the C-contiguous buffer protocol, and objects
with ``data_ptr()`` (torch tensors), sized by ``nbytes`` or
``element_size() * numel()``. A non-contiguous tensor or buffer is rejected
with InvalidArgument: making it contiguous would be a silent copy, so the
caller must do it explicitly (``t.contiguous()``). A tensor not in CPU
memory is rejected too: libdfkv copies with the CPU.

The address is valid only while the Pinned that produced it is open: for
buffer-protocol objects it holds a Py_buffer export (so a bytearray cannot
be resized under the call) and releases it on close.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_int, c_ssize_t, c_void_p
from typing import Any, List, Tuple

from .errors import InvalidArgument


class _PyBuffer(ctypes.Structure):
    # Py_buffer from CPython's Include/pybuffer.h (stable since 3.3).
    _fields_ = [
        ("buf", c_void_p),
        ("obj", c_void_p),  # owned reference; released by PyBuffer_Release
        ("len", c_ssize_t),
        ("itemsize", c_ssize_t),
        ("readonly", c_int),
        ("ndim", c_int),
        ("format", c_char_p),
        ("shape", POINTER(c_ssize_t)),
        ("strides", POINTER(c_ssize_t)),
        ("suboffsets", POINTER(c_ssize_t)),
        ("internal", c_void_p),
    ]


_PyObject_GetBuffer = ctypes.pythonapi.PyObject_GetBuffer
_PyObject_GetBuffer.argtypes = [ctypes.py_object, POINTER(_PyBuffer), c_int]
_PyObject_GetBuffer.restype = c_int
_PyBuffer_Release = ctypes.pythonapi.PyBuffer_Release
_PyBuffer_Release.argtypes = [POINTER(_PyBuffer)]
_PyBuffer_Release.restype = None

_PyBUF_SIMPLE = 0  # implies C-contiguous: exporters refuse otherwise
_PyBUF_WRITABLE = 1


def is_tensor_like(obj: Any) -> bool:
    return callable(getattr(obj, "data_ptr", None)) and not isinstance(obj, (bytes, bytearray, memoryview))


def _tensor(obj: Any, what: str) -> Tuple[int, int]:
    dev = getattr(obj, "device", None)
    if dev is not None and getattr(dev, "type", "cpu") != "cpu":
        raise InvalidArgument(f"{what}: tensor is on {dev}; dfkv reads and writes host memory only "
                              "(copy it to a CPU tensor, ideally pinned, first)")
    contiguous = getattr(obj, "is_contiguous", None)
    if contiguous is not None and not contiguous():
        raise InvalidArgument(f"{what}: tensor is not contiguous (shape {tuple(getattr(obj, 'shape', ()))}, "
                              f"stride {tuple(obj.stride()) if hasattr(obj, 'stride') else '?'}); dfkv does not "
                              "copy silently: pass t.contiguous() explicitly")
    nbytes = getattr(obj, "nbytes", None)
    if nbytes is None:
        nbytes = obj.element_size() * obj.numel()
    return int(obj.data_ptr()), int(nbytes)


class Pinned:
    """Collects buffer addresses for one call; close() releases them."""

    __slots__ = ("_views",)

    def __init__(self) -> None:
        self._views: List[_PyBuffer] = []

    def __enter__(self) -> "Pinned":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        views, self._views = self._views, []
        for v in views:
            _PyBuffer_Release(ctypes.byref(v))

    def addr(self, obj: Any, writable: bool, what: str = "buffer") -> Tuple[int, int]:
        """(address, nbytes) of obj's memory. An empty object gives (0, 0),
        which libdfkv rejects with INVALID."""
        if isinstance(obj, bytes):
            if writable:
                raise TypeError(f"{what}: bytes is read-only; pass a bytearray, memoryview or tensor to read into")
            if not obj:
                return 0, 0
            return ctypes.cast(c_char_p(obj), c_void_p).value or 0, len(obj)
        if is_tensor_like(obj):
            return _tensor(obj, what)
        view = _PyBuffer()
        try:
            _PyObject_GetBuffer(obj, ctypes.byref(view), _PyBUF_WRITABLE if writable else _PyBUF_SIMPLE)
        except BufferError as e:
            raise InvalidArgument(f"{what}: {type(obj).__name__} cannot be used without a copy: {e}") from None
        except TypeError:
            raise TypeError(f"{what}: {type(obj).__name__} is neither a buffer (bytes, bytearray, memoryview, "
                            "array) nor a tensor with data_ptr()") from None
        self._views.append(view)
        return view.buf or 0, view.len
