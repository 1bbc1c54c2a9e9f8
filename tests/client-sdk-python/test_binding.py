"""The binding end to end on the real library: example store round trip and retention,
the built-in trainer (learning, weights round trip, gradients), errors with status names and
messages, Python-side argument checks, and handle hygiene (leaks, double close, OOM)."""

import math
import os

import numpy as np
import pytest

import flotilla_client as fc
from conftest import blobs

# ---- example store ----


def test_store_round_trip_dense_and_raw(tmp_path, counting):
    x, y = blobs(20, dim=6)
    path = str(tmp_path / "ex.db")
    with fc.Store(path, feature_dim=6, allocator=counting) as st:
        st.add_many(x, y)
        st.add_raw(b"\x00raw\xffbytes")
        count, nbytes = st.stats()
        assert count == 21 and len(st) == 21
        assert nbytes == 20 * 6 * 4 + 10
        ids = st.ids(page=7)  # several pages
        assert ids == sorted(ids) and len(ids) == 21
        f, lab = st.get(ids[3])
        assert lab == y[3] and np.array_equal(f, x[3])
        assert st.get(ids[-1]) == (None, b"\x00raw\xffbytes")
        gx, gy = st.dense()
        assert np.array_equal(gx, x) and np.array_equal(gy, y)
    # Persisted: a new handle on the same file sees the same examples.
    with fc.Store(path, feature_dim=6) as st:
        gx, gy = st.dense()
        assert np.array_equal(gx, x) and np.array_equal(gy, y)
        st.clear()
        assert st.stats() == (0, 0)
    # The feature dimension is part of the file.
    with pytest.raises(fc.FlotillaError) as e:
        fc.Store(path, feature_dim=7)
    assert e.value.name == "FL_ERR_FORMAT" and "feature_dim" in e.value.message


def test_store_retention_count_bytes_and_age():
    x, y = blobs(12, dim=4)
    with fc.Store(":memory:", feature_dim=4, max_examples=5) as st:
        st.add_many(x, y)
        assert len(st) == 5
        gx, _ = st.dense()
        assert np.array_equal(gx, x[-5:])  # oldest went first
    with fc.Store(":memory:", feature_dim=4, max_bytes=3 * 16) as st:
        st.add_many(x, y)
        assert st.stats() == (3, 48)
        assert np.array_equal(st.dense()[0], x[-3:])
    now = [1_767_225_600_000]
    with fc.Store(":memory:", feature_dim=4, max_age_ms=1000, clock=lambda: now[0]) as st:
        for i in range(6):
            st.add(x[i], y[i])  # example i is created at t0 + 300 i
            now[0] += 300
        # Inserts prune too: at t0 + 1500 (last insert) examples 0 and 1 were over 1 s old.
        assert len(st) == 4
        assert st.prune() == 1  # t0 + 1800: example 2 (age 1200 ms) goes
        now[0] += 500  # t0 + 2300: examples 3 and 4 are over 1 s old, 5 is 800 ms old
        assert st.prune() == 2
        gx, gy = st.dense()
        assert np.array_equal(gx, x[5:6]) and np.array_equal(gy, y[5:6])
        assert st.prune() == 0


def test_store_errors_carry_status_and_message():
    with fc.Store(":memory:", feature_dim=3) as st:
        with pytest.raises(fc.FlotillaError) as e:
            st.add([1.0, 2.0], 0)
        assert e.value.name == "FL_ERR_MISUSE" and e.value.status == 2
        assert "feature_dim" in e.value.message
        with pytest.raises(fc.FlotillaError) as e:
            st.add([1.0, math.nan, 0.0], 0)
        assert e.value.name == "FL_ERR_RANGE" and e.value.message
        with pytest.raises(fc.FlotillaError) as e:
            st.add([1.0, 2.0, 3.0], -1)
        assert e.value.name == "FL_ERR_MISUSE" and "label" in e.value.message
        with pytest.raises(fc.FlotillaError) as e:
            st.get(12345)
        assert e.value.name == "FL_ERR_NOT_FOUND" and "12345" in e.value.message
        assert "FL_ERR_NOT_FOUND" in str(e.value) and "fl_client_store_get" in str(e.value)
    with fc.Store(":memory:") as raw_only:
        with pytest.raises(fc.FlotillaError) as e:
            raw_only.add([1.0], 0)
        assert e.value.name == "FL_ERR_MISUSE"
        with pytest.raises(fc.FlotillaError):
            raw_only.add_raw(b"")  # 1..16 MiB
    with pytest.raises(fc.FlotillaError) as e:
        fc.Store("/proc/definitely/not/here.db", feature_dim=2)
    assert e.value.name in ("FL_ERR_IO", "FL_ERR_MISUSE") and e.value.message
    with pytest.raises(fc.FlotillaError) as e:
        fc.Store(":memory:", feature_dim=1 << 21)  # over the documented 1..1048576
    assert e.value.name == "FL_ERR_MISUSE" and "feature_dim" in e.value.message


