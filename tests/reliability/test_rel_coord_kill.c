/* kill -9 sweep of the real `flotilla-coordinator serve` executable (docs/reliability.md),
 * and with --power the same sweep with power cuts instead of kills.
 *
 * Three populations with secure aggregation run rounds of n stand-in devices (the secagg
 * client state machine and dp's encoders, tests/coordinator/coord_testkit.c): "kx" without
 * DP, so each completed round's model can be predicted exactly, "kd" with central DP, so
 * each completed round spends privacy budget, and "kp" without DP, with 2-s phase deadlines
 * and dropouts: every other kp round has 1-2 devices go silent at a drawn secagg phase (the
 * round must complete at the deadline with exactly the survivors in the sum), or, one plan
 * in four, more than the round tolerates (it must be abandoned at that phase's deadline).
 * Rounds rotate between them. In most
 * attempts the coordinator is SIGKILLed at a random point: before or during a uniformly
 * drawn request of the round (check-ins, task downloads, the four secagg posts and result
 * polls), or during the request whose arrival completes the unmask phase and so runs the
 * aggregation and its commit, after a random delay within that request's measured
 * latency. After each kill:
 *
 *   - the database passes PRAGMA integrity_check and foreign_key_check (before restart);
 *   - the coordinator is restarted on the same database and the attempt's round is either
 *     committed whole (the kill came after its commit) or abandoned with reason
 *     "coordinator restarted" and nothing of it stored.
 *
 * Every completed round is checked as it completes: kx's model is exactly the previous
 * model plus the FedAvg of the n masked inputs the devices sent (so no update was lost or
 * counted twice); kd's model is the previous model plus (the devices' sum + an integer
 * noise vector within 6 sigma) x gamma / n; kp's is exact like kx's, over the devices in
 * the sum. At the end (after SIGTERM) the whole database is checked: every round is
 * completed or abandoned; a completed round has exactly its model version (metadata
 * round_id, parent = the round's base = the previous completed version), its completed
 * participants (n; kp: its `completed` count), and for kd exactly one ledger entry; an
 * abandoned round has no model, no completed participant and no ledger entry, and a reason
 * other than a restart only for kp's planned dropouts; the ledger holds one entry per
 * completed kd round and matches an independent recomputation of the per-round event;
 * epsilon from dp's accountant over (completed kd rounds x that event) equals /metrics'
 * flotilla_privacy_epsilon_spent; the audit log has one round entry per ended round and
 * verifies offline.
 *
 * --power: the coordinator is rel-coordinator-flfault (its main linked with
 * rel_fault_shim.c: the fault VFS is its SQLite VFS). Each life has a power cut armed, at a
 * uniformly drawn I/O call or (every other life) just after the request that completes a
 * round arrives; at the cut the files are rewritten as a power loss leaves them and the
 * process exits (86). The same checks follow, plus: every round a device was told completed
 * is still there after every later cut.
 *
 * Profiles: CI (default) ~10 kills (cuts) over 10 devices; FL_RELIABILITY_PROFILE=long 1,000
 * kills (300 cuts) and >= 36 completed rounds of 50 devices. FL_REL_KILLS (FL_REL_CUTS),
 * FL_REL_KILL_CLIENTS, FL_REL_KILL_ROUNDS (completed rounds per population),
 * FL_REL_KILL_BUDGET_S and FL_REL_KILL_DEADLINE_S (kp's phase deadlines) override;
 * FL_RELIABILITY_SEED replays the kill points. */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sodium.h>

#include <sqlite3.h>

#include "coord_testkit.h"
#include "flotilla/dp.h"
#include "flotilla/secagg.h"
#include "flotilla/storage.h"
#include "rel_coord.h"

extern char **environ;

#ifndef FL_COORD_EXE
#error "FL_COORD_EXE (path of flotilla-coordinator) is set by CMake"
#endif

enum { NDEV = 64, POPS = 3, POP_KP = 2 };

/* kx: secagg, no DP (exact models); kd: secagg + central DP (ledger); kp: secagg, no DP,
 * short phase deadlines and devices that drop out (exact models over the survivors). */
static const char *const pop_name[POPS] = {"kx", "kd", "kp"};

/* Exit status of rel-coordinator-flfault after a power cut (rel_fault_shim.c). */
enum { CUT_EXIT = 86 };

#ifndef FL_COORD_FLFAULT_EXE
#error "FL_COORD_FLFAULT_EXE (path of rel-coordinator-flfault) is set by CMake"
#endif

struct sweep {
    struct fx *f;
    CURL *h;
    uint64_t rng;
    int n; /* devices per round */
    struct tc dev[POPS][NDEV];
    /* kill plan of the current attempt */
    long step;     /* requests issued in this attempt */
    long kill_at;  /* request index at which to kill, -1 = none */
    int kill_mode; /* 0 before the request, 1 during it (after kill_delay_us) */
    long kill_delay_us;
    bool killed;
    pthread_t killer;
    bool killer_running;
    /* the chain of each population */
    float cur[POPS][D]; /* current model "w" */
    int64_t cur_version[POPS];
    double commit_lat_s; /* largest latency of a committing request in a round without a
                            kill (capped at 0.5 s), for the delay of commit kills */
    double last_lat_s;   /* latency of the last request (not counting a kill's wait) */
    /* dropouts (kp): the plan of the current attempt */
    int drop_phase;      /* 0..3 (advertise .. unmask), -1 = no dropout */
    int drop_count;      /* devices that drop there */
    bool drop_many;      /* more than the round tolerates: it must be abandoned at the deadline */
    bool acked;          /* a device was told the round completed (an acknowledged commit) */
    /* power-cut mode (--power): the coordinator runs on the fault VFS */
    bool power;
    long life_io;        /* I/O calls of a calibration life (startup + one round each) */
    int cuts, startup_cuts, cut_models[2];
    int acked_at_cut;    /* cuts after which an acknowledged round had to be found */
    long cut_dropped, cut_kept, cut_entries;
    long lives;          /* coordinator lives started in power mode */
    int life_model;      /* power-loss model of the running life: 0 lose-unsynced, 1 torn */
    bool commit_life;    /* this life's cut is armed by a signal before a committing request */
    bool arm_pending;    /* ... and that signal is still to be sent */
    int commit_cuts;     /* cuts of such lives */
    long acked_rechecked; /* completed (acknowledged) rounds found intact after a cut */
    /* figures */
    int kills, kills_before, kills_during, kills_commit;
    int db_checks_ok;
    int completed[POPS], completed_after_kill[POPS], abandoned[POPS];
    int kill_phase[6];     /* kills by part of the round: checkin task adv share masked unmask */
    int kind_committed[3]; /* by kind (before, during, commit): round found committed */
    int kind_abandoned[3]; /* by kind: round found abandoned (or not yet created) */
    double restart_s_sum;
    int restarts;
    int startup_kills; /* kills of a restarting process, before it was ready */
    int audit_checks;  /* "checkpoint never ahead of the log" checks passed */
    int drop_rounds[4];      /* kp rounds completed with tolerable dropouts, by phase */
    int drop_abandoned[4];   /* kp rounds abandoned at a phase deadline (too many dropouts) */
    int drop_killed;         /* attempts with a dropout plan ended by a kill / cut */
    int dropouts_total;      /* devices dropped in completed or deadline-abandoned rounds */
};

/* ---- kills ---- */

