"""Parsing, request bodies, errors and the retry rule, without a service."""

from __future__ import annotations

import email.utils
import json
import time
import unittest

import brig
from brig import _wire
from brig.errors import from_response, parse_retry_after


class ResultTest(unittest.TestCase):
    FULL = {
        "id": "r1", "language": "python", "state": "finished", "status": "failed",
        "reason": "timeout", "outcome": "unknown", "exit_code": None, "signal": "SIGKILL",
        "stdout": "a", "stderr": "b", "stdout_truncated": True, "stderr_truncated": False,
        "packages": [{"request": "requests>=0", "name": "requests", "version": "2.32.3", "cached": True}],
        "network": {"mode": "any", "connections": [
            {"host": "example.com", "port": 443, "allowed": True, "rule": "any",
             "bytes_sent": 10, "bytes_received": 20},
        ]},
        "usage": {"wall_ms": 1000, "cpu_ms": 900, "peak_memory_bytes": 1 << 20},
        "timing": {"queued_ms": 1, "prepare_ms": 2, "start_ms": 3, "total_ms": 1004},
        "message": "the run reached its time limit of 1s",
    }

    def test_full(self) -> None:
        r = brig.Result.from_json(self.FULL)
        self.assertEqual((r.id, r.state, r.status, r.reason, r.outcome), ("r1", "finished", "failed", "timeout", "unknown"))
        self.assertIsNone(r.exit_code)
        self.assertEqual(r.signal, "SIGKILL")
        self.assertTrue(r.stdout_truncated)
        self.assertEqual(r.packages, [brig.PackageResult("requests>=0", "requests", "2.32.3", True)])
        self.assertEqual(r.network.connections[0], brig.Connection("example.com", 443, True, "any", 10, 20))
        self.assertEqual(r.usage, brig.Usage(1000, 900, 1 << 20))
        self.assertEqual(r.timing.total_ms, 1004)
        self.assertTrue(r.finished)
        self.assertFalse(r.succeeded)
        self.assertEqual(r.extra, {})

    def test_enums_compare_as_strings(self) -> None:
        r = brig.Result.from_json(self.FULL)
        self.assertEqual(r.reason, brig.Reason.TIMEOUT)
        self.assertEqual(r.outcome, brig.Outcome.UNKNOWN)
        self.assertEqual(r.network.mode, brig.NetworkMode.ANY)
        self.assertEqual(brig.EventKind.RESULT, "result")
        self.assertIsInstance(r.reason, str)

    def test_unknown_fields_are_kept_aside(self) -> None:
        obj = dict(self.FULL, future_field={"x": 1}, state="archived")
        obj["usage"] = dict(self.FULL["usage"], gpu_ms=5)
        obj["packages"] = [dict(self.FULL["packages"][0], sha256="abc")]
        r = brig.Result.from_json(obj)
        self.assertEqual(r.extra, {"future_field": {"x": 1}})
        self.assertEqual(r.usage.extra, {"gpu_ms": 5})
        self.assertEqual(r.packages[0].extra, {"sha256": "abc"})
        self.assertEqual(r.state, "archived", "an unknown word is kept as it is")
        # extra takes no part in equality.
        self.assertEqual(r.usage, brig.Usage(1000, 900, 1 << 20))

    def test_missing_fields_take_zero_values(self) -> None:
        r = brig.Result.from_json({"id": "r2", "state": "queued"})
        self.assertEqual((r.id, r.state, r.status, r.exit_code, r.stdout), ("r2", "queued", "", None, ""))
        self.assertEqual(r.packages, [])
        self.assertEqual(r.network.connections, [])
        self.assertFalse(r.finished)

    def test_not_an_object(self) -> None:
        with self.assertRaises(ValueError):
            brig.Result.from_json([1, 2])


class EventTest(unittest.TestCase):
    def test_kinds(self) -> None:
        cases = [
            ("accepted", {"event": "accepted", "id": "r1"}, "id", "r1"),
            ("stdout", {"event": "stdout", "data": "hi\n"}, "data", "hi\n"),
            ("egress", {"event": "egress", "host": "a.b", "port": 443, "allowed": False}, "allowed", False),
            ("package", {"event": "package", "message": "installing"}, "message", "installing"),
            ("future", {"event": "heartbeat", "seq": 3}, "event", "heartbeat"),
        ]
        for name, obj, attr, want in cases:
            with self.subTest(name):
                ev = _wire.decode_event(json.dumps(obj).encode())
                self.assertEqual(getattr(ev, attr), want)
                self.assertIsNone(ev.result)
        ev = _wire.decode_event(json.dumps({"event": "heartbeat", "seq": 3}).encode())
        self.assertEqual(ev.extra, {"seq": 3})

    def test_result_event(self) -> None:
        ev = _wire.decode_event(json.dumps({"event": "result", "result": ResultTest.FULL}).encode())
        self.assertIsInstance(ev.result, brig.Result)
        assert ev.result is not None
        self.assertEqual(ev.result.id, "r1")

    def test_bad_line(self) -> None:
        with self.assertRaises(brig.ProtocolError):
            _wire.decode_event(b"{not json")

    def test_wrong_shape_is_bad_response(self) -> None:
        """JSON that is not an event's shape is a ProtocolError (bad_response),
        not from_json's ValueError or TypeError."""
        for line in (b"[1]", b'{"event": "result", "result": {"packages": 5}}',
                     b'{"event": "result", "result": {"packages": "oops"}}'):
            with self.subTest(line=line):
                with self.assertRaises(brig.ProtocolError) as cm:
                    _wire.decode_event(line)
                self.assertEqual(cm.exception.code, "bad_response")

    def test_invalid_utf8_is_replaced(self) -> None:
        """Bytes that are not UTF-8 become U+FFFD, as the JS client decodes
        them, rather than ending the stream."""
        ev = _wire.decode_event(b'{"event": "stdout", "data": "a\xffb\xe2\x82c"}')
        self.assertEqual(ev.data, "a\ufffdb\ufffdc")
        s = _wire.LineSplitter()
        s.feed(b'{"event": "stdout", "data": "\xff"}')
        self.assertEqual(_wire.last_line(s), [b'{"event": "stdout", "data": "\xff"}'])


