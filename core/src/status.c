#include "flotilla/common.h"

struct status_entry {
    const char *name;
    const char *text;
};

static const struct status_entry k_status[FL_STATUS_COUNT] = {
    [FL_OK] = {"FL_OK", "success"},
    [FL_ERR_NOMEM] = {"FL_ERR_NOMEM", "out of memory"},
    [FL_ERR_MISUSE] = {"FL_ERR_MISUSE", "bad argument or call out of order"},
    [FL_ERR_FORMAT] = {"FL_ERR_FORMAT", "malformed input"},
    [FL_ERR_IO] = {"FL_ERR_IO", "I/O error"},
    [FL_ERR_AGAIN] = {"FL_ERR_AGAIN", "would block, try again"},
    [FL_ERR_CANCELLED] = {"FL_ERR_CANCELLED", "cancelled"},
    [FL_ERR_NOT_FOUND] = {"FL_ERR_NOT_FOUND", "not found"},
    [FL_ERR_EXISTS] = {"FL_ERR_EXISTS", "already exists"},
    [FL_ERR_CRYPTO] = {"FL_ERR_CRYPTO", "cryptographic check failed"},
    [FL_ERR_STATE] = {"FL_ERR_STATE", "not valid in the current state"},
    [FL_ERR_RANGE] = {"FL_ERR_RANGE", "value out of range"},
    [FL_ERR_BUDGET] = {"FL_ERR_BUDGET", "privacy budget exceeded"},
    [FL_ERR_ABORTED] = {"FL_ERR_ABORTED", "protocol aborted"},
    [FL_ERR_PROTOCOL] = {"FL_ERR_PROTOCOL", "protocol violation"},
    [FL_ERR_AUTH] = {"FL_ERR_AUTH", "authentication required or failed"},
    [FL_ERR_TOO_LARGE] = {"FL_ERR_TOO_LARGE", "input too large"},
    [FL_ERR_UNSUPPORTED] = {"FL_ERR_UNSUPPORTED", "not supported by this build"},
    [FL_ERR_TIMEOUT] = {"FL_ERR_TIMEOUT", "deadline passed"},
    [FL_ERR_BUSY] = {"FL_ERR_BUSY", "resource busy"},
    [FL_ERR_CORRUPT] = {"FL_ERR_CORRUPT", "stored data is corrupt"},
    [FL_ERR_INTERNAL] = {"FL_ERR_INTERNAL", "internal error"},
};

const char *fl_status_str(fl_status code) {
    if ((unsigned)code >= FL_STATUS_COUNT || !k_status[code].text)
        return "unknown status";
    return k_status[code].text;
}

const char *fl_status_name(fl_status code) {
    if ((unsigned)code >= FL_STATUS_COUNT || !k_status[code].name)
        return "FL_ERR_UNKNOWN";
    return k_status[code].name;
}
