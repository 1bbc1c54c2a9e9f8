"""What the binding exposes beyond the handles: the library's version and status names
(fl_client_version_*, fl_client_status_*), the reason a trainer cannot be created
(fl_client_trainer_create_v2), and callbacks written in Python: a transport (ctypes
CFUNCTYPE send/recv/cancel around a Python function) and a custom trainer. Rounds through
both against the real coordinator are in test_round.py; these run without it."""

import json
import os
import re
import struct
import time

import numpy as np
import pytest

import flotilla_client as fc
from flotilla_client import _native
from conftest import ROOT

KEY = bytes(range(32))


def _header_version():
    text = open(os.path.join(ROOT, "core", "include", "flotilla", "version.h")).read()
    m = {k: int(re.search(r"#define FL_VERSION_%s (\d+)" % k, text).group(1))
         for k in ("MAJOR", "MINOR", "PATCH")}
    return m["MAJOR"], m["MINOR"], m["PATCH"]


def test_version_from_library_matches_header():
    lib = _native.lib()
    assert "fl_client_version_number" in lib.optional, "library lacks fl_client_version_number"
    assert "fl_client_version_string" in lib.optional
    major, minor, patch = _header_version()
    assert fc.version() == "%d.%d.%d" % (major, minor, patch)
    assert fc.version_number() == major * 1000000 + minor * 1000 + patch
    assert lib.optional["fl_client_version_number"]() == fc.version_number()


def test_status_names_and_strings_from_library():
    lib = _native.lib()
    assert "fl_client_status_name" in lib.optional and "fl_client_status_str" in lib.optional
    # The binding's table agrees with the library for every code it knows.
    for code, name in enumerate(_native.STATUS_NAMES):
        assert fc.status_name(code) == name
        s = fc.status_str(code)
        assert isinstance(s, str) and s
    assert fc.status_str(_native.FL_ERR_MISUSE) != fc.status_str(_native.FL_ERR_NOMEM)
    # Codes past the table still get a string, never a crash.
    assert fc.status_name(10000)
    assert fc.status_str(10000)