class HealthLimitsTest(unittest.TestCase):
    def test_limits(self) -> None:
        lim = brig.Limits.from_json({
            "timeout_seconds": {"min": 1, "max": 300, "default": 30},
            "code_chars": {"min": 1, "max": 100000},
            "languages": ["python"], "stdout_chars": 5, "new_bound": {"min": 0, "max": 1},
        })
        self.assertEqual(lim.timeout_seconds, brig.Bound(1, 300, 30))
        self.assertIsNone(lim.code_chars.default)
        self.assertEqual(lim.memory_mib, brig.Bound())
        self.assertEqual(lim.extra, {"new_bound": {"min": 0, "max": 1}})

    def test_health(self) -> None:
        h = brig.Health.from_json({"status": "ok", "languages": {"python": "3.11.2"}, "registries": {"python": []}})
        self.assertEqual((h.status, h.languages["python"], h.registries), ("ok", "3.11.2", {"python": []}))


class ErrorTest(unittest.TestCase):
    def body(self, code: str, message: str, field: str = "") -> bytes:
        err = {"code": code, "message": message}
        if field:
            err["field"] = field
        return json.dumps({"error": err}).encode()

    def test_classes_by_status(self) -> None:
        cases = [
            (400, "invalid_request", brig.InvalidRequest),
            (403, "forbidden", brig.Forbidden),
            (404, "not_found", brig.NotFound),
            (405, "method_not_allowed", brig.MethodNotAllowed),
            (409, "conflict", brig.Conflict),
            (413, "too_large", brig.TooLarge),
            (429, "queue_full", brig.QueueFull),
            (500, "internal", brig.Internal),
            (503, "unavailable", brig.Unavailable),
            (418, "teapot", brig.BrigError),
        ]
        for status, code, cls in cases:
            with self.subTest(status=status):
                err = from_response(status, "Reason", self.body(code, "do this"))
                self.assertIs(type(err), cls)
                self.assertEqual((err.status, err.code, err.message, err.field), (status, code, "do this", None))

    def test_field(self) -> None:
        err = from_response(400, "Bad Request", self.body("invalid_request", "pin it as requests==2.32.3", "packages[0]"))
        self.assertEqual(err.field, "packages[0]")
        self.assertEqual(str(err), "400 invalid_request: packages[0]: pin it as requests==2.32.3")

    def test_retry_after(self) -> None:
        self.assertEqual(from_response(429, "", self.body("queue_full", "full"), "3").retry_after, 3.0)
        self.assertIsNone(from_response(429, "", self.body("queue_full", "full")).retry_after)
        # A 503 carries one when its refusal may pass (the journal could not
        # record the run); a shutdown's has none.
        self.assertEqual(from_response(503, "", self.body("unavailable", "x"), "3").retry_after, 3.0)
        self.assertIsNone(from_response(503, "", self.body("unavailable", "x")).retry_after)
        self.assertIsNone(from_response(500, "", self.body("internal", "x"), "3").retry_after)
        for value, want in [("2", 2.0), (" 0 ", 0.0), ("1.5", 1.5), ("-1", None), ("nan", None), (None, None)]:
            with self.subTest(value=value):
                self.assertEqual(parse_retry_after(value), want)

    # RETRY_AFTER is how both clients read a Retry-After (the JS client's fake
    # test has the same table): seconds, whole or decimal, or an HTTP date
    # (RFC 9110: IMF-fixdate, RFC 850 or asctime, all in GMT) as the seconds
    # to it, rounded up, 0 when past. "in:N" is a date N seconds from now.
    RETRY_AFTER = [
        ("2", 2.0), ("2.5", 2.5), (" 0 ", 0.0), ("120", 120.0),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0), ("Sunday, 06-Nov-94 08:49:37 GMT", 0.0),
        ("Sun Nov  6 08:49:37 1994", 0.0), ("in:100", 100.0), ("asctime in:100", 100.0),
        ("-1", None), ("nan", None), ("inf", None), ("1e3", None), (".5", None), ("soon", None),
        ("2026-12-07", None), ("", None),
    ]

    def test_retry_after_forms(self) -> None:
        for value, want in self.RETRY_AFTER:
            with self.subTest(value=value):
                if value.endswith("in:100"):
                    at = time.time() + 100.5
                    value = (time.asctime(time.gmtime(at)) if value.startswith("asctime")
                             else email.utils.formatdate(at, usegmt=True))
                got = parse_retry_after(value)
                if want is not None and want > 0 and value[:1].isalpha():
                    assert got is not None
                    self.assertAlmostEqual(got, want, delta=1.0)
                else:
                    self.assertEqual(got, want)

    def test_body_not_the_error_shape(self) -> None:
        for body in (b"", b"<html>", b'{"error": "x"}', b'{"other": 1}', b"\xff"):
            with self.subTest(body=body):
                err = from_response(502, "Bad Gateway", body)
                self.assertEqual((err.code, err.message, err.field), ("http_502", "Bad Gateway", None))


