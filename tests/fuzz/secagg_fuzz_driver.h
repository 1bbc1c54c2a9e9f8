/* Shared driver of the secagg fuzz targets: a small deterministic round (n = 4, k = 3,
 * t = 2, d = 8; optionally active, with index (v1) or device (v2) certificates, or with
 * revealed pairwise seeds) run up to a chosen phase with real clients, so a fuzz input can
 * be fed to the parser of that phase on either side.
 *
 * Input framing: byte 0 = phase (bits 0-2, mod 5) | active (bit 3) | bit 4: with bit 3,
 * device certificates, without it, revealed seeds; byte 1 = client index (mod n); the rest
 * is the message. The mode below is 0 (semi-honest), 1 (active), 2 (active, device
 * certificates) or 3 (semi-honest, reveal_pair_seeds, client 3 drops before masking so that
 * the unmask answers carry seeds). */
#ifndef SECAGG_FUZZ_DRIVER_H
#define SECAGG_FUZZ_DRIVER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flotilla/secagg.h"

#define FZ_N 4
#define FZ_ROUND 0x5EC0A66ull

struct fz {
    fl_secagg_config cfg;
    fl_secagg_server *srv;
    fl_secagg_client *cl[FZ_N];
    fl_secagg_identity id[FZ_N];
    uint8_t *reply[FZ_N];        /* clients' undelivered replies for `phase` (corpus seeds) */
    size_t reply_len[FZ_N];
    int dropped;                 /* client that never masks (mode 3), else -1 */
};

#define FZ_MODES 4

static void fz_keep(struct fz *f, uint32_t i, const uint8_t *m, size_t ml) {
    free(f->reply[i]);
    f->reply[i] = malloc(ml);
    if (f->reply[i])
        memcpy(f->reply[i], m, ml);
    f->reply_len[i] = f->reply[i] ? ml : 0;
}

static void fz_free(struct fz *f) {
    fl_secagg_server_destroy(f->srv);
    for (int i = 0; i < FZ_N; i++) {
        fl_secagg_client_destroy(f->cl[i]);
        free(f->reply[i]);
    }
    memset(f, 0, sizeof(*f));
}

/* Builds the round and advances it until the server is in `phase` (its clients have
 * handled the server messages that opened it). Returns 0 on success. */
static int fz_setup(struct fz *f, int phase, int mode) {
    int active = mode == 1 || mode == 2, dev = mode == 2;
    memset(f, 0, sizeof(*f));
    f->dropped = mode == 3 ? FZ_N - 1 : -1;
    fl_secagg_config_init(&f->cfg);
    f->cfg.num_clients = FZ_N;
    f->cfg.dim = 8;
    f->cfg.degree = 3;
    f->cfg.threshold = 2;
    f->cfg.bits = 20;
    f->cfg.active = active;
    f->cfg.device_certs = dev;
    f->cfg.reveal_pair_seeds = mode == 3;
    if (active) {
        /* Identities are long-term keys (a device keeps its certified key across rounds), so
         * they are made once per certificate kind and shared by every active round of that
         * kind; round keys stay fresh. Device i's id is 0xD1 || i || 0... */
        static uint8_t auth_vk[2][32];
        static fl_secagg_identity ids[2][FZ_N];
        static int have_ids[2];
        if (!have_ids[dev]) {
            uint8_t ask[64];
            if (fl_secagg_signing_keygen(auth_vk[dev], ask, FL_SECAGG_BACKEND_DEFAULT) != FL_OK)
                return -1;
            for (uint32_t i = 0; i < FZ_N; i++) {
                uint8_t vk[32];
                fl_secagg_identity *id = &ids[dev][i];
                id->struct_size = sizeof(*id);
                id->device_id[0] = 0xD1;
                id->device_id[1] = (uint8_t)i;
                if (fl_secagg_signing_keygen(vk, id->signing_key, FL_SECAGG_BACKEND_DEFAULT) ||
                    (dev ? fl_secagg_cert_issue_device(id->cert, ask, id->device_id, vk,
                                                       FL_SECAGG_BACKEND_DEFAULT)
                         : fl_secagg_cert_issue(id->cert, ask, i, vk,
                                                FL_SECAGG_BACKEND_DEFAULT))) {
                    fl_memzero(ask, sizeof(ask));
                    return -1;
                }
            }
            fl_memzero(ask, sizeof(ask));
            have_ids[dev] = 1;
        }
        memcpy(f->cfg.verify_key, auth_vk[dev], sizeof(auth_vk[dev]));
        memcpy(f->id, ids[dev], sizeof(ids[dev]));
    }
    uint8_t seed[32] = {7};
    if (fl_secagg_server_create(&f->srv, &f->cfg, FZ_ROUND, seed, NULL) != FL_OK)
        return -1;
    for (uint32_t i = 0; i < FZ_N; i++) {
        uint32_t x[8] = {i, 1, 2, 3, 4, 5, 6, 7};
        const uint8_t *m;
        size_t ml;
        if (fl_secagg_client_create(&f->cl[i], &f->cfg, FZ_ROUND, i, active ? &f->id[i] : NULL,
                                    NULL) != FL_OK ||
            fl_secagg_client_set_input(f->cl[i], x, 8) != FL_OK ||
            fl_secagg_client_start(f->cl[i], &m, &ml) != FL_OK)
            return -1;
        if (phase == FL_SECAGG_PHASE_ADVERTISE) {
            fz_keep(f, i, m, ml);
            continue;
        }
        if (fl_secagg_server_receive(f->srv, i, m, ml) != FL_OK)
            return -1;
    }
    while ((int)fl_secagg_server_phase(f->srv) != phase) {
        if (fl_secagg_server_advance(f->srv) != FL_OK)
            return -1;
        int now = (int)fl_secagg_server_phase(f->srv);
        for (uint32_t i = 0; i < FZ_N; i++) {
            const uint8_t *m, *r;
            size_t ml, rl;
            if (fl_secagg_server_outgoing(f->srv, i, &m, &ml) != FL_OK ||
                ((int)i == f->dropped && now >= FL_SECAGG_PHASE_MASKED_INPUT))
                continue;
            if (fl_secagg_client_handle(f->cl[i], m, ml, &r, &rl) != FL_OK)
                return -1;
            if (now == phase)
                fz_keep(f, i, r, rl);
            else if (fl_secagg_server_receive(f->srv, i, r, rl) != FL_OK)
                return -1;
        }
        if (now == FL_SECAGG_PHASE_DONE)
            return -1;
    }
    return 0;
}

