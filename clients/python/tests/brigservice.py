"""Starts a real ``brig serve`` for the tests, on a socket in a temp dir.

The binary is $BRIG_BIN, or ../../bin/brig relative to clients/python (build it
with ``go build -tags urfave_cli_no_docs -o bin/brig ./cmd/brig``). The service
needs root; without root or without the binary, ``start`` raises
unittest.SkipTest with the reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BIN = os.path.normpath(os.path.join(HERE, "..", "..", "..", "bin", "brig"))

# CGROUP_PARENT keeps this suite's runs apart from other brig tests running at
# the same time on the machine.
CGROUP_PARENT = "brig-test-pyclient"

# START_TIMEOUT bounds the wait for the socket (a slow machine builds the pool's
# first sandbox meanwhile); STOP_TIMEOUT the wait for a clean exit on SIGTERM.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0


def binary() -> str:
    return os.environ.get("BRIG_BIN") or DEFAULT_BIN


class Service:
    """A running ``brig serve``: ``socket`` is its API socket."""

    def __init__(self, extra_args: Optional[List[str]] = None) -> None:
        self.extra_args = extra_args or []
        self.dir = ""
        self.socket = ""
        self.proc: Optional[subprocess.Popen] = None
        self._log = None
        # final_log is the end of the service's log, kept by stop.
        self.final_log = ""

    def start(self) -> "Service":
        path = binary()
        if not os.access(path, os.X_OK):
            raise unittest.SkipTest(
                f"no brig binary at {path}: build it with `go build -tags urfave_cli_no_docs "
                f"-o bin/brig ./cmd/brig`, or set BRIG_BIN"
            )
        if os.geteuid() != 0:
            raise unittest.SkipTest("brig serve needs root (namespaces, cgroups): run the tests as root")
        # A short directory: a socket's path must fit in 108 bytes.
        self.dir = tempfile.mkdtemp(prefix="brigpy.", dir="/tmp")
        self.socket = os.path.join(self.dir, "brig.sock")
        self._log = open(os.path.join(self.dir, "serve.log"), "wb")
        args = [
            path, "serve",
            "--socket", self.socket,
            "--state-dir", os.path.join(self.dir, "state"),
            "--cgroup-parent", CGROUP_PARENT,
            "--pool", "1",
            "--log-format", "text",
        ] + self.extra_args
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None:
                log = self.log()
                self._cleanup()
                raise RuntimeError(f"brig serve exited with {self.proc.returncode} before listening:\n{log}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"brig serve did not listen on {self.socket} within {START_TIMEOUT}s")
            time.sleep(0.05)
        return self

    def log(self) -> str:
        try:
            with open(os.path.join(self.dir, "serve.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")[-8000:]
        except OSError:
            return ""

    def stop(self) -> int:
        """Stops the service with SIGTERM and returns its exit status (0 for a
        clean stop; it then has removed its cgroup parent)."""
        code = -1
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                code = -int(signal.SIGKILL)
        elif self.proc is not None:
            code = self.proc.returncode
        self.final_log = self.log()
        self._cleanup()
        return code

    def _cleanup(self) -> None:
        # The service leaves its cgroup parent's lock file (the Go
        # cgroup.ParentLockPath) for the next service on that parent; the
        # tests remove it once the service has exited.
        if self.proc is not None and self.proc.poll() is not None:
            lock_dir = "/run/brig/locks"
            try:
                os.remove(os.path.join(lock_dir, "brig-cgroup-%s.lock" % CGROUP_PARENT.replace("/", "%2F")))
            except FileNotFoundError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
