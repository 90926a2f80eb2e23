"""Real dfkv server processes for the tests.

scripts/test-contrib.sh starts the shared nodes and passes them in
$DFKV_TEST_MEMBERS; tests that kill a node start their own with
start_server() (binary $DFKV_BIN) and record its PID in
$DFKV_TEST_PIDFILE so the script's EXIT trap stops it even if the test
dies.
"""

import hashlib
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
import unittest


def members():
    m = os.environ.get("DFKV_TEST_MEMBERS")
    if not m:
        raise unittest.SkipTest("DFKV_TEST_MEMBERS is not set: run scripts/test-contrib.sh, which starts the servers")
    return m.split(",")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`dfkv server` (role="server", extra args appended) or `dfkv mds`
    (role="mds") on a free loopback port, in its own temporary directory."""

    def __init__(self, role="server", args=()):
        binary = os.environ.get("DFKV_BIN")
        if not binary:
            raise unittest.SkipTest("DFKV_BIN is not set: run scripts/test-contrib.sh")
        self.dir = tempfile.TemporaryDirectory(prefix="dfkv-pytest-")
        self.addr = f"127.0.0.1:{free_port()}"
        self.log = open(os.path.join(self.dir.name, "server.log"), "wb")
        if role == "mds":
            argv = [binary, "mds", "--listen", self.addr, "--http-listen", "", "--db-path",
                    os.path.join(self.dir.name, "mds.db"), *args]
        else:
            argv = [binary, "server", "--listen", self.addr, "--http-listen", "", "--disks",
                    os.path.join(self.dir.name, "disk0"), "--disk-capacity-bytes", "1GiB", *args]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={k: v for k, v in os.environ.items() if not k.startswith("DFKV_")})
        pidfile = os.environ.get("DFKV_TEST_PIDFILE")
        if pidfile:
            with open(pidfile, "a") as f:
                f.write(f"{self.proc.pid}\n")
        host, port = self.addr.rsplit(":", 1)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dfkv server exited early: {self.logs()}")
            try:
                socket.create_connection((host, int(port)), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"dfkv server at {self.addr} not accepting after 30s: {self.logs()}")
                time.sleep(0.02)

    def logs(self):
        self.log.flush()
        with open(os.path.join(self.dir.name, "server.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def close(self):
        self.kill()
        self.log.close()
        self.dir.cleanup()


def new_token(name):
    """A fresh token (well formed: 16..256 bytes, no spaces) for a test."""
    return f"{name}-{secrets.token_hex(16)}"


class CredentialsServer(Server):
    """`dfkv server --credentials-file` granting grants: {token: (tenants,
    rights)}, e.g. {tok: (["acme"], ["read", "write", "remove"])}. Only the
    tokens' SHA-256 go into the file, as on a real node."""

    def __init__(self, grants, args=()):
        self._cred_dir = tempfile.TemporaryDirectory(prefix="dfkv-pytest-creds-")
        path = os.path.join(self._cred_dir.name, "credentials.toml")
        with open(path, "w") as f:
            for i, (tok, (tenants, allow)) in enumerate(grants.items()):
                f.write("[[credential]]\n")
                f.write(f'name = "cred{i}"\n')
                f.write(f'token_sha256 = "{hashlib.sha256(tok.encode()).hexdigest()}"\n')
                f.write("tenants = [" + ", ".join(f'"{t}"' for t in tenants) + "]\n")
                f.write("allow = [" + ", ".join(f'"{r}"' for r in allow) + "]\n\n")
        super().__init__(args=("--credentials-file", path, *args))

    def close(self):
        super().close()
        self._cred_dir.cleanup()
