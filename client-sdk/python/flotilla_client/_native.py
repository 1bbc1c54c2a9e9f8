"""ctypes declarations for libflotilla-client-sdk.so (client-sdk/include/flotilla/client.h).

Everything here mirrors the C header one to one: the structs keep the C field order and
types, and every function gets its argtypes and restype so ctypes never guesses an int.
The public classes in the sibling modules are the only users of this module.

Loading order of the shared library:
  1. $FLOTILLA_CLIENT_LIB (a path to the .so),
  2. the build tree of this checkout (build*/client-sdk/, newest first),
  3. the system loader (libflotilla-client-sdk.so.<major>, then the unversioned name).
"""

import ctypes
import glob
import os
import threading

c_size_t = ctypes.c_size_t
c_int = ctypes.c_int
c_u8 = ctypes.c_uint8
c_u32 = ctypes.c_uint32
c_u64 = ctypes.c_uint64
c_i32 = ctypes.c_int32
c_i64 = ctypes.c_int64
c_double = ctypes.c_double
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
P = ctypes.POINTER

# ---- status codes (core/include/flotilla/common.h; values are stable and only grow) ----

STATUS_NAMES = (
    "FL_OK", "FL_ERR_NOMEM", "FL_ERR_MISUSE", "FL_ERR_FORMAT", "FL_ERR_IO", "FL_ERR_AGAIN",
    "FL_ERR_CANCELLED", "FL_ERR_NOT_FOUND", "FL_ERR_EXISTS", "FL_ERR_CRYPTO", "FL_ERR_STATE",
    "FL_ERR_RANGE", "FL_ERR_BUDGET", "FL_ERR_ABORTED", "FL_ERR_PROTOCOL", "FL_ERR_AUTH",
    "FL_ERR_TOO_LARGE", "FL_ERR_UNSUPPORTED", "FL_ERR_TIMEOUT", "FL_ERR_BUSY",
    "FL_ERR_CORRUPT", "FL_ERR_INTERNAL",
)
for _i, _n in enumerate(STATUS_NAMES):
    globals()[_n] = _i
del _i, _n

# fl_client_state
CLIENT_STATES = ("IDLE", "ENROLL", "CHECKIN", "TASK", "MODEL", "TRAIN", "SECAGG", "UPLOAD",
                 "OUTCOME", "FAILED")

# Sizes the header defines as macros; the getters of the loaded library are checked
# against these by the tests (and used at run time).
HEADER_SIZES = {
    "public_key_bytes": 32,
    "key_id_chars": 16,
    "token_max_chars": 200,
    "max_layers": 16,
    "max_tensors": 256,
    "max_json_bytes": 262144,
    "signing_key_bytes": 64,
    "device_id_bytes": 32,
    "cert_bytes": 64,
}

# ---- callback types ----

ALLOC_FN = ctypes.CFUNCTYPE(c_void_p, c_void_p, c_size_t)
REALLOC_FN = ctypes.CFUNCTYPE(c_void_p, c_void_p, c_void_p, c_size_t, c_size_t)
FREE_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p, c_size_t)
LOG_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_char_p)
CLOCK_FN = ctypes.CFUNCTYPE(c_i64, c_void_p)


# ---- structs (field order and types exactly as in the C headers) ----

class fl_allocator(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("alloc", ALLOC_FN), ("realloc", REALLOC_FN),
                ("free", FREE_FN), ("user", c_void_p)]


class fl_logger(ctypes.Structure):
    _fields_ = [("fn", LOG_FN), ("user", c_void_p), ("min_level", c_int)]


class fl_client_store_config(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("allocator", P(fl_allocator)),
                ("path", c_char_p), ("feature_dim", c_u32), ("max_age_ms", c_i64),
                ("max_bytes", c_u64), ("max_examples", c_u64), ("clock", CLOCK_FN),
                ("clock_user", c_void_p)]


class fl_client_train_params(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("epochs", c_u32), ("batch_size", c_u32),
                ("learning_rate", c_double), ("momentum", c_double),
                ("weight_decay", c_double), ("proximal_mu", c_double),
                ("max_examples", c_u64), ("seed", c_u64)]


