"""PEP 517 build backend of the dfkv Python package (standard library only).

It builds libdfkv.so from the Go sources of the checkout this directory is
in (``go build -buildmode=c-shared ./contrib/libdfkv``) and writes a wheel
holding the ``dfkv`` package with the library and its header inside it, so
``import dfkv`` finds the library next to its own modules and needs neither
PYTHONPATH nor DFKV_LIBRARY. A backend of our own rather than setuptools:
pip would otherwise fetch setuptools into an isolated build environment,
which an offline machine cannot do.

Environment: GO (the go command, default "go" on PATH), DFKV_SOURCE (the
repository root, default two directories up from pyproject.toml).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import re
import tempfile
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # contrib/python


def _project():
    path = os.path.join(HERE, "pyproject.toml")
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    # Before Python 3.11: the [project] table's simple string keys, which
    # is all this file uses.
    project, table = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                table = line
            elif table == "[project]":
                m = re.match(r'([A-Za-z-]+)\s*=\s*"([^"]*)"', line)
                if m:
                    project[m.group(1)] = m.group(2)
    return project


def _dist_name(project) -> str:
    return project["name"].replace("-", "_")


def _tag() -> str:
    # The wheel carries a native library, so it is for this platform only;
    # its Python code runs on any Python 3.
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"py3-none-{plat}"


def _metadata(project) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}",
             f"Summary: {project.get('description', '')}"]
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    lic = project.get("license", {})
    lic = lic.get("text") if isinstance(lic, dict) else None
    if lic:
        lines.append(f"License: {lic}")
    return "\n".join(lines) + "\n"


def _build_library(out_dir: str) -> str:
    """Builds libdfkv.so into out_dir and returns its path."""
    root = os.environ.get("DFKV_SOURCE") or os.path.normpath(os.path.join(HERE, "..", ".."))
    if not os.path.exists(os.path.join(root, "go.mod")) or not os.path.isdir(os.path.join(root, "contrib", "libdfkv")):
        raise RuntimeError(f"dfkv build: {root} is not a dfkv checkout (no go.mod and contrib/libdfkv); "
                           "install from the repository (pip install ./contrib/python) or set DFKV_SOURCE")
    go = os.environ.get("GO", "go")
    if shutil.which(go) is None:
        raise RuntimeError(f"dfkv build: the Go toolchain ({go!r}) is not on PATH; libdfkv.so is built from "
                           "the Go sources at install time (install Go, or set GO to the go command)")
    lib = os.path.join(out_dir, "libdfkv.so")
    env = dict(os.environ, CGO_ENABLED="1")
    cmd = [go, "build", "-trimpath", "-buildmode=c-shared", "-o", lib, "./contrib/libdfkv"]
    print("dfkv build: " + " ".join(cmd), file=sys.stderr)
    res = subprocess.run(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"dfkv build: go build of libdfkv.so failed (exit {res.returncode}); cgo needs a C "
                           f"compiler (apt-get install gcc):\n{res.stdout}")
    return lib


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    name, version = _dist_name(project), project["version"]
    tag = _tag()
    wheel_name = f"{name}-{version}-{tag}.whl"
    dist_info = f"{name}-{version}.dist-info"
    files = []  # (arcname, bytes)
    pkg = os.path.join(HERE, "dfkv")
    for entry in sorted(os.listdir(pkg)):
        if entry.endswith(".py"):
            with open(os.path.join(pkg, entry), "rb") as f:
                files.append((f"dfkv/{entry}", f.read()))
    with tempfile.TemporaryDirectory(prefix="dfkv-build-") as tmp:
        with open(_build_library(tmp), "rb") as f:
            files.append(("dfkv/libdfkv.so", f.read()))
    root = os.environ.get("DFKV_SOURCE") or os.path.normpath(os.path.join(HERE, "..", ".."))
    with open(os.path.join(root, "contrib", "libdfkv", "dfkv.h"), "rb") as f:
        files.append(("dfkv/dfkv.h", f.read()))
    files.append((f"{dist_info}/METADATA", _metadata(project).encode()))
    files.append((f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: dfkv_build\nRoot-Is-Purelib: false\n"
                                         f"Tag: {tag}\n").encode()))
    record = [_record_line(a, d) for a, d in files] + [f"{dist_info}/RECORD,,"]
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    os.makedirs(wheel_directory, exist_ok=True)
    path = os.path.join(wheel_directory, wheel_name)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files:
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if arcname.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return wheel_name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_sdist(sdist_directory, config_settings=None):
    raise RuntimeError("dfkv build: no source distribution: the package is built from a dfkv checkout, whose Go "
                       "sources an sdist of contrib/python would not carry; run pip install ./contrib/python")
