"""A counting fl_allocator implemented in Python on libc malloc/free.

Pass one to Store, Trainer or Client (allocator=...) to see every allocation the SDK makes
for that handle: live bytes, peak bytes, number of calls, and blocks still outstanding (a
leak check after close). fail_after=n makes allocation n+1 and later fail (FL_ERR_NOMEM
walks). Callbacks cost a Python call per allocation: fine for tests, slow for benchmarks.
The allocator must outlive every handle that uses it; the handle classes keep a reference.
"""

import ctypes
import threading

from . import _native

_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.restype = None
_libc.free.argtypes = [ctypes.c_void_p]


class CountingAllocator:
    def __init__(self, fail_after=None):
        self.live = 0          # bytes currently allocated
        self.peak = 0          # most bytes allocated at once
        self.calls = 0         # successful alloc calls
        self.failed = 0        # allocations refused by fail_after
        self.fail_after = fail_after
        self.blocks = {}       # pointer -> size asked
        self.errors = []       # free() of unknown pointers or with the wrong size
        self._lock = threading.Lock()
        # realloc stays NULL: the SDK then does alloc + copy + free, which keeps the count
        # exact without a Python realloc.
        self._alloc = _native.ALLOC_FN(self._on_alloc)
        self._free = _native.FREE_FN(self._on_free)
        self.struct = _native.fl_allocator(ctypes.sizeof(_native.fl_allocator), self._alloc,
                                           _native.REALLOC_FN(), self._free, None)

    def _on_alloc(self, user, size):
        with self._lock:
            if self.fail_after is not None and self.calls >= self.fail_after:
                self.failed += 1
                return None
            p = _libc.malloc(size if size else 1)
            if not p:
                return None
            self.calls += 1
            self.blocks[p] = size
            self.live += size
            self.peak = max(self.peak, self.live)
            return p

    def _on_free(self, user, ptr, size):
        if not ptr:
            return
        with self._lock:
            asked = self.blocks.pop(ptr, None)
            if asked is None:
                self.errors.append("free of unknown pointer 0x%x" % ptr)
            else:
                if asked != size:
                    self.errors.append("free(0x%x) with size %d, allocated %d"
                                       % (ptr, size, asked))
                self.live -= asked
        _libc.free(ptr)

    def reset_peak(self):
        with self._lock:
            self.peak = self.live

    @property
    def outstanding(self):
        """Number of blocks not freed yet."""
        return len(self.blocks)

    def pointer(self):
        return ctypes.pointer(self.struct)
