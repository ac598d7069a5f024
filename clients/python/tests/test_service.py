"""The client against a real ``brig serve`` (root and bin/brig needed; skipped
with the reason otherwise)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import unittest
import uuid
from typing import List

import brig
from brigservice import Service

SERVICE: Service = Service()

# Every blocking call of these tests is bounded: a run's own timeout_seconds,
# and WAIT for any silence on a connection.
WAIT = 60.0


def setUpModule() -> None:
    SERVICE.start()


def tearDownModule() -> None:
    code = SERVICE.stop()
    if code != 0:
        raise RuntimeError(f"brig serve exited with {code} on SIGTERM, want 0:\n{SERVICE.final_log}")


def new_id(name: str) -> str:
    return f"pyclient-{name}-{uuid.uuid4().hex}"


def client() -> brig.Client:
    return brig.Client(SERVICE.socket, timeout=WAIT, wait_timeout=WAIT)


def aclient() -> brig.AsyncClient:
    return brig.AsyncClient(SERVICE.socket, timeout=WAIT, wait_timeout=WAIT)


# A Python program that prints three lines, each as it goes, and one to stderr.
PY_LINES = """
import sys, time
for i in range(3):
    print("line", i, flush=True)
    time.sleep(0.05)
print("warn", file=sys.stderr, flush=True)
"""

PY_SLEEP = "import time\nprint('up', flush=True)\ntime.sleep(120)\n"


def kinds(events: List[brig.Event]) -> List[str]:
    return [ev.event for ev in events]


class SyncRunTest(unittest.TestCase):
    def test_python_completes(self) -> None:
        res = client().run("python", "print(6 * 7)", timeout_seconds=10)
        self.assertIsInstance(res, brig.Result)
        self.assertEqual(res.state, brig.State.FINISHED)
        self.assertEqual(res.status, brig.Status.COMPLETED)
        self.assertEqual(res.outcome, brig.Outcome.SUCCEEDED)
        self.assertEqual(res.reason, "")
        self.assertEqual(res.exit_code, 0)
        self.assertEqual(res.stdout, "42\n")
        self.assertEqual(res.language, "python")
        self.assertTrue(res.id)
        self.assertTrue(res.finished and res.succeeded)
        self.assertEqual(res.network.mode, brig.NetworkMode.NONE)
        self.assertEqual(res.packages, [])
        self.assertIsInstance(res.usage, brig.Usage)
        self.assertIsInstance(res.timing, brig.Timing)
        # Whole milliseconds, rounded up: a warm run takes under one, and
        # reads 1; the request's time holds the program's.
        self.assertGreaterEqual(res.usage.wall_ms, 1)
        self.assertGreaterEqual(res.timing.total_ms, res.usage.wall_ms)

    def test_python_exit_code_and_stderr(self) -> None:
        res = client().run("python", "import sys\nprint('oops', file=sys.stderr)\nsys.exit(3)")
        self.assertEqual(res.status, brig.Status.FAILED)
        self.assertEqual(res.reason, brig.Reason.ERROR)
        self.assertEqual(res.outcome, brig.Outcome.FAILED)
        self.assertEqual(res.exit_code, 3)
        self.assertEqual(res.stderr, "oops\n")
        self.assertTrue(res.message, "a failed run has a message")

    def test_python_env(self) -> None:
        res = client().run("python", "import os\nprint(os.environ['GREETING'])", env={"GREETING": "hej"})
        self.assertEqual((res.status, res.stdout), ("completed", "hej\n"))

    def test_javascript_completes(self) -> None:
        res = client().run("javascript", "console.log([1, 2, 3].map(x => x * 2).join(','))")
        self.assertEqual((res.status, res.exit_code, res.stdout), ("completed", 0, "2,4,6\n"))
        self.assertEqual(res.language, "javascript")

    def test_javascript_exit_code(self) -> None:
        res = client().run("javascript", "console.error('bad'); process.exit(4)")
        self.assertEqual((res.status, res.reason, res.exit_code), ("failed", "error", 4))
        self.assertEqual(res.stderr, "bad\n")

    def test_timeout(self) -> None:
        res = client().run("python", "while True:\n    pass", timeout_seconds=1)
        self.assertEqual((res.status, res.reason, res.outcome), ("failed", "timeout", "failed"))
        self.assertIsNone(res.exit_code)
        self.assertTrue(res.message)


class SyncStreamTest(unittest.TestCase):
    def test_events_in_order(self) -> None:
        with client().stream("python", PY_LINES, timeout_seconds=10) as stream:
            events = list(stream)
        self.assertEqual(kinds(events)[:2], ["accepted", "started"])
        self.assertEqual(events[-1].event, brig.EventKind.RESULT)
        middle = set(kinds(events)[2:-1])
        self.assertTrue(middle <= {"stdout", "stderr"}, f"got events {kinds(events)}")
        out = "".join(ev.data for ev in events if ev.event == "stdout")
        err = "".join(ev.data for ev in events if ev.event == "stderr")
        self.assertEqual(out, "line 0\nline 1\nline 2\n")
        self.assertEqual(err, "warn\n")
        self.assertGreaterEqual(kinds(events).count("stdout"), 2, "output arrives as it is printed")
        res = events[-1].result
        self.assertIsNotNone(res)
        assert res is not None
        self.assertEqual(stream.result, res)
        self.assertEqual(stream.id, res.id)
        self.assertEqual(events[0].id, res.id)
        self.assertEqual((res.status, res.stdout, res.stderr), ("completed", out, err))

    def test_wait(self) -> None:
        res = client().stream("javascript", "console.log('w')").wait()
        self.assertEqual((res.status, res.stdout), ("completed", "w\n"))

    def test_reattach_after_run(self) -> None:
        c = client()
        res = c.run("python", PY_LINES)
        got = c.get(res.id)
        self.assertEqual(got, res)
        with c.events(res.id) as stream:
            events = list(stream)
        self.assertEqual(kinds(events)[:2], ["accepted", "started"])
        self.assertEqual(events[-1].event, "result")
        self.assertEqual("".join(ev.data for ev in events if ev.event == "stdout"), res.stdout)
        self.assertEqual(stream.result, res)

    def test_reattach_while_running(self) -> None:
        c = client()
        with c.stream("python", "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.2)") as first:
            accepted = next(first)
            self.assertEqual(accepted.event, "accepted")
            first.close()  # the connection drops; the run goes on
            with self.assertRaises(StopIteration):
                next(first)
        res = c.events(accepted.id).wait()
        self.assertEqual((res.status, res.stdout), ("completed", "0\n1\n2\n"))

    def test_cancel_long_run(self) -> None:
        c = client()
        with c.stream("python", PY_SLEEP, timeout_seconds=60) as stream:
            for ev in stream:
                if ev.event == "stdout":
                    break
            self.assertTrue(stream.id)
            stopped = c.cancel(stream.id)
            self.assertEqual((stopped.state, stopped.status, stopped.reason), ("finished", "failed", "stopped"))
            self.assertEqual(stopped.outcome, brig.Outcome.FAILED)  # no network: nothing outside changed
            rest = list(stream)
        self.assertEqual(rest[-1].event, "result")
        self.assertEqual(stream.result, stopped)
        self.assertEqual(c.get(stream.id).reason, brig.Reason.STOPPED)


class SyncIdempotencyTest(unittest.TestCase):
    CODE = "import random\nprint(random.getrandbits(64))"

    def test_same_request_same_run(self) -> None:
        c = client()
        rid = new_id("idem")
        first = c.run("python", self.CODE, id=rid)
        second = c.run("python", self.CODE, id=rid)
        self.assertEqual(first.id, rid)
        self.assertEqual(second.id, rid)
        self.assertTrue(first.stdout.strip().isdigit())
        self.assertEqual(second.stdout, first.stdout, "the program ran once")
        streamed = c.stream("python", self.CODE, id=rid).wait()
        self.assertEqual(streamed.stdout, first.stdout)
        # A default written out is the same request.
        same = c.run("python", self.CODE, id=rid, timeout_seconds=30, memory_mib=512, network="none")
        self.assertEqual(same.stdout, first.stdout)

    def test_different_request_conflicts(self) -> None:
        c = client()
        rid = new_id("conflict")
        c.run("python", self.CODE, id=rid)
        with self.assertRaises(brig.Conflict) as cm:
            c.run("python", "print('other')", id=rid)
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "conflict"))

    def test_id_with_every_allowed_character(self) -> None:
        c = client()
        rid = new_id("A.b_c:d-e")
        res = c.run("python", "print(1)", id=rid)
        self.assertEqual(c.get(rid).id, rid)
        self.assertEqual(c.cancel(rid), res)


class SyncErrorTest(unittest.TestCase):
    def test_invalid_request_names_the_field(self) -> None:
        cases = [
            ("empty code", dict(language="python", code=""), "code"),
            ("unknown language", dict(language="cobol", code="x"), "language"),
            ("memory too small", dict(language="python", code="x", memory_mib=1), "memory_mib"),
            ("timeout too long", dict(language="python", code="x", timeout_seconds=301), "timeout_seconds"),
            ("package without a version", dict(language="python", code="x", packages=["requests"]), "packages[0]"),
            ("reserved env", dict(language="python", code="x", env={"PATH": "/"}), "env.PATH"),
            ("bad id", dict(language="python", code="x", id="no spaces"), "id"),
            ("domains without names", dict(language="python", code="x", domains=[]), "network.domains"),
        ]
        for name, kwargs, field in cases:
            with self.subTest(name):
                with self.assertRaises(brig.InvalidRequest) as cm:
                    client().run(**kwargs)  # type: ignore[arg-type]
                err = cm.exception
                self.assertIsInstance(err, brig.BrigError)
                self.assertEqual((err.status, err.code, err.field), (400, "invalid_request", field))
                self.assertTrue(err.message)
                self.assertIn(field, str(err))

    def test_invalid_stream_raises_at_once(self) -> None:
        with self.assertRaises(brig.InvalidRequest) as cm:
            client().stream("python", "x", memory_mib=100000)
        self.assertEqual(cm.exception.field, "memory_mib")

    def test_too_large(self) -> None:
        """The service answers 413 before reading the whole body and closes;
        the client still reads that answer."""
        with self.assertRaises(brig.TooLarge) as cm:
            client().run("python", "x" * (5 << 20))
        self.assertEqual((cm.exception.status, cm.exception.code), (413, "too_large"))

    def test_not_found(self) -> None:
        c = client()
        rid = new_id("missing")
        for name, call in [("get", c.get), ("cancel", c.cancel), ("events", c.events)]:
            with self.subTest(name):
                with self.assertRaises(brig.NotFound) as cm:
                    call(rid)
                self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
                self.assertIsNone(cm.exception.field)

    def test_no_service(self) -> None:
        with self.assertRaises(OSError):
            brig.Client(os.path.join(SERVICE.dir, "nothing.sock")).health()


class SyncServiceTest(unittest.TestCase):
    def test_health(self) -> None:
        h = client().health()
        self.assertIsInstance(h, brig.Health)
        self.assertEqual(h.status, "ok")
        self.assertIn("python", h.languages)
        self.assertIn("javascript", h.languages)
        self.assertIn("none", h.network_modes)

    def test_limits(self) -> None:
        lim = client().limits()
        self.assertIsInstance(lim.timeout_seconds, brig.Bound)
        self.assertEqual((lim.timeout_seconds.min, lim.timeout_seconds.max, lim.timeout_seconds.default), (1, 300, 30))
        self.assertEqual((lim.memory_mib.min, lim.memory_mib.max, lim.memory_mib.default), (128, 2048, 512))
        self.assertEqual(lim.code_chars.max, 100_000)
        self.assertEqual(lim.stdout_chars, 1_000_000)
        self.assertEqual(lim.writable_files_share, 0.5)
        # brig serve's defaults: --pids 512, --cpus 1.
        self.assertEqual((lim.processes, lim.cpus), (512, 1.0))
        # The install's bounds, when the host installs packages: brig serve's
        # defaults.
        if client().health().package_languages:
            self.assertIsInstance(lim.install, brig.InstallLimits)
            self.assertEqual((lim.install.timeout_seconds, lim.install.memory_mib), (300.0, 1024))
        else:
            self.assertIsNone(lim.install)
        self.assertEqual(sorted(lim.languages), ["javascript", "python"])
        self.assertIn("PATH", lim.reserved_env)
        self.assertEqual(lim.default_network_mode, "none")
        self.assertRegex("run-1", lim.id_pattern)
        self.assertNotRegex("run 1", lim.id_pattern)
        self.assertRegex("DEBUG", lim.env_name_pattern)
        # The test service offers networked modes: their bounds are typed.
        self.assertIsInstance(lim.egress, brig.EgressLimits)
        assert lim.egress is not None
        self.assertGreater(lim.egress.max_conns, 0)
        self.assertGreater(lim.egress.handshake_timeout_seconds, 0)
        self.assertEqual(lim.extra, {})


class AsyncTest(unittest.IsolatedAsyncioTestCase):
    async def test_run(self) -> None:
        c = aclient()
        res = await c.run("python", "print('async')")
        self.assertEqual((res.status, res.exit_code, res.stdout), ("completed", 0, "async\n"))
        res = await c.run("javascript", "process.exit(5)")
        self.assertEqual((res.status, res.reason, res.exit_code), ("failed", "error", 5))

    async def test_stream(self) -> None:
        stream = aclient().stream("python", PY_LINES)
        events = [ev async for ev in stream]
        self.assertEqual(kinds(events)[:2], ["accepted", "started"])
        self.assertEqual(events[-1].event, "result")
        self.assertEqual("".join(ev.data for ev in events if ev.event == "stdout"), "line 0\nline 1\nline 2\n")
        self.assertEqual(stream.result, events[-1].result)
        assert stream.result is not None
        self.assertEqual(stream.result.status, "completed")

    async def test_stream_javascript_wait(self) -> None:
        async with aclient().stream("javascript", "console.log('a'); console.log('b')") as stream:
            res = await stream.wait()
        self.assertEqual(res.stdout, "a\nb\n")

    async def test_reattach_and_cancel(self) -> None:
        c = aclient()
        async with c.stream("python", PY_SLEEP, timeout_seconds=60) as stream:
            async for ev in stream:
                if ev.event == "started":
                    break
        # The stream is closed; the run goes on until cancelled.
        running = await c.get(stream.id)
        self.assertIn(running.state, ("running", "finished"))
        stopped = await c.cancel(stream.id)
        self.assertEqual(stopped.reason, "stopped")
        replay = [ev async for ev in c.events(stream.id)]
        self.assertEqual(kinds(replay)[0], "accepted")
        self.assertEqual(replay[-1].result, stopped)

    async def test_idempotent(self) -> None:
        c = aclient()
        rid = new_id("aidem")
        code = "import random\nprint(random.random())"
        first, second = await asyncio.gather(c.run("python", code, id=rid), c.run("python", code, id=rid))
        self.assertEqual((first.id, second.id), (rid, rid))
        self.assertEqual(first.stdout, second.stdout)

    async def test_errors(self) -> None:
        c = aclient()
        with self.assertRaises(brig.InvalidRequest) as cm:
            await c.run("python", "x", packages=["lodash@4"])
        self.assertEqual((cm.exception.status, cm.exception.field), (400, "packages[0]"))
        with self.assertRaises(brig.InvalidRequest):
            async for _ in c.stream("python", ""):
                pass
        with self.assertRaises(brig.TooLarge):
            await c.run("python", "x" * (5 << 20))
        with self.assertRaises(brig.NotFound):
            await c.get(new_id("amissing"))
        with self.assertRaises(brig.NotFound):
            await c.events(new_id("amissing")).open()

    async def test_health_and_limits(self) -> None:
        c = aclient()
        h, lim = await asyncio.gather(c.health(), c.limits())
        self.assertEqual(h.status, "ok")
        self.assertEqual(lim.timeout_seconds.max, 300)


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")


class ReadmeTest(unittest.TestCase):
    def test_quickstart_runs(self) -> None:
        """Each python block of the README, pasted as it is but for the socket's
        path, runs against the service; the first prints the answer."""
        with open(README, encoding="utf-8") as f:
            text = f.read()
        blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
        self.assertGreaterEqual(len(blocks), 2, "the README has a sync and an async quickstart")
        src = os.path.join(os.path.dirname(README), "src")
        env = dict(os.environ, PYTHONPATH=src)
        for i, code in enumerate(blocks):
            with self.subTest(block=i):
                self.assertIn(brig.DEFAULT_SOCKET, code, "the quickstart names the default socket")
                code = code.replace(brig.DEFAULT_SOCKET, SERVICE.socket)
                proc = subprocess.run(
                    [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
                )
                self.assertEqual(proc.returncode, 0, f"block {i} failed:\n{proc.stdout}\n{proc.stderr}")
                if i == 0:
                    self.assertIn("completed 0 42", proc.stdout)
                    self.assertIn("hello from node", proc.stdout)
                    self.assertIn("packages[0] ->", proc.stdout)

if __name__ == "__main__":
    unittest.main()
