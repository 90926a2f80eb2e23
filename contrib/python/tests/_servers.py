"""Real dfkv server processes for the tests.

scripts/test-contrib.sh starts the shared nodes and passes them in
$DFKV_TEST_MEMBERS; tests that kill a node start their own with
start_server() (binary $DFKV_BIN) and record its PID in
$DFKV_TEST_PIDFILE so the script's EXIT trap stops it even if the test
dies.
"""

import hashlib
import os
import random
import secrets
import shutil
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


# Ports the tests choose before a process binds them come from a band just
# below Linux's default ephemeral range (32768-60999). The kernel hands out
# ports of that range to every bind of port 0 and every outgoing
# connection, so a port chosen from it can be taken between the choice and
# the node's listen by any other test running beside this suite (the Go
# multi-process tests do, from 20000-29999; the benchmark scripts take
# 10000-19999).
PORT_BAND = (30000, 32768)
_given = set()


def free_port():
    """A loopback port in PORT_BAND that nothing listens on and this
    process has not handed out before (a node a test killed may come back
    on its port, so the port stays reserved)."""
    for _ in range(500):
        port = random.randrange(*PORT_BAND)
        if port in _given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {PORT_BAND[0]}-{PORT_BAND[1] - 1}")


class Server:
    """`dfkv server` (role="server", extra args appended) or `dfkv mds`
    (role="mds") on a free loopback port, in its own temporary directory."""

    def __init__(self, role="server", args=()):
        binary = os.environ.get("DFKV_BIN")
        if not binary:
            raise unittest.SkipTest("DFKV_BIN is not set: run scripts/test-contrib.sh")
        self.dir = tempfile.TemporaryDirectory(prefix="dfkv-pytest-")
        self.log = open(os.path.join(self.dir.name, "server.log"), "wb")
        # A port someone else bound since free_port chose it fails the
        # listen: choose another (a test that fixed the port gets the error).
        for attempt in range(5):
            self.addr = f"127.0.0.1:{free_port()}"
            if self._start(binary, role, args):
                return
            if attempt == 4:
                raise RuntimeError(f"dfkv {role}: port in use on five tries, last {self.addr}: {self.logs()}")
            self.log.truncate(0)
            self.log.seek(0)

    def _start(self, binary, role, args):
        """Starts the process on self.addr and waits until its log says it
        listens there; False when the port was in use."""
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
        # The log line, not a connection: a connection would succeed against
        # another process that holds the port while this one failed to bind.
        ready = f'msg="dfkv {role} listening" '
        deadline = time.monotonic() + 30
        while True:
            logs = self.logs()
            if ready in logs and f" listen={self.addr} " in logs:
                return True
            if self.proc.poll() is not None:
                if "address already in use" in logs:
                    return False
                raise RuntimeError(f"dfkv {role} exited early: {logs}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"dfkv {role} at {self.addr} not listening after 30s: {logs}")
            time.sleep(0.02)

    def stop_process(self):
        """SIGSTOPs the process and returns once the kernel shows every
        thread of it stopped (a thread in an uninterruptible wait, a disk
        read say, stops only when that wait ends)."""
        self.proc.send_signal(signal.SIGSTOP)
        tasks = f"/proc/{self.proc.pid}/task"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            states = []
            for tid in os.listdir(tasks):
                try:
                    with open(f"{tasks}/{tid}/stat") as f:
                        # The state follows the command name, in parentheses.
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
                except FileNotFoundError:
                    pass  # a thread that exited meanwhile
            if states and all(st == "T" for st in states):
                return
            time.sleep(0.005)
        raise RuntimeError(f"dfkv process {self.proc.pid} not stopped 10 s after SIGSTOP")

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
    tokens' SHA-256 go into the file, as on a real node. cert_grants
    grants client certificates by common name the same way
    (cert_common_name; for a node with --tls-client-ca, in args)."""

    def __init__(self, grants, args=(), cert_grants=None):
        self._cred_dir = tempfile.TemporaryDirectory(prefix="dfkv-pytest-creds-")
        path = os.path.join(self._cred_dir.name, "credentials.toml")
        entries = [("token_sha256", hashlib.sha256(tok.encode()).hexdigest(), g) for tok, g in grants.items()]
        entries += [("cert_common_name", cn, g) for cn, g in (cert_grants or {}).items()]
        with open(path, "w") as f:
            for i, (field, value, (tenants, allow)) in enumerate(entries):
                f.write("[[credential]]\n")
                f.write(f'name = "cred{i}"\n')
                f.write(f'{field} = "{value}"\n')
                f.write("tenants = [" + ", ".join(f'"{t}"' for t in tenants) + "]\n")
                f.write("allow = [" + ", ".join(f'"{r}"' for r in allow) + "]\n\n")
        super().__init__(args=("--credentials-file", path, *args))

    def close(self):
        super().close()
        self._cred_dir.cleanup()


class CertAuthority:
    """A throwaway certificate authority made with the openssl CLI, in a
    temporary directory: its certificate is .file; server() issues a
    certificate for 127.0.0.1 and localhost, client() one with a common
    name, each returned as (certificate file, key file). ECDSA P-256,
    valid for two days."""

    def __init__(self, name="ca"):
        self.openssl = shutil.which("openssl")
        if not self.openssl:
            raise unittest.SkipTest("the openssl command is not installed (scripts/ci-deps.sh installs it: "
                                    "apt-get install openssl); the TLS tests make their certificates with it")
        self._dir = tempfile.TemporaryDirectory(prefix=f"dfkv-pytest-{name}-")
        self.dir = self._dir.name
        self.file = self._path("ca.pem")
        self._key = self._path("ca-key.pem")
        cnf = self._write("ca.cnf", "[req]\ndistinguished_name = dn\n[dn]\n[v3_ca]\n"
                                    "basicConstraints = critical,CA:TRUE\n"
                                    "keyUsage = critical,keyCertSign,cRLSign,digitalSignature\n"
                                    "subjectKeyIdentifier = hash\n")
        self._run("req", "-x509", "-config", cnf, "-extensions", "v3_ca", "-newkey", "ec",
                  "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", self._key, "-out", self.file,
                  "-days", "2", "-subj", f"/CN=dfkv pytest {name}")

    def server(self, name="node"):
        return self._issue(name, "localhost", "extendedKeyUsage = serverAuth\n"
                                              "subjectAltName = IP:127.0.0.1,DNS:localhost\n")

    def client(self, name, cn):
        return self._issue(name, cn, "extendedKeyUsage = clientAuth\n")

    def server_args(self, mutual=False):
        """`dfkv server` flags serving TLS with a certificate of this CA;
        mutual also requires client certificates of it."""
        cert, key = self.server()
        args = ("--tls-cert", cert, "--tls-key", key)
        return args + ("--tls-client-ca", self.file) if mutual else args

    def close(self):
        self._dir.cleanup()

    def _issue(self, name, cn, ext):
        cert, key, csr = self._path(name + ".pem"), self._path(name + "-key.pem"), self._path(name + ".csr")
        req = self._write(name + "-req.cnf", "[req]\ndistinguished_name = dn\n[dn]\n")
        extfile = self._write(name + "-ext.cnf", "[ext]\nbasicConstraints = CA:FALSE\n"
                                                 "keyUsage = critical,digitalSignature\n" + ext)
        self._run("req", "-new", "-config", req, "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={cn}")
        self._run("x509", "-req", "-in", csr, "-CA", self.file, "-CAkey", self._key,
                  "-set_serial", str(secrets.randbits(63)), "-days", "2", "-extfile", extfile, "-extensions", "ext",
                  "-out", cert)
        return cert, key

    def _path(self, name):
        return os.path.join(self.dir, name)

    def _write(self, name, text):
        path = self._path(name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def _run(self, *args):
        r = subprocess.run([self.openssl, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RuntimeError(f"openssl {args[0]} failed ({r.returncode}): {r.stdout.decode(errors='replace')}")
