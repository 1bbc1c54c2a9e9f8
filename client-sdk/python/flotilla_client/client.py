"""The federated client (fl_client_*) over the default libcurl transport."""

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from . import _native
from .errors import FlotillaError, check

_curl_lock = threading.Lock()
_curl_ready = False


def _curl_global_init():
    """libcurl wants curl_global_init once per process before any handle; the SDK leaves that
    to the app, so the binding does it on the first Client (from the libcurl the SDK loaded)."""
    global _curl_ready
    with _curl_lock:
        if _curl_ready:
            return
        try:
            curl = ctypes.CDLL("libcurl.so.4")
        except OSError as e:
            raise FlotillaError(_native.FL_ERR_UNSUPPORTED, "libcurl not loadable: %s" % e,
                                "curl_global_init")
        curl.curl_global_init.restype = ctypes.c_int
        curl.curl_global_init.argtypes = [ctypes.c_long]
        rc = curl.curl_global_init(3)  # CURL_GLOBAL_DEFAULT
        if rc != 0:
            raise FlotillaError(_native.FL_ERR_INTERNAL, "curl_global_init returned %d" % rc,
                                "curl_global_init")
        _curl_ready = True


def identity_keygen():
    """A device identity key pair for active-adversary secure aggregation:
    (verify_key: 32 bytes, signing_key: 64 bytes). Keep signing_key secret; have the device
    authority certify verify_key with the device id (see Client's secagg_identity)."""
    lib = _native.lib()
    vk = (ctypes.c_uint8 * lib.fl_client_public_key_bytes())()
    sk = (ctypes.c_uint8 * lib.fl_client_signing_key_bytes())()
    check(lib.fl_client_identity_keygen(vk, sk), "fl_client_identity_keygen",
          lambda: "key generation failed")
    out = (bytes(vk), bytes(sk))
    ctypes.memset(sk, 0, ctypes.sizeof(sk))
    return out


def key_id(public_key):
    """Key id (16 lowercase hex chars) of a coordinator Ed25519 public key (32 bytes)."""
    lib = _native.lib()
    pk = bytes(public_key)
    if len(pk) != lib.fl_client_public_key_bytes():
        raise ValueError("public key must be %d bytes, got %d"
                         % (lib.fl_client_public_key_bytes(), len(pk)))
    out = ctypes.create_string_buffer(lib.fl_client_key_id_chars() + 1)
    arr = (ctypes.c_uint8 * len(pk)).from_buffer_copy(pk)
    check(lib.fl_client_key_id(out, arr), "fl_client_key_id", lambda: "bad argument")
    return out.value.decode()


# ---- callbacks written in Python: transport and trainer ----

@dataclass
class Request:
    """One HTTP request the SDK wants sent (a copy of fl_client_request)."""
    method: str          # "GET" or "POST"
    path: str            # absolute path and query, e.g. "/v1/checkin"
    headers: list        # [(name, value)] in the SDK's order
    body: bytes          # b"" for GET
    timeout_ms: int      # whole-request timeout the SDK asks for (long polls included)


def _status_of(exc):
    """The fl_status a transport exception stands for: timeouts are FL_ERR_TIMEOUT, a
    FlotillaError keeps its code, anything else is network trouble (FL_ERR_IO), which the SDK
    retries with backoff."""
    if isinstance(exc, FlotillaError) and exc.status != 0:
        return exc.status
    if isinstance(exc, TimeoutError):
        return _native.FL_ERR_TIMEOUT
    return _native.FL_ERR_IO


