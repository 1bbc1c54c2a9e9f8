#include <stdio.h>
#include <string.h>

#include "fl_internal.h"

fl_status fl__err_set(struct fl__err *err, fl_status code, const char *fmt, ...) {
    if (!err)
        return code;
    err->code = code;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    } else {
        snprintf(err->msg, sizeof(err->msg), "%s", fl_status_str(code));
    }
    return code;
}

void fl__err_clear(struct fl__err *err) {
    if (!err)
        return;
    err->code = FL_OK;
    err->msg[0] = '\0';
}

const char *fl__err_msg(const struct fl__err *err) {
    if (!err)
        return fl_status_str(FL_ERR_MISUSE);
    if (err->msg[0])
        return err->msg;
    return fl_status_str(err->code);
}

void fl__log(const fl_logger *lg, fl_log_level level, const char *fmt, ...) {
    if (!lg || !lg->fn || level < lg->min_level)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    lg->fn(lg->user, level, buf);
}
