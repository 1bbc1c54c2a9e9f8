/* Audit entries: canonical JSON, the schema of each entry type, and the rules an entry
 * must satisfy given what the log already says about its population. The same code runs
 * when the store appends an entry (so an honest store never writes a bad one) and when
 * flotilla-audit verifies a bundle offline. docs/audit.md lists every field and rule. */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "audit_internal.h"

/* json_is_<type>(v) with its NULL test in one place rather than at every call: v is NULL
 * for a missing field. */
static int is_type(const json_t *v, json_type t) {
    return v && json_typeof(v) == t;
}

/* ---- canonical JSON ---- */

fl_status fl__store_audit_dump(const fl_allocator *alloc, const json_t *v, size_t max, char **out,
                               size_t *len) {
    *out = NULL;
    *len = 0;
    size_t n = json_dumpb(v, NULL, 0, FL__AUDIT_JSON_FLAGS);
    if (n == 0)
        return FL_ERR_NOMEM; /* Jansson reports failure as 0; our values are never empty */
    if (n > max)
        return FL_ERR_TOO_LARGE;
    char *buf = fl__alloc(alloc, n + 1);
    if (!buf)
        return FL_ERR_NOMEM;
    if (json_dumpb(v, buf, n, FL__AUDIT_JSON_FLAGS) != n) {
        fl__free(alloc, buf, n + 1);
        return FL_ERR_NOMEM;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return FL_OK;
}

/* Only objects, arrays, strings, integers and null are canonical (reals and booleans are
 * not used, so there is one encoding of every value). */
static int values_ok(const json_t *v, int depth) {
    if (depth > 8)
        return 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) { // GCOVR_EXCL_BR_LINE Jansson macro internals
            if (!values_ok(x, depth + 1))
                return 0;
        }
        return 1;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) { // GCOVR_EXCL_BR_LINE Jansson macro internals
            if (!values_ok(x, depth + 1))
                return 0;
        }
        return 1;
    }
    case JSON_STRING:
    case JSON_INTEGER:
    case JSON_NULL:
        return 1;
    default:
        return 0;
    }
}

/* Compares a dump, chunk by chunk, with the original bytes. */
struct cmp_state {
    const char *p; /* original bytes */
    size_t len;    /* their length */
    size_t at;     /* bytes compared so far */
    int differs;   /* set at the first difference */
};

static int cmp_chunk(const char *buf, size_t size, void *data) {
    struct cmp_state *cs = data;
    if (cs->differs || size > cs->len - cs->at || memcmp(cs->p + cs->at, buf, size) != 0) {
        cs->differs = 1;
        return -1;
    }
    cs->at += size;
    return 0;
}

static fl_status parse_once(const char *p, size_t len, json_t **out, char *why, size_t why_len) {
    *out = NULL;
    if (len == 0 || len > FL_STORE_AUDIT_ENTRY_MAX * 2) {
        snprintf(why, why_len, "line of %zu bytes", len);
        return FL_ERR_FORMAT;
    }
    if (memchr(p, '\0', len)) {
        snprintf(why, why_len, "NUL byte in line");
        return FL_ERR_FORMAT;
    }
    json_error_t jerr;
    json_t *v = json_loadb(p, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v) {
        /* Jansson 2.14 leaves the text empty when an allocation fails (some of its
         * allocation failures it reports as syntax errors instead: see below). */
        if (jerr.text[0] == '\0') {
            snprintf(why, why_len, "out of memory parsing JSON");
            return FL_ERR_NOMEM;
        }
        snprintf(why, why_len, "not JSON: %s at column %d", jerr.text, jerr.column);
        return FL_ERR_FORMAT;
    }
    fl_status r = FL_OK;
    if (!is_type(v, JSON_OBJECT) || !values_ok(v, 0)) {
        snprintf(why, why_len, "not an object of strings, integers and null");
        r = FL_ERR_FORMAT;
        goto out;
    }
    /* Canonical: dumping it again must give the same bytes (compared as Jansson streams the
     * dump, without a copy). */
    struct cmp_state cs = {p, len, 0, 0};
    /* cs.differs with a 0 return is unreachable: cmp_chunk returns -1 when it sets it */
    if (json_dump_callback(v, cmp_chunk, &cs, FL__AUDIT_JSON_FLAGS) != 0 || // GCOVR_EXCL_BR_LINE
        cs.differs || cs.at != len) {                                       // GCOVR_EXCL_BR_LINE
        snprintf(why, why_len, "not canonical JSON (keys sorted, no spaces, ASCII escapes)");
        r = FL_ERR_FORMAT;
    }
out:
    if (r == FL_OK)
        *out = v;
    else
        json_decref(v);
    return r;
}