class _PyTransport:
    """An fl_client_transport whose send/recv are ctypes callbacks around handler(Request) ->
    (status, headers, body). Blocking: send only records the request, recv calls the handler
    and reports its answer through fl_client_response_*. Exceptions never cross into C: they
    become status codes and the last one is kept in .error."""

    def __init__(self, lib, handler):
        self._lib = lib
        self._handler = handler
        self._pending = None
        self.error = None
        self.requests = 0
        # The CFUNCTYPE objects must outlive the client handle (kept by the Client).
        self._send = _native.SEND_FN(self._on_send)
        self._recv = _native.RECV_FN(self._on_recv)
        self._cancel = _native.CANCEL_FN(self._on_cancel)

    def install(self, vt):
        vt.struct_size = ctypes.sizeof(_native.fl_client_transport)
        vt.send = ctypes.cast(self._send, ctypes.c_void_p)
        vt.recv = ctypes.cast(self._recv, ctypes.c_void_p)
        vt.cancel = ctypes.cast(self._cancel, ctypes.c_void_p)
        vt.ctx = None

    def _on_send(self, ctx, req_p):
        try:
            r = req_p.contents
            headers = []
            for i in range(r.n_headers):
                line = r.headers[i].decode("latin-1")
                name, _, value = line.partition(":")
                headers.append((name.strip(), value.strip()))
            body = ctypes.string_at(r.body, r.body_len) if r.body_len else b""
            self._pending = Request(r.method.decode(), r.path.decode(), headers, body,
                                    int(r.timeout_ms))
            self.requests += 1
            return 0
        except BaseException as e:  # noqa: BLE001 (must not unwind into C)
            self.error = e
            return _native.FL_ERR_INTERNAL

    def _on_recv(self, ctx, resp):
        req, self._pending = self._pending, None
        if req is None:
            return _native.FL_ERR_MISUSE
        lib = self._lib
        try:
            status, headers, body = self._handler(req)
            if isinstance(headers, dict):
                headers = list(headers.items())
            rc = lib.fl_client_response_set_status(resp, int(status))
            for name, value in headers or ():
                if rc != 0:
                    break
                n, v = str(name).encode("latin-1"), str(value).encode("latin-1")
                rc = lib.fl_client_response_add_header(resp, n, len(n), v, len(v))
                if rc == _native.FL_ERR_TOO_LARGE:
                    rc = 0  # a long header the SDK does not read
            body = bytes(body or b"")
            if rc == 0 and body:
                rc = lib.fl_client_response_append(resp, body, len(body))
            return rc
        except BaseException as e:  # noqa: BLE001
            self.error = e
            return _status_of(e)

    def _on_cancel(self, ctx):
        self._pending = None


class _PyTrainer:
    """fl_client_train_fn around train_fn(tensors, params, store) -> examples used. tensors:
    {name: float32 ndarray} viewing the SDK's copies (write the trained values in place; the
    views are valid only during the call); params: the round's hyper-parameters as a dict."""

    def __init__(self, train_fn, store):
        self._fn = train_fn
        self._store = store
        self.error = None
        self.calls = 0
        self._cb = _native.TRAIN_FN(self._on_train)

    def pointer(self):
        return ctypes.cast(self._cb, ctypes.c_void_p)

    def _on_train(self, user, tensors_p, n, params_p, store_p, used_p):
        try:
            self.calls += 1
            tensors = {}
            for i in range(n):
                t = tensors_p[i]
                shape = tuple(int(t.shape[k]) for k in range(t.ndim))
                if t.numel:
                    arr = np.ctypeslib.as_array(t.data, shape=(t.numel,)).reshape(shape)
                else:
                    arr = np.zeros(shape, np.float32)
                tensors[t.name.decode()] = arr
            p = params_p.contents
            params = {k: getattr(p, k) for k, _ in _native.fl_client_train_params._fields_
                      if k != "struct_size"}
            used = int(self._fn(tensors, params, self._store))
            if used < 0:
                raise ValueError("train_fn returned a negative example count")
            used_p[0] = used
            return 0
        except BaseException as e:  # noqa: BLE001 (must not unwind into C)
            self.error = e
            return _native.FL_ERR_ABORTED


@dataclass
class ClientStats:
    """fl_client_stats, with the state as its name."""
    state: str
    checkins: int
    selected: int
    rounds_completed: int
    rounds_failed: int
    uploads: int
    transient_errors: int
    bytes_sent: int
    bytes_received: int
    next_action_ms: int
    round_id: int
    model_version: int
    examples_trained: int
    train_loss: float
    last_error: str
    retry_timeouts: int  # exchanges given up after retry_timeout_ms


