#ifndef FLOTILLA_VERSION_H
#define FLOTILLA_VERSION_H

/* Compile-time version of the headers; compare with fl_version_number() at run time. */
#define FL_VERSION_MAJOR 0
#define FL_VERSION_MINOR 1
#define FL_VERSION_PATCH 0
#define FL_VERSION_STRING "0.1.0"
#define FL_VERSION_NUMBER (FL_VERSION_MAJOR * 1000000 + FL_VERSION_MINOR * 1000 + FL_VERSION_PATCH)
#define FL_VERSION_AT_LEAST(M, m, p) (FL_VERSION_NUMBER >= ((M) * 1000000 + (m) * 1000 + (p)))

#endif /* FLOTILLA_VERSION_H */