/* Under memory pressure Jansson 2.14 can report a failed allocation as a syntax error
 * ("string or '}' expected"), drop a character from a string it is reading (its lexer does
 * not check that append: a key read as "checkpoint") or stop a dump short; each would make
 * a sound line look damaged. A format error is therefore believed only when a second parse
 * finds one too (two failed allocations in a row can still mislead it). */
fl_status fl__store_audit_parse(const char *p, size_t len, json_t **out, char *why,
                                size_t why_len) {
    fl_status r = parse_once(p, len, out, why, why_len);
    return r == FL_ERR_FORMAT ? parse_once(p, len, out, why, why_len) : r;
}

/* ---- fixed point and hex ---- */

static int64_t fixed(double x, double scale, int mode) {
    if (!isfinite(x) || x < 0)
        return -1;
    double y = x * scale;
    if (!(y < 9.0e18))
        return -1;
    y = mode < 0 ? floor(y) : mode > 0 ? ceil(y) : nearbyint(y);
    return (int64_t)y;
}
int64_t fl__store_audit_fixed_ceil(double x, double scale) {
    return fixed(x, scale, 1);
}
int64_t fl__store_audit_fixed_floor(double x, double scale) {
    return fixed(x, scale, -1);
}
int64_t fl__store_audit_fixed_round(double x, double scale) {
    return fixed(x, scale, 0);
}

void fl__store_audit_hex(char *out, const uint8_t *p, size_t n) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

/* e9 fixed point as a decimal, for messages. */
static const char *e9s(char buf[32], int64_t v) {
    snprintf(buf, 32, "%" PRId64 ".%09" PRId64, v / 1000000000, v % 1000000000);
    return buf;
}

/* ---- population state ---- */

void fl__store_audit_pop_init(struct fl__store_audit_pop *p) {
    memset(p, 0, sizeof(*p));
}

void fl__store_audit_pop_free(struct fl__store_audit_pop *p) {
    if (p && p->allowed) {
        json_decref(p->allowed);
        p->allowed = NULL;
    }
}

/* ---- schema helpers ----
 * Each returns 0 when the field is present with the right type and range, -1 with why. */

struct ck {
    char *why;
    size_t why_len;
};

static int bad(struct ck *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct ck *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, c->why_len, fmt, ap);
    va_end(ap);
    return -1;
}

/* obj must have exactly the keys in names (n of them). */
static int keys_exact(struct ck *c, const json_t *obj, const char *what, const char *const *names,
                      size_t n) {
    if (!is_type(obj, JSON_OBJECT))
        return bad(c, "%s is not an object", what);
    if (json_object_size(obj) != n) {
        for (size_t i = 0; i < n; i++)
            if (!json_object_get(obj, names[i]))
                return bad(c, "%s lacks field \"%s\"", what, names[i]);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)obj, k, v) { // GCOVR_EXCL_BR_LINE Jansson macro internals
            size_t i = 0;
            while (i < n && strcmp(k, names[i]) != 0)
                i++;
            if (i == n)
                return bad(c, "%s has unknown field \"%.40s\"", what, k);
        }
        return bad(c, "%s has the wrong fields", what);
    }
    for (size_t i = 0; i < n; i++)
        if (!json_object_get(obj, names[i]))
            return bad(c, "%s lacks field \"%s\"", what, names[i]);
    return 0;
}

static int get_int(struct ck *c, const json_t *obj, const char *key, int64_t min, int64_t max,
                   int64_t *out) {
    json_t *v = json_object_get(obj, key);
    *out = 0; /* defined on every path, so callers' error returns read no garbage */
    if (!is_type(v, JSON_INTEGER))
        return bad(c, "\"%s\" is not an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < min || x > max)
        return bad(c, "\"%s\" = %lld is out of range [%lld, %lld]", key, (long long)x,
                   (long long)min, (long long)max);
    *out = (int64_t)x;
    return 0;
}

/* String of 1..max printable ASCII bytes (0x20..0x7e when spaces, else 0x21..0x7e). */
/* String of 1..max bytes. spaces 0: printable ASCII 0x21..0x7e; 1: also space; 2: any
 * byte >= 0x20 but DEL (UTF-8 text, which Jansson has already validated: population
 * names, as the store accepts them). */
static int text_ok(const char *s, size_t n, size_t max, int spaces) {
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < (spaces ? 0x20 : 0x21) || ch == 0x7f || (ch > 0x7e && spaces < 2))
            return 0;
    }
    return 1;
}