class fl_client_transport(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("send", c_void_p), ("recv", c_void_p),
                ("cancel", c_void_p), ("ctx", c_void_p)]


class fl_client_request(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("method", c_char_p), ("path", c_char_p),
                ("headers", P(c_char_p)), ("n_headers", c_size_t), ("body", P(c_u8)),
                ("body_len", c_size_t), ("timeout_ms", c_u32)]


class fl_client_tensor(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("ndim", c_size_t), ("shape", P(c_u64)),
                ("data", P(ctypes.c_float)), ("numel", c_size_t)]


# transport vtable entries and the custom trainer (fl_client_train_fn)
SEND_FN = ctypes.CFUNCTYPE(c_int, c_void_p, P(fl_client_request))
RECV_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p)
CANCEL_FN = ctypes.CFUNCTYPE(None, c_void_p)
TRAIN_FN = ctypes.CFUNCTYPE(c_int, c_void_p, P(fl_client_tensor), c_size_t,
                            P(fl_client_train_params), c_void_p, P(c_u64))


class fl_client_curl_config(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("allocator", P(fl_allocator)),
                ("base_url", c_char_p), ("pinned_public_key", c_char_p),
                ("ca_file", c_char_p), ("connect_timeout_ms", c_u32)]


class fl_client_eligibility(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("charging", c_int), ("unmetered", c_int),
                ("idle", c_int), ("battery_pct", c_int)]


class fl_client_config(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("allocator", P(fl_allocator)),
                ("logger", fl_logger), ("population", c_char_p), ("region", c_char_p),
                ("platform", c_char_p), ("coordinator_key", c_u8 * 32),
                ("has_coordinator_key", c_int), ("client_token", c_char_p),
                ("enrollment_token", c_char_p), ("transport", fl_client_transport),
                ("store", c_void_p), ("train_fn", c_void_p), ("train_user", c_void_p),
                ("momentum", c_double), ("weight_decay", c_double),
                ("max_model_bytes", c_u64), ("backoff_initial_ms", c_u32),
                ("backoff_max_ms", c_u32), ("request_timeout_ms", c_u32),
                ("long_poll_s", c_u32), ("secagg_backend", c_int), ("seed", c_u64),
                ("clock", CLOCK_FN), ("clock_user", c_void_p),
                ("has_secagg_identity", c_int), ("secagg_signing_key", c_u8 * 64),
                ("secagg_device_id", c_u8 * 32), ("secagg_cert", c_u8 * 64),
                ("secagg_authority_key", c_u8 * 32), ("retry_timeout_ms", c_u64)]


class fl_client_stats(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("state", c_int), ("checkins", c_u64),
                ("selected", c_u64), ("rounds_completed", c_u64), ("rounds_failed", c_u64),
                ("uploads", c_u64), ("transient_errors", c_u64), ("bytes_sent", c_u64),
                ("bytes_received", c_u64), ("next_action_ms", c_i64), ("round_id", c_i64),
                ("model_version", c_i64), ("examples_trained", c_u64),
                ("train_loss", c_double), ("last_error", c_int), ("retry_timeouts", c_u64)]


# ---- prototypes: name -> (restype, argtypes) ----