static void *killer_main(void *arg) {
    struct sweep *s = arg;
    struct timespec ts = {s->kill_delay_us / 1000000, (s->kill_delay_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
    int st = fx_proc_signal(s->f, SIGKILL);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
        fprintf(stderr, "kill: unexpected wait status %d\n", st);
    return NULL;
}

/* One request of a round, with the attempt's kill plan. Returns the HTTP status, or -1
 * when the coordinator is gone. */
static long req(struct sweep *s, const char *method, const char *path, const char *tok,
                const char *ct, const void *body, size_t len, const char *pid, struct resp *r) {
    if (!s->killed && s->step == s->kill_at) {
        s->killed = true;
        if (s->kill_mode == 0) {
            int st = fx_proc_signal(s->f, SIGKILL);
            assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        } else {
            assert_int_equal(pthread_create(&s->killer, NULL, killer_main, s), 0);
            s->killer_running = true;
        }
    }
    s->step++;
    double t0 = rel_mono_s();
    CURLcode rc = rel_http(s->f, s->h, method, path, tok, ct, body, len, pid, 30000, r);
    s->last_lat_s = rel_mono_s() - t0;
    if (s->killer_running) {
        pthread_join(s->killer, NULL);
        s->killer_running = false;
    }
    if (rc != CURLE_OK) {
        resp_free(r);
        if (s->power && !s->killed) {
            /* Only a power cut may end the connection: the coordinator must have exited
             * with the cut's status (a live one is killed here and fails the check). */
            int st = fx_proc_signal(s->f, SIGKILL);
            if (!(WIFEXITED(st) && WEXITSTATUS(st) == CUT_EXIT))
                fprintf(stderr, "transport error %d (%s) on %s %s without a cut (status %d)\n",
                        (int)rc, curl_easy_strerror(rc), method, path, st);
            assert_true(WIFEXITED(st) && WEXITSTATUS(st) == CUT_EXIT);
            s->killed = true;
        }
        assert_true(s->killed); /* no transport error unless we killed it */
        return -1;
    }
    return r->status;
}

/* ---- one round ---- */

static const char checkin_body[] =
    "{\"region\":\"EU\",\"eligibility\":{\"charging\":true,\"unmetered\":true,\"idle\":true},"
    "\"capabilities\":{\"secagg\":true}}";

/* Devices of the attempt's dropout plan (kp): drop_count distinct devices, drawn once the
 * tasks are known, drop at drop_phase (they post the earlier phases, then go silent).
 * Tolerable plans (the default) stay within what the round survives: at most 2 devices and
 * at most k - t, so every survivor keeps t live neighbours, and at least min_participants
 * left; "too many" plans leave min_participants - 1 before the unmask phase, so the round
 * must be abandoned at that phase's deadline. */
static void plan_dropouts(struct sweep *s, struct tc *c) {
    static const int drop_of[4] = {DROP_ADVERTISE, DROP_SHARE, DROP_MASKED, DROP_UNMASK};
    int n = s->n, minp = n / 2;
    if (s->drop_many) {
        s->drop_count = n - minp + 1;
    } else {
        int tol = (int)c[0].task.k - (int)c[0].task.t;
        int most = tol < 2 ? tol : 2;
        assert_true(most >= 1);
        s->drop_count = 1 + (int)(rel_next(&s->rng) % (uint64_t)most);
    }
    for (int left = s->drop_count; left > 0;) {
        int i = (int)(rel_next(&s->rng) % (uint64_t)n);
        if (c[i].drop == DROP_NONE) {
            c[i].drop = drop_of[s->drop_phase];
            left--;
        }
    }
}

/* Runs one round of population p. Returns 1 when it completed (outcome read), 2 when it was
 * abandoned at a phase deadline as its dropout plan requires (every survivor told 410),
 * 0 when the coordinator was killed. *rid receives the round id once known (0 before). */
static int attempt(struct sweep *s, int p, int64_t *rid) {
    struct tc *c = s->dev[p];
    int n = s->n;
    struct resp r;
    char path[160];
    *rid = 0;
    s->acked = false;
    for (int i = 0; i < n; i++)
        c[i].drop = DROP_NONE;
    for (int i = 0; i < n; i++) {
        long st = req(s, "POST", "/v1/checkin", c[i].tok, "application/json", checkin_body,
                      strlen(checkin_body), NULL, &r);
        if (st < 0)
            return 0;
        json_t *j = body_json(&r);
        const char *status = json_string_value(json_object_get(j, "status"));
        if (st != 200 || !status || strcmp(status, "selected") != 0)
            fprintf(stderr, "check-in %d of %s: %ld %s\n", i, pop_name[p], st, r.body);
        assert_int_equal(st, 200);
        assert_string_equal(status, "selected");
        snprintf(c[i].pid, sizeof(c[i].pid), "%s",
                 json_string_value(json_object_get(j, "participation_id")));
        int64_t got = json_integer_value(json_object_get(j, "round_id"));
        assert_true(i == 0 || got == *rid);
        *rid = got;
        json_decref(j);
        resp_free(&r);
    }
    snprintf(path, sizeof(path), "/v1/rounds/%lld/task", (long long)*rid);
    for (int i = 0; i < n; i++) {
        long st = req(s, "GET", path, c[i].tok, NULL, NULL, 0, c[i].pid, &r);
        if (st < 0)
            return 0;
        if (st != 200)
            fprintf(stderr, "task %d: %ld %s\n", i, st, r.body);
        assert_int_equal(st, 200);
        parse_task(&r, &c[i].task);
        resp_free(&r);
        assert_int_equal(c[i].task.rid, *rid);
        assert_int_equal(c[i].task.model_version, s->cur_version[p]);
        encode(&c[i], i);
    }
    if (p == POP_KP && s->drop_phase >= 0)
        plan_dropouts(s, c);
    static const char *const phases[4] = {"advertise", "share", "masked", "unmask"};
    const uint8_t *out[NDEV];
    size_t out_len[NDEV];
    bool alive[NDEV];
    int in_sum = n;
    for (int i = 0; i < n; i++) {
        alive[i] = true;
        in_sum -= c[i].drop != DROP_NONE && c[i].drop != DROP_UNMASK;
    }
    secagg_clients_start(c, n, *rid, out, out_len);
    int result = 1;
    for (int ph = 0; ph < 4 && result == 1; ph++) {
        snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/%s", (long long)*rid, phases[ph]);
        for (int i = 0; i < n; i++) {
            if (alive[i] && ph == s->drop_phase && c[i].drop != DROP_NONE)
                alive[i] = false; /* goes silent: the phase closes at its deadline */
            if (!alive[i])
                continue;
            if (ph == 3 && s->arm_pending) {
                /* Power mode, a commit life: is this the last unmask post, the one whose
                 * arrival completes the round? Then arm the cut inside its commit. */
                int j = i + 1;
                while (j < n && !(alive[j] && c[j].drop == DROP_NONE))
                    j++;
                if (j == n) {
                    kill(s->f->child, SIGUSR1);
                    s->arm_pending = false;
                    rel_sleep_ms(2); /* let the handler run before the request */
                }
            }
            long st = req(s, "POST", path, c[i].tok, "application/octet-stream", out[i], out_len[i],
                          c[i].pid, &r);
            if (st < 0) {
                result = 0;
                break;
            }
            if (ph == 3 && i == n - 1 && s->kill_at < 0 && s->last_lat_s > s->commit_lat_s)
                s->commit_lat_s = s->last_lat_s < 0.5 ? s->last_lat_s : 0.5;
            if (st != 202)
                fprintf(stderr, "post %s %d: %ld %s\n", phases[ph], i, st, r.body);
            assert_int_equal(st, 202);
            resp_free(&r);
        }
        if (!result)
            break;
        snprintf(path, sizeof(path), "/v1/rounds/%lld/secagg/%s/result?wait=%ld", (long long)*rid,
                 phases[ph], fl_test_scaled(10) < 30 ? fl_test_scaled(10) : 30);
        for (int i = 0; i < n; i++) {
            if (!alive[i])
                continue;
            long st = req(s, "GET", path, c[i].tok, NULL, NULL, 0, c[i].pid, &r);
            if (st < 0) {
                result = 0;
                break;
            }
            if (s->drop_many && ph == s->drop_phase) {
                /* Too few survivors: the round was abandoned when the phase closed. */
                if (st != 410)
                    fprintf(stderr, "result %s %d after too many dropouts: %ld %s\n",
                            phases[ph], i, st, r.body);
                assert_int_equal(st, 410);
                resp_free(&r);
                result = 2;
                continue;
            }
            if (st != 200)
                fprintf(stderr, "result %s %d: %ld %s\n", phases[ph], i, st, r.body);
            assert_int_equal(st, 200);
            if (ph < 3) {
                fl_status fs = fl_secagg_client_handle(c[i].sa, (const uint8_t *)r.body, r.len,
                                                       &out[i], &out_len[i]);
                if (fs != FL_OK)
                    fprintf(stderr, "device %d %s: %s\n", i, phases[ph],
                            fl_secagg_client_errmsg(c[i].sa));
                assert_int_equal(fs, FL_OK);
            } else {
                json_t *o = body_json(&r);
                assert_string_equal(json_string_value(json_object_get(o, "state")), "completed");
                s->acked = true; /* this device was told: the commit is acknowledged */
                if (json_integer_value(json_object_get(o, "participants")) != in_sum)
                    fprintf(stderr, "round %lld outcome: %s (expected %d in the sum)\n",
                            (long long)*rid, r.body, in_sum);
                assert_int_equal(json_integer_value(json_object_get(o, "participants")), in_sum);
                json_decref(o);
            }
            resp_free(&r);
        }
    }
    secagg_clients_free(c, n);
    return result;
}

/* ---- checks of one completed round ---- */

/* Sigma (lattice units) and L2 sensitivity of kd's central noise, computed here from the
 * population config (clip 1, noise multiplier 1) and the task's granularity, the way
 * docs/dp.md defines them, independently of the coordinator. */
static void kd_noise(double gran, double *sigma, double *l2) {
    fl_dp_central_params cp;
    fl_dp_central_params_init(&cp);
    cp.clip = 1.0;
    cp.granularity = gran;
    cp.beta = exp(-0.5);
    fl_dp_central_info info;
    assert_int_equal(fl_dp_central_info_get(&info, &cp, D), FL_OK);
    uint64_t num, den;
    assert_int_equal(fl_dp_variance_to_rational(&num, &den, info.l2_bound * info.l2_bound, 1),
                     FL_OK);
    *sigma = sqrt((double)num / (double)den);
    *l2 = info.l2_bound;
}

static void check_completed(struct sweep *s, int p, int64_t rid) {
    struct fx *f = s->f;
    struct tc *c = s->dev[p];
    sqlite3 *db = rel_db_open(f->db);
    assert_non_null(db);
    assert_int_equal(rel_q(db, "SELECT state FROM rounds WHERE id = %lld", (long long)rid), 2);
    int64_t v = rel_q(db, "SELECT result_version FROM rounds WHERE id = %lld", (long long)rid);
    assert_true(v > s->cur_version[p]);
    assert_int_equal(rel_q(db, "SELECT parent FROM models WHERE version = %lld", (long long)v),
                     s->cur_version[p]);
    /* The devices in the sum: all, less those that dropped before the unmask phase. */
    int in_sum = 0;
    for (int i = 0; i < s->n; i++)
        in_sum += c[i].drop == DROP_NONE || c[i].drop == DROP_UNMASK;
    assert_int_equal(rel_q(db, "SELECT completed FROM rounds WHERE id = %lld", (long long)rid),
                     in_sum);
    assert_int_equal(rel_q(db,
                           "SELECT count(*) FROM round_participants WHERE round_id = %lld AND "
                           "state = 2",
                           (long long)rid),
                     in_sum);
    rel_db_close(db);
    float w[D], b[2], expect[D];
    fetch_model(f, &c[0], pop_name[p], v, w, b);
    assert_float_equal(b[0], 3.0f, 0);
    assert_float_equal(b[1], -4.0f, 0);
    if (p != 1) {
        /* Exactly the previous model + the FedAvg of the vectors of the devices in the sum
         * (kp: the survivors of its dropouts). */
        expected_fedavg(c, s->n, s->cur[p], expect);
        if (memcmp(w, expect, sizeof(w)) != 0)
            for (int j = 0; j < D; j++)
                fprintf(stderr, "round %lld w[%d] = %.9g, expected %.9g\n", (long long)rid, j, w[j],
                        expect[j]);
        assert_memory_equal(w, expect, sizeof(w));
    } else {
        /* (w - prev) * n / gamma = the devices' centred sum + integer noise (|.| <= 6 sigma). */
        double gran = c[0].task.gran, sigma, l2;
        kd_noise(gran, &sigma, &l2);
        uint64_t mod = (uint64_t)1 << c[0].task.bits;
        for (int j = 0; j < D; j++) {
            uint64_t sum = 0;
            for (int i = 0; i < s->n; i++)
                sum = (sum + c[i].words[j]) & (mod - 1);
            int64_t z = sum >= mod / 2 ? -(int64_t)(mod - sum) : (int64_t)sum;
            double noise = ((double)w[j] - (double)s->cur[p][j]) * s->n / gran - (double)z;
            double frac = fabs(noise - nearbyint(noise));
            if (frac > 0.05 || fabs(noise) > 6 * sigma)
                fprintf(stderr, "round %lld w[%d]: noise %.4f (sigma %.1f)\n", (long long)rid, j,
                        noise, sigma);
            assert_true(frac <= 0.05);
            assert_true(fabs(noise) <= 6 * sigma);
        }
        memcpy(expect, w, sizeof(w));
    }
    memcpy(s->cur[p], expect, sizeof(expect));
    s->cur_version[p] = v;
    s->completed[p]++;
    if (p == POP_KP && s->drop_phase >= 0) {
        s->drop_rounds[s->drop_phase]++;
        s->dropouts_total += s->drop_count;
    }
}

/* Nothing of round rid is stored beyond its row (abandoned, with the restart reason, or
 * with the too-few-survivors reason at the planned phase when the attempt planned too many
 * dropouts and may have reached that deadline; `deadline`: it must be that one) and its
 * selections. */
static void check_abandoned(struct sweep *s, int p, int64_t rid, bool deadline) {
    static const char *const phases[4] = {"advertise", "share", "masked", "unmask"};
    sqlite3 *db = rel_db_open(s->f->db);
    assert_non_null(db);
    long long id = (long long)rid;
    assert_int_equal(rel_q(db, "SELECT state FROM rounds WHERE id = %lld", id), 3);
    char like[96];
    snprintf(like, sizeof(like), "too few survivors in phase %s: %d < %d",
             s->drop_many ? phases[s->drop_phase] : "-", s->n - s->drop_count, s->n / 2);
    int64_t restart = rel_q(db,
                            "SELECT abandon_reason = 'coordinator restarted' FROM rounds "
                            "WHERE id = %lld",
                            id);
    int64_t too_few =
        rel_q(db, "SELECT abandon_reason = '%s' FROM rounds WHERE id = %lld", like, id);
    if (!(deadline ? too_few == 1 : restart == 1 || (s->drop_many && too_few == 1)))
        fprintf(stderr, "round %lld: unexpected abandon reason (expected %s)\n", id,
                deadline ? like : "coordinator restarted");
    assert_true(deadline ? too_few == 1 : restart == 1 || (s->drop_many && too_few == 1));
    if (too_few == 1) {
        s->drop_abandoned[s->drop_phase]++;
        s->dropouts_total += s->drop_count;
    }
    assert_int_equal(rel_q(db, "SELECT result_version IS NULL FROM rounds WHERE id = %lld", id), 1);
    assert_int_equal(rel_q(db, "SELECT count(*) FROM privacy_ledger WHERE round_id = %lld", id), 0);
    assert_int_equal(rel_q(db,
                           "SELECT count(*) FROM models WHERE "
                           "json_extract(metadata_json, '$.round_id') = %lld",
                           id),
                     0);
    assert_int_equal(rel_q(db,
                           "SELECT count(*) FROM round_participants WHERE round_id = %lld "
                           "AND state = 2",
                           id),
                     0);
    char tag[64];
    snprintf(tag, sizeof(tag), "population/%s", pop_name[p]);
    assert_int_equal(rel_q(db, "SELECT version FROM tags WHERE name = '%s'", tag),
                     s->cur_version[p]);
    rel_db_close(db);
    if (!deadline && too_few != 1)
        s->abandoned[p]++;
}

/* ---- the whole database at the end ---- */

static void check_final(struct sweep *s) {
    sqlite3 *db = rel_db_open(s->f->db);
    assert_non_null(db);
    int64_t completed_total = 0;
    for (int p = 0; p < POPS; p++) {
        int64_t pid = rel_q(db, "SELECT id FROM populations WHERE name = '%s'", pop_name[p]);
        assert_true(pid > 0);
        /* Only completed and abandoned rounds remain. */
        assert_int_equal(rel_q(db,
                               "SELECT count(*) FROM rounds WHERE population_id = %lld "
                               "AND state NOT IN (2, 3)",
                               (long long)pid),
                         0);
        int64_t nc = rel_q(db,
                           "SELECT count(*) FROM rounds WHERE population_id = %lld AND "
                           "state = 2",
                           (long long)pid);
        assert_int_equal(nc, s->completed[p]);
        completed_total += nc;
        /* Completed: its model version, n completed participants and no one else. */
        assert_int_equal(
            rel_q(db,
                  "SELECT count(*) FROM rounds r WHERE r.population_id = %lld AND r.state = 2 AND ("
                  " r.result_version IS NULL"
                  " OR (SELECT count(*) FROM models m WHERE m.version = r.result_version AND"
                  "     m.population_id = r.population_id AND m.parent = r.base_version AND"
                  "     json_extract(m.metadata_json, '$.round_id') = r.id) != 1"
                  " OR (SELECT count(*) FROM models m WHERE"
                  "     json_extract(m.metadata_json, '$.round_id') = r.id) != 1"
                  " OR (SELECT count(*) FROM round_participants q WHERE q.round_id = r.id AND"
                  "     q.state = 2) != r.completed"
                  " OR (SELECT count(*) FROM round_participants q WHERE q.round_id = r.id) != %d"
                  " OR r.completed NOT BETWEEN %d AND %d"
                  " OR (SELECT count(*) FROM privacy_ledger l WHERE l.round_id = r.id) != %d)",
                  (long long)pid, s->n, p == POP_KP ? s->n - 2 : s->n, s->n, p == 1 ? 1 : 0),
            0);
        /* Abandoned for a reason other than a restart: only kp's planned dropouts. */
        assert_int_equal(rel_q(db,
                               "SELECT count(*) FROM rounds WHERE population_id = %lld AND "
                               "state = 3 AND abandon_reason != 'coordinator restarted'",
                               (long long)pid),
                         p == POP_KP ? s->drop_abandoned[0] + s->drop_abandoned[1] +
                                           s->drop_abandoned[2] + s->drop_abandoned[3]
                                     : 0);
        /* Abandoned: nothing. */
        assert_int_equal(
            rel_q(db,
                  "SELECT count(*) FROM rounds r WHERE r.population_id = %lld AND r.state = 3 AND ("
                  " r.result_version IS NOT NULL"
                  " OR (SELECT count(*) FROM models m WHERE"
                  "     json_extract(m.metadata_json, '$.round_id') = r.id) != 0"
                  " OR (SELECT count(*) FROM round_participants q WHERE q.round_id = r.id AND"
                  "     q.state = 2) != 0"
                  " OR (SELECT count(*) FROM privacy_ledger l WHERE l.round_id = r.id) != 0)",
                  (long long)pid),
            0);
        /* No stray model version: the upload plus one per completed round. */
        assert_int_equal(
            rel_q(db, "SELECT count(*) FROM models WHERE population_id = %lld", (long long)pid),
            1 + nc);
        /* The lineage: each completed round trains on the previous completed version. */
        assert_int_equal(
            rel_q(db,
                  "SELECT count(*) FROM rounds r WHERE r.population_id = %lld AND r.state = 2 AND"
                  " r.base_version != coalesce((SELECT r2.result_version FROM rounds r2 WHERE"
                  "   r2.population_id = r.population_id AND r2.state = 2 AND r2.id < r.id"
                  "   ORDER BY r2.id DESC LIMIT 1),"
                  " (SELECT min(version) FROM models m WHERE m.population_id = r.population_id))",
                  (long long)pid),
            0);
        assert_int_equal(
            rel_q(db, "SELECT version FROM tags WHERE name = 'population/%s'", pop_name[p]),
            s->cur_version[p]);
        /* Ledger: one entry per completed kd round, none for kx, none twice. */
        assert_int_equal(rel_q(db,
                               "SELECT count(*) FROM privacy_ledger WHERE population_id = "
                               "%lld",
                               (long long)pid),
                         p == 1 ? nc : 0);
        assert_int_equal(rel_q(db,
                               "SELECT count(DISTINCT round_id) FROM privacy_ledger WHERE "
                               "population_id = %lld",
                               (long long)pid),
                         p == 1 ? nc : 0);
        assert_int_equal(rel_q(db,
                               "SELECT count(*) FROM privacy_ledger l JOIN rounds r ON "
                               "r.id = l.round_id WHERE l.population_id = %lld AND "
                               "r.state != 2",
                               (long long)pid),
                         0);
    }
    fprintf(stderr,
            "final database: %lld completed round(s), %lld abandoned, %lld ledger "
            "entries, %lld audit entries\n",
            (long long)completed_total,
            (long long)rel_q(db, "SELECT count(*) FROM rounds WHERE state = 3"),
            (long long)rel_q(db, "SELECT count(*) FROM privacy_ledger"),
            (long long)rel_q(db, "SELECT count(*) FROM audit_entries"));
    /* The audit log: one "round" entry per ended round (completed or abandoned), never two;
     * then the whole log is verified offline below (check_audit). */
    int64_t audit = rel_q(db, "SELECT count(*) FROM audit_entries");
    if (audit > 0) {
        assert_int_equal(rel_q(db, "SELECT count(*) FROM rounds r WHERE r.state IN (2, 3) AND"
                                   " (SELECT count(*) FROM audit_entries a WHERE a.type = "
                                   "'round' AND json_extract(CAST(a.data AS TEXT), "
                                   "'$.round_id') = r.id) != 1"),
                         0);
        assert_int_equal(rel_q(db, "SELECT count(*) FROM rounds r WHERE r.state = 2 AND "
                                   "(SELECT json_extract(CAST(a.data AS TEXT), '$.outcome') "
                                   "FROM audit_entries a WHERE a.type = 'round' AND "
                                   "json_extract(CAST(a.data AS TEXT), '$.round_id') = r.id) "
                                   "!= 'completed'"),
                         0);
    } else {
        fprintf(stderr, "audit log: not written by the coordinator (0 entries): not checked\n");
    }
    rel_db_close(db);
}

/* Every kd ledger entry is the per-round event recomputed here; epsilon from dp's
 * accountant over (completed kd rounds x that event) is what /metrics reports. */
static void check_ledger_epsilon(struct sweep *s) {
    double gran = s->dev[1][0].task.gran, sigma, l2;
    kd_noise(gran, &sigma, &l2);
    sqlite3 *db = rel_db_open(s->f->db);
    assert_non_null(db);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT mechanism, sampling_rate, noise_multiplier,"
                                        " clip_norm, steps, participants, params_json FROM "
                                        "privacy_ledger ORDER BY id",
                                        -1, &st, NULL),
                     SQLITE_OK);
    int rows = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        rows++;
        fl_dp_ledger_entry e;
        fl_dp_ledger_entry_init(&e, (const char *)sqlite3_column_text(st, 0));
        assert_string_equal(e.mechanism, FL_DP_MECH_DISCRETE_GAUSSIAN);
        assert_float_equal(sqlite3_column_double(st, 1), (double)s->n / 1000.0, 1e-12);
        assert_float_equal(sqlite3_column_double(st, 2), 1.0, 0);
        assert_float_equal(sqlite3_column_double(st, 3), 1.0, 0);
        assert_int_equal(sqlite3_column_int64(st, 4), 1);
        assert_int_equal(sqlite3_column_int64(st, 5), s->n);
        char msg[128];
        assert_int_equal(fl_dp_ledger_entry_parse_params(
                             &e, (const char *)sqlite3_column_text(st, 6), msg, sizeof(msg)),
                         FL_OK);
        assert_float_equal(e.sigma, sigma, 1e-9 * sigma);
        assert_float_equal(e.l2_sensitivity, l2, 1e-9 * l2);
    }
    sqlite3_finalize(st);
    rel_db_close(db);
    assert_int_equal(rows, s->completed[1]);
    fl_dp_accountant *acc = NULL;
    char msg[128];
    assert_int_equal(fl_dp_accountant_create(&acc, NULL, NULL, msg, sizeof(msg)), FL_OK);
    fl_dp_event ev;
    fl_dp_event_discrete_gaussian(&ev, sigma, l2, (double)s->n / 1000.0, (uint64_t)s->completed[1]);
    assert_int_equal(fl_dp_accountant_compose(acc, &ev), FL_OK);
    double eps = 0;
    assert_int_equal(fl_dp_accountant_epsilon(acc, &eps, NULL, 1e-5), FL_OK);
    fl_dp_accountant_destroy(acc);
    double m = rel_metric(s->f, "flotilla_privacy_epsilon_spent{population=\"kd\"}");
    fprintf(stderr,
            "privacy: %d completed kd round(s), sigma %.3f, l2 %.3f, q %.3f: epsilon "
            "recomputed %.6g, /metrics %.6g (delta 1e-5)\n",
            s->completed[1], sigma, l2, (double)s->n / 1000.0, eps, m);
    assert_true(isfinite(m));
    assert_true(fabs(m - eps) <= 1e-5 * fabs(eps) + 1e-9);
}