static int get_str(struct ck *c, const json_t *obj, const char *key, size_t max, int spaces,
                   const char **out) {
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!is_type(v, JSON_STRING))
        return bad(c, "\"%s\" is not a string", key);
    const char *s = json_string_value(v);
    /* text_ok reads all json_string_length bytes, so an embedded NUL is refused there. */
    if (!text_ok(s, json_string_length(v), max, spaces))
        return bad(c, "\"%s\" is not 1..%zu printable ASCII characters", key, max);
    *out = s;
    return 0;
}

static int get_hex64(struct ck *c, const json_t *obj, const char *key, const char **out) {
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!is_type(v, JSON_STRING) || json_string_length(v) != 64)
        return bad(c, "\"%s\" is not 64 hex digits", key);
    const char *s = json_string_value(v);
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return bad(c, "\"%s\" is not 64 lowercase hex digits", key);
    *out = s;
    return 0;
}

static int get_regions_array(struct ck *c, const json_t *obj, const char *key) {
    json_t *a = json_object_get(obj, key);
    if (!is_type(a, JSON_ARRAY) || json_array_size(a) > 1000)
        return bad(c, "\"%s\" is not an array of at most 1000 regions", key);
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x) { // GCOVR_EXCL_BR_LINE Jansson macro internals
        if (!is_type(x, JSON_STRING) ||
            !text_ok(json_string_value(x), json_string_length(x), 64, 0))
            return bad(c, "\"%s\"[%zu] is not a region name", key, i);
    }
    return 0;
}

/* A {"sha256": hex, "version": n} model reference, or null when nullable. */
static int get_model(struct ck *c, const json_t *obj, const char *key, int nullable,
                     int64_t *version, const char **sha) {
    static const char *const k[] = {"sha256", "version"};
    json_t *m = json_object_get(obj, key);
    *version = 0;
    *sha = NULL;
    if (is_type(m, JSON_NULL) && nullable)
        return 0;
    if (keys_exact(c, m, key, k, 2) || get_int(c, m, "version", 1, INT64_MAX, version) ||
        get_hex64(c, m, "sha256", sha))
        return -1;
    return 0;
}

static const char *const common_keys[] = {"population", "population_id", "seq",
                                          "time",       "type",          "v"};
#define N_COMMON 6

/* Checks the fields every population entry has and that they name pop. */
static int check_pop_ref(struct ck *c, const json_t *e, const struct fl__store_audit_pop *pop,
                         int creating) {
    const char *name = NULL;
    int64_t id = 0;
    if (get_str(c, e, "population", FL_STORE_NAME_MAX, 2, &name) ||
        get_int(c, e, "population_id", 1, INT64_MAX, &id))
        return -1;
    if (creating) {
        if (pop)
            return bad(c, "population %" PRId64 " was already created", id);
        return 0;
    }
    if (!pop)
        return bad(c, "population %" PRId64 " has no population_created entry before", id);
    if (strcmp(pop->name, name) != 0)
        return bad(c, "population %" PRId64 " is named \"%s\", not \"%.40s\"", id, pop->name, name);
    return 0;
}

static int check_terms(struct ck *c, const json_t *e, int creating,
                       const struct fl__store_audit_pop *pop) {
    static const char *const k[] = {"allowed_regions",
                                    "budget",
                                    "config_sha256",
                                    "population",
                                    "population_id",
                                    "seq",
                                    "time",
                                    "type",
                                    "v"};
    static const char *const kb[] = {"delta_e18", "epsilon_e9"};
    const char *sha;
    int64_t x;
    if (keys_exact(c, e, "entry", k, 9) || check_pop_ref(c, e, pop, creating) ||
        get_hex64(c, e, "config_sha256", &sha) || get_regions_array(c, e, "allowed_regions"))
        return -1;
    json_t *b = json_object_get(e, "budget");
    if (keys_exact(c, b, "budget", kb, 2) || get_int(c, b, "epsilon_e9", 1, INT64_MAX, &x) ||
        get_int(c, b, "delta_e18", 0, 999999999999999999LL, &x))
        return -1;
    return 0;
}

static int region_allowed(const json_t *allowed, const char *region) {
    if (!allowed || json_array_size(allowed) == 0)
        return 1;
    size_t i;
    json_t *x;
    json_array_foreach(allowed, i, x) { // GCOVR_EXCL_BR_LINE Jansson macro internals
        const char *a = json_string_value(x);
        if (a && (strcmp(a, "*") == 0 || strcmp(a, region) == 0))
            return 1;
    }
    return 0;
}