def test_store_bad_arguments_raise_before_c():
    with fc.Store(":memory:", feature_dim=2) as st:
        with pytest.raises(ValueError):
            st.add([1.0, 2.0], 1 << 40)  # label does not fit int32
        with pytest.raises(ValueError):
            st.add_many(np.zeros((3, 2)), np.zeros(2))  # n mismatch
        with pytest.raises((TypeError, ValueError)):
            st.add(["a", "b"], 0)
    with pytest.raises(ValueError):
        fc.Store(":memory:", feature_dim=-1)
    with pytest.raises(ValueError):
        st.add([1.0, 2.0], 0)  # closed
    with pytest.raises(ValueError):
        st.stats()

# ---- trainer ----


def test_trainer_learns_separable_problem(counting):
    x, y = blobs(600, dim=8, classes=3, seed=1)
    xt, yt = x[500:], y[500:]
    x, y = x[:500], y[:500]
    with fc.Trainer.mlp([8, 16, 3], seed=3, allocator=counting) as tr:
        assert (tr.num_inputs, tr.num_classes, tr.num_params) == (8, 3, 8 * 16 + 16 + 16 * 3 + 3)
        loss0, acc0 = tr.evaluate(xt, yt)
        last = tr.train(x, y, epochs=5, batch_size=16, learning_rate=0.05, momentum=0.9, seed=7)
        loss1, acc1 = tr.evaluate(xt, yt)
        assert last < loss0 and loss1 < loss0
        assert acc1 >= 0.95, (acc0, acc1)


def test_trainer_from_store_and_determinism():
    x, y = blobs(200, dim=5, classes=2, seed=2)
    p = fc.TrainParams(epochs=3, batch_size=10, learning_rate=0.1, seed=11)
    with fc.Store(":memory:", feature_dim=5) as st:
        st.add_many(x, y)
        with fc.Trainer.mlp([5, 8, 2], seed=4) as a, fc.Trainer.mlp([5, 8, 2], seed=4) as b:
            used, loss = a.train_store(st, p)
            assert used == 200 and np.isfinite(loss)
            used_b, loss_b = b.train_store(st, p)
            assert np.array_equal(a.get_params(), b.get_params()) and loss == loss_b
            assert a.evaluate(x, y)[1] >= 0.95
            used, _ = a.train_store(st, epochs=1, max_examples=50)
            assert used == 50
        with fc.Trainer.mlp([4, 2]) as wrong:
            with pytest.raises(fc.FlotillaError) as e:
                wrong.train_store(st, p)
            assert e.value.name == "FL_ERR_MISUSE" and e.value.message
    with fc.Store(":memory:", feature_dim=5) as empty, fc.Trainer.mlp([5, 2]) as tr:
        with pytest.raises(fc.FlotillaError) as e:
            tr.train_store(empty, p)
        assert e.value.name == "FL_ERR_NOT_FOUND"


def test_weights_round_trip():
    with fc.Trainer.mlp([6, 5, 4, 3], seed=9) as a, fc.Trainer.mlp([6, 5, 4, 3], seed=10) as b:
        w = a.get_weights()
        assert list(w) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
                           "fc3.bias"]
        assert w["fc1.weight"].shape == (5, 6) and w["fc3.bias"].shape == (3,)
        assert w["fc1.weight"].dtype == np.float32
        assert not np.array_equal(a.get_params(), b.get_params())
        b.set_weights(w)
        assert np.array_equal(a.get_params(), b.get_params())
        flat = np.arange(a.num_params, dtype=np.float32) / 1000
        a.set_params(flat)
        assert np.array_equal(a.get_params(), flat)
        assert np.array_equal(a.get_weights()["fc2.weight"].reshape(-1),
                              flat[6 * 5 + 5: 6 * 5 + 5 + 20])
        # safetensors image round trip through save()/create().
        with fc.Trainer(a.save()) as c:
            assert np.array_equal(c.get_params(), flat)
            assert c.layout == a.layout
        x, y = blobs(30, dim=6, classes=3)
        b.set_params(flat)
        assert a.evaluate(x, y) == b.evaluate(x, y)
        with pytest.raises(ValueError):
            b.set_weights({**w, "fc1.weight": np.zeros((6, 5))})
        with pytest.raises(KeyError):
            b.set_weights({**w, "fc9.weight": np.zeros(1)})
        with pytest.raises(fc.FlotillaError) as e:
            a.set_params(flat[:-1])
        assert e.value.name == "FL_ERR_MISUSE"