/* The audit log as a whole, with storage's offline verifier: a bundle exported from the
 * final database verifies under the coordinator's key (every checkpoint signature, the
 * Merkle roots, consistency between checkpoints, each entry's rules), and after the
 * graceful stop the last checkpoint covers the whole log. Returns the entry count. */
static int64_t check_audit(struct sweep *s) {
    fl_store *st = NULL;
    assert_int_equal(fl_store_open(&st, s->f->db, NULL), FL_OK);
    int64_t size = 0;
    assert_int_equal(fl_store_audit_size(st, &size), FL_OK);
    if (size == 0) {
        fl_store_close(st);
        return 0;
    }
    fl_store_audit_checkpoint *cp = NULL;
    assert_int_equal(fl_store_audit_checkpoint_latest(st, &cp), FL_OK);
    assert_int_equal(cp->tree_size, size);
    uint8_t root[FL_STORE_AUDIT_HASH_BYTES];
    assert_int_equal(fl_store_audit_root(st, root, cp->tree_size), FL_OK);
    assert_memory_equal(root, cp->root, sizeof(root));
    fl_store_free(st, cp);
    uint8_t *bundle = NULL;
    size_t blen = 0;
    assert_int_equal(fl_store_audit_export(st, &bundle, &blen), FL_OK);
    /* The coordinator's key: the fixed test seed 0x07.. (coord_testkit's signing.key). */
    uint8_t seed[32], pk[32], sk[64], h[32];
    memset(seed, 7, sizeof(seed));
    crypto_sign_seed_keypair(pk, sk, seed);
    crypto_hash_sha256(h, pk, sizeof(pk));
    char kid[17], origin[64], vkey[256];
    sodium_bin2hex(kid, sizeof(kid), h, 8);
    snprintf(origin, sizeof(origin), "flotilla-coordinator/%s", kid);
    assert_int_equal(fl_store_audit_vkey(vkey, sizeof(vkey), origin, pk), FL_OK);
    fl_store_audit_bundle *b = NULL;
    assert_int_equal(fl_store_audit_bundle_open(&b, bundle, blen, NULL), FL_OK);
    fl_store_audit_verdict v;
    memset(&v, 0, sizeof(v));
    fl_status rc = fl_store_audit_bundle_verify(b, vkey, &v);
    if (rc != FL_OK)
        fprintf(stderr, "audit bundle: %s\n", fl_store_audit_bundle_errmsg(b));
    assert_int_equal(rc, FL_OK);
    assert_true(v.ok);
    assert_int_equal(v.entries, size);
    fl_store_audit_bundle_close(b);
    fl_store_free(st, bundle);
    fl_store_close(st);
    sodium_memzero(sk, sizeof(sk));
    return size;
}

