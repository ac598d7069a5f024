"""The retry rule and the response framing, against a tiny fake service on a
Unix socket that answers each request with scripted raw HTTP (no root needed)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Callable, List, Optional, Tuple

import brig

# Every test is bounded: WAIT for any silence on a connection.
WAIT = 10.0

RESULT = {
    "id": "r1", "language": "python", "state": "finished", "status": "completed",
    "outcome": "succeeded", "exit_code": 0, "stdout": "ok\n", "stderr": "",
    "stdout_truncated": False, "stderr_truncated": False, "packages": [],
    "network": {"mode": "none", "connections": []},
    "usage": {"wall_ms": 1, "cpu_ms": 1, "peak_memory_bytes": 1},
    "timing": {"queued_ms": 0, "prepare_ms": 0, "start_ms": 1, "total_ms": 2},
}


def response(status: str, body: bytes, headers: Optional[List[str]] = None) -> bytes:
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", f"Content-Length: {len(body)}"]
    head += headers or []
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def ok_result() -> bytes:
    return response("200 OK", json.dumps(RESULT).encode())


def queue_full(retry_after: Optional[str]) -> bytes:
    body = json.dumps({"error": {"code": "queue_full", "message": "the run queue is full; retry later"}}).encode()
    return response("429 Too Many Requests", body, [f"Retry-After: {retry_after}"] if retry_after is not None else [])


def unavailable(retry_after: Optional[str]) -> bytes:
    body = json.dumps({"error": {"code": "unavailable", "message": "the service could not record the run in its journal"}}).encode()
    return response("503 Service Unavailable", body, [f"Retry-After: {retry_after}"] if retry_after is not None else [])


def chunked(pieces: List[bytes], end: bool = True) -> bytes:
    """A chunked NDJSON response whose chunks are pieces, exactly."""
    out = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    for p in pieces:
        out += b"%x\r\n" % len(p) + p + b"\r\n"
    if end:
        out += b"0\r\n\r\n"
    return out


def events_ndjson(n_stdout: int = 2) -> bytes:
    lines = [{"event": "accepted", "id": "r1"}, {"event": "started"}]
    lines += [{"event": "stdout", "data": f"{i}\n"} for i in range(n_stdout)]
    lines += [{"event": "result", "result": RESULT}]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


STALL = b"<stall>"
# A script entry's DELAY: what comes before it is written, then, 0.6 s later,
# the rest.
DELAY = b"<delay>"


class Fake:
    """A fake service: the i-th request gets script[i] (the last entry
    repeats), written raw; it records each request's (method, path, headers,
    body) and the time it arrived."""

    def __init__(self, script: List[bytes]) -> None:
        self.script = script
        # A script entry ending in STALL is written up to STALL, then the
        # connection stays silent until close.
        self.release = threading.Event()
        self.requests: List[Tuple[str, str, dict, bytes]] = []
        self.times: List[float] = []
        self.lock = threading.Lock()
        self.dir = tempfile.mkdtemp(prefix="brigfake.", dir="/tmp")
        self.socket = os.path.join(self.dir, "fake.sock")
        fake = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline().decode()
                if not line:
                    return
                method, path, _ = line.split(" ", 2)
                headers = {}
                while True:
                    h = self.rfile.readline().decode().strip()
                    if not h:
                        break
                    k, _, v = h.partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = self.rfile.read(int(headers.get("content-length", "0")))
                with fake.lock:
                    i = len(fake.requests)
                    fake.requests.append((method, path, headers, body))
                    fake.times.append(time.monotonic())
                    answer = fake.script[min(i, len(fake.script) - 1)]
                stall = answer.endswith(STALL)
                try:
                    for i, part in enumerate((answer[: -len(STALL)] if stall else answer).split(DELAY)):
                        if i > 0:
                            time.sleep(0.6)
                        self.wfile.write(part)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client stopped reading (a body over its bound)
                if stall:
                    fake.release.wait(WAIT)

        self.server = socketserver.ThreadingUnixStreamServer(self.socket, Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(WAIT)
        shutil.rmtree(self.dir, ignore_errors=True)


class FakeCase(unittest.TestCase):
    def fake(self, script: List[bytes]) -> Fake:
        f = Fake(script)
        self.addCleanup(f.close)
        return f


def clients(path: str, retry: brig.RetryPolicy) -> List[Tuple[str, Callable[..., brig.Result]]]:
    """The sync and the async run, as plain calls."""
    sync = brig.Client(path, timeout=WAIT, wait_timeout=WAIT, retry=retry)
    aio = brig.AsyncClient(path, timeout=WAIT, wait_timeout=WAIT, retry=retry)
    return [
        ("sync", lambda *a, **kw: sync.run(*a, **kw)),
        ("async", lambda *a, **kw: asyncio.run(aio.run(*a, **kw))),
    ]


class RetryTest(FakeCase):
    def test_retry_after_is_honoured(self) -> None:
        for name in ("sync", "async"):
            with self.subTest(name):
                fake = self.fake([queue_full("1"), ok_result()])
                run = dict(clients(fake.socket, brig.RetryPolicy()))[name]
                res = run("python", "print(1)", id="abc")
                self.assertEqual(res.stdout, "ok\n")
                self.assertEqual(len(fake.requests), 2)
                waited = fake.times[1] - fake.times[0]
                self.assertGreaterEqual(waited, 0.95, "the retry waited for Retry-After")
                self.assertLess(waited, 5.0)
                # The retry is the same request.
                self.assertEqual(fake.requests[0][3], fake.requests[1][3])
                self.assertEqual(json.loads(fake.requests[1][3])["id"], "abc")

    def test_attempts_are_bounded(self) -> None:
        for name in ("sync", "async"):
            with self.subTest(name):
                fake = self.fake([queue_full("0")])
                run = dict(clients(fake.socket, brig.RetryPolicy(max_attempts=3)))[name]
                with self.assertRaises(brig.QueueFull) as cm:
                    run("python", "print(1)")
                self.assertEqual(len(fake.requests), 3)
                err = cm.exception
                self.assertEqual((err.status, err.code, err.retry_after), (429, "queue_full", 0.0))
                self.assertIsInstance(err, brig.BrigError)

    def test_total_wait_is_bounded(self) -> None:
        for name in ("sync", "async"):
            with self.subTest(name):
                fake = self.fake([queue_full("100")])
                run = dict(clients(fake.socket, brig.RetryPolicy(max_attempts=5, max_wait=2.0)))[name]
                start = time.monotonic()
                with self.assertRaises(brig.QueueFull) as cm:
                    run("python", "print(1)")
                self.assertLess(time.monotonic() - start, 1.0, "a wait past max_wait is not begun")
                self.assertEqual(len(fake.requests), 1)
                self.assertEqual(cm.exception.retry_after, 100.0)

    def test_waits_add_up_to_the_bound(self) -> None:
        fake = self.fake([queue_full("1")])
        c = brig.Client(fake.socket, timeout=WAIT, retry=brig.RetryPolicy(max_attempts=10, max_wait=2.0))
        with self.assertRaises(brig.QueueFull):
            c.run("python", "print(1)")
        self.assertEqual(len(fake.requests), 3, "two waits of 1 s fit in 2 s, a third does not")

    def test_no_retry_policy(self) -> None:
        fake = self.fake([queue_full("0"), ok_result()])
        with self.assertRaises(brig.QueueFull):
            brig.Client(fake.socket, retry=brig.RetryPolicy(max_attempts=1)).run("python", "1")
        self.assertEqual(len(fake.requests), 1)

    def test_unavailable_with_retry_after_is_retried(self) -> None:
        # A 503 with Retry-After (the journal could not record the run)
        # admitted nothing, as a 429; one without (a shutdown) is raised.
        for name in ("sync", "async"):
            with self.subTest(name):
                fake = self.fake([unavailable("0"), ok_result()])
                run = dict(clients(fake.socket, brig.RetryPolicy()))[name]
                self.assertEqual(run("python", "print(1)").stdout, "ok\n")
                self.assertEqual(len(fake.requests), 2)
                fake = self.fake([unavailable(None), ok_result()])
                run = dict(clients(fake.socket, brig.RetryPolicy()))[name]
                with self.assertRaises(brig.Unavailable) as cm:
                    run("python", "print(1)")
                self.assertEqual(len(fake.requests), 1)
                self.assertIsNone(cm.exception.retry_after)

    def test_missing_retry_after(self) -> None:
        fake = self.fake([queue_full(None), ok_result()])
        res = brig.Client(fake.socket, timeout=WAIT).run("python", "1")
        self.assertEqual(res.status, "completed")
        self.assertGreaterEqual(fake.times[1] - fake.times[0], 0.95, "a 429 without Retry-After waits 1 s")

    def test_other_errors_are_not_retried(self) -> None:
        body = json.dumps({"error": {"code": "unavailable", "message": "shutting down"}}).encode()
        fake = self.fake([response("503 Service Unavailable", body), ok_result()])
        with self.assertRaises(brig.Unavailable) as cm:
            brig.Client(fake.socket, timeout=WAIT).run("python", "1")
        self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.message), (503, "unavailable", "shutting down"))
        self.assertEqual(len(fake.requests), 1)

    def test_bad_policy(self) -> None:
        with self.assertRaises(ValueError):
            brig.RetryPolicy(max_attempts=0)
        with self.assertRaises(ValueError):
            brig.RetryPolicy(max_wait=-1)


def collect_sync(path: str) -> Tuple[List[brig.Event], Optional[brig.Result]]:
    with brig.Client(path, timeout=WAIT, wait_timeout=WAIT).stream("python", "x") as s:
        return list(s), s.result


def collect_async(path: str) -> Tuple[List[brig.Event], Optional[brig.Result]]:
    async def main() -> Tuple[List[brig.Event], Optional[brig.Result]]:
        s = brig.AsyncClient(path, timeout=WAIT, wait_timeout=WAIT).stream("python", "x")
        return [ev async for ev in s], s.result

    return asyncio.run(main())


COLLECTORS = [("sync", collect_sync), ("async", collect_async)]


class FramingTest(FakeCase):
    def check(self, answer: bytes, n_stdout: int = 2) -> None:
        for name, collect in COLLECTORS:
            with self.subTest(name):
                fake = self.fake([answer])
                events, result = collect(fake.socket)
                self.assertEqual([e.event for e in events], ["accepted", "started"] + ["stdout"] * n_stdout + ["result"])
                self.assertEqual(result, brig.Result.from_json(RESULT))
                self.assertEqual(fake.requests[0][2].get("accept"), "application/x-ndjson")

    def test_one_chunk_per_line(self) -> None:
        lines = events_ndjson().splitlines(keepends=True)
        self.check(chunked(lines))

    def test_lines_split_across_chunks(self) -> None:
        data = events_ndjson()
        self.check(chunked([data[i:i + 7] for i in range(0, len(data), 7)]))

    def test_all_lines_in_one_chunk(self) -> None:
        self.check(chunked([events_ndjson()]))

    def test_content_length(self) -> None:
        data = events_ndjson()
        self.check(response("200 OK", data))

    def test_until_close(self) -> None:
        data = events_ndjson()
        self.check(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n" + data)

    def test_long_line(self) -> None:
        big = dict(RESULT, stdout="\u00e9" * 1_000_000)
        data = json.dumps({"event": "result", "result": big}).encode() + b"\n"
        for name, collect in COLLECTORS:
            with self.subTest(name):
                fake = self.fake([chunked([data[i:i + 4096] for i in range(0, len(data), 4096)])])
                events, result = collect(fake.socket)
                assert result is not None
                self.assertEqual(len(result.stdout), 1_000_000)

    def test_stream_cut_before_result(self) -> None:
        lines = events_ndjson().splitlines(keepends=True)[:-1]
        for name, collect in COLLECTORS:
            with self.subTest(name):
                for answer in (chunked(lines), chunked(lines, end=False)):
                    fake = self.fake([answer])
                    with self.assertRaises(brig.ProtocolError) as cm:
                        collect(fake.socket)
                    self.assertEqual(cm.exception.code, "stream_ended")
                    self.assertIsNone(cm.exception.status)

    def test_last_line_without_newline(self) -> None:
        """A body that ends properly after a whole last line without its
        newline still gives that line's event."""
        data = events_ndjson().rstrip(b"\n")
        self.check(chunked([data]))
        self.check(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n" + data)

    def test_invalid_utf8_is_replaced(self) -> None:
        """A line with bytes that are not UTF-8 gives its event with U+FFFD in
        their place, and the stream goes on to its result (as the JS client
        reads it), whether or not the last line has its newline."""
        lines = events_ndjson().splitlines(keepends=True)
        bad = b'{"event": "stdout", "data": "a\xffb"}\n'
        data = b"".join(lines[:2]) + bad + b"".join(lines[2:])
        result_bad = json.dumps({"event": "result", "result": dict(RESULT, stdout="ok\n")}).encode()
        result_bad = result_bad.replace(b"ok\\n", b"ok\xfe\\n")
        answers = [
            ("split across chunks", chunked([data[i:i + 5] for i in range(0, len(data), 5)]), "ok\n"),
            ("the last line, without its newline", chunked([b"".join(lines[:2]) + bad + result_bad]), "ok\ufffd\n"),
        ]
        for name, collect in COLLECTORS:
            for framing, answer, stdout in answers:
                with self.subTest(name, framing=framing):
                    fake = self.fake([answer])
                    events, result = collect(fake.socket)
                    self.assertEqual(events[2].data, "a\ufffdb")
                    self.assertEqual(events[-1].event, "result")
                    assert result is not None
                    self.assertEqual(result.stdout, stdout)

    def test_stream_cut_mid_line(self) -> None:
        """A connection that drops inside a line, however the body is framed,
        ends the stream with stream_ended after the whole lines before it; the
        cut line is not decoded."""
        lines = events_ndjson().splitlines(keepends=True)
        whole = b"".join(lines[:3])  # accepted, started, one stdout
        cut = lines[3][:9]  # '{"event":' of the next stdout line
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
        answers = [
            ("within a chunk", head + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % (len(whole) + 100) + whole + cut),
            ("between chunks", chunked([whole, cut], end=False)),
            ("short of Content-Length", head + b"Content-Length: %d\r\n\r\n" % (len(whole) + 100) + whole + cut),
            ("at the connection's end", head + b"Connection: close\r\n\r\n" + whole + cut),
        ]
        for name in ("sync", "async"):
            for framing, answer in answers:
                with self.subTest(name, framing=framing):
                    fake = self.fake([answer])
                    seen: List[str] = []
                    with self.assertRaises(brig.ProtocolError) as cm:
                        if name == "sync":
                            with brig.Client(fake.socket, timeout=WAIT, wait_timeout=WAIT).stream("python", "x") as s:
                                seen.extend(ev.event for ev in s)
                        else:
                            asyncio.run(self.record_async(fake.socket, seen))
                    self.assertEqual(cm.exception.code, "stream_ended", str(cm.exception))
                    self.assertIsNone(cm.exception.status)
                    self.assertEqual(seen, ["accepted", "started", "stdout"])

    @staticmethod
    async def record_async(path: str, seen: List[str]) -> None:
        async for ev in brig.AsyncClient(path, timeout=WAIT, wait_timeout=WAIT).stream("python", "x"):
            seen.append(ev.event)

    def test_run_cut(self) -> None:
        """run, get and cancel whose response is cut raise the same error from
        both clients: stream_ended, saying the run may still be going."""
        body = json.dumps(RESULT).encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        answers = [
            ("short of Content-Length", head + b"Content-Length: %d\r\n\r\n" % len(body) + body[:40]),
            ("within a chunk", head + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body[:40]),
            # A service that dies during a run: a plain run's head comes only
            # with its result.
            ("before the head", b""),
            ("within the head", head[:30]),
        ]
        calls = [
            ("run", lambda c: c.run("python", "x", id="r1")),
            ("get", lambda c: c.get("r1")),
            ("cancel", lambda c: c.cancel("r1")),
        ]
        for framing, answer in answers:
            for call, do in calls:
                errs = {}
                for name in ("sync", "async"):
                    with self.subTest(framing, call=call, client=name):
                        fake = self.fake([answer])
                        with self.assertRaises(brig.ProtocolError) as cm:
                            if name == "sync":
                                do(brig.Client(fake.socket, timeout=WAIT, wait_timeout=WAIT))
                            else:
                                asyncio.run(do(brig.AsyncClient(fake.socket, timeout=WAIT, wait_timeout=WAIT)))
                        err = cm.exception
                        self.assertEqual((err.code, err.status, err.id), ("stream_ended", None, "r1"))
                        self.assertIn("the run r1 may still be going", err.message)
                        errs[name] = err.message
                self.assertEqual(errs.get("sync"), errs.get("async"), "both clients say the same")
                # And as the JS client's NoResultError says it (its fake test).
                self.assertEqual(errs.get("sync"), "the connection dropped before the run's result; the run r1 may "
                                 "still be going: follow it with events(id) or read it with get(id)")
        for framing, answer in [("short of Content-Length", head + b"Content-Length: 100\r\n\r\n{}"), ("before the head", b"")]:
            for name in ("sync", "async"):
                with self.subTest("no id", framing=framing, client=name):
                    fake = self.fake([answer])
                    with self.assertRaises(brig.ProtocolError) as cm:
                        if name == "sync":
                            brig.Client(fake.socket, timeout=WAIT).run("python", "x")
                        else:
                            asyncio.run(brig.AsyncClient(fake.socket, timeout=WAIT).run("python", "x"))
                    self.assertEqual((cm.exception.code, cm.exception.id), ("stream_ended", None))
                    self.assertIn("before its id was known: give requests an id", cm.exception.message)

    def test_result_body_is_bounded(self) -> None:
        """A result longer than the API's bound on one (MAX_EVENT_LINE, as the
        async and the JS client bound it) is bad_response, however it is
        framed, and is not read to its end."""
        body = json.dumps(dict(RESULT, stdout="x" * brig._wire.MAX_EVENT_LINE)).encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        answers = [
            ("Content-Length", response("200 OK", body)),
            ("chunked", head + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"),
            ("until close", head + b"Connection: close\r\n\r\n" + body),
        ]
        for framing, answer in answers:
            for name in ("sync", "async"):
                with self.subTest(framing, client=name):
                    fake = self.fake([answer])
                    with self.assertRaises(brig.ProtocolError) as cm:
                        if name == "sync":
                            brig.Client(fake.socket, timeout=WAIT, wait_timeout=WAIT).get("r1")
                        else:
                            asyncio.run(brig.AsyncClient(fake.socket, timeout=WAIT, wait_timeout=WAIT).get("r1"))
                    self.assertEqual((cm.exception.code, cm.exception.status), ("bad_response", None))
                    self.assertIn("the result is longer than the API allows", cm.exception.message)

    def test_wrong_shape_is_bad_response(self) -> None:
        """A 200 whose JSON is not the API's shape raises ProtocolError
        (bad_response), as the README promises, not a ValueError or TypeError."""
        calls = [
            ("run", lambda c: c.run("python", "x", id="r1")),
            ("get", lambda c: c.get("r1")),
            ("cancel", lambda c: c.cancel("r1")),
        ]
        cases = [(call, do, body) for call, do in calls
                 for body in (b"[1, 2]", b'"r1"', b'{"packages": "oops"}', b'{"packages": 5}', b'{"network": []}')]
        cases += [("health", lambda c: c.health(), b"[]"), ("limits", lambda c: c.limits(), b'{"egress": [1]}')]
        for call, do, body in cases:
            for name in ("sync", "async"):
                with self.subTest(call, body=body, client=name):
                    fake = self.fake([response("200 OK", body)])
                    with self.assertRaises(brig.ProtocolError) as cm:
                        if name == "sync":
                            do(brig.Client(fake.socket, timeout=WAIT, wait_timeout=WAIT))
                        else:
                            asyncio.run(do(brig.AsyncClient(fake.socket, timeout=WAIT, wait_timeout=WAIT)))
                    self.assertEqual((cm.exception.code, cm.exception.status), ("bad_response", None))
                    self.assertIn("decoding the ", cm.exception.message)

    def test_garbage_head_is_bad_response(self) -> None:
        """A head that is not HTTP is bad_response from both clients, not a
        dropped connection (stream_ended)."""
        for name in ("sync", "async"):
            with self.subTest(client=name):
                fake = self.fake([b"SSH-2.0-OpenSSH_9.2\r\n\r\n"])
                with self.assertRaises(brig.ProtocolError) as cm:
                    if name == "sync":
                        brig.Client(fake.socket, timeout=WAIT, wait_timeout=WAIT).run("python", "x", id="r1")
                    else:
                        asyncio.run(brig.AsyncClient(fake.socket, timeout=WAIT, wait_timeout=WAIT).run("python", "x", id="r1"))
                self.assertEqual(cm.exception.code, "bad_response", str(cm.exception))
                self.assertIn("not HTTP/1.1 as expected", cm.exception.message)

    def test_stream_cut_names_the_id(self) -> None:
        """A stream whose connection drops, before its head or after its
        accepted event, raises stream_ended with the run's id: the request's,
        or the one the accepted event gave."""
        accepted = chunked([json.dumps({"event": "accepted", "id": "r9"}).encode() + b"\n"], end=False)
        for framing, answer, given, want in [
            ("before the head", b"", "r1", "r1"),
            ("after accepted", accepted, None, "r9"),
        ]:
            for name in ("sync", "async"):
                with self.subTest(framing, client=name):
                    fake = self.fake([answer])

                    async def read_async() -> None:
                        async for _ in brig.AsyncClient(fake.socket, timeout=WAIT, wait_timeout=WAIT).stream("python", "x", id=given):
                            pass

                    with self.assertRaises(brig.ProtocolError) as cm:
                        if name == "sync":
                            for _ in brig.Client(fake.socket, timeout=WAIT, wait_timeout=WAIT).stream("python", "x", id=given):
                                pass
                        else:
                            asyncio.run(read_async())
                    self.assertEqual((cm.exception.code, cm.exception.id), ("stream_ended", want))
                    self.assertIn(f"the run {want} may still be going", cm.exception.message)

    def test_silence_is_bounded(self) -> None:
        """wait_timeout bounds each silence of a run's response, timeout that
        of any other call."""
        lines = events_ndjson().splitlines(keepends=True)
        cases = [
            ("no answer to a run", STALL, "run"),
            ("a stream goes silent", chunked(lines[:2], end=False) + STALL, "stream"),
            ("no answer to health", STALL, "health"),
        ]
        timeouts = (TimeoutError, socket.timeout, asyncio.TimeoutError)
        for name, answer, call in cases:
            for kind in ("sync", "async"):
                with self.subTest(name, client=kind):
                    fake = self.fake([answer])
                    c = brig.Client(fake.socket, timeout=0.3, wait_timeout=0.3)
                    a = brig.AsyncClient(fake.socket, timeout=0.3, wait_timeout=0.3)
                    start = time.monotonic()
                    with self.assertRaises(timeouts):
                        if kind == "sync" and call == "stream":
                            list(c.stream("python", "x"))
                        elif kind == "sync":
                            getattr(c, call)(*(("python", "x") if call == "run" else ()))
                        elif call == "stream":
                            asyncio.run(a.stream("python", "x").wait())
                        else:
                            asyncio.run(getattr(a, call)(*(("python", "x") if call == "run" else ())))
                    self.assertLess(time.monotonic() - start, 3.0)

    def test_stream_head_is_bounded_by_timeout(self) -> None:
        """A stream's head, which the service sends at once, is waited for as
        timeout says, even with no wait_timeout: a service that took the
        connection and never answered held stream and events with no end (the
        clients probe of 2026-12-06); once the head has come, a silence
        longer than timeout is the run's own."""
        timeouts = (TimeoutError, socket.timeout, asyncio.TimeoutError)
        for call in ("stream", "events"):
            for kind in ("sync", "async"):
                with self.subTest(call, client=kind):
                    fake = self.fake([STALL])
                    start = time.monotonic()
                    with self.assertRaises(timeouts):
                        args = ("python", "x") if call == "stream" else ("r1",)
                        if kind == "sync":
                            list(getattr(brig.Client(fake.socket, timeout=0.3), call)(*args))
                        else:
                            asyncio.run(getattr(brig.AsyncClient(fake.socket, timeout=0.3), call)(*args).wait())
                    self.assertLess(time.monotonic() - start, 3.0)
        lines = events_ndjson().splitlines(keepends=True)
        quiet = chunked(lines[:1], end=False) + DELAY + chunked(lines[1:])[len(chunked([], end=False)):]
        for kind in ("sync", "async"):
            with self.subTest("a quiet run", client=kind):
                fake = self.fake([quiet])
                if kind == "sync":
                    result = brig.Client(fake.socket, timeout=0.3).stream("python", "x").wait()
                else:
                    result = asyncio.run(brig.AsyncClient(fake.socket, timeout=0.3).stream("python", "x").wait())
                self.assertEqual(result.id, "r1")

    def test_error_body_not_json(self) -> None:
        answer = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 5\r\n\r\noops!"
        fake = self.fake([answer])
        with self.assertRaises(brig.BrigError) as cm:
            brig.Client(fake.socket, timeout=WAIT).health()
        self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.message), (502, "http_502", "Bad Gateway"))
        with self.assertRaises(brig.BrigError) as cm:
            asyncio.run(brig.AsyncClient(fake.socket, timeout=WAIT).health())
        self.assertEqual((cm.exception.status, cm.exception.code), (502, "http_502"))

    def test_request_shape(self) -> None:
        fake = self.fake([ok_result()])
        brig.Client(fake.socket, timeout=WAIT).run(
            "python", "print('é')", timeout_seconds=5, packages=["numpy==1.26.4"], env={"A": "b"},
            domains=["example.com"], id="x:1",
        )
        method, path, headers, body = fake.requests[0]
        self.assertEqual((method, path), ("POST", "/v1/runs"))
        self.assertEqual(headers.get("content-type"), "application/json")
        self.assertEqual(json.loads(body), {
            "id": "x:1", "language": "python", "code": "print('é')", "timeout_seconds": 5,
            "packages": ["numpy==1.26.4"], "env": {"A": "b"},
            "network": {"mode": "domains", "domains": ["example.com"]},
        })

    def test_paths(self) -> None:
        fake = self.fake([ok_result()])
        c = brig.Client(fake.socket, timeout=WAIT)
        a = brig.AsyncClient(fake.socket, timeout=WAIT)
        c.get("a:b.c")
        c.cancel("r1", uid=1000)
        asyncio.run(a.get("r/1"))
        asyncio.run(a.cancel("r1"))
        got = [(m, p) for m, p, _, _ in fake.requests]
        self.assertEqual(got, [
            ("GET", "/v1/runs/a%3Ab.c"),
            ("DELETE", "/v1/runs/r1?uid=1000"),
            ("GET", "/v1/runs/r%2F1"),
            ("DELETE", "/v1/runs/r1"),
        ])


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")


