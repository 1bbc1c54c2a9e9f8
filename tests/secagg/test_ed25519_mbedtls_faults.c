/* Ed25519 on the mbedTLS backend (secagg/src/ed25519_mbedtls.c) when mbedTLS fails, and on
 * the verifier inputs whose result lands on the edge of the Wei25519 arithmetic:
 *   - constructed signatures (built here with libsodium's own scalar and point arithmetic)
 *     whose check [S]B - [k]A is the identity (k odd and even), the point of order 2
 *     (a key with an order-2 component), or whose intermediate [S]B - [k-1]A is the
 *     identity (a valid signature with R = -A): each decision is asserted and equal to
 *     libsodium's;
 *   - the one-time curve construction failing at one of its mbedTLS allocations (each picked
 *     one in turn, see "which allocations to fail"), each in a forked child (the
 *     construction runs once per process): the group stays unavailable and keypair, sign,
 *     verify and fl_secagg_signing_keygen all fail;
 *   - allocation-failure walks over keypair, sign and verify (the constructed cases
 *     included) and over fl_secagg_signing_keygen / fl_secagg_cert_issue on the mbedTLS
 *     backend, failing each picked allocation of a call in turn: every failed call
 *     returns -1 (FL_ERR_CRYPTO for the public calls), a failed sign leaves a
 *     zeroed signature, no failure ever turns a rejection into an acceptance, and the same
 *     call succeeds with the right output afterwards. Leaks: ASan's leak check at exit;
 *   - the same walks over the backend's X25519 (keypair, shared secret) and HKDF, the other
 *     entries whose mbedTLS calls allocate.
 *
 * mbedTLS 2.28 as packaged by Debian is built without MBEDTLS_PLATFORM_MEMORY, so its
 * mbedtls_calloc is the C library's calloc, called through the dynamic linker. This
 * executable therefore defines calloc itself (the executable's definition takes precedence
 * over libc's, and over the sanitizer's): it counts calls while a walk is armed, fails the
 * chosen one and otherwise allocates with malloc. Only mbedTLS calls calloc inside the
 * backend functions walked here (they do not allocate themselves), and
 * test_hook_sees_mbedtls checks that the hook really intercepts mbedTLS. Skipped when the
 * mbedTLS backend is not built. */

#include <errno.h>
#include <execinfo.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sodium.h>

#include "crypto.h"
#include "fl_test.h"
#include "test_sa_harness.h"
#if defined(FL_HAVE_MBEDTLS_BUILD)
#include "ed25519_mbedtls.h"
#endif

/* ---- the failing calloc ---- */

static int hook_armed;    /* count (and maybe fail) calloc calls */
static long hook_fail_at; /* 1-based call to fail while armed; 0 = none */
static long hook_calls;   /* calloc calls since the hook was armed */
static long hook_failed;  /* 1 once the armed call was failed */
static int hook_busy;     /* inside the hook's own bookkeeping: allocate plainly */

/* Through a volatile pointer so the compiler cannot fold malloc + memset back into calloc. */
static void *(*volatile hook_malloc)(size_t) = malloc;

static void hook_record(long index);