/* A round's secagg.norm_proof (added in 0.3): the ranges fl_store_audit_append_round
 * accepts. Failures are named "secagg.norm_proof: ...", since "bits" alone says little. */
static int check_norm_proof(struct ck *c, const json_t *np) {
    static const char *const kn[] = {"bits", "bound2", "dim", "weight_max"};
    int64_t x;
    if (keys_exact(c, np, "secagg.norm_proof", kn, 4))
        return -1;
    if (get_int(c, np, "bits", 2, 32, &x) || get_int(c, np, "bound2", 1, INT64_MAX, &x) ||
        get_int(c, np, "dim", 1, UINT32_MAX, &x) ||
        get_int(c, np, "weight_max", 1, UINT32_MAX, &x)) {
        char why[200];
        snprintf(why, sizeof(why), "%s", c->why);
        return bad(c, "secagg.norm_proof: %s", why);
    }
    return 0;
}

/* A round's active-mode fields (added after 0.3): "active" is the integer 1 (present only
 * in active mode; the format has no booleans, and a 0 would give semi-honest entries two
 * encodings) and "authority_key_sha256" 64 lowercase hex digits; both or neither (the
 * caller has checked that). Failures are named "secagg.active" / "secagg.authority_key_sha256". */
static int check_active(struct ck *c, const json_t *o) {
    const json_t *a = json_object_get(o, "active");
    const char *fp;
    if (!is_type(a, JSON_INTEGER) || json_integer_value(a) != 1)
        return bad(c, "secagg.active is not the integer 1 (the field is present only for "
                      "active-mode rounds)");
    if (get_hex64(c, o, "authority_key_sha256", &fp)) {
        char why[200];
        snprintf(why, sizeof(why), "%s", c->why);
        return bad(c, "secagg.authority_key_sha256: %s (SHA-256 of the device authority's key)",
                   why);
    }
    return 0;
}

