#ifndef FLOTILLA_AUDIT_TOOL_H
#define FLOTILLA_AUDIT_TOOL_H
/* flotilla-audit internals shared by its source files. */
#include <stdio.h>

#include <jansson.h>

#include "flotilla/storage.h"

/* A bundle loaded for the tool: bytes, the library's handle, its verdict and the entries
 * parsed with Jansson (an array of objects, in order). */
struct tool_bundle {
    char *path;                     /* file it came from */
    unsigned char *bytes;           /* whole file */
    size_t len;                     /* its size */
    fl_store_audit_bundle *b;       /* library handle (NULL if it did not open) */
    fl_store_audit_verdict verdict; /* result of verification */
    fl_status status;               /* FL_OK when verified */
    json_t *entries;                /* parsed entries (unparseable ones are JSON null) */
    char sha256[65];                /* SHA-256 of the bundle file, hex */
};

/* Loads and verifies path (trusted_vkey may be NULL); with parse set, also parses every
 * entry into tb->entries (show, export and report hold them all in memory: fine for the
 * 10^5 entries of years of rounds; verify alone streams). Returns 0, or -1 when the file
 * cannot be read (message on stderr). A bundle that fails verification still loads. */
int tool_bundle_load(struct tool_bundle *tb, const char *path, const char *trusted_vkey, int parse);
void tool_bundle_free(struct tool_bundle *tb);

/* Set by tool_nomem() when an allocation failed while writing output: the command's output
 * is incomplete and the tool exits 2 saying so. */
extern int tool_oom;
void tool_nomem(void);

/* Formatting helpers. */
void tool_fmt_time(char out[32], long long ms);         /* ISO 8601 UTC, "-" for 0 */
void tool_fmt_e9(char out[40], long long v);            /* 1e-9 fixed point, trimmed */
void tool_fmt_e18(char out[40], long long v);           /* 1e-18 fixed point, as %g */
long long tool_int(const json_t *o, const char *path);  /* "a.b" lookup, 0 if absent */
const char *tool_str(const json_t *o, const char *key); /* "" if absent */

/* Commands. Each returns the process exit status. */
int tool_show(struct tool_bundle *tb, FILE *out, long long from_round, long long to_round,
              const char *population, long long from_seq, long long to_seq);
int tool_export(struct tool_bundle *tb, FILE *out, int csv);
int tool_report(struct tool_bundle *tb, FILE *out);

#endif