/* After a kill: the last signed checkpoint is never ahead of the log the dead process left
 * (the log may be ahead of it: checkpoints are signed after the commit). */
static void check_audit_not_behind(struct sweep *s) {
    sqlite3 *db = rel_db_open(s->f->db);
    assert_non_null(db);
    int64_t entries = rel_q(db, "SELECT count(*) FROM audit_entries");
    int64_t cp = rel_q(db, "SELECT coalesce(max(tree_size), 0) FROM audit_checkpoints");
    rel_db_close(db);
    if (cp > entries)
        fprintf(stderr, "audit: checkpoint of %lld entries, log of %lld\n", (long long)cp,
                (long long)entries);
    assert_true(cp <= entries);
    s->audit_checks++;
}

/* Starts the coordinator on the same config and SIGKILLs it after delay_us, before it is
 * ready or while it opens the store and abandons the open rounds. */
static void kill_during_startup(struct sweep *s, long delay_us) {
    struct fx *f = s->f;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, f->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    char *argv[] = {(char *)FL_COORD_EXE, "serve", "--config", f->conf, NULL};
    pid_t pid = 0;
    int rc = posix_spawn(&pid, FL_COORD_EXE, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        ;
    s->startup_kills++;
}

/* ---- the sweep ---- */

static void restart(struct sweep *s) {
    double t0 = rel_mono_s();
    fx_proc_start(s->f, FL_COORD_EXE);
    s->restart_s_sum += rel_mono_s() - t0;
    s->restarts++;
}

/* ---- power cuts (--power) ---- */

static void io_file(struct sweep *s, char *buf, size_t n) {
    snprintf(buf, n, "%s/flfault.io", s->f->dir);
}

/* The shim's report (rel_fault_shim.c): the I/O count of the life, and after a cut the
 * cut's statistics, added to the sweep's. Returns the I/O count, or -1 without a report. */
static long read_io_report(struct sweep *s, bool add_cut_stats) {
    char path[160];
    io_file(s, path, sizeof(path));
    FILE *fp = fopen(path, "r");
    long io = -1, dropped = 0, kept = 0, entries = 0;
    if (fp) {
        if (fscanf(fp, "io %ld dropped %ld kept %ld entries %ld", &io, &dropped, &kept,
                   &entries) != 4)
            io = -1;
        fclose(fp);
    }
    unlink(path);
    if (add_cut_stats && io >= 0) {
        s->cut_dropped += dropped;
        s->cut_kept += kept;
        s->cut_entries += entries;
    }
    return io;
}

/* After a cut, with the process gone: the files it left pass what a kill's must. */
static void after_cut_checks(struct sweep *s) {
    char why[256];
    bool ok = rel_db_ok(s->f->db, why, sizeof(why));
    if (!ok)
        fprintf(stderr, "cut %d: %s\n", s->cuts, why);
    assert_true(ok);
    s->db_checks_ok++;
    check_audit_not_behind(s);
    assert_true(read_io_report(s, true) >= 0);
    /* Every round acknowledged before (all the completed ones the test counted) is still
     * there, with its model version; the round in flight may have committed too. */
    sqlite3 *db = rel_db_open(s->f->db);
    assert_non_null(db);
    for (int p = 0; p < POPS; p++) {
        int64_t nc = rel_q(db,
                           "SELECT count(*) FROM rounds r JOIN populations p ON "
                           "p.id = r.population_id WHERE p.name = '%s' AND r.state = 2 AND "
                           "r.result_version <= %lld",
                           pop_name[p], (long long)s->cur_version[p]);
        if (nc != s->completed[p])
            fprintf(stderr, "cut %d: %s has %lld completed rounds up to version %lld, %d "
                            "acknowledged\n",
                    s->cuts, pop_name[p], (long long)nc, (long long)s->cur_version[p],
                    s->completed[p]);
        assert_int_equal(nc, s->completed[p]);
        assert_int_equal(rel_q(db, "SELECT count(*) FROM models WHERE version = %lld",
                               (long long)s->cur_version[p]),
                         1);
        s->acked_rechecked += s->completed[p];
    }
    rel_db_close(db);
}

/* Starts a new life of rel-coordinator-flfault with a power cut armed at an I/O call drawn
 * uniformly from [1, life_io] (the calibrated count of a start plus one round of each
 * population), or, every other life, armed by SIGUSR1 just before the next request that
 * completes a round, at an I/O call drawn from [1, 48] after it (inside or right after the
 * commit); lose-unsynced and torn alternate every two lives. A cut during the start
 * (opening the store, abandoning the rounds left open) is checked like any other and a new
 * life begins. */
static void power_restart(struct sweep *s) {
    char path[160], num[32];
    io_file(s, path, sizeof(path));
    for (;;) {
        s->commit_life = s->lives % 2 == 1;
        s->life_model = (int)((s->lives / 2) & 1);
        s->lives++;
        long k = 1 + (long)(rel_next(&s->rng) % (uint64_t)(s->commit_life ? 48 : s->life_io));
        setenv("FL_REL_FLFAULT", "1", 1);
        setenv("FL_REL_IO_FILE", path, 1);
        snprintf(num, sizeof(num), "%ld", k);
        setenv(s->commit_life ? "FL_REL_CUT_ON_SIGNAL" : "FL_REL_CUT_AT", num, 1);
        unsetenv(s->commit_life ? "FL_REL_CUT_AT" : "FL_REL_CUT_ON_SIGNAL");
        s->arm_pending = s->commit_life;
        setenv("FL_REL_CUT_MODEL", s->life_model ? "1" : "0", 1);
        snprintf(num, sizeof(num), "%llu", (unsigned long long)rel_next(&s->rng));
        setenv("FL_REL_CUT_SEED", num, 1);
        double t0 = rel_mono_s();
        int st = rel_proc_try_start(s->f, FL_COORD_FLFAULT_EXE);
        if (st == 0) {
            /* The signal handler is installed before main: ready means armed-able. */
            s->restart_s_sum += rel_mono_s() - t0;
            s->restarts++;
            return;
        }
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == CUT_EXIT))
            fprintf(stderr, "rel-coordinator-flfault died while starting (status %d); log %s\n",
                    st, s->f->log);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == CUT_EXIT);
        s->cuts++;
        s->startup_cuts++;
        s->cut_models[s->life_model]++;
        after_cut_checks(s);
    }
}