static int check_round(struct ck *c, const json_t *e, const struct fl__store_audit_pop *pop,
                       int *budget) {
    static const char *const k[] = {"coordinator",
                                    "counts",
                                    "dp",
                                    "dropped_by_phase",
                                    "ended_at",
                                    "model_in",
                                    "model_out",
                                    "outcome",
                                    "population",
                                    "population_id",
                                    "privacy",
                                    "regions",
                                    "round",
                                    "round_id",
                                    "secagg",
                                    "seq",
                                    "started_at",
                                    "task_config_sha256",
                                    "time",
                                    "type",
                                    "v"};
    static const char *const kc[] = {"checked_in", "completed", "dropped", "selected"};
    static const char *const kd[] = {"advertise", "consistency", "masked", "share", "unmask"};
    static const char *const kdp[] = {"clip_norm_e9", "mechanism", "noise_multiplier_e9",
                                      "sampling_rate_e9", "steps"};
    static const char *const kp[] = {"budget_delta_e18", "budget_epsilon_e9", "delta_e18",
                                     "epsilon_spent_e9", "epsilon_total_e9"};
    const char *s, *outcome, *in_sha, *out_sha;
    int64_t round = 0, x = 0, t0 = 0, t1 = 0, in_v = 0, out_v = 0;
    char b1[32], b2[32];
    /* the caller has checked the population fields (check_pop_ref) */
    if (keys_exact(c, e, "round entry", k, 21) || get_int(c, e, "round", 1, INT64_MAX, &round) ||
        get_int(c, e, "round_id", 1, INT64_MAX, &x) || get_str(c, e, "coordinator", 64, 0, &s) ||
        get_str(c, e, "outcome", 16, 0, &outcome) || get_hex64(c, e, "task_config_sha256", &s) ||
        get_int(c, e, "started_at", 0, INT64_MAX, &t0) ||
        get_int(c, e, "ended_at", 0, INT64_MAX, &t1) ||
        get_model(c, e, "model_in", 1, &in_v, &in_sha) ||
        get_model(c, e, "model_out", 1, &out_v, &out_sha))
        return -1;
    int completed_round = strcmp(outcome, "completed") == 0;
    if (!completed_round && strcmp(outcome, "abandoned") != 0)
        return bad(c, "outcome \"%.20s\" is neither completed nor abandoned", outcome);
    if (round <= pop->last_round)
        return bad(c, "round %" PRId64 " does not come after round %" PRId64 " already logged",
                   round, pop->last_round);
    if (t0 && t1 && t1 < t0)
        return bad(c, "round ended before it started");

    /* Counts. */
    int64_t checked_in, selected, completed, dropped, sum = 0, v;
    json_t *o = json_object_get(e, "counts");
    if (keys_exact(c, o, "counts", kc, 4) ||
        get_int(c, o, "checked_in", 0, INT64_MAX / 8, &checked_in) ||
        get_int(c, o, "selected", 0, INT64_MAX / 8, &selected) ||
        get_int(c, o, "completed", 0, INT64_MAX / 8, &completed) ||
        get_int(c, o, "dropped", 0, INT64_MAX / 8, &dropped))
        return -1;
    if (selected > checked_in)
        return bad(c, "counts: selected %" PRId64 " > checked in %" PRId64, selected, checked_in);
    if (completed + dropped > selected || (completed_round && completed + dropped != selected))
        return bad(c, "counts: completed %" PRId64 " + dropped %" PRId64 " %s selected %" PRId64,
                   completed, dropped, completed_round ? "!=" : ">", selected);
    o = json_object_get(e, "dropped_by_phase");
    if (keys_exact(c, o, "dropped_by_phase", kd, 5))
        return -1;
    for (int i = 0; i < 5; i++) {
        if (get_int(c, o, kd[i], 0, INT64_MAX / 8, &v))
            return -1;
        sum += v;
    }
    if (sum != dropped)
        return bad(c, "dropouts per phase add up to %" PRId64 ", not to dropped %" PRId64, sum,
                   dropped);

    /* Secure aggregation. */
    o = json_object_get(e, "secagg");
    if (!is_type(o, JSON_NULL)) {
        int64_t n, kk, t;
        /* {k, n, t}, with norm proofs also norm_proof, in active mode also active and
         * authority_key_sha256 (json_object_get of a missing or non-object secagg is NULL:
         * keys_exact then names the fault) */
        const json_t *np = json_object_get(o, "norm_proof");
        const json_t *act = json_object_get(o, "active");
        const json_t *akey = json_object_get(o, "authority_key_sha256");
        const json_t *rs = json_object_get(o, "revealed_seeds");
        if ((act != NULL) != (akey != NULL))
            return bad(c, "secagg: \"%s\" without \"%s\" (active mode logs both, other "
                          "rounds neither)",
                       act ? "active" : "authority_key_sha256",
                       act ? "authority_key_sha256" : "active");
        const char *ks[7] = {"k", "n", "t"};
        size_t nks = 3;
        if (np)
            ks[nks++] = "norm_proof";
        if (act) {
            ks[nks++] = "active";
            ks[nks++] = "authority_key_sha256";
        }
        if (rs)
            ks[nks++] = "revealed_seeds";
        if (keys_exact(c, o, "secagg", ks, nks) || get_int(c, o, "n", 1, INT64_MAX / 8, &n) ||
            get_int(c, o, "k", 1, INT64_MAX / 8, &kk) || get_int(c, o, "t", 1, INT64_MAX / 8, &t) ||
            (np && check_norm_proof(c, np)) || (act && check_active(c, o)))
            return -1;
        if (rs && (!is_type(rs, JSON_INTEGER) || json_integer_value(rs) != 1))
            return bad(c, "secagg.revealed_seeds is not the integer 1 (the field is present "
                          "only for rounds with revealed pairwise seeds)");
        if (rs && np)
            return bad(c, "secagg: revealed_seeds with norm_proof (a revealed seed cannot be "
                          "checked, so no coordinator combines them)");
        if (!(t <= kk && kk <= n))
            return bad(c, "secagg: needs t <= k <= n, got t=%" PRId64 " k=%" PRId64 " n=%" PRId64,
                       t, kk, n);
        if (n > selected)
            return bad(c, "secagg: n=%" PRId64 " > selected %" PRId64, n, selected);
        if (completed_round && completed < t)
            return bad(c, "secagg: %" PRId64 " survivors < threshold t=%" PRId64, completed, t);
    }

    /* Differential privacy. */
    o = json_object_get(e, "dp");
    const char *mech;
    int64_t clip, noise, q, steps;
    if (keys_exact(c, o, "dp", kdp, 5) || get_str(c, o, "mechanism", 64, 0, &mech) ||
        get_int(c, o, "clip_norm_e9", 0, INT64_MAX, &clip) ||
        get_int(c, o, "noise_multiplier_e9", 0, INT64_MAX, &noise) ||
        get_int(c, o, "sampling_rate_e9", 0, 1000000000, &q) ||
        get_int(c, o, "steps", 0, INT64_MAX, &steps))
        return -1;
    int no_dp = strcmp(mech, "none") == 0;
    if (no_dp && (clip || noise || q || steps))
        return bad(c, "dp: mechanism none with parameters");
    if (!no_dp && (clip <= 0 || q <= 0 || steps < 1))
        return bad(c, "dp: %s needs clip_norm > 0, sampling_rate > 0 and steps >= 1", mech);

    o = json_object_get(e, "privacy");
    int64_t spent = 0, total = 0, delta = 0, beps = 0, bdelta = 0;
    if (keys_exact(c, o, "privacy", kp, 5) ||
        get_int(c, o, "epsilon_spent_e9", 0, INT64_MAX, &spent) ||
        get_int(c, o, "epsilon_total_e9", 0, INT64_MAX, &total) ||
        get_int(c, o, "delta_e18", 0, 999999999999999999LL, &delta) ||
        get_int(c, o, "budget_epsilon_e9", 1, INT64_MAX, &beps) ||
        get_int(c, o, "budget_delta_e18", 0, 999999999999999999LL, &bdelta))
        return -1;
    if (beps != pop->budget_eps_e9 || bdelta != pop->budget_delta_e18)
        return bad(c,
                   "privacy: budget (%s, %" PRId64 "e-18) is not the population's (%s, %" PRId64
                   "e-18)",
                   e9s(b1, beps), bdelta, e9s(b2, pop->budget_eps_e9), pop->budget_delta_e18);
    if (pop->eps_total_e9 > INT64_MAX - spent || pop->eps_total_e9 + spent != total)
        return bad(c, "privacy: epsilon total %s != previous total %s + spent %s", e9s(b1, total),
                   e9s(b2, pop->eps_total_e9), e9s((char[32]){0}, spent));
    if (no_dp && spent)
        return bad(c, "privacy: epsilon spent without a DP mechanism");
    if (!completed_round && spent)
        return bad(c, "privacy: an abandoned round released nothing but spent epsilon");
    if (total > beps) {
        *budget = 1;
        return bad(c, "privacy: epsilon total %s is over the budget %s", e9s(b1, total),
                   e9s(b2, beps));
    }
    if (delta > bdelta) {
        *budget = 1;
        return bad(c, "privacy: delta %" PRId64 "e-18 is over the budget %" PRId64 "e-18", delta,
                   bdelta);
    }

    /* Model lineage. */
    if (pop->has_model) {
        if (!in_sha || in_v != pop->model_version || strcmp(in_sha, pop->model_sha) != 0)
            return bad(
                c, "lineage: model in is not the population's current model (version %" PRId64 ")",
                pop->model_version);
    }
    if (completed_round) {
        if (!out_sha)
            return bad(c, "lineage: a completed round has no model out");
        if (in_sha && out_v == in_v)
            return bad(c, "lineage: model out is model in");
    } else if (out_sha) {
        return bad(c, "lineage: an abandoned round has a model out");
    }

    /* Regions. */
    o = json_object_get(e, "regions");
    if (!is_type(o, JSON_OBJECT) || json_object_size(o) > 1000)
        return bad(c, "\"regions\" is not an object of at most 1000 regions");
    const char *rk;
    json_t *rv;
    sum = 0;
    json_object_foreach(o, rk, rv) { // GCOVR_EXCL_BR_LINE Jansson macro internals
        if (!text_ok(rk, strlen(rk), 64, 0))
            return bad(c, "regions: bad region name");
        if (!is_type(rv, JSON_INTEGER) || json_integer_value(rv) < 1 ||
            json_integer_value(rv) > INT64_MAX / 8)
            return bad(c, "regions: count of \"%.64s\" is not a positive integer", rk);
        if (!region_allowed(pop->allowed, rk))
            return bad(c, "regions: \"%.64s\" is not an allowed region of the population", rk);
        sum += (int64_t)json_integer_value(rv);
        if (sum > INT64_MAX / 8)
            return bad(c, "regions: counts too large");
    }
    if (sum != selected)
        return bad(c, "regions: counts add up to %" PRId64 ", not to selected %" PRId64, sum,
                   selected);
    return 0;
}

