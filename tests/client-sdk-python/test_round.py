"""A whole federated round driven through the binding against the real coordinator
executable ($FLOTILLA_COORDINATOR, set by ctest; skipped without it): enrollment, check-in,
signed task and model, local training on the store, the plain update, the round outcome, and
the coordinator's new model version."""

import hashlib
import json
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import flotilla_client as fc
from conftest import blobs

COORD = os.environ.get("FLOTILLA_COORDINATOR")
pytestmark = pytest.mark.skipif(not COORD or not os.access(COORD, os.X_OK),
                                reason="FLOTILLA_COORDINATOR (the coordinator executable) not set")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Coordinator:
    def __init__(self, tmp):
        self.admin = "fla_" + secrets.token_hex(24)
        out = subprocess.run([COORD, "gen-key", "--out", str(tmp / "signing.key")], check=True,
                             capture_output=True, text=True).stdout
        kv = dict(line.split(None, 1) for line in out.splitlines() if " " in line)
        self.public_key = bytes.fromhex(kv["public_key"].strip())
        self.key_id = kv["key_id"].strip()
        self.port = _free_port()
        conf = {"listen": "127.0.0.1", "port": self.port, "threads": 2,
                "database": str(tmp / "coord.db"),
                "admin_token_sha256": hashlib.sha256(self.admin.encode()).hexdigest(),
                "signing_key_file": str(tmp / "signing.key"), "log_level": "warn"}
        (tmp / "coord.json").write_text(json.dumps(conf))
        self.log = open(tmp / "coord.log", "w")
        self.proc = subprocess.Popen([COORD, "serve", "--config", str(tmp / "coord.json")],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.url = "http://127.0.0.1:%d" % self.port
        deadline = time.time() + 10
        while True:
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1).read()
                break
            except (urllib.error.URLError, ConnectionError):
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("coordinator did not come up: "
                                       + (tmp / "coord.log").read_text())
                time.sleep(0.05)

    def call(self, path, body=None, ctype="application/json", method=None):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method or (
            "POST" if data is not None else "GET"))
        req.add_header("Authorization", "Bearer " + self.admin)
        if data is not None:
            req.add_header("Content-Type", ctype)
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def coord(tmp_path):
    c = Coordinator(tmp_path)
    yield c
    c.stop()


def test_plain_round_against_real_coordinator(coord, counting):
    pop = {"name": "pyround", "allowed_regions": ["EU"],
           "selection": {"target": 1, "over_selection": 1.0, "min_participants": 1,
                         "forming_s": 60, "jitter_s": 0, "min_retry_s": 30, "max_retry_s": 600},
           "training": {"epochs": 2, "batch_size": 8, "learning_rate": 0.05,
                        "max_examples": 100},
           "update": {"tensors": ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]},
           "strategy": {"name": "fedavg"}, "secagg": {"enabled": False},
           "privacy": {"mode": "none"}}
    code, out = coord.call("/v1/admin/populations", pop)
    assert code == 201
    enroll = out["enrollment_token"]
    model = fc.model_init([16, 8, 4], seed=1)
    assert coord.call("/v1/admin/populations/pyround/models", model,
                      "application/octet-stream")[0] == 201
    assert coord.call("/v1/admin/populations/pyround/start", b"")[0] == 200
    assert fc.key_id(coord.public_key) == coord.key_id

    x, y = blobs(40, dim=16, classes=4, seed=3)
    logs = []
    with fc.Store(":memory:", feature_dim=16, allocator=counting) as st:
        st.add_many(x, y)
        with fc.Client(coord.url, "pyround", "EU", coord.public_key, st,
                       enrollment_token=enroll, seed=5, allocator=counting,
                       backoff_initial_ms=100, backoff_max_ms=1000,
                       logger=lambda lv, m: logs.append((lv, m))) as c:
            c.set_eligibility(charging=True, unmetered=True, idle=True, battery_pct=90)
            deadline = time.time() + 20
            while time.time() < deadline:
                nxt = c.step()
                s = c.stats()
                if s.rounds_completed or s.rounds_failed or s.state == "FAILED":
                    break
                wait_ms = (nxt or 0) - int(time.time() * 1000)
                time.sleep(min(max(wait_ms, 0), 200) / 1000)
            s = c.stats()
            detail = "stats %r, log %r" % (s, logs[-10:])
            assert s.rounds_completed == 1 and s.rounds_failed == 0, detail
            assert s.selected == 1 and s.uploads == 1, detail
            assert s.model_version == 1 and s.examples_trained == 40, detail
            assert np.isfinite(s.train_loss) and s.bytes_sent > 0 and s.bytes_received > 0
            tok = c.token()
            assert tok and tok.startswith("flc_")
        # The coordinator applied the update: a new model version.
        code, p = coord.call("/v1/admin/populations/pyround")
        assert code == 200 and p["model_version"] == 2, p
        # The saved token works for a new client (no enrollment token).
        with fc.Client(coord.url, "pyround", "EU", coord.public_key, st, client_token=tok,
                       seed=6, allocator=counting) as c2:
            c2.step()
            s2 = c2.stats()
            assert s2.checkins == 1 and s2.state != "FAILED", s2
            assert c2.token() == tok