/* Counts the I/O calls of one life without a cut: a start on the fault VFS and one clean
 * round of each population, ended by SIGTERM (the shim writes its count at exit). */
static void calibrate(struct sweep *s) {
    char path[160];
    io_file(s, path, sizeof(path));
    int st = fx_proc_signal(s->f, SIGTERM);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    setenv("FL_REL_FLFAULT", "1", 1);
    setenv("FL_REL_IO_FILE", path, 1);
    unsetenv("FL_REL_CUT_AT");
    unsetenv("FL_REL_CUT_ON_SIGNAL");
    assert_int_equal(rel_proc_try_start(s->f, FL_COORD_FLFAULT_EXE), 0);
    for (int p = 0; p < POPS; p++) {
        int64_t rid = 0;
        s->drop_phase = -1;
        s->drop_many = false;
        assert_int_equal(attempt(s, p, &rid), 1);
        check_completed(s, p, rid);
    }
    st = fx_proc_signal(s->f, SIGTERM);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    s->life_io = read_io_report(s, false);
    assert_true(s->life_io > 10);
    fprintf(stderr, "power cuts: a life (start + one round of each population) makes %ld I/O "
                    "calls; each cut lands uniformly in [1, %ld]\n",
            s->life_io, s->life_io);
}

/* The sweep's state lives in cmocka's state, so that teardown stops the coordinator and
 * removes the files even when a check fails half-way. */