static int check_refusal(struct ck *c, const json_t *e, const struct fl__store_audit_pop *pop,
                         int *budget) {
    static const char *const k[] = {"population", "population_id", "privacy", "round",
                                    "seq",        "time",          "type",    "v"};
    static const char *const kp[] = {"budget_delta_e18", "budget_epsilon_e9", "delta_e18",
                                     "epsilon_requested_e9", "epsilon_total_e9"};
    int64_t round = 0, total = 0, req = 0, delta = 0, beps = 0, bdelta = 0;
    char b1[32], b2[32];
    /* the caller has checked the population fields (check_pop_ref) */
    if (keys_exact(c, e, "budget_refused entry", k, 8) ||
        get_int(c, e, "round", 1, INT64_MAX, &round))
        return -1;
    json_t *o = json_object_get(e, "privacy");
    if (keys_exact(c, o, "privacy", kp, 5) ||
        get_int(c, o, "epsilon_total_e9", 0, INT64_MAX, &total) ||
        get_int(c, o, "epsilon_requested_e9", 0, INT64_MAX, &req) ||
        get_int(c, o, "delta_e18", 0, 999999999999999999LL, &delta) ||
        get_int(c, o, "budget_epsilon_e9", 1, INT64_MAX, &beps) ||
        get_int(c, o, "budget_delta_e18", 0, 999999999999999999LL, &bdelta))
        return -1;
    (void)budget;
    if (round <= pop->last_round)
        return bad(c, "refused round %" PRId64 " does not come after round %" PRId64, round,
                   pop->last_round);
    if (beps != pop->budget_eps_e9 || bdelta != pop->budget_delta_e18)
        return bad(c, "privacy: budget is not the population's");
    if (total != pop->eps_total_e9)
        return bad(c, "privacy: epsilon total %s is not the population's %s", e9s(b1, total),
                   e9s(b2, pop->eps_total_e9));
    if (req <= beps && delta <= bdelta)
        return bad(c, "privacy: a refusal within the budget (requested %s, budget %s)",
                   e9s(b1, req), e9s(b2, beps));
    return 0;
}

