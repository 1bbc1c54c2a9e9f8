#ifndef FL_COORD_ACTIVE_KIT_H
#define FL_COORD_ACTIVE_KIT_H
/* Shared code of the active-adversary secure aggregation tests (test_secagg_active.c,
 * test_secagg_active_norm.c, test_secagg_seats.c; coord_active_kit.c, in the testkit
 * library): the device authority, devices with their own identities and v2 certificates
 * (docs/protocol.md "Device identities"), active populations, enrollment with a
 * secagg_identity, and the devices' active secagg clients. */

#include "coord_testkit.h"
#include "flotilla/secagg.h"

/* The device authority: an Ed25519 key pair held outside the coordinator. */
struct authority {
    uint8_t vk[FL_SECAGG_VERIFY_KEY_BYTES];   /* verification key, pinned by the population */
    uint8_t sk[FL_SECAGG_SIGNING_KEY_BYTES];  /* signing key, issues the certificates */
    char vk_hex[2 * FL_SECAGG_VERIFY_KEY_BYTES + 1]; /* vk in lowercase hex */
};

/* Lowercase hex of in (n bytes) into out (2n + 1 bytes). */
void hex_encode(char *out, const uint8_t *in, size_t n);
/* A fresh authority key pair. */
void authority_make(struct authority *a);

/* ---- devices ---- */

/* A device: its key pair (verification key into vk), a device id derived from seed, and
 * authority a's certificate. */
void identity_make(fl_secagg_identity *id, uint8_t vk[32], const struct authority *a,
                   uint8_t seed);
/* The enrollment body's secagg_identity for (device_id, vk, cert) into out (n bytes). */
void identity_json(char *out, size_t n, const uint8_t *device_id, const uint8_t *vk,
                   const uint8_t *cert);
/* identity_make and identity_json in one: the device's identity and its JSON (ident, n bytes). */
void device_make(fl_secagg_identity *id, char *ident, size_t n, const struct authority *a,
                 uint8_t seed);

/* ---- populations and enrollment ---- */

/* POST /admin/populations (secagg: raw JSON of the "secagg" object's fields; strategy NULL:
 * fedavg); on 201 with etok, uploads the model, starts the population and puts the
 * enrollment token (strdup) in *etok. Returns the creation response (caller frees). */
struct resp secagg_pop_create(struct fx *f, const char *name, int target, int min,
                              const char *secagg, const char *strategy, char **etok);
/* An active population (consistency_check under authority a, complete graph, threshold 0.5;
 * extra: more secagg fields after the key, e.g. ",\"norm_proof\":true", or NULL), asserting
 * 201, its model uploaded and started; returns the enrollment token (strdup). */
char *active_pop(struct fx *f, const char *name, int target, int min, const struct authority *a,
                 const char *extra);
/* POST /v1/enroll to pop with the secagg_identity JSON ident (NULL: none). */
struct resp enroll_ident(struct fx *f, const char *etok, const char *pop, const char *ident);
/* enroll_ident(), asserting 201; returns the client token (strdup) and, if cid, the client id
 * (cid_len bytes). */
char *enroll_ident_ok(struct fx *f, const char *etok, const char *pop, const char *ident,
                      char *cid, size_t cid_len);
/* Zeroes c[0..n) and enrols n devices in pop, device i with a fresh identity id[i] (seed
 * seed0 + i) as c[i].tok; cid (NULL: not wanted) receives the client ids. */
void enroll_devices(struct fx *f, const char *etok, const char *pop, const struct authority *a,
                    int seed0, struct tc *c, fl_secagg_identity *id, int n, char (*cid)[32]);
/* GET /v1/rounds/{rid}/task as device c (asserting 200): the task's JSON (json_decref it). */
json_t *task_json(struct fx *f, const struct tc *c, int64_t rid);

/* An active population `name` (target n, min 3; extra as for active_pop) with n devices
 * enrolled (enroll_devices, seeds seed0 + i) and checked in to one round, each holding its
 * task (fetch_tasks); returns the round id, and in *task the task's JSON as device 0 reads
 * it (json_decref it). */
int64_t active_round_start(struct fx *f, const char *name, const struct authority *a,
                           const char *extra, int seed0, struct tc *c, fl_secagg_identity *id,
                           int n, json_t **task);

/* ---- active secagg clients ---- */

/* The phases of an active round, in order. */
extern const char *const active_phases[5];
/* cfg for device task t in active mode with device certificates pinning authority a. */
void active_config(fl_secagg_config *cfg, const struct task *t, const struct authority *a);
/* Creates device c's secagg client under cfg with identity id, sets its input (x, vec_len
 * words; NULL: the device's encoded words) and makes its ADVERTISE (out/out_len). */
void active_client_start(struct tc *c, const fl_secagg_config *cfg, const fl_secagg_identity *id,
                         int64_t rid, const uint32_t *x, const uint8_t **out, size_t *out_len);
/* active_config and active_client_start with the device's own words. */
void active_client(struct tc *c, const fl_secagg_identity *id, const struct authority *a,
                   int64_t rid, const uint8_t **out, size_t *out_len);
/* Device c posts ADVERTISE msg (len bytes) naming another enrolled device: asserts that it is
 * refused (400 invalid_message, "the advertisement names another device") and that c is
 * dropped: its secagg client is replaced by one with its own identity own (pinning a), whose
 * ADVERTISE is refused too (410 round_closed). */
void advertise_other_refused(struct fx *f, struct tc *c, int64_t rid, const uint8_t *msg,
                             size_t len, const fl_secagg_identity *own,
                             const struct authority *a);
/* Every alive device (alive[i]) reads phase ph's result and hands it to its secagg client,
 * which makes its next message (out[i]/out_len[i]), asserting 200 and FL_OK. In the unmask
 * phase (the last) the results are not handled: the first 200 one goes to *outcome (JSON,
 * caller frees) when *outcome is still NULL. */
void active_results(struct fx *f, struct tc *c, int n, int64_t rid, int ph, const bool *alive,
                    const uint8_t **out, size_t *out_len, json_t **outcome);
/* Asserts that the hook saw one aggregate: the exact sum of the devices in (in[i]) of
 * c[0..n), their count and vec_len. */
void check_exact_sum(const struct sum_hook *h, const struct tc *c, const bool *in, int n);

#endif /* FL_COORD_ACTIVE_KIT_H */
