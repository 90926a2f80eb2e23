"""Helpers shared by the engine connectors."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional


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


def setting(extra: Optional[Dict[str, Any]], name: str, env: Optional[str] = None, default: Any = None) -> Any:
    """extra_config[name], else $env, else default."""
    if extra and extra.get(name) not in (None, ""):
        return extra[name]
    if env and os.environ.get(env):
        return os.environ[env]
    return default