class Client:
    """A device taking part in federated rounds of one population.

    Client(url, population, region, coordinator_key, store, enrollment_token=None,
           client_token=None, platform=None, seed=0, allocator=None, logger=None,
           pinned_public_key=None, ca_file=None, connect_timeout_ms=None, **config)

    url               coordinator base URL ("https://host:port"; http:// only for loopback);
                      None with transport=
    coordinator_key   the coordinator's Ed25519 public key (32 bytes), pinned
    store             a Store with the device's examples (borrowed; must stay open)
    logger            optional callable(level:int, msg:str)
    transport         optional callable(Request) -> (status, headers, body) used instead of
                      libcurl: it sends the request however the app likes and returns the
                      HTTP status, the response headers ([(name, value)] or a dict) and the
                      body bytes. Raising TimeoutError gives FL_ERR_TIMEOUT, a FlotillaError
                      its code, anything else FL_ERR_IO (all retried with backoff); the last
                      exception is kept in .transport_error.
    train_fn          optional callable(tensors, params, store) -> examples used, replacing
                      the built-in trainer: tensors is {name: float32 ndarray} over the SDK's
                      copies of the global model (write the trained values in place; valid
                      only during the call), params the round's hyper-parameters (dict),
                      store this client's Store. An exception abandons the round
                      (FL_ERR_ABORTED, nothing is sent) and is kept in .train_error.
    secagg_identity   optional device identity for active-adversary secure aggregation:
                      {"signing_key": 64 bytes (identity_keygen), "device_id": 32 bytes,
                      "cert": the device authority's 64-byte v2 certificate,
                      "authority_key": its 32-byte verification key, pinned} or the same
                      as a 4-tuple; checked at creation (FlotillaError FL_ERR_MISUSE when
                      the certificate does not verify)
    config            other fl_client_config fields: momentum, weight_decay,
                      max_model_bytes, backoff_initial_ms, backoff_max_ms,
                      request_timeout_ms, long_poll_s, secagg_backend, retry_timeout_ms
                      (longest time enrollment, check-in or the task download is retried
                      after transient failures before run() raises FlotillaError
                      FL_ERR_TIMEOUT; 0 = no limit; default 300000)
    Use as a context manager or call close(); close() is idempotent. One thread at a time,
    except interrupt().
    """

    _CONFIG_FIELDS = ("momentum", "weight_decay", "max_model_bytes", "backoff_initial_ms",
                      "backoff_max_ms", "request_timeout_ms", "long_poll_s", "secagg_backend",
                      "retry_timeout_ms")

    def __init__(self, url, population, region, coordinator_key, store, enrollment_token=None,
                 client_token=None, platform=None, seed=0, allocator=None, logger=None,
                 pinned_public_key=None, ca_file=None, connect_timeout_ms=None, transport=None,
                 train_fn=None, secagg_identity=None, **config):
        self._lib = lib = _native.lib()
        self._h = None
        self._curl = None
        self._pyt = self._pytr = None
        if transport is not None and not callable(transport):
            raise TypeError("transport must be callable(Request) -> (status, headers, body)")
        if train_fn is not None and not callable(train_fn):
            raise TypeError("train_fn must be callable(tensors, params, store) -> int")
        if transport is None and url is None:
            raise ValueError("url is required without transport=")
        unknown = set(config) - set(self._CONFIG_FIELDS)
        if unknown:
            raise TypeError("unknown client option(s): %s" % ", ".join(sorted(unknown)))
        key = bytes(coordinator_key)
        if len(key) != lib.fl_client_public_key_bytes():
            raise ValueError("coordinator_key must be %d bytes, got %d"
                             % (lib.fl_client_public_key_bytes(), len(key)))
        store._handle()  # raises if closed
        if transport is None:
            _curl_global_init()
        alloc = allocator.pointer() if allocator is not None else None
        self._allocator, self._store = allocator, store
        # Every string handed to C stays referenced by self for the handle's lifetime (the SDK
        # copies them, but this keeps the rule simple).
        self._keep = []

        def cs(s):
            if s is None:
                return None
            b = s.encode() if isinstance(s, str) else bytes(s)
            self._keep.append(b)
            return b

        err = ctypes.create_string_buffer(512)
        t = None
        if transport is None:
            tbuf, tc = lib.init_struct(_native.fl_client_curl_config,
                                       "fl_client_curl_config_init")
            tc.base_url = cs(url)
            tc.pinned_public_key = cs(pinned_public_key)
            tc.ca_file = cs(ca_file)
            if connect_timeout_ms is not None:
                tc.connect_timeout_ms = int(connect_timeout_ms)
            if alloc is not None:
                tc.allocator = alloc
            t = ctypes.c_void_p()
            check(lib.fl_client_curl_create(ctypes.byref(t), ctypes.addressof(tbuf), err,
                                            len(err)),
                  "fl_client_curl_create", lambda: err.value)
            self._curl = t
        try:
            cbuf, cfg = lib.init_struct(_native.fl_client_config, "fl_client_config_init")
            if transport is None:
                check(lib.fl_client_curl_transport(t, ctypes.byref(cfg.transport)),
                      "fl_client_curl_transport", lambda: "cannot get the curl vtable")
            else:
                self._pyt = _PyTransport(lib, transport)
                self._pyt.install(cfg.transport)
            if train_fn is not None:
                self._pytr = _PyTrainer(train_fn, store)
                cfg.train_fn = self._pytr.pointer()
                cfg.train_user = None
            if alloc is not None:
                cfg.allocator = alloc
            cfg.population = cs(population)
            cfg.region = cs(region)
            if platform is not None:
                cfg.platform = cs(platform)
            ctypes.memmove(cfg.coordinator_key, key, len(key))
            cfg.has_coordinator_key = 1
            cfg.client_token = cs(client_token)
            cfg.enrollment_token = cs(enrollment_token)
            cfg.store = store._handle()
            cfg.seed = int(seed)
            if secagg_identity is not None:
                self._set_identity(cfg, secagg_identity)
            for k, v in config.items():
                setattr(cfg, k, v)
            self._log = None
            if logger is not None:
                self._log = _native.LOG_FN(
                    lambda user, level, msg: logger(level, msg.decode("utf-8", "replace")))
                cfg.logger.fn = self._log
                cfg.logger.min_level = 0
            h = ctypes.c_void_p()
            try:
                check(lib.fl_client_create(ctypes.byref(h), ctypes.addressof(cbuf), err,
                                           len(err)),
                      "fl_client_create", lambda: err.value)
            finally:
                ctypes.memset(cfg.secagg_signing_key, 0, ctypes.sizeof(cfg.secagg_signing_key))
            self._h = h
        except BaseException:
            if t is not None:
                lib.fl_client_curl_destroy(t)
            self._curl = None
            raise
        store._users.add(self)

    @staticmethod
    def _set_identity(cfg, ident):
        """Fills the device identity fields from a dict or a 4-tuple (signing_key,
        device_id, cert, authority_key), all bytes."""
        if isinstance(ident, dict):
            try:
                parts = (ident["signing_key"], ident["device_id"], ident["cert"],
                         ident["authority_key"])
            except KeyError as e:
                raise ValueError("secagg_identity lacks %s" % e) from None
        else:
            parts = tuple(ident)
            if len(parts) != 4:
                raise ValueError("secagg_identity: (signing_key, device_id, cert, "
                                 "authority_key)")
        fields = ("secagg_signing_key", "secagg_device_id", "secagg_cert",
                  "secagg_authority_key")
        for name, value in zip(fields, parts):
            b = bytes(value)
            dst = getattr(cfg, name)
            if len(b) != ctypes.sizeof(dst):
                raise ValueError("secagg_identity %s must be %d bytes, got %d"
                                 % (name[7:], ctypes.sizeof(dst), len(b)))
            ctypes.memmove(dst, b, len(b))
        cfg.has_secagg_identity = 1

    # ---- lifetime ----

    def close(self):
        """Stops the worker if any, destroys the client and its transport. Idempotent."""
        if self._h is not None:
            self._lib.fl_client_worker_stop(self._h)
            self._lib.fl_client_destroy(self._h)
            self._h = None
        if self._curl is not None:
            self._lib.fl_client_curl_destroy(self._curl)
            self._curl = None

    @property
    def closed(self):
        return self._h is None

    @property
    def transport_error(self):
        """The last exception the Python transport raised (None if none, or with libcurl)."""
        return self._pyt.error if self._pyt is not None else None

    @property
    def errmsg(self):
        """Detail of the last failure on this client (fl_client_errmsg), e.g. why a round
        was given up while step() returned normally; "" if there was none."""
        m = self._lib.fl_client_errmsg(self._handle())
        return m.decode("utf-8", "replace") if m else ""

    @property
    def train_error(self):
        """The last exception the Python train_fn raised (None if none)."""
        return self._pytr.error if self._pytr is not None else None

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
            raise ValueError("client is closed")
        return self._h

    def _check(self, rc, call):
        check(rc, call, lambda: self._lib.fl_client_errmsg(self._h))

    # ---- driving ----

    def set_eligibility(self, charging=True, unmetered=True, idle=True, battery_pct=-1):
        e = _native.fl_client_eligibility(ctypes.sizeof(_native.fl_client_eligibility),
                                          int(bool(charging)), int(bool(unmetered)),
                                          int(bool(idle)), int(battery_pct))
        self._check(self._lib.fl_client_set_eligibility(self._handle(), ctypes.byref(e)),
                    "fl_client_set_eligibility")

    def step(self):
        """One exchange and what follows it. Returns the Unix ms at which to step again, or
        None when the transport would block (FL_ERR_AGAIN)."""
        nxt = ctypes.c_int64()
        rc = self._lib.fl_client_step(self._handle(), ctypes.byref(nxt))
        if rc == _native.FL_ERR_AGAIN:
            return None
        self._check(rc, "fl_client_step")
        return nxt.value

    def run(self, max_wait_ms=60000):
        """Blocking loop until a round this client took part in ends (True), or until nothing
        is due within max_wait_ms (False). Interrupts and sticky failures raise, and so does
        an exchange given up after retry_timeout_ms (FlotillaError FL_ERR_TIMEOUT; not
        sticky: the client checks in again on a later call)."""
        rc = self._lib.fl_client_run(self._handle(), int(max_wait_ms))
        if rc == _native.FL_ERR_AGAIN:
            return False
        self._check(rc, "fl_client_run")
        return True

    def interrupt(self):
        """Makes a running step/run return FL_ERR_CANCELLED (safe from any thread)."""
        h = self._h
        if h is not None:
            self._lib.fl_client_interrupt(h)

    def stats(self):
        s = _native.fl_client_stats()
        s.struct_size = ctypes.sizeof(s)
        self._check(self._lib.fl_client_stats_get(self._handle(), ctypes.byref(s)),
                    "fl_client_stats_get")
        st = s.state
        return ClientStats(
            state=_native.CLIENT_STATES[st] if 0 <= st < len(_native.CLIENT_STATES) else str(st),
            checkins=s.checkins, selected=s.selected, rounds_completed=s.rounds_completed,
            rounds_failed=s.rounds_failed, uploads=s.uploads,
            transient_errors=s.transient_errors, bytes_sent=s.bytes_sent,
            bytes_received=s.bytes_received, next_action_ms=s.next_action_ms,
            round_id=s.round_id, model_version=s.model_version,
            examples_trained=s.examples_trained, train_loss=s.train_loss,
            last_error=_native.STATUS_NAMES[s.last_error]
            if 0 <= s.last_error < len(_native.STATUS_NAMES) else str(s.last_error),
            retry_timeouts=s.retry_timeouts)

    def token(self):
        """The client token after enrollment (keep it in secure storage), or None."""
        buf = ctypes.create_string_buffer(self._lib.fl_client_token_max_chars() + 1)
        rc = self._lib.fl_client_token(self._handle(), buf, len(buf))
        if rc == _native.FL_ERR_NOT_FOUND:
            return None
        self._check(rc, "fl_client_token")
        return buf.value.decode()

    def start_worker(self):
        self._check(self._lib.fl_client_worker_start(self._handle()), "fl_client_worker_start")

    def stop_worker(self):
        if self._h is not None:
            self._lib.fl_client_worker_stop(self._h)