def test_wrong_pinned_key_fails_enrollment(coord):
    code, out = coord.call("/v1/admin/populations", {
        "name": "pykey", "allowed_regions": ["EU"],
        "selection": {"target": 1, "over_selection": 1.0, "min_participants": 1,
                      "forming_s": 60, "jitter_s": 0, "min_retry_s": 30, "max_retry_s": 600},
        "training": {"epochs": 1, "batch_size": 8, "learning_rate": 0.05},
        "update": {"tensors": ["fc1.weight"]}, "strategy": {"name": "fedavg"},
        "secagg": {"enabled": False}, "privacy": {"mode": "none"}})
    assert code == 201
    wrong = bytes(b ^ 0xFF for b in coord.public_key)
    with fc.Store(":memory:", feature_dim=4) as st, \
            fc.Client(coord.url, "pykey", "EU", wrong, st,
                      enrollment_token=out["enrollment_token"]) as c:
        with pytest.raises(fc.FlotillaError) as e:
            for _ in range(3):
                c.step()
        assert e.value.name == "FL_ERR_CRYPTO" and e.value.message
        assert c.stats().state == "FAILED"
        with pytest.raises(fc.FlotillaError):
            c.step()  # sticky


def _urllib_transport(base_url, log):
    """A transport written in Python: urllib, one request per call, non-2xx answers passed
    through (not raised)."""
    def send(req):
        log.append((req.method, req.path))
        r = urllib.request.Request(base_url + req.path, method=req.method,
                                   data=req.body if req.method == "POST" else None)
        for name, value in req.headers:
            r.add_header(name, value)
        timeout = req.timeout_ms / 1000 + 5
        try:
            with urllib.request.urlopen(r, timeout=timeout) as resp:
                return resp.status, list(resp.headers.items()), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, list(e.headers.items()), e.read()
    return send


def test_round_through_python_transport_and_python_trainer(coord, counting):
    """A whole round where the SDK's network and training are both Python: every request goes
    through the ctypes transport (urllib), and the trainer callback moves each tensor by a
    known step. The coordinator's new model must be the old one plus that step (FedAvg of
    one device, no DP)."""
    pop = {"name": "pycb", "allowed_regions": ["EU"],
           "selection": {"target": 1, "over_selection": 1.0, "min_participants": 1,
                         "forming_s": 60, "jitter_s": 0, "min_retry_s": 30, "max_retry_s": 600},
           "training": {"epochs": 3, "batch_size": 4, "learning_rate": 0.05},
           "update": {"tensors": ["fc1.weight", "fc1.bias"]},
           "strategy": {"name": "fedavg"}, "secagg": {"enabled": False},
           "privacy": {"mode": "none"}}
    code, out = coord.call("/v1/admin/populations", pop)
    assert code == 201
    model = fc.model_init([6, 3], seed=4)
    assert coord.call("/v1/admin/populations/pycb/models", model,
                      "application/octet-stream")[0] == 201
    assert coord.call("/v1/admin/populations/pycb/start", b"")[0] == 200

    calls, log = [], []

    def train(tensors, params, store):
        calls.append((sorted(tensors), params["epochs"], params["batch_size"]))
        tensors["fc1.weight"] += 0.125  # exactly representable: no rounding surprises
        tensors["fc1.bias"] -= 0.25
        return 7

    x, y = blobs(12, dim=6, classes=3, seed=1)
    with fc.Store(":memory:", feature_dim=6, allocator=counting) as st:
        st.add_many(x, y)
        with fc.Client(None, "pycb", "EU", coord.public_key, st,
                       enrollment_token=out["enrollment_token"], seed=9, allocator=counting,
                       transport=_urllib_transport(coord.url, log), train_fn=train,
                       backoff_initial_ms=100, backoff_max_ms=1000) as c:
            c.set_eligibility(charging=True, unmetered=True, idle=True, battery_pct=90)
            deadline = time.time() + 30
            while time.time() < deadline:
                nxt = c.step()
                s = c.stats()
                if s.rounds_completed or s.rounds_failed or s.state == "FAILED":
                    break
                time.sleep(min(max((nxt or 0) - int(time.time() * 1000), 0), 200) / 1000)
            s = c.stats()
            detail = "stats %r, requests %r, transport error %r, train error %r" % (
                s, log, c.transport_error, c.train_error)
            assert s.rounds_completed == 1 and s.uploads == 1, detail
            assert s.examples_trained == 7, detail
            assert calls == [(["fc1.bias", "fc1.weight"], 3, 4)], calls
            paths = [p for _, p in log]
            assert paths[0] == "/v1/enroll" and "/v1/checkin" in paths, paths
            assert any(p.startswith("/v1/rounds/") for p in paths), paths
            tok = c.token()
    code, p = coord.call("/v1/admin/populations/pycb")
    assert code == 200 and p["model_version"] == 2, p
    # The new model is base + step: the steps are multiples of the lattice step and the
    # delta is under the clip norm, so quantization is exact.
    r = urllib.request.Request(coord.url + "/v1/models/pycb/2")
    r.add_header("Authorization", "Bearer " + tok)
    with urllib.request.urlopen(r, timeout=10) as resp:
        new = _tensors(resp.read())
    base = _tensors(model)
    np.testing.assert_allclose(new["fc1.weight"], base["fc1.weight"] + 0.125, atol=1e-6)
    np.testing.assert_allclose(new["fc1.bias"], base["fc1.bias"] - 0.25, atol=1e-6)


def _tensors(image):
    """{name: float32 array} of a safetensors image."""
    import struct
    (n,) = struct.unpack_from("<Q", image, 0)
    hdr = json.loads(bytes(image[8: 8 + n]))
    hdr.pop("__metadata__", None)
    out = {}
    for k, v in hdr.items():
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(image[8 + n + a: 8 + n + b], dtype="<f4").reshape(v["shape"])
    return out