__attribute__((visibility("default"))) void *calloc(size_t n, size_t size) {
    if (size != 0 && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    if (hook_armed && !hook_busy) {
        ++hook_calls;
        if (hook_calls == hook_fail_at) {
            hook_failed = 1;
            errno = ENOMEM;
            return NULL;
        }
        hook_busy = 1;
        hook_record(hook_calls);
        hook_busy = 0;
    }
    size_t bytes = n * size;
    void *p = hook_malloc(bytes != 0 ? bytes : 1);
    if (p)
        memset(p, 0, bytes);
    return p;
}

static void hook_arm(long n) {
    hook_calls = 0;
    hook_failed = 0;
    hook_fail_at = n;
    hook_armed = 1;
}

/* Disarms; returns 1 if the armed allocation was reached (and failed). */
static int hook_disarm(void) {
    hook_armed = 0;
    hook_fail_at = 0;
    return (int)hook_failed;
}

/* ---- which allocations to fail ---- */

/* A clean call makes thousands of allocations, nearly all inside mbedTLS's scalar
 * multiplications, so failing each in turn (and rerunning the call each time) is quadratic
 * and slow under ASan. A counting run first records, for every allocation, the chain of
 * return addresses inside this executable (the Ed25519 code and its callers; mbedTLS's own
 * frames are left out): an allocation whose chain was not seen before is the first one of a
 * distinct path through ed25519_mbedtls.c, and is picked. The first WALK_HEAD allocations
 * and every WALK_STRIDE-th one are picked as well, so short calls are walked in full and
 * failures deep inside mbedTLS's loops are exercised too. */
#define WALK_HEAD 8
#define WALK_STRIDE 97
#define MAX_PICKS 4096

extern char __executable_start, etext; /* GNU ld: this executable's text */

static int hook_recording;       /* record picks during this armed run */
static long picks[MAX_PICKS];    /* allocation indices to fail, ascending */
static uint64_t seen[MAX_PICKS]; /* hashes of the address chains recorded */
static size_t npicks, nseen;

static void hook_record(long index) {
    if (!hook_recording)
        return;
    void *fr[64];
    int nf = backtrace(fr, 64);
    uint64_t h = 1469598103934665603ull;
    for (int i = 1; i < nf; i++) { /* fr[0] is this hook */
        uintptr_t a = (uintptr_t)fr[i];
        if (a >= (uintptr_t)&__executable_start && a < (uintptr_t)&etext)
            h = (h ^ a) * 1099511628211ull;
    }
    int fresh = 1;
    for (size_t i = 0; i < nseen && fresh; i++)
        fresh = seen[i] != h;
    if (fresh && nseen < MAX_PICKS)
        seen[nseen++] = h;
    if ((fresh || index <= WALK_HEAD || index % WALK_STRIDE == 0) && npicks < MAX_PICKS)
        picks[npicks++] = index;
}

/* Starts a counting run that records picks; returns after hook_arm(0). */
static void picks_start(void) {
    void *fr[4];
    backtrace(fr, 4); /* its one-time setup (it may load libgcc_s) outside the count */
    npicks = nseen = 0;
    hook_recording = 1;
    hook_arm(0);
}

static long picks_end(void) {
    long calls = hook_calls;
    hook_disarm();
    hook_recording = 0;
    if (npicks >= MAX_PICKS)
        fail_msg("more than %d picks", MAX_PICKS);
    return calls;
}

/* ---- shared state ---- */

static const struct fl__sa_crypto *S, *M; /* sodium-openssl (reference), mbedtls */

static int setup(void **state) {
    (void)state;
    S = fl__sa_crypto_get(FL__SA_BACKEND_SODIUM);
    M = fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS);
    return S && sodium_init() >= 0 ? 0 : -1;
}