static int check_deleted(struct ck *c, const json_t *e) {
    static const char *const k[] = {"clients", "participations"};
    json_t *o = json_object_get(e, "deleted");
    int64_t x;
    if (keys_exact(c, o, "deleted", k, 2) || get_int(c, o, "clients", 0, INT64_MAX, &x) ||
        get_int(c, o, "participations", 0, INT64_MAX, &x))
        return -1;
    return 0;
}

int fl__store_audit_check(const json_t *e, int64_t seq, const struct fl__store_audit_pop *pop,
                          char *why, size_t why_len, int *budget) {
    struct ck c = {why, why_len};
    int64_t x;
    const char *type;
    *budget = 0;
    why[0] = '\0';
    if (!is_type(e, JSON_OBJECT))
        return bad(&c, "not an object");
    if (get_int(&c, e, "v", 1, 1, &x))
        return -1;
    if (get_int(&c, e, "seq", 0, INT64_MAX, &x))
        return -1;
    if (x != seq)
        return bad(&c, "seq is %" PRId64 " at position %" PRId64, x, seq);
    if (get_int(&c, e, "time", 0, INT64_MAX, &x) || get_str(&c, e, "type", 32, 0, &type))
        return -1;
    if (strcmp(type, "population_created") == 0)
        return check_terms(&c, e, 1, pop);
    if (strcmp(type, "config_changed") == 0)
        return check_terms(&c, e, 0, pop);
    if (strcmp(type, "model_registered") == 0) {
        static const char *const k[] = {"model", "population", "population_id", "seq", "time",
                                        "type",  "v"};
        int64_t v;
        const char *sha;
        if (keys_exact(&c, e, "model_registered entry", k, 7) || check_pop_ref(&c, e, pop, 0) ||
            get_model(&c, e, "model", 0, &v, &sha))
            return -1;
        return 0;
    }
    if (strcmp(type, "round") == 0) {
        if (check_pop_ref(&c, e, pop, 0))
            return -1;
        return check_round(&c, e, pop, budget);
    }
    if (strcmp(type, "budget_refused") == 0) {
        if (check_pop_ref(&c, e, pop, 0))
            return -1;
        return check_refusal(&c, e, pop, budget);
    }
    if (strcmp(type, "erasure") == 0) {
        static const char *const k[] = {"client", "deleted", "population", "population_id",
                                        "seq",    "time",    "type",       "v"};
        const char *p;
        if (keys_exact(&c, e, "erasure entry", k, 8) || check_pop_ref(&c, e, pop, 0) ||
            get_hex64(&c, e, "client", &p) || check_deleted(&c, e))
            return -1;
        return 0;
    }
    if (strcmp(type, "client_revoked") == 0) {
        static const char *const k[] = {"client", "population", "population_id", "revoked_at",
                                        "seq",    "time",       "type",          "v"};
        const char *p;
        int64_t at = 0;
        if (keys_exact(&c, e, "client_revoked entry", k, 8) || check_pop_ref(&c, e, pop, 0) ||
            get_hex64(&c, e, "client", &p) || get_int(&c, e, "revoked_at", 1, INT64_MAX, &at))
            return -1;
        if (at > (int64_t)json_integer_value(json_object_get(e, "time")))
            return bad(&c, "client_revoked: revoked_at is after the entry's time");
        return 0;
    }
    if (strcmp(type, "client_reinstated") == 0) {
        static const char *const k[] = {"client", "population", "population_id", "seq",
                                        "time",   "type",       "v"};
        const char *p;
        if (keys_exact(&c, e, "client_reinstated entry", k, 7) || check_pop_ref(&c, e, pop, 0) ||
            get_hex64(&c, e, "client", &p))
            return -1;
        return 0;
    }
    if (strcmp(type, "retention") == 0) {
        static const char *const k[] = {"cutoff", "deleted", "retention_ms", "seq", "time",
                                        "type",   "v"};
        int64_t cutoff = 0, keep = 0, time = 0;
        if (keys_exact(&c, e, "retention entry", k, 7) ||
            get_int(&c, e, "cutoff", INT64_MIN, INT64_MAX, &cutoff) ||
            get_int(&c, e, "retention_ms", 1, INT64_MAX, &keep) || check_deleted(&c, e))
            return -1;
        time = (int64_t)json_integer_value(json_object_get(e, "time"));
        if (keep > time || cutoff != time - keep)
            return bad(&c, "retention: cutoff is not time - retention_ms");
        return 0;
    }
    (void)common_keys;
    return bad(&c, "unknown entry type \"%.32s\"", type);
}

