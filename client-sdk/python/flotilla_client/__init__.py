"""Python binding (ctypes) for the Flotilla client SDK, libflotilla-client-sdk.so.

    import flotilla_client as fc
    with fc.Store(":memory:", feature_dim=4) as st:
        st.add_many(x, y)
        with fc.Trainer.mlp([4, 16, 3]) as tr:
            tr.train_store(st, epochs=5, batch_size=8, learning_rate=0.1)
            w = tr.get_weights()

Every failing call raises FlotillaError (.status, .name, .message). The library is found
through $FLOTILLA_CLIENT_LIB, then this checkout's build tree, then the system loader.
"""

from . import _native
from .allocator import CountingAllocator
from .client import Client, ClientStats, Request, identity_keygen, key_id
from .errors import FlotillaError, status_name, status_str
from .store import Store
from .trainer import TrainParams, Trainer, model_init, safetensors_layout

__all__ = ["Client", "ClientStats", "CountingAllocator", "FlotillaError", "Request", "Store",
           "TrainParams", "Trainer", "identity_keygen", "key_id", "lib_path", "model_init",
           "safetensors_layout", "sizes", "status_name", "status_str", "version",
           "version_number"]


def lib_path():
    """The file of the loaded shared library."""
    return _native.lib().path


def sizes():
    """The SDK's size constants, read from the loaded library's getters."""
    lib = _native.lib()
    return {k: int(getattr(lib, "fl_client_" + k)()) for k in _native.HEADER_SIZES}


def version():
    """Version string "M.m.p" of the loaded library: from an exported version getter when the
    library has one, else from the versioned file name (libflotilla-client-sdk.so.M.m.p) the
    loader mapped; None if neither is known."""
    lib = _native.lib()
    for name in ("fl_client_version_string", "fl_version_string"):
        f = lib.optional.get(name)
        if f is not None:
            return f().decode()
    import os
    import re
    m = re.search(r"\.so\.(\d+\.\d+\.\d+)$", os.path.realpath(lib.path))
    return m.group(1) if m else None


def version_number():
    """M*1000000 + m*1000 + p of the loaded library (see version()), or None."""
    lib = _native.lib()
    for name in ("fl_client_version_number", "fl_version_number"):
        f = lib.optional.get(name)
        if f is not None:
            return int(f())
    v = version()
    if v is None:
        return None
    a, b, c = (int(x) for x in v.split("."))
    return a * 1000000 + b * 1000 + c