#define NEED_MBEDTLS()                                                                             \
    do {                                                                                           \
        if (!M) {                                                                                  \
            print_message("mbedtls backend not built: skipped\n");                                 \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

static uint64_t rng_state = 0x25519f;

static void fill(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(sa_rng_next(&rng_state) >> 24);
}

static int all_zero(const uint8_t *p, size_t n) {
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

/* ---- constructed verifier inputs (libsodium arithmetic) ---- */

/* The point of order 2, (0, -1): y = p - 1, sign 0. */
static const uint8_t order2_enc[32] = {
    0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};

struct vcase {
    const char *what;
    uint8_t pk[32];
    uint8_t sig[64];
    uint8_t msg[16];
    int expect; /* 0 accept, -1 reject: libsodium's decision, asserted */
};

/* a mod L for the secret scalar of seed (RFC 8032 5.1.5 clamping). */
static void secret_scalar(uint8_t a[32], const uint8_t seed[32]) {
    uint8_t h[64];
    crypto_hash_sha512(h, seed, 32);
    h[0] &= 248;
    h[31] &= 127;
    h[31] |= 64;
    memset(h + 32, 0, 32);
    crypto_core_ed25519_scalar_reduce(a, h);
}

/* k = SHA-512(R || A || M) mod L. */
static void challenge(uint8_t k[32], const uint8_t r[32], const uint8_t pk[32], const uint8_t *msg,
                      size_t len) {
    crypto_hash_sha512_state st;
    uint8_t h[64];
    crypto_hash_sha512_init(&st);
    crypto_hash_sha512_update(&st, r, 32);
    crypto_hash_sha512_update(&st, pk, 32);
    crypto_hash_sha512_update(&st, msg, len);
    crypto_hash_sha512_final(&st, h);
    crypto_core_ed25519_scalar_reduce(k, h);
}

/* Draws messages until k = H(R || A || M) has the wanted parity; returns k in k_out. */
static void pick_msg(struct vcase *c, const uint8_t r[32], int parity, uint8_t k[32]) {
    for (int i = 0; i < 256; i++) {
        fill(c->msg, sizeof(c->msg));
        challenge(k, r, c->pk, c->msg, sizeof(c->msg));
        if ((k[0] & 1) == parity)
            return;
    }
    fail_msg("no message with k of parity %d in 256 draws", parity);
}

enum { N_CASES = 5 };

/* Builds the cases. With A = [a]B and R any point (an honest R here):
 *   0, 1: S = k a, k odd / even: [S]B - [k]A = O, which encodes as the identity != R: reject;
 *   2: R = -A (pk with its sign bit flipped), k even, S = (k - 1) a: [S]B - [k-1]A = O on
 *      the way, and [S]B - [k]A = -A = R: a valid signature, accept;
 *   3: A' = A + T2 (T2 of order 2; A' is a mixed-order key, not on the blocklist), k odd,
 *      S = k a: [S]B - [k]A' = -[k]T2 = T2, which encodes as order2_enc != R: reject;
 *   4: an honest signature with one bit of S flipped: reject. */
static void build_cases(struct vcase c[N_CASES]) {
    uint8_t seed[32], pk[32], sk[64], a[32], k[32], one[32] = {1}, km1[32], r[32], sig[64];
    fill(seed, sizeof(seed));
    assert_int_equal(crypto_sign_ed25519_seed_keypair(pk, sk, seed), 0);
    secret_scalar(a, seed);
    assert_int_equal(crypto_sign_ed25519_detached(sig, NULL, (const uint8_t *)"R", 1, sk), 0);
    memcpy(r, sig, 32); /* an honest, prime-order R */

    for (int parity = 1; parity >= 0; parity--) {
        struct vcase *v = &c[1 - parity];
        v->what = parity ? "[S]B - [k]A = O, k odd" : "[S]B - [k]A = O, k even";
        memcpy(v->pk, pk, 32);
        pick_msg(v, r, parity, k);
        memcpy(v->sig, r, 32);
        crypto_core_ed25519_scalar_mul(v->sig + 32, k, a);
        v->expect = -1;
    }

    struct vcase *v = &c[2];
    v->what = "R = -A, [S]B - [k-1]A = O";
    memcpy(v->pk, pk, 32);
    memcpy(v->sig, pk, 32);
    v->sig[31] ^= 0x80; /* -A: x negated flips the sign bit (x != 0) */
    pick_msg(v, v->sig, 0, k);
    crypto_core_ed25519_scalar_sub(km1, k, one);
    crypto_core_ed25519_scalar_mul(v->sig + 32, km1, a);
    v->expect = 0;

    v = &c[3];
    v->what = "mixed-order A, [S]B - [k]A = T2";
    assert_int_equal(crypto_core_ed25519_add(v->pk, pk, order2_enc), 0);
    pick_msg(v, r, 1, k);
    memcpy(v->sig, r, 32);
    crypto_core_ed25519_scalar_mul(v->sig + 32, k, a);
    v->expect = -1;

    v = &c[4];
    v->what = "honest signature, S bit flipped";
    memcpy(v->pk, pk, 32);
    fill(v->msg, sizeof(v->msg));
    assert_int_equal(crypto_sign_ed25519_detached(v->sig, NULL, v->msg, sizeof(v->msg), sk), 0);
    v->sig[40] ^= 0x04;
    v->expect = -1;
}

static void test_constructed_cases(void **state) {
    (void)state;
    NEED_MBEDTLS();
    struct vcase c[N_CASES];
    build_cases(c);
    for (int i = 0; i < N_CASES; i++) {
        int rs = S->ed25519_verify(c[i].sig, c[i].msg, sizeof(c[i].msg), c[i].pk);
        int rm = M->ed25519_verify(c[i].sig, c[i].msg, sizeof(c[i].msg), c[i].pk);
        if (rs != c[i].expect || rm != c[i].expect)
            fail_msg("%s: sodium %d, mbedtls %d, expected %d", c[i].what, rs, rm, c[i].expect);
    }
}

/* ---- the curve construction failing ---- */

#if defined(FL_HAVE_MBEDTLS_BUILD)
/* Child of the construction walk: fail allocation n of the first Ed25519 use. Exit codes:
 * 0 the curve was built without reaching allocation n (the walk is over), 1 it failed and
 * every operation refused, 2 built although allocation n failed and every operation right,
 * 3 and up: a wrong result. */
static int build_child(long n) {
    uint8_t seed[32] = {7}, pk[32], sk[64], pk_ref[32], sk_ref[64], sig[64], sig_ref[64];
    const uint8_t msg[] = "curve";
    if (S->ed25519_keypair(pk_ref, sk_ref, seed) != 0 ||
        S->ed25519_sign(sig_ref, msg, sizeof(msg), sk_ref) != 0)
        return 3;
    hook_arm(n);
    const mbedtls_ecp_group *g = fl__sa_mbed_ed25519_group();
    int failed = hook_disarm();
    if (!g) {
        if (!failed)
            return 4; /* no injected failure, yet no curve */
        memset(sig, 0x55, sizeof(sig));
        if (M->ed25519_keypair(pk, sk, seed) != -1 ||
            M->ed25519_sign(sig, msg, sizeof(msg), sk_ref) != -1 ||
            M->ed25519_verify(sig_ref, msg, sizeof(msg), pk_ref) != -1 ||
            fl__sa_mbed_ed25519_group() != NULL)
            return 5;
        if (fl_secagg_signing_keygen(pk, sk, FL_SECAGG_BACKEND_MBEDTLS) != FL_ERR_CRYPTO ||
            !all_zero(sk, sizeof(sk)))
            return 6;
        return 1;
    }
    if (M->ed25519_keypair(pk, sk, seed) != 0 || memcmp(pk, pk_ref, 32) != 0 ||
        M->ed25519_sign(sig, msg, sizeof(msg), sk) != 0 || memcmp(sig, sig_ref, 64) != 0 ||
        M->ed25519_verify(sig_ref, msg, sizeof(msg), pk_ref) != 0)
        return 7;
    return failed ? 2 : 0;
}
#endif

/* Runs first: the parent must not have built the curve, so each child builds it anew. A
 * first child makes the counting run and sends its picks through a pipe. */
static void test_curve_build_failures(void **state) {
    (void)state;
    NEED_MBEDTLS();
#if defined(FL_HAVE_MBEDTLS_BUILD)
    uint8_t buf[16];
    /* Seed the DRBG now (its own one-time setup), so the children share it ready-made. */
    assert_int_equal(M->random(buf, sizeof(buf)), 0);
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        picks_start();
        int ok = fl__sa_mbed_ed25519_group() != NULL;
        long calls = picks_end();
        long head[2] = {calls, (long)npicks};
        ok = ok && write(fd[1], head, sizeof(head)) == (ssize_t)sizeof(head) &&
             write(fd[1], picks, npicks * sizeof(long)) == (ssize_t)(npicks * sizeof(long));
        exit(ok ? 0 : 1);
    }
    close(fd[1]);
    long head[2] = {0, 0};
    size_t want = sizeof(head), got = 0;
    int status = 0;
    assert_int_equal(read(fd[0], head, want), (ssize_t)want);
    assert_true(head[1] > 0 && head[1] <= MAX_PICKS);
    want = (size_t)head[1] * sizeof(long);
    while (got < want) {
        ssize_t r = read(fd[0], (char *)picks + got, want - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    close(fd[0]);
    npicks = (size_t)head[1];
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    long refused = 0;
    for (size_t i = 0; i < npicks; i++) {
        long n = picks[i];
        fflush(NULL);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            exit(build_child(n)); /* exit, not _exit: coverage and leak checks run */
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status))
            fail_msg("allocation %ld: child died (status %d)", n, status);
        int code = WEXITSTATUS(status);
        if (code == 1)
            refused++;
        else if (code > 2)
            fail_msg("allocation %ld: child exit code %d", n, code);
    }
    print_message("curve construction: %ld allocations, %zu failed in turn, %ld refused every "
                  "call\n",
                  head[0], npicks, refused);
    assert_true(refused > 0);
#endif
}

/* ---- allocation-failure walks over the operations ---- */

/* One operation under test: runs it, returns its status and whether the result is the
 * expected one (the reference output); after a failure the output must show it. */
struct op {
    const char *what;
    int (*run)(struct op *o);          /* returns 0 when the call succeeded, -1 when it failed */
    int (*failed_ok)(struct op *o);    /* 1 if a failed call left its outputs as required */
    int (*succeeded_ok)(struct op *o); /* 1 if a successful call produced the reference */
    const struct vcase *vc;            /* verify cases */
    uint8_t seed[32], pk[32], msg[40];
    uint8_t ref_pk[32], ref_sk[64], ref_sig[64];
    uint8_t out_pk[32], out_sk[64], out_sig[64];
    uint8_t x_sk[32], x_peer[32], x_ref[64]; /* X25519 and HKDF walks */
};

static int run_keypair(struct op *o) {
    memset(o->out_pk, 0x55, 32);
    return M->ed25519_keypair(o->out_pk, o->out_sk, o->seed);
}
static int keypair_failed_ok(struct op *o) {
    for (int i = 0; i < 32; i++) /* a failed keypair writes nothing */
        if (o->out_pk[i] != 0x55)
            return 0;
    return 1;
}
static int keypair_ok(struct op *o) {
    return memcmp(o->out_pk, o->ref_pk, 32) == 0 && memcmp(o->out_sk, o->ref_sk, 64) == 0;
}
static int run_sign(struct op *o) {
    memset(o->out_sig, 0x55, 64);
    return M->ed25519_sign(o->out_sig, o->msg, sizeof(o->msg), o->ref_sk);
}
static int sign_failed_ok(struct op *o) {
    return all_zero(o->out_sig, 64);
}
static int sign_ok(struct op *o) {
    return memcmp(o->out_sig, o->ref_sig, 64) == 0;
}
static int run_verify(struct op *o) {
    return M->ed25519_verify(o->vc->sig, o->vc->msg, sizeof(o->vc->msg), o->vc->pk);
}
static int run_verify_honest(struct op *o) {
    return M->ed25519_verify(o->ref_sig, o->msg, sizeof(o->msg), o->ref_pk);
}
static int yes(struct op *o) {
    (void)o;
    return 1;
}
/* The public wrappers: FL_ERR_CRYPTO on a failed Ed25519 call. */
static int run_signing_keygen(struct op *o) {
    memset(o->out_sk, 0x55, 64);
    fl_status st = fl_secagg_signing_keygen(o->out_pk, o->out_sk, FL_SECAGG_BACKEND_MBEDTLS);
    assert_true(st == FL_OK || st == FL_ERR_CRYPTO);
    return st == FL_OK ? 0 : -1;
}
static int signing_keygen_failed_ok(struct op *o) {
    return all_zero(o->out_sk, 64);
}
static int signing_keygen_ok(struct op *o) {
    /* A fresh random key: it must be a working pair (checked with libsodium). */
    uint8_t sig[64];
    return crypto_sign_ed25519_detached(sig, NULL, o->msg, sizeof(o->msg), o->out_sk) == 0 &&
           crypto_sign_ed25519_verify_detached(sig, o->msg, sizeof(o->msg), o->out_pk) == 0 &&
           memcmp(o->out_sk + 32, o->out_pk, 32) == 0;
}
static int run_cert_issue(struct op *o) {
    memset(o->out_sig, 0x55, 64);
    fl_status st =
        fl_secagg_cert_issue(o->out_sig, o->ref_sk, 11, o->pk, FL_SECAGG_BACKEND_MBEDTLS);
    assert_true(st == FL_OK || st == FL_ERR_CRYPTO);
    return st == FL_OK ? 0 : -1;
}
static int cert_ok(struct op *o) {
    uint8_t ref[64];
    return fl_secagg_cert_issue(ref, o->ref_sk, 11, o->pk, FL_SECAGG_BACKEND_SODIUM) == FL_OK &&
           memcmp(ref, o->out_sig, 64) == 0;
}

/* Fails each picked allocation of op in turn (a counting run picks them): each failed call
 * must fail cleanly, never yield a result the clean call would not (for verify: never
 * accept what the clean call rejects), and the call succeeds again right after. Prints the
 * counts. */
static void walk(struct op *o, int expect) {
    picks_start();
    int rc = o->run(o);
    long calls = picks_end();
    if (rc != expect || (rc == 0 && !o->succeeded_ok(o)))
        fail_msg("%s: clean call gave %d (expected %d)", o->what, rc, expect);
    long failures = 0;
    for (size_t i = 0; i < npicks; i++) {
        long n = picks[i];
        hook_arm(n);
        rc = o->run(o);
        int failed = hook_disarm();
        if (rc == 0 && expect != 0)
            fail_msg("%s: allocation %ld failed and the call accepted", o->what, n);
        if (rc == 0 && !o->succeeded_ok(o))
            fail_msg("%s: allocation %ld failed and the call gave a wrong result", o->what, n);
        if (!failed)
            continue; /* this call made fewer allocations (randomised blinding) */
        failures += rc != 0;
        if (rc != 0 && !o->failed_ok(o))
            fail_msg("%s: allocation %ld failed and the outputs were not cleared", o->what, n);
        /* And right after, the same call works. */
        rc = o->run(o);
        if (rc != expect || (rc == 0 && !o->succeeded_ok(o)))
            fail_msg("%s: after failing allocation %ld, the clean call gave %d", o->what, n, rc);
    }
    print_message("%s: %ld allocations, %zu failed in turn, %ld made the call fail\n", o->what,
                  calls, npicks, failures);
    assert_true(failures > 0);
}

static void op_init(struct op *o) {
    memset(o, 0, sizeof(*o));
    fill(o->seed, sizeof(o->seed));
    fill(o->msg, sizeof(o->msg));
    fill(o->pk, sizeof(o->pk));
    assert_int_equal(S->ed25519_keypair(o->ref_pk, o->ref_sk, o->seed), 0);
    assert_int_equal(S->ed25519_sign(o->ref_sig, o->msg, sizeof(o->msg), o->ref_sk), 0);
    o->failed_ok = yes;
    o->succeeded_ok = yes;
}

/* The hook sees mbedTLS's allocations: without that the walks below would prove nothing. */
static void test_hook_sees_mbedtls(void **state) {
    (void)state;
    NEED_MBEDTLS();
    struct op o;
    op_init(&o);
    assert_int_equal(run_keypair(&o), 0); /* the curve is built outside the count */
    hook_arm(0);
    assert_int_equal(run_keypair(&o), 0);
    long calls = hook_calls;
    hook_disarm();
    assert_true(keypair_ok(&o));
    if (calls == 0)
        fail_msg("no calloc seen during an mbedTLS Ed25519 keypair: the hook does not "
                 "intercept mbedTLS's allocations");
}

static void test_walk_keypair_sign(void **state) {
    (void)state;
    NEED_MBEDTLS();
    struct op o;
    op_init(&o);
    o.what = "keypair";
    o.run = run_keypair;
    o.failed_ok = keypair_failed_ok;
    o.succeeded_ok = keypair_ok;
    walk(&o, 0);
    o.what = "sign";
    o.run = run_sign;
    o.failed_ok = sign_failed_ok;
    o.succeeded_ok = sign_ok;
    walk(&o, 0);
}

static void test_walk_verify(void **state) {
    (void)state;
    NEED_MBEDTLS();
    struct op o;
    struct vcase c[N_CASES];
    op_init(&o);
    o.what = "verify (honest)";
    o.run = run_verify_honest;
    walk(&o, 0);
    /* An honest signature with k of the other parity than the one above (the two branches
     * of the verifier). */
    uint8_t k[32];
    challenge(k, o.ref_sig, o.ref_pk, o.msg, sizeof(o.msg));
    int parity = k[0] & 1;
    for (int i = 0; i < 256 && (k[0] & 1) == parity; i++) {
        fill(o.msg, sizeof(o.msg));
        challenge(k, o.ref_sig, o.ref_pk, o.msg, sizeof(o.msg));
    }
    assert_int_not_equal(k[0] & 1, parity);
    assert_int_equal(S->ed25519_sign(o.ref_sig, o.msg, sizeof(o.msg), o.ref_sk), 0);
    o.what = "verify (honest, other k parity)";
    walk(&o, 0);

    build_cases(c);
    o.run = run_verify;
    for (int i = 0; i < N_CASES; i++) {
        o.what = c[i].what;
        o.vc = &c[i];
        assert_int_equal(S->ed25519_verify(c[i].sig, c[i].msg, sizeof(c[i].msg), c[i].pk),
                         c[i].expect);
        walk(&o, c[i].expect);
    }
}

static void test_walk_public_calls(void **state) {
    (void)state;
    NEED_MBEDTLS();
    struct op o;
    op_init(&o);
    o.what = "fl_secagg_signing_keygen";
    o.run = run_signing_keygen;
    o.failed_ok = signing_keygen_failed_ok;
    o.succeeded_ok = signing_keygen_ok;
    walk(&o, 0);
    o.what = "fl_secagg_cert_issue";
    o.run = run_cert_issue;
    o.failed_ok = sign_failed_ok; /* the certificate is zeroed like a failed signature */
    o.succeeded_ok = cert_ok;
    walk(&o, 0);
}

/* ---- the backend's other allocating mbedTLS calls: X25519 and HKDF ---- */

static int run_x25519_keypair(struct op *o) {
    memset(o->out_pk, 0x55, 32);
    return M->x25519_keypair(o->out_pk, o->out_sk);
}
static int x25519_keypair_failed_ok(struct op *o) {
    return all_zero(o->out_pk, 32) && all_zero(o->out_sk, 32);
}
static int x25519_keypair_ok(struct op *o) {
    uint8_t ref[32];
    return S->x25519_public(ref, o->out_sk) == 0 && memcmp(ref, o->out_pk, 32) == 0;
}
static int run_x25519_shared(struct op *o) {
    memset(o->out_sig, 0x55, 32);
    return M->x25519_shared(o->out_sig, o->x_sk, o->x_peer);
}
static int out32_zero(struct op *o) {
    return all_zero(o->out_sig, 32);
}
static int out32_ref(struct op *o) {
    return memcmp(o->out_sig, o->x_ref, 32) == 0;
}
#define HKDF_OUT 42
static int run_hkdf(struct op *o) {
    memset(o->out_sig, 0x55, HKDF_OUT);
    return M->hkdf_sha256(o->out_sig, HKDF_OUT, o->seed, 32, o->x_sk, 32, o->msg, 16);
}
static int hkdf_zero(struct op *o) {
    return all_zero(o->out_sig, HKDF_OUT);
}
static int hkdf_ref(struct op *o) {
    return memcmp(o->out_sig, o->x_ref, HKDF_OUT) == 0;
}

/* X25519 keypair and shared secret and HKDF on the mbedTLS backend fail the same way: -1,
 * outputs (and a half-made secret key) zeroed, right again after; outputs equal
 * libsodium's / OpenSSL's otherwise. */
static void test_walk_x25519_hkdf(void **state) {
    (void)state;
    NEED_MBEDTLS();
    struct op o;
    uint8_t peer_sk[32];
    op_init(&o);
    fill(o.x_sk, 32);
    fill(peer_sk, 32);
    assert_int_equal(S->x25519_public(o.x_peer, peer_sk), 0);
    o.what = "x25519_keypair";
    o.run = run_x25519_keypair;
    o.failed_ok = x25519_keypair_failed_ok;
    o.succeeded_ok = x25519_keypair_ok;
    walk(&o, 0);
    assert_int_equal(S->x25519_shared(o.x_ref, o.x_sk, o.x_peer), 0);
    o.what = "x25519_shared";
    o.run = run_x25519_shared;
    o.failed_ok = out32_zero;
    o.succeeded_ok = out32_ref;
    walk(&o, 0);
    assert_int_equal(S->hkdf_sha256(o.x_ref, HKDF_OUT, o.seed, 32, o.x_sk, 32, o.msg, 16), 0);
    o.what = "hkdf_sha256";
    o.run = run_hkdf;
    o.failed_ok = hkdf_zero;
    o.succeeded_ok = hkdf_ref;
    walk(&o, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_curve_build_failures), /* first: before the curve exists */
        cmocka_unit_test(test_constructed_cases),    cmocka_unit_test(test_hook_sees_mbedtls),
        cmocka_unit_test(test_walk_keypair_sign),    cmocka_unit_test(test_walk_verify),
        cmocka_unit_test(test_walk_public_calls),    cmocka_unit_test(test_walk_x25519_hkdf),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