def test_gradient_matches_finite_differences():
    x, y = blobs(8, dim=3, classes=2, seed=5)
    with fc.Trainer.mlp([3, 4, 2], seed=2) as tr:
        loss, g = tr.gradient(x, y)
        p = tr.get_params().astype(np.float64)
        for i in (0, 5, 13, tr.num_params - 1):
            eps = 1e-2
            q = p.copy()
            q[i] += eps
            tr.set_params(q)
            lp = tr.evaluate(x, y)[0]
            q[i] -= 2 * eps
            tr.set_params(q)
            lm = tr.evaluate(x, y)[0]
            assert abs((lp - lm) / (2 * eps) - g[i]) < 2e-3 + 0.02 * abs(g[i])
        tr.set_params(p)
        assert tr.gradient(x, y)[0] == pytest.approx(loss)
        _, gwd = tr.gradient(x, y, weight_decay=0.5)
        assert not np.array_equal(g, gwd)


def test_trainer_errors_and_bad_arguments():
    with pytest.raises(fc.FlotillaError) as e:
        fc.Trainer(b"not a safetensors image at all")
    assert e.value.name == "FL_ERR_FORMAT" and e.value.message
    with pytest.raises(fc.FlotillaError) as e:
        fc.model_init([4])  # needs at least inputs and one layer
    assert e.value.name == "FL_ERR_MISUSE"
    with pytest.raises(ValueError):
        fc.model_init([4, -2])
    with fc.Trainer.mlp([4, 3]) as tr:
        x = np.zeros((5, 4), np.float32)
        with pytest.raises(fc.FlotillaError) as e:
            tr.train(x, np.array([0, 1, 2, 3, 0]))  # label 3 >= classes
        assert e.value.name == "FL_ERR_MISUSE" and e.value.message
        assert e.value.call == "fl_client_trainer_train"
        with pytest.raises(fc.FlotillaError) as e:
            tr.train(x, np.zeros(5), epochs=0)
        assert e.value.name == "FL_ERR_MISUSE" and "epochs" in e.value.message
        with pytest.raises(ValueError):
            tr.train(np.zeros((5, 3)), np.zeros(5))  # wrong width
        with pytest.raises(ValueError):
            tr.train(x, np.zeros(4))  # wrong n
        with pytest.raises(AttributeError):
            fc.TrainParams(epohcs=3)
        with pytest.raises(ValueError):
            fc.TrainParams(batch_size=-1)
        with pytest.raises(TypeError):
            tr.train(x, np.zeros(5), fc.TrainParams(), epochs=2)
    with pytest.raises(ValueError):
        tr.get_params()  # closed
    assert tr.closed

# ---- handle hygiene ----


def test_close_twice_and_no_leaks(counting, tmp_path):
    st = fc.Store(str(tmp_path / "a.db"), feature_dim=4, allocator=counting)
    st.add_many(*blobs(10, dim=4, classes=2))
    tr = fc.Trainer.mlp([4, 8, 2], allocator=counting)
    tr.train_store(st, epochs=2, batch_size=4)
    assert counting.outstanding > 0 and counting.peak > 0
    tr.close()
    tr.close()
    st.close()
    st.close()
    assert st.closed and tr.closed
    assert counting.outstanding == 0
    # Many open/close cycles do not grow anything.
    for _ in range(50):
        with fc.Trainer.mlp([4, 8, 2], allocator=counting) as t:
            t.get_params()
        with fc.Store(":memory:", feature_dim=4, allocator=counting) as s:
            s.add([1, 2, 3, 4], 0)
    assert counting.outstanding == 0


def test_allocation_failures_raise_nomem_without_leaks():
    image = fc.model_init([6, 8, 3])
    x, y = blobs(20, dim=6, classes=3)
    seen_ok = False
    for k in range(0, 40):
        a = fc.CountingAllocator(fail_after=k)
        try:
            with fc.Trainer(image, allocator=a) as tr:
                tr.train(x, y, epochs=1, batch_size=4)
            seen_ok = True
        except fc.FlotillaError as e:
            assert e.name == "FL_ERR_NOMEM", (k, e)
        assert a.outstanding == 0 and a.errors == [], k
        if seen_ok:
            break
    assert seen_ok


