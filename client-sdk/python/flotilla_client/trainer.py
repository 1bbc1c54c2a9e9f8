"""The built-in dense trainer (fl_client_trainer_*) and model initialisation."""

import ctypes
import json
import re
import struct

import numpy as np

from . import _native
from .errors import check

_f32p = ctypes.POINTER(ctypes.c_float)
_i32p = ctypes.POINTER(ctypes.c_int32)


def model_init(sizes, seed=1, allocator=None):
    """Safetensors bytes of a fresh He-initialised MLP: sizes = [inputs, width1, ...,
    classes] (2..max_layers+1 entries)."""
    lib = _native.lib()
    sizes = [int(s) for s in sizes]
    if any(not 0 <= s < 2 ** 32 for s in sizes):
        raise ValueError("layer sizes must fit in uint32: %r" % (sizes,))
    arr = (ctypes.c_uint32 * max(len(sizes), 1))(*sizes)
    alloc = allocator.pointer() if allocator is not None else None
    need = ctypes.c_size_t()
    rc = lib.fl_client_model_init(None, 0, ctypes.byref(need), arr, len(sizes), int(seed), alloc)
    if rc not in (0, _native.FL_ERR_TOO_LARGE):
        check(rc, "fl_client_model_init",
              lambda: "bad sizes %r (2..%d entries, each >= 1)"
              % (sizes, lib.fl_client_max_layers() + 1))
    buf = ctypes.create_string_buffer(need.value)
    check(lib.fl_client_model_init(buf, need.value, ctypes.byref(need), arr, len(sizes),
                                   int(seed), alloc),
          "fl_client_model_init", lambda: "model_init failed")
    return buf.raw[: need.value]


def safetensors_layout(image):
    """[(name, shape, dtype)] of a safetensors image, in the trainer's parameter order
    (fc1.weight, fc1.bias, fc2.weight, ...; dense.weight, dense.bias)."""
    (n,) = struct.unpack_from("<Q", image, 0)
    hdr = json.loads(bytes(image[8: 8 + n]))
    hdr.pop("__metadata__", None)

    def key(name):
        m = re.match(r"^(?:fc(\d+)|dense)\.(weight|bias)$", name)
        if not m:
            return (1 << 30, name)
        return (int(m.group(1) or 0), 0 if m.group(2) == "weight" else 1)

    return [(k, tuple(hdr[k]["shape"]), hdr[k]["dtype"]) for k in sorted(hdr, key=key)]


class TrainParams:
    """Local training hyper-parameters (fl_client_train_params); defaults come from
    fl_client_train_params_init()."""

    FIELDS = ("epochs", "batch_size", "learning_rate", "momentum", "weight_decay",
              "proximal_mu", "max_examples", "seed")

    def __init__(self, **kw):
        lib = _native.lib()
        self._buf, self._s = lib.init_struct(_native.fl_client_train_params,
                                             "fl_client_train_params_init")
        for k, v in kw.items():
            setattr(self, k, v)

    def __setattr__(self, k, v):
        if k.startswith("_"):
            object.__setattr__(self, k, v)
        elif k in self.FIELDS:
            ctype = dict(_native.fl_client_train_params._fields_)[k]
            if ctype in (ctypes.c_uint32, ctypes.c_uint64):
                v = int(v)
                bits = 32 if ctype is ctypes.c_uint32 else 64
                if not 0 <= v < 2 ** bits:
                    raise ValueError("%s out of range: %d" % (k, v))
            else:
                v = float(v)
            setattr(self._s, k, v)
        else:
            raise AttributeError("unknown training parameter %r" % k)

    def __getattr__(self, k):
        if k in TrainParams.FIELDS:
            return getattr(self._s, k)
        raise AttributeError(k)

    def as_dict(self):
        return {k: getattr(self, k) for k in self.FIELDS}

    def pointer(self):
        return ctypes.pointer(self._s)

    def __repr__(self):
        return "TrainParams(%s)" % ", ".join("%s=%r" % kv for kv in self.as_dict().items())


def _params(p, kw):
    if p is None:
        return TrainParams(**kw)
    if kw:
        raise TypeError("pass either a TrainParams or keyword arguments, not both")
    return p


