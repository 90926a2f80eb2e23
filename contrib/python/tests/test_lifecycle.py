"""A client's life in an engine's process, as dfkv.h and the package
promise it: across fork, at close (an embedded store's flush can fail),
under environment variables set in-process, and at the max_block_bytes
limit.

    scripts/test-contrib.sh -k test_lifecycle
"""

import ctypes
import os
import shutil
import tempfile
import time
import unittest
import uuid
import warnings

import dfkv
from dfkv import Status


def ns():
    return b"lifecycle-" + uuid.uuid4().hex.encode()


def _fork():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded process"
        return os.fork()


def _wait(pid, seconds):
    """The child's exit code, or None when it is still running after
    seconds (it is then killed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        p, status = os.waitpid(pid, os.WNOHANG)
        if p:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def _fds_naming(path):
    out = []
    for f in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{f}") == path:
                out.append(int(f))
        except OSError:
            pass
    return out


class LifecycleTest(unittest.TestCase):
    def _last_error(self, lib, h):
        buf = ctypes.create_string_buffer(8192)
        lib.dfkv_last_error(h, buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    # -- fork ----------------------------------------------------------

    def _child_drops_inherited_client(self, box):
        pid = _fork()
        if pid == 0:  # a forked worker that never uses dfkv lets go of the inherited object
            try:
                box.clear()  # the last reference: Client.__del__ -> close() -> dfkv_close in the child
            finally:
                os._exit(0)
        return _wait(pid, 20)

    def test_forked_child_that_drops_an_inherited_client_exits(self):
        # A worker forked after the engine made its Client (the connectors
        # are made in the parent) drops or GCs it, or exits normally:
        # Client.__del__ calls dfkv_close in the child, into a Go runtime
        # that did not survive fork, and the child hangs for ever.
        for what, make in (("connected", lambda: dfkv.Client("127.0.0.1:1", ns())),
                           ("embedded", lambda: dfkv.Client(None, ns(), embedded={"ram_tier_bytes": "64MiB"}))):
            box = [make()]
            try:
                rc = self._child_drops_inherited_client(box)
            finally:
                box[0].close()
            self.assertEqual(rc, 0, f"{what}: forked child hung in Client.__del__ -> dfkv_close (killed after 20 s)")

    def test_forked_child_calling_an_inherited_client_is_refused(self):
        # A call from the child would block for ever in libdfkv; it is
        # refused at once with a message that says to open a client there.
        c = dfkv.Client(None, ns(), embedded={"ram_tier_bytes": "64MiB"})
        self.addCleanup(c.close)
        c.put(b"k", b"v")
        pid = _fork()
        if pid == 0:
            code = 4
            try:
                c.exist(b"k")
            except dfkv.InvalidArgument as e:
                code = 0 if "fork" in str(e) else 5
            finally:
                os._exit(code)
        self.assertEqual(_wait(pid, 20), 0, "the child's call was not refused (4: it ran, 5: the message)")
        self.assertTrue(c.exist(b"k"), "the parent's client works after the fork")

    def test_forked_child_opening_a_client_is_refused_not_hung(self):
        # The parent's Go runtime is a dead copy in the child: an open there
        # would block for ever, so it is refused at once, saying what works.
        c = dfkv.Client(None, ns(), embedded={"ram_tier_bytes": "64MiB"})
        self.addCleanup(c.close)
        pid = _fork()
        if pid == 0:
            code = 4
            try:
                dfkv.Client(None, ns(), embedded={"ram_tier_bytes": "64MiB"})
            except dfkv.InvalidArgument as e:
                code = 0 if "spawn" in str(e) else 5
            finally:
                os._exit(code)
        self.assertEqual(_wait(pid, 20), 0, "the child's open was not refused (None: it hung; 4: it opened; 5: the message)")

    def test_grandchild_keeps_descriptors_its_parent_opened(self):
        # fork.c closes the noted lock descriptors in every child, but never
        # forgets them there: a worker (child) that opens a file, pipe or
        # socket on the freed number and then forks (a DataLoader, a
        # subprocess helper) has that descriptor closed in its own child.
        with tempfile.TemporaryDirectory(prefix="dfkv-lifecycle-") as d:
            disk = os.path.join(d, "disk")
            c = dfkv.Client(None, ns(), embedded={"ram_tier_bytes": "64MiB", "disks": [disk],
                                                  "disk_capacity_bytes": "256MiB"})
            try:
                fds = _fds_naming(disk)
                self.assertTrue(fds, "no descriptor of the disk directory found")
                n = fds[0]
                pid = _fork()
                if pid == 0:  # the worker: never touches dfkv
                    code = 10
                    try:
                        fd = os.open("/dev/null", os.O_RDONLY)  # its own file, on number n
                        if fd != n:
                            os.dup2(fd, n)
                            os.close(fd)
                        g = os.fork()
                        if g == 0:
                            try:
                                os.fstat(n)
                                os._exit(0)
                            except OSError:
                                os._exit(3)
                        _, st = os.waitpid(g, 0)
                        code = os.waitstatus_to_exitcode(st)
                    finally:
                        os._exit(code)
                rc = _wait(pid, 30)
            finally:
                c.close()
            self.assertEqual(rc, 0, f"the worker's descriptor {n} was closed in its own forked child (exit {rc})")

    # -- close ---------------------------------------------------------

    def _failing_store(self, d):
        disk = os.path.join(d, "disk")
        c = dfkv.Client(None, ns(), embedded={"ram_tier_bytes": "64MiB", "disks": [disk],
                                              "disk_capacity_bytes": "256MiB"})
        c.put(b"k", b"v" * 5000)
        shutil.rmtree(disk)  # the store fails closed on its next STATS
        c.stats()
        return c

    def test_dfkv_close_failure_message_is_readable(self):
        # dfkv_close of an embedded store flushes and can fail (IO_ERROR
        # here); its message goes to the handle it just invalidated, so
        # neither dfkv_last_error(c) nor dfkv_last_error(NULL) can read it.
        with tempfile.TemporaryDirectory(prefix="dfkv-lifecycle-") as d:
            c = self._failing_store(d)
            lib, h = c._lib, c._h
            c._h = None
            rc = lib.dfkv_close(h)
            self.assertEqual(rc, Status.IO_ERROR)
            msgs = [self._last_error(lib, h), self._last_error(lib, None)]
            self.assertTrue(any("failed closed" in m or "slab engine" in m for m in msgs),
                            f"dfkv_close returned {Status(rc).name} but no message says why: {msgs}")

    def test_client_close_reports_a_failed_close(self):
        # Client.close() drops dfkv_close's status: the flush the header
        # promises failed and the caller is never told.
        with tempfile.TemporaryDirectory(prefix="dfkv-lifecycle-") as d:
            c = self._failing_store(d)
            with self.assertRaises(dfkv.DfkvError):
                c.close()

    # -- environment ---------------------------------------------------

    def test_embedded_store_reads_server_settings_set_in_process(self):
        # dfkv.h: "DFKV_SERVER_* variables apply on top". libdfkv reads the
        # token and TLS variables through getenv (an engine may set them
        # after loading it), but the embedded configuration through Go's
        # copy of the environment taken at load, so os.environ is ignored.
        old = os.environ.get("DFKV_SERVER_MAX_BLOCK_BYTES")
        os.environ["DFKV_SERVER_MAX_BLOCK_BYTES"] = "1MiB"
        try:
            with dfkv.Client(None, ns(), embedded={"ram_tier_bytes": "72MiB"}) as c:
                with self.assertRaises(dfkv.TooLarge, msg="a 2 MiB value was stored under DFKV_SERVER_MAX_BLOCK_BYTES=1MiB"):
                    c.put(b"k", bytes(2 << 20))
        finally:
            if old is None:
                del os.environ["DFKV_SERVER_MAX_BLOCK_BYTES"]
            else:
                os.environ["DFKV_SERVER_MAX_BLOCK_BYTES"] = old

    def test_embedded_store_ignores_client_tls_environment(self):
        # dfkv.h: for an embedded store "the environment is ignored" (TLS).
        old = os.environ.get("DFKV_CLIENT_TLS")
        os.environ["DFKV_CLIENT_TLS"] = "required"
        try:
            with dfkv.Client(None, ns(), embedded={"ram_tier_bytes": "64MiB"}) as c:
                c.put(b"k", b"v")
        finally:
            if old is None:
                del os.environ["DFKV_CLIENT_TLS"]
            else:
                os.environ["DFKV_CLIENT_TLS"] = old

    # -- messages ------------------------------------------------------

    def test_too_large_over_max_block_bytes_does_not_blame_the_buffer(self):
        # A value longer than this handle's max_block_bytes (written by
        # another handle of the store): dfkv_get with a buffer of exactly
        # *stored_len bytes, as dfkv.h says to retry, still fails, and the
        # message says the buffer is smaller than the value.
        cfg = {"ram_tier_bytes": "64MiB"}
        with dfkv.Client(None, b"lifecycle-big", embedded=cfg) as a, \
                dfkv.Client(None, b"lifecycle-big", embedded=cfg, max_block_bytes=1 << 20) as b:
            a.put(b"big", bytes(2 << 20))
            lib = b._lib
            stored = ctypes.c_uint64()
            buf = ctypes.create_string_buffer(2 << 20)
            rc = lib.dfkv_get(b._h, b"big", 3, buf, 2 << 20, ctypes.byref(stored))
            self.assertEqual(stored.value, 2 << 20)
            if rc == Status.OK:
                return
            self.assertEqual(rc, Status.TOO_LARGE)
            msg = self._last_error(lib, b._h)
            self.assertIn("max_block_bytes", msg,
                          f"buffer of {2 << 20} bytes for a {stored.value}-byte value, message: {msg!r}")

    def test_get_into_over_max_block_bytes_names_the_limit(self):
        # With a buffer smaller than the value too, the message names the
        # limit, which no larger buffer gets past.
        cfg = {"ram_tier_bytes": "64MiB"}
        name = b"lifecycle-big-" + uuid.uuid4().hex.encode()
        with dfkv.Client(None, name, embedded=cfg) as a, \
                dfkv.Client(None, name, embedded=cfg, max_block_bytes=1 << 20) as b:
            a.put(b"big", bytes(2 << 20))
            with self.assertRaises(dfkv.TooLarge) as cm:
                b.get_into(b"big", bytearray(4096))
            self.assertIn("max_block_bytes", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