class TimeoutTest(FakeCase):
    """A call that starts or follows a run and times out says what became of
    the run, as a dropped connection does: a bare TimeoutError('timed out')
    before (the fixcli probe)."""

    def call(self, kind: str, socket_path: str, call: str, **kw: object) -> None:
        args = ("r1",) if call == "events" else ("python", "x")
        if kind == "sync":
            c = brig.Client(socket_path, timeout=0.3, wait_timeout=0.3)
            out = getattr(c, call)(*args, **kw)
            if call in ("stream", "events"):
                list(out)
        else:
            a = brig.AsyncClient(socket_path, timeout=0.3, wait_timeout=0.3)

            async def go() -> None:
                out = getattr(a, call)(*args, **kw)
                if call in ("stream", "events"):
                    await out.wait()
                else:
                    await out

            asyncio.run(go())

    def test_run_with_an_id(self) -> None:
        accepted = chunked([json.dumps({"event": "accepted", "id": "r1"}).encode() + b"\n"], end=False)
        for name, answer, call, given, want in [
            ("run", STALL, "run", "t1", "t1"),
            ("stream's head", STALL, "stream", "t1", "t1"),
            ("stream after accepted", accepted + STALL, "stream", None, "r1"),
            ("events", accepted + STALL, "events", None, "r1"),
        ]:
            for kind in ("sync", "async"):
                with self.subTest(name, client=kind):
                    fake = self.fake([answer])
                    kw = {} if call == "events" else {"id": given}
                    with self.assertRaises(brig.RunTimeout) as cm:
                        self.call(kind, fake.socket, call, **kw)
                    err = cm.exception
                    # Existing catches still hold.
                    self.assertIsInstance(err, socket.timeout)
                    self.assertIsInstance(err, asyncio.TimeoutError)
                    self.assertEqual(err.id, want)
                    self.assertIn(f"brig at {fake.socket} sent nothing for 0.3 s", str(err))
                    self.assertIn(f"the run {want} goes on in the service", str(err))
                    self.assertIn("cancel(id)", str(err))

    def test_run_without_an_id(self) -> None:
        """run without an id: the service stops it as the connection closes
        (supervisor/server.go), and the error says so."""
        for kind in ("sync", "async"):
            with self.subTest(client=kind):
                fake = self.fake([STALL])
                with self.assertRaises(brig.RunTimeout) as cm:
                    self.call(kind, fake.socket, "run")
                self.assertIsNone(cm.exception.id)
                self.assertIn("(wait_timeout) in answer to POST /v1/runs", str(cm.exception))
                self.assertIn("the service stops it as the connection closes", str(cm.exception))
                self.assertIn("give requests an id", str(cm.exception))

    def test_short_call_names_the_socket_and_the_call(self) -> None:
        for call, path in [("health", "GET /v1/health"), ("get", "GET /v1/runs/r1"), ("cancel", "DELETE /v1/runs/r1")]:
            for kind in ("sync", "async"):
                with self.subTest(call, client=kind):
                    fake = self.fake([STALL])
                    args = () if call == "health" else ("r1",)
                    with self.assertRaises(socket.timeout if kind == "sync" else asyncio.TimeoutError) as cm:
                        if kind == "sync":
                            getattr(brig.Client(fake.socket, timeout=0.3), call)(*args)
                        else:
                            asyncio.run(getattr(brig.AsyncClient(fake.socket, timeout=0.3), call)(*args))
                    self.assertNotIsInstance(cm.exception, brig.RunTimeout)
                    self.assertEqual(str(cm.exception), f"brig at {fake.socket} sent nothing for 0.3 s (timeout) in answer to {path}")