class RequestTest(unittest.TestCase):
    def body(self, *args: object, **kwargs: object) -> dict:
        return json.loads(_wire.run_request(*args, **kwargs))  # type: ignore[arg-type]

    def test_defaults_left_out(self) -> None:
        self.assertEqual(self.body("python", "print(1)"), {"language": "python", "code": "print(1)"})

    def test_every_field(self) -> None:
        got = self.body("javascript", "x", timeout_seconds=5, memory_mib=256, packages=("lodash@4",),
                        env={"A": "1"}, network="registries", id="i")
        self.assertEqual(got, {"id": "i", "language": "javascript", "code": "x", "timeout_seconds": 5,
                               "memory_mib": 256, "packages": ["lodash@4"], "env": {"A": "1"},
                               "network": {"mode": "registries"}})

    def test_network(self) -> None:
        self.assertEqual(self.body("python", "x", domains=["a.b"])["network"], {"mode": "domains", "domains": ["a.b"]})
        self.assertEqual(self.body("python", "x", network="any")["network"], {"mode": "any"})
        self.assertEqual(self.body("python", "x", network="none", domains=[])["network"], {"mode": "none", "domains": []})

    def test_strings_for_lists(self) -> None:
        with self.assertRaises(TypeError):
            _wire.run_request("python", "x", packages="numpy==1")
        with self.assertRaises(TypeError):
            _wire.run_request("python", "x", domains="a.b")

    def test_lone_surrogate_is_a_value_error(self) -> None:
        with self.assertRaisesRegex(ValueError, "not valid Unicode"):
            _wire.run_request("python", "print(1)#\ud800")
        with self.assertRaisesRegex(ValueError, "not valid Unicode"):
            _wire.run_request("python", "x", env={"A": "\udfff"})

    def test_unicode_is_sent_as_utf8(self) -> None:
        raw = _wire.run_request("python", "print('é')")
        self.assertIn("é".encode(), raw)

    def test_paths(self) -> None:
        cases = [
            ("plain", ("abc",), "/v1/runs/abc"),
            ("colon", ("a:b",), "/v1/runs/a%3Ab"),
            ("events", ("a.b_c-d", "/events"), "/v1/runs/a.b_c-d/events"),
            ("slash escaped", ("../x",), "/v1/runs/..%2Fx"),
            ("uid", ("abc", "", 1000), "/v1/runs/abc?uid=1000"),
        ]
        for name, args, want in cases:
            with self.subTest(name):
                self.assertEqual(_wire.run_path(*args), want)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            _wire.run_path("")


class RetryPolicyTest(unittest.TestCase):
    def test_delay(self) -> None:
        full = brig.QueueFull("full", code="queue_full", status=429, retry_after=2.0)
        bare = brig.QueueFull("full", code="queue_full", status=429)
        other = brig.Unavailable("down", code="unavailable", status=503)
        p = brig.RetryPolicy(max_attempts=3, max_wait=5.0)
        cases = [
            ("first 429", full, 1, 0.0, 2.0),
            ("second 429", full, 2, 2.0, 2.0),
            ("attempts spent", full, 3, 4.0, None),
            ("wait would pass the bound", full, 2, 3.5, None),
            ("no Retry-After", bare, 1, 0.0, 1.0),
            ("not a 429", other, 1, 0.0, None),
        ]
        for name, err, attempt, waited, want in cases:
            with self.subTest(name):
                self.assertEqual(p.delay(err, attempt, waited), want)


class LineSplitterTest(unittest.TestCase):
    def test_split(self) -> None:
        s = _wire.LineSplitter()
        self.assertEqual(s.feed(b'{"a":1}\n{"b"'), [b'{"a":1}'])
        self.assertEqual(s.feed(b":2}\r\n\n{"), [b'{"b":2}'])
        self.assertEqual(s.rest(), b"{")

    def test_too_long(self) -> None:
        s = _wire.LineSplitter()
        piece = b"x" * (1 << 20)
        with self.assertRaises(brig.ProtocolError):
            for _ in range(_wire.MAX_EVENT_LINE // len(piece) + 2):
                s.feed(piece)


if __name__ == "__main__":
    unittest.main()