def _safetensors(tensors):
    """A safetensors image of {name: (dtype, shape)} with zeroed data."""
    hdr, off = {}, 0
    size = {"F32": 4, "F16": 2}
    for name, (dtype, shape) in tensors.items():
        n = size[dtype] * int(np.prod(shape))
        hdr[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(off)


def test_trainer_create_error_names_the_problem(counting):
    with pytest.raises(fc.FlotillaError) as e:
        fc.Trainer(b"definitely not safetensors", allocator=counting)
    assert e.value.name == "FL_ERR_FORMAT"
    assert e.value.call == "fl_client_trainer_create_v2"
    assert e.value.message.startswith("model:"), e.value.message
    # A well-formed image whose tensor is not F32: the message names the tensor and dtype.
    with pytest.raises(fc.FlotillaError) as e:
        fc.Trainer(_safetensors({"fc1.weight": ("F16", (3, 4)), "fc1.bias": ("F32", (3,))}))
    assert e.value.name == "FL_ERR_UNSUPPORTED"
    assert "fc1.weight" in e.value.message and "F32" in e.value.message, e.value.message
    # A tensor that is not part of a dense network.
    with pytest.raises(fc.FlotillaError) as e:
        fc.Trainer(_safetensors({"conv.kernel": ("F32", (3, 3))}))
    assert e.value.name == "FL_ERR_FORMAT" and "conv.kernel" in e.value.message, e.value.message
    # Success leaves no message behind and works as before.
    with fc.Trainer(fc.model_init([4, 3]), allocator=counting) as tr:
        assert tr.num_params == 4 * 3 + 3


def test_trainer_create_v2_direct_arguments():
    """The C function itself: NULL/empty model is FL_ERR_MISUSE with a message; a tiny
    buffer truncates the message and stays NUL-terminated."""
    import ctypes
    lib = _native.lib()
    v2 = lib.optional["fl_client_trainer_create_v2"]
    h = ctypes.c_void_p()
    err = ctypes.create_string_buffer(256)
    assert v2(ctypes.byref(h), None, 0, None, err, len(err)) == _native.FL_ERR_MISUSE
    assert b"model" in err.value and not h.value
    small = ctypes.create_string_buffer(8)
    assert v2(ctypes.byref(h), b"xxxxxxxxxxxxxxxx", 16, None, small, len(small)) == \
        _native.FL_ERR_FORMAT
    assert len(small.value) == 7
    img = fc.model_init([4, 3])
    assert v2(ctypes.byref(h), img, len(img), None, err, len(err)) == 0
    assert err.value == b"" and h.value
    lib.fl_client_trainer_destroy(h)


# ---- Python transport without a coordinator ----

def _client(st, transport, **kw):
    kw.setdefault("backoff_initial_ms", 10)
    kw.setdefault("backoff_max_ms", 20)
    return fc.Client(None, "pop", "EU", KEY, st, enrollment_token="fle_" + "a" * 40,
                     transport=transport, seed=3, **kw)


def _step_when_due(c):
    """Sleeps until the client's next action (its backoff) and steps once."""
    wait_ms = c.stats().next_action_ms - int(time.time() * 1000)
    if wait_ms > 0:
        time.sleep(min(wait_ms, 2000) / 1000)
    c.step()


def test_python_transport_sees_requests_and_failures_are_transient(counting):
    seen = []

    def unavailable(req):
        seen.append(req)
        return 503, [("Retry-After", "0"), ("Content-Type", "application/json")], \
            b'{"error":"unavailable"}'

    with fc.Store(":memory:", feature_dim=4, allocator=counting) as st:
        with _client(st, unavailable, allocator=counting) as c:
            c.step()
            s = c.stats()
            assert len(seen) == 1 and s.transient_errors == 1, s
            r = seen[0]
            assert isinstance(r, fc.Request)
            assert r.method == "POST" and r.path.startswith("/v1/"), r
            assert json.loads(r.body)["population"] == "pop"
            assert r.timeout_ms > 0
            assert any(n.lower() == "content-type" for n, _ in r.headers), r.headers
            assert c.transport_error is None

            # A handler that raises: no exception crosses into C, the step is a transient
            # failure (FL_ERR_IO), and the exception is kept.
            def broken(req):
                raise ConnectionResetError("peer went away")
            c._pyt._handler = broken
            _step_when_due(c)
            s = c.stats()
            assert s.transient_errors == 2 and s.state != "FAILED", s
            assert isinstance(c.transport_error, ConnectionResetError)

            # A timeout maps to FL_ERR_TIMEOUT, still transient.
            def slow(req):
                raise TimeoutError("too slow")
            c._pyt._handler = slow
            _step_when_due(c)
            assert c.stats().transient_errors == 3
            assert isinstance(c.transport_error, TimeoutError)


def test_retry_timeout_makes_run_raise_timeout(counting):
    # retry_timeout_ms bounds the retrying of an exchange no round deadline bounds: a
    # coordinator answering 503 to every enrollment makes run() raise FL_ERR_TIMEOUT within
    # the bound, after a few tries; nothing is sticky, and once the server answers the next
    # run() goes on (here: enrolled, then told to check in again in 10 minutes).
    calls = []
    answer = {"fn": lambda req: (503, [("Content-Type", "application/json")],
                                 b'{"error":{"status":503,"code":"unavailable",'
                                 b'"message":"busy"}}')}

    def handler(req):
        calls.append((time.time(), req.path))
        return answer["fn"](req)

    with fc.Store(":memory:", feature_dim=4, allocator=counting) as st:
        with _client(st, handler, allocator=counting, retry_timeout_ms=1500,
                     backoff_initial_ms=100, backoff_max_ms=400) as c:
            t0 = time.time()
            with pytest.raises(fc.FlotillaError) as e:
                c.run(max_wait_ms=20000)
            took = time.time() - t0
            assert e.value.name == "FL_ERR_TIMEOUT", e.value
            assert "enrollment failed" in e.value.message and "503" in e.value.message
            assert "retry_timeout_ms 1500" in e.value.message, e.value.message
            assert calls[-1][0] - calls[0][0] <= 1.6 and took < 3.0, (took, calls)
            assert len(calls) >= 4, calls
            s = c.stats()
            assert s.retry_timeouts == 1 and s.last_error == "FL_ERR_TIMEOUT", s
            assert s.state == "IDLE" and s.transient_errors == len(calls), s

            enrolled = json.dumps({"client_id": "0123456789abcdef",
                                   "client_token": "flc_0123456789abcdef." + "b" * 43,
                                   "population": "pop", "coordinator_key_id": fc.key_id(KEY),
                                   "protocol": "flotilla/v1"}).encode()
            retry = json.dumps({"status": "retry", "retry_after_s": 600,
                                "reason": "no_round_forming"}).encode()
            answer["fn"] = lambda req: (201 if req.path == "/v1/enroll" else 200,
                                        [("Content-Type", "application/json")],
                                        enrolled if req.path == "/v1/enroll" else retry)
            assert c.run(max_wait_ms=5000) is False  # next check-in in 10 min: FL_ERR_AGAIN
            s = c.stats()
            assert s.checkins == 1 and s.retry_timeouts == 1 and s.state == "IDLE", s
            assert c.token().startswith("flc_0123456789abcdef.")


def test_python_transport_body_limit_and_bad_arguments(counting):
    def huge(req):
        return 200, {"Content-Type": "application/json"}, b" " * (1 << 20)  # > 256 KiB JSON

    with fc.Store(":memory:", feature_dim=4, allocator=counting) as st:
        with _client(st, huge, allocator=counting) as c:
            c.step()
            s = c.stats()
            assert s.transient_errors == 1 and s.state != "FAILED", s
        with pytest.raises(TypeError):
            fc.Client(None, "pop", "EU", KEY, st, transport="not callable")
        with pytest.raises(TypeError):
            fc.Client(None, "pop", "EU", KEY, st, transport=huge, train_fn=42)
        with pytest.raises(ValueError):
            fc.Client(None, "pop", "EU", KEY, st)  # no url and no transport


def test_python_trainer_callback_shapes():
    """The trainer callback gets numpy views of the model's tensors with the right names and
    shapes, writes through to the SDK, and its exceptions are kept (unit-level: the
    round-level test is in test_round.py)."""
    import ctypes
    seen = {}

    def train(tensors, params, store):
        for k, v in tensors.items():
            seen[k] = (v.shape, v.dtype, float(v.sum()))
            v += 1.0
        assert params["epochs"] == 2 and params["batch_size"] == 4
        assert store is st
        return 17

    with fc.Store(":memory:", feature_dim=4) as st:
        tr = fc.client._PyTrainer(train, st)
        img = fc.model_init([4, 3], seed=2)
        layout = fc.safetensors_layout(img)
        arrays = [np.arange(int(np.prod(shape)), dtype=np.float32) for _, shape, _ in layout]
        shapes = [(ctypes.c_uint64 * len(shape))(*shape) for _, shape, _ in layout]
        names = [n.encode() for n, _, _ in layout]
        ts = (_native.fl_client_tensor * len(layout))()
        for i, (name, shape, _) in enumerate(layout):
            ts[i].name = names[i]
            ts[i].ndim = len(shape)
            ts[i].shape = shapes[i]
            ts[i].data = arrays[i].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            ts[i].numel = arrays[i].size
        p = fc.TrainParams(epochs=2, batch_size=4)
        used = ctypes.c_uint64()
        fn = ctypes.cast(tr.pointer(), _native.TRAIN_FN)
        assert fn(None, ts, len(layout), p.pointer(), None, ctypes.byref(used)) == 0
        assert used.value == 17
        assert seen["fc1.weight"][0] == (3, 4) and seen["fc1.bias"][0] == (3,)
        assert seen["fc1.weight"][1] == np.float32
        assert arrays[0][0] == 1.0 and arrays[1][2] == 3.0  # written through

        def bad(tensors, params, store):
            raise RuntimeError("engine crashed")
        tr._fn = bad
        assert fn(None, ts, len(layout), p.pointer(), None, ctypes.byref(used)) == \
            _native.FL_ERR_ABORTED
        assert isinstance(tr.error, RuntimeError)