static int sweep_setup(void **state) {
    struct sweep *s = calloc(1, sizeof(*s));
    if (!s)
        return -1;
    s->f = fx_new();
    s->h = curl_easy_init();
    *state = s;
    return s->h ? 0 : -1;
}

static int sweep_teardown(void **state) {
    struct sweep *s = *state;
    if (s->killer_running)
        pthread_join(s->killer, NULL);
    for (int p = 0; p < POPS; p++)
        clients_free(s->dev[p], NDEV);
    curl_easy_cleanup(s->h);
    char path[160];
    io_file(s, path, sizeof(path));
    unlink(path);
    fx_free(s->f); /* kills a coordinator still running */
    free(s);
    return 0;
}

/* Sets the attempt's dropout plan: kp attempts get one every drop_every-th time. Plan j
 * (0, 1, ...): j % 4 == 0 is "too many" (at advertise, share or masked), the others are
 * tolerable at any phase; plans 0 and 2 (mod 4) run to their end, 1 and 3 may be killed
 * (see run_sweep), so the first three plans already cover each path. */
static void plan_attempt_dropouts(struct sweep *s, int p, long attempts, int drop_every) {
    s->drop_phase = -1;
    s->drop_many = false;
    s->drop_count = 0;
    if (p != POP_KP || (attempts / POPS) % drop_every != 0)
        return;
    s->drop_many = (attempts / POPS / drop_every) % 4 == 0; /* the 1st, 5th, ... plan */
    s->drop_phase = (int)(rel_next(&s->rng) % (s->drop_many ? 3 : 4));
}