_VP = c_void_p  # opaque handles
_PROTOS = {
    # sizes
    "fl_client_public_key_bytes": (c_size_t, []),
    "fl_client_key_id_chars": (c_size_t, []),
    "fl_client_token_max_chars": (c_size_t, []),
    "fl_client_max_layers": (c_size_t, []),
    "fl_client_max_tensors": (c_size_t, []),
    "fl_client_max_json_bytes": (c_size_t, []),
    "fl_client_signing_key_bytes": (c_size_t, []),
    "fl_client_device_id_bytes": (c_size_t, []),
    "fl_client_cert_bytes": (c_size_t, []),
    "fl_client_key_id": (c_int, [c_char_p, P(c_u8)]),
    "fl_client_identity_keygen": (c_int, [P(c_u8), P(c_u8)]),
    # store
    "fl_client_store_config_init": (None, [c_void_p]),
    "fl_client_store_open": (c_int, [P(_VP), c_void_p, c_char_p, c_size_t]),
    "fl_client_store_close": (None, [_VP]),
    "fl_client_store_errmsg": (c_char_p, [_VP]),
    "fl_client_store_add": (c_int, [_VP, P(ctypes.c_float), c_size_t, c_i32]),
    "fl_client_store_add_raw": (c_int, [_VP, c_void_p, c_size_t]),
    "fl_client_store_prune": (c_int, [_VP, P(c_u64)]),
    "fl_client_store_stats": (c_int, [_VP, P(c_u64), P(c_u64)]),
    "fl_client_store_clear": (c_int, [_VP]),
    "fl_client_store_ids": (c_int, [_VP, P(c_i64), c_size_t, P(c_size_t), c_i64]),
    "fl_client_store_get": (c_int, [_VP, c_i64, P(ctypes.c_float), c_size_t, P(c_i32),
                                    c_void_p, c_size_t, P(c_size_t)]),
    # models and trainer
    "fl_client_model_init": (c_int, [c_void_p, c_size_t, P(c_size_t), P(c_u32), c_size_t,
                                     c_u64, P(fl_allocator)]),
    "fl_client_train_params_init": (None, [c_void_p]),
    "fl_client_trainer_create": (c_int, [P(_VP), c_void_p, c_size_t, P(fl_allocator)]),
    "fl_client_trainer_destroy": (None, [_VP]),
    "fl_client_trainer_errmsg": (c_char_p, [_VP]),
    "fl_client_trainer_num_params": (c_size_t, [_VP]),
    "fl_client_trainer_num_inputs": (c_size_t, [_VP]),
    "fl_client_trainer_num_classes": (c_size_t, [_VP]),
    "fl_client_trainer_train": (c_int, [_VP, P(ctypes.c_float), P(c_i32), c_size_t,
                                        P(fl_client_train_params), P(c_double)]),
    "fl_client_trainer_train_store": (c_int, [_VP, _VP, P(fl_client_train_params), P(c_u64),
                                              P(c_double)]),
    "fl_client_trainer_evaluate": (c_int, [_VP, P(ctypes.c_float), P(c_i32), c_size_t,
                                           P(c_double), P(c_double)]),
    "fl_client_trainer_gradient": (c_int, [_VP, P(ctypes.c_float), c_size_t, P(c_double),
                                           P(ctypes.c_float), P(c_i32), c_size_t,
                                           P(fl_client_train_params)]),
    "fl_client_trainer_get_params": (c_int, [_VP, P(ctypes.c_float), c_size_t]),
    "fl_client_trainer_set_params": (c_int, [_VP, P(ctypes.c_float), c_size_t]),
    "fl_client_trainer_save": (c_int, [_VP, c_void_p, c_size_t, P(c_size_t)]),
    # curl transport
    "fl_client_curl_config_init": (None, [c_void_p]),
    "fl_client_curl_create": (c_int, [P(_VP), c_void_p, c_char_p, c_size_t]),
    "fl_client_curl_destroy": (None, [_VP]),
    "fl_client_curl_transport": (c_int, [_VP, P(fl_client_transport)]),
    # client
    "fl_client_config_init": (None, [c_void_p]),
    "fl_client_create": (c_int, [P(_VP), c_void_p, c_char_p, c_size_t]),
    "fl_client_destroy": (None, [_VP]),
    "fl_client_errmsg": (c_char_p, [_VP]),
    "fl_client_set_eligibility": (c_int, [_VP, P(fl_client_eligibility)]),
    "fl_client_stats_get": (c_int, [_VP, P(fl_client_stats)]),
    "fl_client_step": (c_int, [_VP, P(c_i64)]),
    "fl_client_run": (c_int, [_VP, c_u32]),
    "fl_client_interrupt": (None, [_VP]),
    "fl_client_token": (c_int, [_VP, c_char_p, c_size_t]),
    "fl_client_worker_start": (c_int, [_VP]),
    "fl_client_worker_stop": (None, [_VP]),
    # responses (what a transport written in Python reports)
    "fl_client_response_set_status": (c_int, [_VP, c_int]),
    "fl_client_response_add_header": (c_int, [_VP, c_char_p, c_size_t, c_char_p, c_size_t]),
    "fl_client_response_append": (c_int, [_VP, c_void_p, c_size_t]),
    "fl_client_response_limit": (c_size_t, [_VP]),
}