int64_t fl__store_audit_entry_pop(const json_t *e) {
    json_t *v = json_object_get(e, "population_id");
    return is_type(v, JSON_INTEGER) ? (int64_t)json_integer_value(v) : 0;
}

fl_status fl__store_audit_apply(const json_t *e, struct fl__store_audit_pop *pop) {
    const char *type = json_string_value(json_object_get(e, "type"));
    if (!type || !pop)
        return FL_OK;
    if (strcmp(type, "population_created") == 0 || strcmp(type, "config_changed") == 0) {
        json_t *b = json_object_get(e, "budget");
        if (strcmp(type, "population_created") == 0) {
            pop->id = fl__store_audit_entry_pop(e);
            pop->eps_total_e9 = 0;
            pop->last_round = 0;
            pop->has_model = 0;
        }
        snprintf(pop->name, sizeof(pop->name), "%s",
                 json_string_value(json_object_get(e, "population")));
        pop->budget_eps_e9 = (int64_t)json_integer_value(json_object_get(b, "epsilon_e9"));
        pop->budget_delta_e18 = (int64_t)json_integer_value(json_object_get(b, "delta_e18"));
        if (pop->allowed)
            json_decref(pop->allowed);
        pop->allowed = json_incref(json_object_get(e, "allowed_regions"));
    } else if (strcmp(type, "model_registered") == 0) {
        json_t *m = json_object_get(e, "model");
        pop->has_model = 1;
        pop->model_version = (int64_t)json_integer_value(json_object_get(m, "version"));
        snprintf(pop->model_sha, sizeof(pop->model_sha), "%s",
                 json_string_value(json_object_get(m, "sha256")));
    } else if (strcmp(type, "round") == 0) {
        json_t *p = json_object_get(e, "privacy");
        pop->last_round = (int64_t)json_integer_value(json_object_get(e, "round"));
        pop->eps_total_e9 = (int64_t)json_integer_value(json_object_get(p, "epsilon_total_e9"));
        json_t *m = json_object_get(e, "model_out");
        if (is_type(m, JSON_OBJECT)) {
            pop->has_model = 1;
            pop->model_version = (int64_t)json_integer_value(json_object_get(m, "version"));
            snprintf(pop->model_sha, sizeof(pop->model_sha), "%s",
                     json_string_value(json_object_get(m, "sha256")));
        }
    } else if (strcmp(type, "budget_refused") == 0) {
        json_t *p = json_object_get(e, "privacy");
        pop->eps_total_e9 = (int64_t)json_integer_value(json_object_get(p, "epsilon_total_e9"));
    }
    return FL_OK;
}
