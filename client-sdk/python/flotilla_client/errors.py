"""The exception every failing SDK call raises, carrying the fl_status code, its name and the
handle's error message (fl_client_*errmsg())."""

from . import _native


def status_name(code):
    """Symbolic name of an fl_status code, e.g. "FL_ERR_MISUSE" (from the library's
    fl_client_status_name when it exports it, else the binding's table)."""
    opt = _native.lib().optional
    f = opt.get("fl_client_status_name") or opt.get("fl_status_name")
    if f is not None:
        name = f(int(code)).decode()
        if name != "FL_ERR_UNKNOWN":  # the library's name for codes it does not know
            return name
    elif 0 <= code < len(_native.STATUS_NAMES):
        return _native.STATUS_NAMES[code]
    return "FL_STATUS_%d" % code


def status_str(code):
    """English description of an fl_status code (fl_client_status_str), or None when the
    loaded library predates it."""
    opt = _native.lib().optional
    f = opt.get("fl_client_status_str") or opt.get("fl_status_str")
    return f(int(code)).decode() if f is not None else None


class FlotillaError(Exception):
    """An SDK call returned something other than FL_OK.

    status   the fl_status code (int)
    name     its symbolic name ("FL_ERR_MISUSE", ...)
    message  the handle's detail message at the time of the failure
    call     the C function that failed
    """

    def __init__(self, status, message, call=""):
        self.status = int(status)
        self.name = status_name(self.status)
        self.message = message
        self.call = call
        super().__init__("%s%s: %s" % (call + ": " if call else "", self.name, message))


def check(rc, call, errmsg):
    """Raises FlotillaError unless rc is FL_OK. errmsg is a zero-argument callable that reads
    the handle's message (called only on failure, before anything else touches the handle)."""
    if rc != 0:
        msg = errmsg()
        if isinstance(msg, bytes):
            msg = msg.decode("utf-8", "replace")
        raise FlotillaError(rc, msg, call)