# Symbols the binding uses when the library exports them (added in later releases; the core's
# own getters are not in the client SDK's export map, which keeps only fl_client_*).
_OPTIONAL = {
    "fl_client_version_number": (c_int, []),
    "fl_client_version_string": (c_char_p, []),
    "fl_client_status_name": (c_char_p, [c_int]),
    "fl_client_status_str": (c_char_p, [c_int]),
    "fl_client_trainer_create_v2": (c_int, [P(_VP), c_void_p, c_size_t, P(fl_allocator),
                                            c_char_p, c_size_t]),
    "fl_version_number": (c_int, []),
    "fl_version_string": (c_char_p, []),
    "fl_status_name": (c_char_p, [c_int]),
    "fl_status_str": (c_char_p, [c_int]),
}

LIB_NAME = "libflotilla-client-sdk.so"
_repo_root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _candidates():
    env = os.environ.get("FLOTILLA_CLIENT_LIB")
    if env:
        # An explicit choice is never second-guessed: if it does not load, that is an error.
        return [env], True
    found = glob.glob(os.path.join(_repo_root, "build*", "client-sdk", LIB_NAME))
    found += glob.glob(os.path.join(_repo_root, "build", "*", "client-sdk", LIB_NAME))
    found.sort(key=lambda p: os.path.getmtime(p), reverse=True)
    return found + [LIB_NAME + ".0", LIB_NAME], False


class Library:
    """The loaded shared library with every prototype declared."""

    def __init__(self, path=None):
        if path is not None:
            tried, strict = [path], True
        else:
            tried, strict = _candidates()
        errors = []
        self.cdll = None
        for p in tried:
            try:
                self.cdll = ctypes.CDLL(p)
                self.path = p
                break
            except OSError as e:
                errors.append("%s: %s" % (p, e))
                if strict:
                    break
        if self.cdll is None:
            raise OSError("cannot load %s (set FLOTILLA_CLIENT_LIB): %s"
                          % (LIB_NAME, "; ".join(errors)))
        for name, (res, args) in _PROTOS.items():
            f = getattr(self.cdll, name)  # AttributeError names a missing export
            f.restype = res
            f.argtypes = args
            setattr(self, name, f)
        self.optional = {}
        for name, (res, args) in _OPTIONAL.items():
            try:
                f = getattr(self.cdll, name)
            except AttributeError:
                continue
            f.restype = res
            f.argtypes = args
            self.optional[name] = f
        self.path = _mapped_path(self.path)

    def init_struct(self, cls, init_name):
        """Runs the C _config_init on a zeroed buffer large enough for any later (grown)
        version of the struct, then returns (buffer, view as cls). Keeping the buffer means
        fields a newer library added at the end keep their C defaults."""
        buf = ctypes.create_string_buffer(max(4096, ctypes.sizeof(cls)))
        getattr(self, init_name)(buf)
        view = cls.from_buffer(buf)
        if view.struct_size < ctypes.sizeof(cls):
            raise OSError("%s: library struct_size %d < binding's %d: library too old"
                          % (cls.__name__, view.struct_size, ctypes.sizeof(cls)))
        return buf, view


def _mapped_path(name):
    """The file the dynamic loader actually mapped for name (from /proc/self/maps)."""
    if os.path.isabs(name):
        return os.path.realpath(name)
    base = os.path.basename(name).split(".so")[0]
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and os.path.basename(parts[5]).startswith(base + ".so"):
                    return parts[5]
    except OSError:
        pass
    return name


_lib = None
_lib_lock = threading.Lock()


def lib():
    """The process-wide Library, loaded on first use."""
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = Library()
        return _lib