class Trainer:
    """The built-in trainer for dense ReLU networks fc1..fcK with softmax cross-entropy.

    Trainer(model_bytes, allocator=None) from a safetensors image, or Trainer.mlp(sizes, seed).
    Use as a context manager or call close(); close() is idempotent. One thread at a time.
    """

    def __init__(self, model, allocator=None):
        self._lib = _native.lib()
        self._h = None
        image = bytes(model)
        self._allocator = allocator
        h = ctypes.c_void_p()
        alloc = allocator.pointer() if allocator is not None else None
        v2 = self._lib.optional.get("fl_client_trainer_create_v2")
        if v2 is not None:
            # No handle exists on failure: _v2 writes the reason (naming the tensor).
            err = ctypes.create_string_buffer(512)
            rc = v2(ctypes.byref(h), image, len(image), alloc, err, len(err))
            check(rc, "fl_client_trainer_create_v2", lambda: err.value)
        else:
            rc = self._lib.fl_client_trainer_create(ctypes.byref(h), image, len(image), alloc)
            check(rc, "fl_client_trainer_create",
                  lambda: self._lib.fl_client_trainer_errmsg(None))
        self._h = h
        self.layout = safetensors_layout(image)

    @classmethod
    def mlp(cls, sizes, seed=1, allocator=None):
        return cls(model_init(sizes, seed), allocator=allocator)

    def close(self):
        if self._h is not None:
            self._lib.fl_client_trainer_destroy(self._h)
            self._h = None

    @property
    def closed(self):
        return self._h is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _handle(self):
        if self._h is None:
            raise ValueError("trainer is closed")
        return self._h

    def _check(self, rc, call):
        check(rc, call, lambda: self._lib.fl_client_trainer_errmsg(self._h))

    # ---- shapes ----

    @property
    def num_params(self):
        return self._lib.fl_client_trainer_num_params(self._handle())

    @property
    def num_inputs(self):
        return self._lib.fl_client_trainer_num_inputs(self._handle())

    @property
    def num_classes(self):
        return self._lib.fl_client_trainer_num_classes(self._handle())

    def _xy(self, x, y):
        x = np.ascontiguousarray(x, dtype=np.float32)
        y = np.ascontiguousarray(y, dtype=np.int32)
        if x.ndim != 2 or x.shape[1] != self.num_inputs:
            raise ValueError("x must have shape (n, %d), got %s" % (self.num_inputs, x.shape))
        if y.shape != (x.shape[0],):
            raise ValueError("y must have shape (%d,), got %s" % (x.shape[0], y.shape))
        return x, y

    # ---- training ----

    def train(self, x, y, params=None, **kw):
        """Trains on (x (n, inputs), y (n,)); returns the mean loss of the last epoch.
        Hyper-parameters as a TrainParams or keywords (epochs=, batch_size=, ...)."""
        x, y = self._xy(x, y)
        p = _params(params, kw)
        loss = ctypes.c_double()
        self._check(self._lib.fl_client_trainer_train(
            self._handle(), x.ctypes.data_as(_f32p), y.ctypes.data_as(_i32p), x.shape[0],
            p.pointer(), ctypes.byref(loss)), "fl_client_trainer_train")
        return loss.value

    def train_store(self, store, params=None, **kw):
        """Trains on the store's dense examples; returns (examples_used, mean_loss)."""
        p = _params(params, kw)
        used, loss = ctypes.c_uint64(), ctypes.c_double()
        self._check(self._lib.fl_client_trainer_train_store(
            self._handle(), store._handle(), p.pointer(), ctypes.byref(used),
            ctypes.byref(loss)), "fl_client_trainer_train_store")
        return used.value, loss.value

    def evaluate(self, x, y):
        """(mean loss, accuracy) on (x, y); the parameters do not change."""
        x, y = self._xy(x, y)
        loss, acc = ctypes.c_double(), ctypes.c_double()
        self._check(self._lib.fl_client_trainer_evaluate(
            self._handle(), x.ctypes.data_as(_f32p), y.ctypes.data_as(_i32p), x.shape[0],
            ctypes.byref(loss), ctypes.byref(acc)), "fl_client_trainer_evaluate")
        return loss.value, acc.value

    def gradient(self, x, y, params=None, **kw):
        """(mean loss, gradient as a flat float32 array in parameter order). Weight decay and
        the proximal term of params are included when given."""
        x, y = self._xy(x, y)
        p = _params(params, kw) if (params is not None or kw) else None
        g = np.zeros(self.num_params, dtype=np.float32)
        loss = ctypes.c_double()
        self._check(self._lib.fl_client_trainer_gradient(
            self._handle(), g.ctypes.data_as(_f32p), g.size, ctypes.byref(loss),
            x.ctypes.data_as(_f32p), y.ctypes.data_as(_i32p), x.shape[0],
            p.pointer() if p is not None else None), "fl_client_trainer_gradient")
        return loss.value, g

    # ---- weights ----

    def get_params(self):
        """The parameters as one flat float32 array (fc1.weight, fc1.bias, fc2.weight, ...)."""
        out = np.empty(self.num_params, dtype=np.float32)
        self._check(self._lib.fl_client_trainer_get_params(
            self._handle(), out.ctypes.data_as(_f32p), out.size), "fl_client_trainer_get_params")
        return out

    def set_params(self, flat):
        """Sets the parameters from a flat array of num_params values (the global reference
        stays as it was)."""
        a = np.ascontiguousarray(flat, dtype=np.float32).reshape(-1)
        self._check(self._lib.fl_client_trainer_set_params(
            self._handle(), a.ctypes.data_as(_f32p), a.size), "fl_client_trainer_set_params")

    def get_weights(self):
        """{tensor name: array of its shape}, in parameter order."""
        flat = self.get_params()
        out, off = {}, 0
        for name, shape, _ in self.layout:
            n = int(np.prod(shape))
            out[name] = flat[off: off + n].reshape(shape).copy()
            off += n
        return out

    def set_weights(self, weights):
        """Sets every tensor from {name: array}; every name and shape must match."""
        parts = []
        names = {n for n, _, _ in self.layout}
        extra = set(weights) - names
        if extra:
            raise KeyError("unknown tensors: %s" % ", ".join(sorted(extra)))
        for name, shape, _ in self.layout:
            a = np.asarray(weights[name], dtype=np.float32)
            if a.shape != shape:
                raise ValueError("%s: shape %s, want %s" % (name, a.shape, shape))
            parts.append(a.reshape(-1))
        self.set_params(np.concatenate(parts))

    def save(self):
        """The current parameters as a safetensors image (bytes)."""
        h = self._handle()
        need = ctypes.c_size_t()
        rc = self._lib.fl_client_trainer_save(h, None, 0, ctypes.byref(need))
        if rc not in (0, _native.FL_ERR_TOO_LARGE):
            self._check(rc, "fl_client_trainer_save")
        buf = ctypes.create_string_buffer(need.value)
        self._check(self._lib.fl_client_trainer_save(h, buf, need.value, ctypes.byref(need)),
                    "fl_client_trainer_save")
        return buf.raw[: need.value]