def test_client_create_errors_and_leaks(counting):
    key = bytes(32)
    with fc.Store(":memory:", feature_dim=2, allocator=counting) as st:
        with pytest.raises(fc.FlotillaError) as e:
            fc.Client("http://127.0.0.1:9", "bad population!", "EU", key, st,
                      enrollment_token="x" * 30, allocator=counting)
        assert e.value.name == "FL_ERR_MISUSE" and "population" in e.value.message
        with pytest.raises(fc.FlotillaError) as e:
            fc.Client("http://127.0.0.1:9", "pop", "EU", key, st, allocator=counting)
        assert e.value.name == "FL_ERR_MISUSE" and "token" in e.value.message
        with pytest.raises(fc.FlotillaError) as e:
            fc.Client("ftp://example.com", "pop", "EU", key, st, enrollment_token="x" * 30)
        assert e.value.name == "FL_ERR_MISUSE" and e.value.message
        with pytest.raises(fc.FlotillaError) as e:
            fc.Client("http://127.0.0.1:9", "pop", "EU", key, st, enrollment_token="x" * 30,
                      long_poll_s=61)
        assert "long_poll_s" in e.value.message
        with pytest.raises(ValueError):
            fc.Client("http://127.0.0.1:9", "pop", "EU", b"short", st, enrollment_token="x" * 30)
        with pytest.raises(TypeError):
            fc.Client("http://127.0.0.1:9", "pop", "EU", key, st, enrollment_token="x" * 30,
                      no_such_option=1)
        # A client against a port nothing listens on: the step handles the failure itself
        # (backoff), counts it, and the handle stays usable.
        c = fc.Client("http://127.0.0.1:9", "pop", "EU", key, st, enrollment_token="x" * 30,
                      allocator=counting, seed=3, connect_timeout_ms=2000)
        c.set_eligibility(charging=True, unmetered=True, idle=True, battery_pct=77)
        with pytest.raises(fc.FlotillaError) as e:
            c.set_eligibility(battery_pct=101)
        assert e.value.name == "FL_ERR_MISUSE" and "battery" in e.value.message
        assert c.token() is None
        nxt = c.step()
        s = c.stats()
        assert s.transient_errors == 1 and s.state in ("ENROLL", "IDLE")
        assert s.last_error != "FL_OK" and nxt > 0
        assert c.run(max_wait_ms=0) is False  # next try is in the future: FL_ERR_AGAIN
        c.interrupt()
        c.close()
        c.close()
        c.interrupt()  # no-op once closed
        with pytest.raises(ValueError):
            c.step()
        # Closing the store closes a client still borrowing it.
        c2 = fc.Client("http://127.0.0.1:9", "pop", "EU", key, st, enrollment_token="x" * 30,
                       allocator=counting)
    assert c2.closed


def test_identity_keygen_and_create_check():
    # The device authority is Python's own Ed25519 (cryptography): its v2 certificate over
    # ("flotilla-secagg-cert-v2" || device id || the SDK-made verification key) is accepted
    # at creation; one byte changed anywhere is refused with the field named.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    vk, sk = fc.identity_keygen()
    vk2, _ = fc.identity_keygen()
    assert len(vk) == 32 and len(sk) == fc.sizes()["signing_key_bytes"] == 64
    assert sk[32:] == vk and vk != vk2
    auth = Ed25519PrivateKey.generate()
    auth_vk = auth.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    dev = b"python-device-1".ljust(32, b"\0")
    cert = auth.sign(b"flotilla-secagg-cert-v2" + dev + vk)
    key = bytes(32)
    ident = {"signing_key": sk, "device_id": dev, "cert": cert, "authority_key": auth_vk}
    with fc.Store(":memory:", feature_dim=2) as st:
        fc.Client("http://127.0.0.1:9", "pop", "EU", key, st, enrollment_token="x" * 30,
                  secagg_identity=ident).close()
        fc.Client("http://127.0.0.1:9", "pop", "EU", key, st, enrollment_token="x" * 30,
                  secagg_identity=(sk, dev, cert, auth_vk)).close()
        for field in ("device_id", "cert", "authority_key"):
            bad = dict(ident)
            bad[field] = bytes([bad[field][0] ^ 1]) + bad[field][1:]
            with pytest.raises(fc.FlotillaError) as e:
                fc.Client("http://127.0.0.1:9", "pop", "EU", key, st,
                          enrollment_token="x" * 30, secagg_identity=bad)
            assert e.value.name == "FL_ERR_MISUSE" and "secagg_cert" in e.value.message
        with pytest.raises(ValueError):
            fc.Client("http://127.0.0.1:9", "pop", "EU", key, st, enrollment_token="x" * 30,
                      secagg_identity=(sk, dev, cert[:10], auth_vk))