/* Runs the round from a fixture left by fz_setup to the end: every client's kept reply is
 * delivered, then the phases are advanced with every client answering (but the dropped
 * one, from the masked inputs on). Returns 0 if the server ends DONE with the inputs of all
 * clients but the dropped one in the sum and the sum is exactly theirs (client i holds
 * {i, 1, 2, ..., 7}). Consumes the fixture. */
static int fz_finish(struct fz *f) {
    for (uint32_t i = 0; i < FZ_N; i++) {
        if (!f->reply[i] && (int)i == f->dropped)
            continue;
        if (!f->reply[i] || fl_secagg_server_receive(f->srv, i, f->reply[i], f->reply_len[i]))
            return -1;
    }
    while (fl_secagg_server_phase(f->srv) != FL_SECAGG_PHASE_DONE) {
        if (fl_secagg_server_advance(f->srv) != FL_OK)
            return -1;
        if (fl_secagg_server_phase(f->srv) == FL_SECAGG_PHASE_DONE)
            break;
        for (uint32_t i = 0; i < FZ_N; i++) {
            const uint8_t *m, *r;
            size_t ml, rl;
            if ((int)i == f->dropped &&
                fl_secagg_server_phase(f->srv) >= FL_SECAGG_PHASE_MASKED_INPUT)
                continue;
            if (fl_secagg_server_outgoing(f->srv, i, &m, &ml) != FL_OK ||
                fl_secagg_client_handle(f->cl[i], m, ml, &r, &rl) != FL_OK ||
                fl_secagg_server_receive(f->srv, i, r, rl) != FL_OK)
                return -1;
        }
    }
    const uint32_t *sum;
    size_t dim;
    uint32_t count;
    uint32_t in = f->dropped >= 0 ? FZ_N - 1 : FZ_N, first = 0;
    for (uint32_t i = 0; i < in; i++)
        first += i; /* the dropped client is the last one */
    if (fl_secagg_server_result(f->srv, &sum, &dim, &count) != FL_OK || dim != 8 || count != in)
        return -1;
    for (uint32_t j = 0; j < 8; j++)
        if (sum[j] != (j == 0 ? first : in * j))
            return -1;
    return 0;
}

/* ---- fixture cache ----
 * Building a fixture runs a real round up to a phase (key generation, key agreement, share
 * encryption), which costs far more than parsing one message. The library promises that a
 * rejected message changes no state, so a fixture is kept per (phase, active) and reused
 * while inputs are rejected; it is rebuilt only after an input was accepted (or failed a
 * client stickily). That promise becomes an oracle: every FZ_CHECK_EVERY inputs (and once
 * early, so corpus replays exercise it) the reused fixture is run to the end of the round,
 * which must produce the exact sum of the inputs (fz_finish). */
#define FZ_CHECK_EVERY 4096u

struct fz_slot {
    struct fz f;
    int ready; /* f holds a fixture that no accepted input has touched */
};

static struct fz_slot fz_slots[5][FZ_MODES]; /* [setup phase][mode] */
static unsigned long fz_inputs;       /* inputs run, for the periodic end-of-round check */

/* The fixture for (phase, mode), built on first use or after fz_drop. NULL if the round
 * could not be set up. */
static struct fz *fz_get(int phase, int mode) {
    struct fz_slot *s = &fz_slots[phase][mode];
    if (!s->ready) {
        if (fz_setup(&s->f, phase, mode) != 0) {
            fz_free(&s->f);
            return NULL;
        }
        s->ready = 1;
    }
    return &s->f;
}

/* Forgets the fixture (its state was changed); the next fz_get builds a fresh one. */
static void fz_drop(int phase, int mode) {
    struct fz_slot *s = &fz_slots[phase][mode];
    fz_free(&s->f);
    s->ready = 0;
}

/* Called after each input that was rejected: now and then, runs the reused fixture to the
 * end of the round and traps unless the sum is exact (a rejected input left state behind). */
static void fz_check_reused(int phase, int mode) {
    fz_inputs++;
    if (fz_inputs != 16 && fz_inputs % FZ_CHECK_EVERY != 0)
        return;
    if (fz_finish(&fz_slots[phase][mode].f) != 0)
        __builtin_trap();
    fz_drop(phase, mode);
}

/* Decodes the framing; returns 0 if the phase is usable. */
static int fz_frame(const uint8_t *data, size_t size, int *phase, int *mode, uint32_t *who) {
    if (size < 2)
        return -1;
    *phase = (data[0] & 7) % 5;
    int act = (data[0] >> 3) & 1, b4 = (data[0] >> 4) & 1;
    *mode = act ? 1 + b4 : 3 * b4;
    if (*phase == FL_SECAGG_PHASE_CONSISTENCY && (*mode == 0 || *mode == 3))
        *phase = FL_SECAGG_PHASE_UNMASK;
    *who = data[1] % FZ_N;
    return 0;
}

#endif