class ConnectTest(unittest.TestCase):
    def test_full_backlog_is_eagain(self) -> None:
        """A service whose listen backlog is full refuses the connection at
        once with EAGAIN, in both clients: the async one took it for a
        connect in progress and failed later with ENOTCONN (the clients
        probe of 2026-12-06)."""
        d = tempfile.mkdtemp(prefix="brigfake.", dir="/tmp")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "full.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(srv.close)
        srv.bind(path)
        srv.listen(0)
        for _ in range(16):  # fill the backlog; never accepted
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.addCleanup(c.close)
            c.setblocking(False)
            try:
                c.connect(path)
            except BlockingIOError:
                break
        with self.assertRaises(BlockingIOError):
            brig.Client(path, timeout=1).health()
        with self.assertRaises(BlockingIOError):
            asyncio.run(brig.AsyncClient(path, timeout=1).health())


class ReadmeTest(FakeCase):
    def test_async_quickstart_output(self) -> None:
        """The README's asyncio block prints whole lines when the service
        sends a line of stderr as two events ('oops', then the newline), as
        `print(..., file=sys.stderr)` under `python3 -u` does."""
        with open(README, encoding="utf-8") as f:
            blocks = re.findall(r"^```python\n(.*?)^```", f.read(), flags=re.S | re.M)
        code = next((b for b in blocks if "AsyncClient" in b), None)
        self.assertIsNotNone(code, "the README has an asyncio quickstart")
        assert code is not None
        self.assertIn(brig.DEFAULT_SOCKET, code)
        hi = dict(RESULT, stdout="hi\n")
        oops = dict(RESULT, stdout="", stderr="oops\n")
        events = [
            {"event": "accepted", "id": "r1"}, {"event": "started"},
            {"event": "stderr", "data": "oops"}, {"event": "stderr", "data": "\n"},
            {"event": "result", "result": oops},
        ]
        fake = self.fake([
            response("200 OK", json.dumps(hi).encode()),
            chunked([json.dumps(e).encode() + b"\n" for e in events]),
        ])
        src = os.path.join(os.path.dirname(README), "src")
        proc = subprocess.run(
            [sys.executable, "-c", code.replace(brig.DEFAULT_SOCKET, fake.socket)],
            env=dict(os.environ, PYTHONPATH=src), capture_output=True, text=True, timeout=60,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout, "hi\nstderr: oops\n")


if __name__ == "__main__":
    unittest.main()
