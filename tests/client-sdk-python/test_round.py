"""A whole federated round driven through the binding against the real coordinator
executable ($FLOTILLA_COORDINATOR, set by ctest; skipped without it): enrollment, check-in,
signed task and model, local training on the store, the plain update, the round outcome, and
the coordinator's new model version; and secure aggregation in active-adversary mode (device
identities certified by an Ed25519 authority of Python's own), with the refusals of clients
without an identity."""

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
    # The new model is base + step: the steps are multiples of the lattice step and the
    # delta is under the clip norm, so quantization is exact.
    new = _new_model(coord, "pycb", tok, 2)
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


def _new_model(coord, pop, tok, version):
    """Asserts that population pop's model is at `version` and downloads it as the client
    with token tok: its tensors."""
    code, p = coord.call("/v1/admin/populations/" + pop)
    assert code == 200 and p["model_version"] == version, p
    r = urllib.request.Request(coord.url + "/v1/models/%s/%d" % (pop, version))
    r.add_header("Authorization", "Bearer " + tok)
    with urllib.request.urlopen(r, timeout=10) as resp:
        return _tensors(resp.read())


# ---- active-adversary secure aggregation (protocol 5.6) ----

def _authority():
    """The device authority: an Ed25519 key pair of Python's own (cryptography), independent
    of the SDK and of the coordinator; certify(device_id, verify_key) is its v2 certificate."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    sk = Ed25519PrivateKey.generate()
    vk = sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return vk, lambda dev, dvk: sk.sign(b"flotilla-secagg-cert-v2" + dev + dvk)


def _identity(auth_vk, certify, name):
    """A device identity: the SDK makes the key pair, the authority certifies it."""
    vk, sk = fc.identity_keygen()
    dev = name.encode().ljust(32, b"\0")
    return {"signing_key": sk, "device_id": dev, "cert": certify(dev, vk),
            "authority_key": auth_vk}


def _active_population(coord, name, auth_vk):
    pop = {"name": name, "allowed_regions": ["EU"],
           "selection": {"target": 3, "over_selection": 1.0, "min_participants": 3,
                         "forming_s": 60, "jitter_s": 0, "min_retry_s": 1, "max_retry_s": 5},
           "deadlines_s": {"advertise": 30, "share": 30, "masked": 30, "consistency": 30,
                           "unmask": 30},
           "training": {"epochs": 1, "batch_size": 4, "learning_rate": 0.05},
           "update": {"tensors": ["fc1.weight", "fc1.bias"], "weighting": "uniform"},
           "strategy": {"name": "fedavg"},
           "secagg": {"enabled": True, "threshold_fraction": 0.5, "consistency_check": True,
                      "authority_key": auth_vk.hex()},
           "privacy": {"mode": "none", "clip_norm": 10.0}}
    code, out = coord.call("/v1/admin/populations", pop)
    assert code == 201, out
    model = fc.model_init([6, 3], seed=4)
    assert coord.call("/v1/admin/populations/%s/models" % name, model,
                      "application/octet-stream")[0] == 201
    assert coord.call("/v1/admin/populations/%s/start" % name, b"")[0] == 200
    return out["enrollment_token"], model


def _drive(clients, done, seconds=60):
    """Steps each client when it is due, round robin on this thread, until done()."""
    due = [0] * len(clients)
    deadline = time.time() + seconds
    while not done():
        assert time.time() < deadline, [c.stats() for c in clients]
        now = int(time.time() * 1000)
        for i, c in enumerate(clients):
            if due[i] <= now:
                due[i] = c.step() or now
        wait_ms = min(due) - int(time.time() * 1000)
        time.sleep(min(max(wait_ms, 0), 50) / 1000)


def test_active_secure_round_through_the_binding(coord, counting):
    """Three binding clients, each with a device identity certified by a Python authority,
    run a round in active-adversary mode (signed advertisements, the consistency phase)
    through the real coordinator. Each device's trainer moves the tensors by its own known
    step; the new model is the base plus the exact mean of the steps (uniform weights, no
    DP: the steps are multiples of the lattice step, so the masked sum of the quantized
    updates decodes to them exactly), and every device signed the survivor set."""
    auth_vk, certify = _authority()
    enroll, model = _active_population(coord, "pyactive", auth_vk)
    steps = [0.125, 0.25, 0.375]

    def trainer(k):
        def train(tensors, params, store):
            tensors["fc1.weight"] += steps[k]
            tensors["fc1.bias"] -= steps[k] / 2
            return 5
        return train

    x, y = blobs(12, dim=6, classes=3, seed=2)
    stores, clients, logs = [], [], [[] for _ in steps]
    try:
        for k in range(len(steps)):
            st = fc.Store(":memory:", feature_dim=6, allocator=counting)
            stores.append(st)
            st.add_many(x, y)
            c = fc.Client(coord.url, "pyactive", "EU", coord.public_key, st,
                          enrollment_token=enroll, seed=20 + k, allocator=counting,
                          secagg_identity=_identity(auth_vk, certify, "py-active-%d" % k),
                          train_fn=trainer(k), backoff_initial_ms=50, backoff_max_ms=500,
                          long_poll_s=0, logger=lambda lv, m, k=k: logs[k].append(m))
            clients.append(c)
            c.set_eligibility(charging=True, unmetered=True, idle=True, battery_pct=90)
        _drive(clients, lambda: all(c.stats().rounds_completed + c.stats().rounds_failed
                                    for c in clients))
        for k, c in enumerate(clients):
            s = c.stats()
            detail = "device %d: stats %r, log %r, train error %r" % (k, s, logs[k][-8:],
                                                                       c.train_error)
            assert s.rounds_completed == 1 and s.rounds_failed == 0, detail
            assert s.uploads == 1 and s.examples_trained == 5, detail
        rid = clients[0].stats().round_id
        assert all(c.stats().round_id == rid for c in clients)
        tok = clients[0].token()
    finally:
        for c in clients:
            c.close()
        for st in stores:
            st.close()
    # Every device posted its signature over the survivor set (the consistency phase).
    code, r = coord.call("/v1/admin/rounds/%d" % rid)
    assert code == 200 and r["phase_counts"]["consistency"] == 3, r
    new = _new_model(coord, "pyactive", tok, 2)
    base = _tensors(model)
    mean = sum(steps) / len(steps)  # 0.25: exact in binary
    np.testing.assert_allclose(new["fc1.weight"], base["fc1.weight"] + mean, atol=1e-6)
    np.testing.assert_allclose(new["fc1.bias"], base["fc1.bias"] - mean / 2, atol=1e-6)


def test_active_population_refuses_clients_without_identity(coord):
    """Without a device identity a binding client cannot take part in an active population:
    enrolling is refused by the coordinator (FL_ERR_AUTH, sticky, naming secagg_identity),
    and a client enrolled with one but run without it (the app lost it, kept the token)
    refuses the active task: the round is given up (FL_ERR_STATE, not sticky) before the
    model download, nothing trained, nothing posted but check-ins."""
    auth_vk, certify = _authority()
    enroll, _ = _active_population(coord, "pyactive2", auth_vk)
    with fc.Store(":memory:", feature_dim=6) as st:
        st.add_many(*blobs(8, dim=6, classes=3, seed=5))
        with fc.Client(coord.url, "pyactive2", "EU", coord.public_key, st,
                       enrollment_token=enroll, seed=1) as c:
            with pytest.raises(fc.FlotillaError) as e:
                c.step()
            assert e.value.name == "FL_ERR_AUTH", e.value
            assert "secagg_identity" in e.value.message, e.value.message
            assert c.stats().state == "FAILED" and c.token() is None
            with pytest.raises(fc.FlotillaError):
                c.step()  # sticky

        # Device X enrolls with its identity, then comes back without it.
        with fc.Client(coord.url, "pyactive2", "EU", coord.public_key, st,
                       enrollment_token=enroll, seed=2,
                       secagg_identity=_identity(auth_vk, certify, "py-x")) as c:
            c.step()
            tok = c.token()
            assert tok, c.stats()
        requests, logs, trained = [], [], []
        x, others = None, []
        try:
            x = fc.Client(None, "pyactive2", "EU", coord.public_key, st, client_token=tok,
                          seed=3, transport=_urllib_transport(coord.url, requests),
                          train_fn=lambda t, p, s: trained.append(1) or 1,
                          backoff_initial_ms=50, backoff_max_ms=500, long_poll_s=0,
                          logger=lambda lv, m: logs.append(m))
            others = [fc.Client(coord.url, "pyactive2", "EU", coord.public_key, st,
                                enrollment_token=enroll, seed=4 + k, backoff_initial_ms=50,
                                backoff_max_ms=500, long_poll_s=0,
                                secagg_identity=_identity(auth_vk, certify, "py-b%d" % k))
                      for k in range(2)]
            for c in [x] + others:
                c.set_eligibility(charging=True, unmetered=True, idle=True, battery_pct=90)
            _drive([x] + others, lambda: x.stats().rounds_failed > 0)
            s = x.stats()
            assert s.selected == 1 and s.rounds_failed == 1 and s.rounds_completed == 0, s
            assert s.last_error == "FL_ERR_STATE" and s.state == "IDLE", s  # not sticky
            assert any("requires a device identity" in m for m in logs), logs[-8:]
            assert "requires a device identity" in x.errmsg, x.errmsg
            assert trained == []
            assert not any(p.startswith("/v1/models/") for _, p in requests), requests
            assert all(p == "/v1/checkin" for m, p in requests if m == "POST"), requests
            assert any(p.endswith("/task") for _, p in requests), requests
            x.step()  # not failed for good: stepping goes on without an error
        finally:
            for c in others:
                c.close()
            if x is not None:
                x.close()
