"""The on-device example store (fl_client_store_*)."""

import ctypes
import weakref

import numpy as np

from . import _native
from .errors import FlotillaError, check

_f32p = ctypes.POINTER(ctypes.c_float)
_i32p = ctypes.POINTER(ctypes.c_int32)


class Store:
    """An SQLite example store with retention limits.

    Store(path, feature_dim=0, max_age_ms=0, max_bytes=0, max_examples=0, clock=None,
          allocator=None)

    path          database file (created if missing) or ":memory:"
    feature_dim   floats per dense example; 0 = raw examples only
    max_age_ms, max_bytes, max_examples   retention limits (0 = none), applied on every
                  insert, on open, before training and by prune()
    clock         optional callable returning Unix milliseconds (tests fake time with it)
    allocator     optional CountingAllocator (or anything with .pointer())

    Use as a context manager or call close(); close() is idempotent. One thread at a time.
    """

    def __init__(self, path=":memory:", feature_dim=0, max_age_ms=0, max_bytes=0,
                 max_examples=0, clock=None, allocator=None):
        self._lib = _native.lib()
        self._h = None
        self._users = weakref.WeakSet()  # clients borrowing this store
        buf, cfg = self._lib.init_struct(_native.fl_client_store_config,
                                         "fl_client_store_config_init")
        self._path = str(path).encode()
        cfg.path = self._path
        cfg.feature_dim = _u32(feature_dim, "feature_dim")
        cfg.max_age_ms = int(max_age_ms)
        cfg.max_bytes = int(max_bytes)
        cfg.max_examples = int(max_examples)
        self._allocator = allocator
        if allocator is not None:
            cfg.allocator = allocator.pointer()
        self._clock = None
        if clock is not None:
            self._clock = _native.CLOCK_FN(lambda user: int(clock()))
            cfg.clock = self._clock
        h = ctypes.c_void_p()
        err = ctypes.create_string_buffer(512)
        rc = self._lib.fl_client_store_open(ctypes.byref(h), ctypes.addressof(buf), err,
                                            len(err))
        check(rc, "fl_client_store_open", lambda: err.value)
        self._h = h
        self.feature_dim = int(feature_dim)

    # ---- lifetime ----

    def close(self):
        """Closes the store (clients still borrowing it are closed first). Idempotent."""
        for c in list(self._users):
            c.close()
        if self._h is not None:
            self._lib.fl_client_store_close(self._h)
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
            raise ValueError("store is closed")
        return self._h

    def _check(self, rc, call):
        check(rc, call, lambda: self._lib.fl_client_store_errmsg(self._h))

    # ---- examples ----

    def add(self, features, label):
        """Adds one dense example (feature_dim floats, label >= 0)."""
        h = self._handle()
        x = np.ascontiguousarray(features, dtype=np.float32).reshape(-1)
        self._check(self._lib.fl_client_store_add(h, x.ctypes.data_as(_f32p), x.size,
                                                  _i32(label)), "fl_client_store_add")

    def add_many(self, x, y):
        """Adds n dense examples: x is (n, feature_dim), y holds n labels."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        y = np.asarray(y)
        if x.ndim != 2 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise ValueError("add_many wants x of shape (n, feature_dim) and y of shape (n,), "
                             "got %s and %s" % (x.shape, y.shape))
        for i in range(x.shape[0]):
            self.add(x[i], int(y[i]))

    def add_raw(self, data):
        """Adds one raw example (bytes-like, 1 byte..16 MiB)."""
        h = self._handle()
        b = bytes(data)
        self._check(self._lib.fl_client_store_add_raw(h, b, len(b)), "fl_client_store_add_raw")

    def prune(self):
        """Applies the retention limits now; returns the number of examples removed."""
        removed = ctypes.c_uint64()
        self._check(self._lib.fl_client_store_prune(self._handle(), ctypes.byref(removed)),
                    "fl_client_store_prune")
        return removed.value

    def stats(self):
        """(count, payload bytes)."""
        n, b = ctypes.c_uint64(), ctypes.c_uint64()
        self._check(self._lib.fl_client_store_stats(self._handle(), ctypes.byref(n),
                                                    ctypes.byref(b)), "fl_client_store_stats")
        return n.value, b.value

    def __len__(self):
        return self.stats()[0]

    def clear(self):
        """Deletes every example."""
        self._check(self._lib.fl_client_store_clear(self._handle()), "fl_client_store_clear")

    def ids(self, page=256):
        """Every example id, oldest first (paged through fl_client_store_ids)."""
        h = self._handle()
        out = []
        arr = (ctypes.c_int64 * page)()
        n = ctypes.c_size_t()
        after = 0
        while True:
            self._check(self._lib.fl_client_store_ids(h, arr, page, ctypes.byref(n), after),
                        "fl_client_store_ids")
            out.extend(arr[: n.value])
            if n.value < page:
                return out
            after = out[-1]

    def get(self, example_id):
        """Example example_id: (features ndarray, label) for a dense one, (None, bytes) for a
        raw one."""
        h = self._handle()
        dim = max(self.feature_dim, 1)
        feats = np.zeros(dim, dtype=np.float32)
        label = ctypes.c_int32()
        raw_len = ctypes.c_size_t()
        # Size query first (raw_cap 0 gives FL_ERR_TOO_LARGE with the size), then the read.
        rc = self._lib.fl_client_store_get(h, int(example_id), feats.ctypes.data_as(_f32p),
                                           dim, ctypes.byref(label), None, 0,
                                           ctypes.byref(raw_len))
        if rc not in (0, _native.FL_ERR_TOO_LARGE):
            self._check(rc, "fl_client_store_get")
        if label.value >= 0:
            return feats[: self.feature_dim].copy(), label.value
        raw = ctypes.create_string_buffer(max(raw_len.value, 1))
        self._check(self._lib.fl_client_store_get(h, int(example_id), None, 0,
                                                  ctypes.byref(label), raw, len(raw),
                                                  ctypes.byref(raw_len)),
                    "fl_client_store_get")
        return None, raw.raw[: raw_len.value]

    def dense(self):
        """Every dense example as (x (n, feature_dim) float32, y (n,) int32), oldest first."""
        xs, ys = [], []
        for i in self.ids():
            f, lab = self.get(i)
            if f is not None:
                xs.append(f)
                ys.append(lab)
        x = np.stack(xs) if xs else np.zeros((0, self.feature_dim), np.float32)
        return x, np.asarray(ys, dtype=np.int32)


def _u32(v, name):
    v = int(v)
    if not 0 <= v < 2 ** 32:
        raise ValueError("%s must fit in uint32, got %d" % (name, v))
    return v


def _i32(v):
    v = int(v)
    if not -2 ** 31 <= v < 2 ** 31:
        raise ValueError("label must fit in int32, got %d" % v)
    return v


__all__ = ["Store", "FlotillaError"]