static void run_sweep(struct sweep *s, bool power) {
    int lng = rel_long();
    uint64_t seed = rel_seed0();
    s->rng = seed;
    s->power = power;
    s->n = (int)rel_envl("FL_REL_KILL_CLIENTS", lng ? 50 : 10);
    long kills_target =
        rel_envl(power ? "FL_REL_CUTS" : "FL_REL_KILLS", lng ? (power ? 300 : 1000) : 10);
    long rounds_target = rel_envl("FL_REL_KILL_ROUNDS", lng ? 12 : 2); /* per population */
    /* Both times FL_TEST_TIME_SCALE (a slow tool: restarts and rounds take longer); kp's
     * phase deadlines at most 7 s: they add up from the round's start (the unmask phase
     * closes 4 deadlines after it), and a result poll waits at most 30 s (the coordinator's
     * max_long_poll_s), so a phase closes within one poll. */
    double budget_s = (double)fl_test_scaled(rel_envl("FL_REL_KILL_BUDGET_S", lng ? 1500 : 15));
    long deadline_s = fl_test_scaled(2) < 7 ? fl_test_scaled(2) : 7;
    deadline_s = rel_envl("FL_REL_KILL_DEADLINE_S", deadline_s); /* kp's phase deadlines */
    int drop_every = power ? 4 : 2;
    assert_true(s->n >= 4 && s->n <= NDEV);
    fprintf(stderr,
            "%s sweep: seed %llu, %d devices, target %ld %s and %ld completed rounds per "
            "population, time cap %.0f s; kp: phase deadlines %ld s, dropouts in 1 of %d "
            "rounds\n",
            power ? "power-cut" : "kill", (unsigned long long)seed, s->n, kills_target,
            power ? "cuts" : "kills", rounds_target, budget_s, deadline_s, drop_every);
    restart(s);
    for (int p = 0; p < POPS; p++) {
        char *tok[NDEV];
        struct popcfg pc = {.name = pop_name[p], .target = s->n,
                            .min = p == POP_KP ? s->n / 2 : s->n, .secagg = true,
                            .neighbors = s->n > 10 ? 10 : s->n - 1,
                            .mode = p == 1 ? "central" : "none", .budget = 1e6};
        setup_population(s->f, &pc, tok, s->n);
        for (int i = 0; i < s->n; i++)
            s->dev[p][i].tok = tok[i];
        for (int j = 0; j < D; j++)
            s->cur[p][j] = base_w(j);
        char q[128];
        snprintf(q, sizeof(q), "SELECT version FROM tags WHERE name = 'population/%s'",
                 pop_name[p]);
        s->cur_version[p] = db_int(s->f, q);
        assert_true(s->cur_version[p] > 0);
    }
    /* kp's short deadlines: a dropout costs the test the rest of its phase's deadline. */
    char body[160];
    snprintf(body, sizeof(body),
             "{\"deadlines_s\":{\"advertise\":%ld,\"share\":%ld,\"masked\":%ld,\"unmask\":%ld}}",
             deadline_s, deadline_s, deadline_s, deadline_s);
    struct resp pr = http_json(s->f, "PATCH", "/v1/admin/populations/kp", ADMIN_TOKEN, body);
    if (pr.status != 200)
        fprintf(stderr, "PATCH kp: %ld %s\n", pr.status, pr.body);
    assert_int_equal(pr.status, 200);
    resp_free(&pr);
    s->commit_lat_s = 0.005;
    s->kill_at = -1;
    if (power) {
        calibrate(s);
        power_restart(s);
    }
    long clean_every = kills_target / (2 * rounds_target) + 1;
    double t_start = rel_mono_s();
    long attempts = 0;
    bool capped = false;
    int completed_all = 0;
    for (;;) {
        int faults = power ? s->cuts : s->kills;
        completed_all = 0;
        for (int q = 0; q < POPS; q++)
            completed_all += s->completed[q] >= rounds_target;
        if (faults >= kills_target && completed_all == POPS)
            break;
        if (rel_mono_s() - t_start > budget_s) {
            capped = true;
            break;
        }
        int p = (int)(attempts % POPS);
        bool want_rounds = s->completed[p] < rounds_target;
        bool kill = !power && s->kills < kills_target &&
                    !(want_rounds && attempts % clean_every == 0);
        if (!power && !kill && !want_rounds)
            kill = true; /* both targets met for this population: keep killing */
        plan_attempt_dropouts(s, p, attempts, drop_every);
        if (s->drop_phase >= 0 && rel_mono_s() - t_start > budget_s - 4.0 * deadline_s) {
            s->drop_phase = -1; /* its wait would overrun the time cap */
            s->drop_many = false;
        }
        if (s->drop_phase >= 0 && (attempts / POPS / drop_every) % 2 == 0)
            kill = false; /* every other dropout plan runs to its end (deadline paths) */
        attempts++;
        s->step = 0;
        s->killed = false;
        s->kill_at = -1;
        long per_round = 10L * s->n; /* n check-ins, n tasks, 4 x (n posts + n polls) */
        int kind = 0;
        if (kill) {
            uint64_t x = rel_next(&s->rng);
            if (x % 4 == 0) { /* inside the committing request */
                kind = 2;
                s->kill_at = 9L * s->n - 1;
                s->kill_mode = 1;
                s->kill_delay_us =
                    (long)(rel_next(&s->rng) % (uint64_t)(1 + 1.5e6 * s->commit_lat_s));
            } else {
                s->kill_at = (long)(rel_next(&s->rng) % (uint64_t)per_round);
                s->kill_mode = (int)(rel_next(&s->rng) & 1);
                kind = s->kill_mode;
                s->kill_delay_us = (long)(rel_next(&s->rng) % 1500);
            }
        }
        int64_t rid = 0;
        int done = attempt(s, p, &rid);
        if (!s->killed) {
            if (done == 1) {
                check_completed(s, p, rid);
            } else {
                assert_int_equal(done, 2); /* abandoned at the deadline, as planned */
                check_abandoned(s, p, rid, true);
            }
            continue;
        }
        /* Killed, or the power was cut (a kill "during" the round's last request may land
         * after its answer: then the round completed and the process died after it). */
        s->drop_killed += s->drop_phase >= 0;
        long k = power ? s->step - 1 : s->kill_at;
        s->kill_phase[k < s->n        ? 0
                      : k < 2L * s->n ? 1
                                      : 2 + (int)((k - 2L * s->n) / (2L * s->n)) % 4]++;
        if (power) {
            s->cuts++;
            s->commit_cuts += s->commit_life;
            s->cut_models[s->life_model]++;
            after_cut_checks(s);
            if (s->cuts % 50 == 0)
                fprintf(stderr, "  %d cuts, %d + %d + %d rounds completed, %.0f s\n", s->cuts,
                        s->completed[0], s->completed[1], s->completed[2],
                        rel_mono_s() - t_start);
        } else {
            s->kills++;
            if (s->kills % 100 == 0)
                fprintf(stderr, "  %d kills, %d + %d + %d rounds completed, %.0f s\n", s->kills,
                        s->completed[0], s->completed[1], s->completed[2],
                        rel_mono_s() - t_start);
            s->kills_before += kind == 0;
            s->kills_during += kind == 1;
            s->kills_commit += kind == 2;
            /* Before the restart: the files as the dead process left them. */
            char why[256];
            if (!rel_db_ok(s->f->db, why, sizeof(why)))
                fprintf(stderr, "kill %d (attempt %ld, request %ld): %s\n", s->kills, attempts,
                        k, why);
            assert_true(rel_db_ok(s->f->db, why, sizeof(why)));
            s->db_checks_ok++;
            check_audit_not_behind(s);
            if (rel_next(&s->rng) % 8 == 0) {
                /* Kill the restarting process too (0-40 ms after its start), then check
                 * again. */
                kill_during_startup(s, (long)(rel_next(&s->rng) % 40000));
                assert_true(rel_db_ok(s->f->db, why, sizeof(why)));
                s->db_checks_ok++;
                check_audit_not_behind(s);
            }
        }
        char q[128];
        snprintf(q, sizeof(q), "SELECT state FROM rounds WHERE id = %lld", (long long)rid);
        int64_t before = rid ? db_int(s->f, q) : -1;
        if (s->acked) {
            /* A device was told the round completed: the cut must not have lost it. */
            s->acked_at_cut++;
            if (before != 2)
                fprintf(stderr, "round %lld: acknowledged as completed, state %lld after the "
                                "cut\n",
                        (long long)rid, (long long)before);
            assert_int_equal(before, 2);
        }
        if (power)
            power_restart(s);
        else
            restart(s);
        if (rid == 0) {
            s->kind_abandoned[kind]++;
            continue; /* killed before the round existed */
        }
        if (done == 1 || before == 2)
            s->kind_committed[kind]++;
        else
            s->kind_abandoned[kind]++;
        if (done == 1 || before == 2) {
            /* Committed before the kill landed: a whole round. */
            assert_int_equal(before, 2);
            s->completed_after_kill[p]++;
            check_completed(s, p, rid);
        } else {
            check_abandoned(s, p, rid, false);
        }
    }
    double elapsed = rel_mono_s() - t_start;
    if (power) {
        /* The end: the plain coordinator on what the last life left. */
        int st = fx_proc_signal(s->f, SIGKILL);
        (void)st;
        unsetenv("FL_REL_FLFAULT");
        unsetenv("FL_REL_CUT_AT");
        unsetenv("FL_REL_CUT_ON_SIGNAL");
        restart(s);
    }
    check_ledger_epsilon(s);
    int st = fx_proc_signal(s->f, SIGTERM);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char why[256];
    assert_true(rel_db_ok(s->f->db, why, sizeof(why)));
    s->db_checks_ok++;
    check_final(s);
    int64_t audit_entries = check_audit(s);
    const char *what = power ? "power-cut sweep" : "kill sweep";
    int faults = power ? s->cuts : s->kills;
    fprintf(stderr,
            "audit log: %lld entries, bundle verified under the coordinator's key, last "
            "checkpoint covers the whole log; checkpoint never ahead of the log after %d "
            "%s\n",
            (long long)audit_entries, s->audit_checks, power ? "cuts" : "kills");
    if (power)
        fprintf(stderr,
                "%s: %ld attempts in %.1f s%s: %d power cuts (%d lose-unsynced, %d torn; %d "
                "while the coordinator was starting; %d armed just before a committing "
                "request); cuts by the request in flight: "
                "check-in %d, task %d, advertise %d, share %d, masked %d, unmask %d; unsynced "
                "writes dropped %ld, torn sectors kept %ld, directory entries reverted %ld\n",
                what, attempts, elapsed, capped ? " (time cap reached)" : "", s->cuts,
                s->cut_models[0], s->cut_models[1], s->startup_cuts, s->commit_cuts,
                s->kill_phase[0],
                s->kill_phase[1], s->kill_phase[2], s->kill_phase[3], s->kill_phase[4],
                s->kill_phase[5], s->cut_dropped, s->cut_kept, s->cut_entries);
    else
        fprintf(stderr,
                "%s: %ld attempts in %.1f s%s: %d kills (%d before a request, %d during one, "
                "%d inside the committing request); kills by part of the round: check-in %d, "
                "task %d, advertise %d, share %d, masked %d, unmask %d\n",
                what, attempts, elapsed, capped ? " (time cap reached)" : "", s->kills,
                s->kills_before, s->kills_during, s->kills_commit, s->kill_phase[0],
                s->kill_phase[1], s->kill_phase[2], s->kill_phase[3], s->kill_phase[4],
                s->kill_phase[5]);
    fprintf(stderr,
            "%s: integrity_check + foreign_key_check passed %d/%d; rounds completed: "
            "kx %d (%d committed just before the fault), kd %d (%d), kp %d (%d); abandoned "
            "after a fault: kx %d, kd %d, kp %d; half-committed 0; models exact (kx, kp) %d/%d; "
            "rounds acknowledged in the attempt a fault ended %d, lost 0; earlier completed "
            "rounds re-checked after each cut %ld, lost 0; restart mean %.3f s; %d "
            "restarting processes killed too\n",
            what, s->db_checks_ok, faults + 1 + s->startup_kills, s->completed[0],
            s->completed_after_kill[0], s->completed[1], s->completed_after_kill[1],
            s->completed[2], s->completed_after_kill[2], s->abandoned[0], s->abandoned[1],
            s->abandoned[2], s->completed[0] + s->completed[2], s->completed[0] + s->completed[2],
            s->acked_at_cut, s->acked_rechecked, s->restart_s_sum / s->restarts,
            s->startup_kills);
    fprintf(stderr,
            "%s: kp dropouts: rounds completed with 1-2 devices dropped at advertise %d, share "
            "%d, masked %d, unmask %d; abandoned at the phase deadline (too few survivors) at "
            "advertise %d, share %d, masked %d; %d devices dropped in those; %d dropout "
            "rounds ended by a fault\n",
            what, s->drop_rounds[0], s->drop_rounds[1], s->drop_rounds[2], s->drop_rounds[3],
            s->drop_abandoned[0], s->drop_abandoned[1], s->drop_abandoned[2], s->dropouts_total,
            s->drop_killed);
    if (!power)
        fprintf(stderr,
                "%s: round found committed / abandoned after the restart: kills "
                "before a request %d / %d, during one %d / %d, inside the committing request "
                "%d / %d\n",
                what, s->kind_committed[0], s->kind_abandoned[0], s->kind_committed[1],
                s->kind_abandoned[1], s->kind_committed[2], s->kind_abandoned[2]);
    if (capped)
        fprintf(stderr, "%s: stopped by the time cap before the targets\n", what);
    assert_true(faults >= (lng ? 1 : kills_target / 2));
    assert_true(s->completed[0] >= 1 && s->completed[1] >= 1 && s->completed[2] >= 1);
}

static void test_kill_sweep(void **state) {
    run_sweep(*state, false);
}

static void test_power_sweep(void **state) {
    run_sweep(*state, true);
}

int main(int argc, char **argv) {
    bool power = argc > 1 && strcmp(argv[1], "--power") == 0;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest kill_tests[] = {
        cmocka_unit_test_setup_teardown(test_kill_sweep, sweep_setup, sweep_teardown),
    };
    const struct CMUnitTest power_tests[] = {
        cmocka_unit_test_setup_teardown(test_power_sweep, sweep_setup, sweep_teardown),
    };
    int rc = power ? cmocka_run_group_tests(power_tests, NULL, NULL)
                   : cmocka_run_group_tests(kill_tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
