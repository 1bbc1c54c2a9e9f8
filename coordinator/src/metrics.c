/* Prometheus metrics: lock-free counters bumped by request threads, rendered in the text
 * exposition format 0.0.4 on /metrics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"

/* Every status the coordinator answers (408: a request past its deadline; 503: storage
 * unavailable, busy or draining, which an operator tells apart from a 500). */
static const int codes[FL__COORD_CODES] = {200, 201, 202, 204, 304, 400, 401, 403, 404, 405,
                                           408, 409, 410, 411, 413, 415, 425, 429, 500, 503};

static int code_index(int status) {
    int other = status >= 500 ? 500 : 400; /* any other status: its class's generic bucket */
    int fallback = 0;
    for (int i = 0; i < FL__COORD_CODES; i++) {
        if (codes[i] == status)
            return i;
        if (codes[i] == other)
            fallback = i;
    }
    return fallback;
}

const double fl__coord_dur_bounds[FL__COORD_DUR_BUCKETS] = {1, 5, 10, 30, 60, 120, 300, 600,
                                                             1800, 3600};

void fl__coord_metrics_round_done(struct fl__coord_metrics *m, int outcome, int64_t ms) {
    if (ms < 0)
        ms = 0;
    outcome = outcome ? 1 : 0;
    for (int i = 0; i < FL__COORD_DUR_BUCKETS; i++)
        if ((double)ms <= fl__coord_dur_bounds[i] * 1000.0)
            atomic_fetch_add(&m->dur_bucket[outcome][i], 1);
    atomic_fetch_add(&m->dur_count[outcome], 1);
    atomic_fetch_add(&m->dur_sum_ms[outcome], (uint64_t)ms);
}

void fl__coord_metrics_http(struct fl__coord_metrics *m, enum fl__coord_route r, int status) {
    if ((unsigned)r >= FL__R_COUNT)
        r = FL__R_NOT_FOUND;
    atomic_fetch_add(&m->http[r][code_index(status)], 1);
}

/* Growable string for rendering. */
struct sbuf {
    char *p;
    size_t len, cap;
    bool failed;
    fl_coord *co; /* whose allocator grows p */
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...) {
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t ncap = b->cap * 2 + (size_t)n;
        char *np = fl__realloc(fl__coord_alloc(b->co), b->p, b->cap, ncap);
        if (!np) {
            b->failed = true;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
}

char *fl__coord_metrics_render(fl_coord *co, size_t *size) {
    struct fl__coord_metrics *m = &co->metrics;
    struct sbuf b = {fl__alloc(fl__coord_alloc(co), 8192), 0, 8192, false, co};
    if (!b.p)
        return NULL;
    b.p[0] = '\0';
    sb_printf(&b, "# HELP flotilla_build_info Build of the running coordinator.\n"
                  "# TYPE flotilla_build_info gauge\n"
                  "flotilla_build_info{version=\"%s\"} 1\n", FL_VERSION_STRING);
    sb_printf(&b, "# HELP flotilla_up 1 while the coordinator is ready to serve.\n"
                  "# TYPE flotilla_up gauge\nflotilla_up %d\n", atomic_load(&co->ready) ? 1 : 0);
    int64_t now = fl__coord_now(co);
    sb_printf(&b, "# HELP flotilla_uptime_seconds Seconds since the server started.\n"
                  "# TYPE flotilla_uptime_seconds gauge\nflotilla_uptime_seconds %.3f\n",
              co->started_at ? (double)(now - co->started_at) / 1000.0 : 0.0);
    sb_printf(&b, "# HELP flotilla_http_requests_total HTTP requests answered, by route and "
                  "status code.\n# TYPE flotilla_http_requests_total counter\n");
    for (int r = 0; r < FL__R_COUNT; r++)
        for (int c = 0; c < FL__COORD_CODES; c++) {
            uint64_t v = atomic_load(&m->http[r][c]);
            if (v)
                sb_printf(&b, "flotilla_http_requests_total{route=\"%s\",code=\"%d\"} %llu\n",
                          fl__coord_route_name((enum fl__coord_route)r), codes[c],
                          (unsigned long long)v);
        }
    static const char *outcomes[FL__CHK_COUNT] = {"selected", "retry", "rejected"};
    sb_printf(&b, "# HELP flotilla_checkins_total Check-ins by outcome.\n"
                  "# TYPE flotilla_checkins_total counter\n");
    for (int i = 0; i < FL__CHK_COUNT; i++)
        sb_printf(&b, "flotilla_checkins_total{outcome=\"%s\"} %llu\n", outcomes[i],
                  (unsigned long long)atomic_load(&m->checkins[i]));
    sb_printf(&b, "# HELP flotilla_enrollments_total Clients enrolled.\n"
                  "# TYPE flotilla_enrollments_total counter\nflotilla_enrollments_total %llu\n",
              (unsigned long long)atomic_load(&m->enrollments));
    sb_printf(&b, "# HELP flotilla_rounds_total Rounds by outcome.\n"
                  "# TYPE flotilla_rounds_total counter\n"
                  "flotilla_rounds_total{outcome=\"started\"} %llu\n"
                  "flotilla_rounds_total{outcome=\"completed\"} %llu\n"
                  "flotilla_rounds_total{outcome=\"abandoned\"} %llu\n",
              (unsigned long long)atomic_load(&m->rounds_started),
              (unsigned long long)atomic_load(&m->rounds_completed),
              (unsigned long long)atomic_load(&m->rounds_abandoned));
    sb_printf(&b, "# HELP flotilla_phases_closed_total Round phases closed, by what closed "
                  "them.\n"
                  "# TYPE flotilla_phases_closed_total counter\n"
                  "flotilla_phases_closed_total{reason=\"all_posted\"} %llu\n"
                  "flotilla_phases_closed_total{reason=\"deadline\"} %llu\n"
                  "flotilla_phases_closed_total{reason=\"target\"} %llu\n",
              (unsigned long long)atomic_load(&m->phases_closed[0]),
              (unsigned long long)atomic_load(&m->phases_closed[1]),
              (unsigned long long)atomic_load(&m->phases_closed[2]));
    sb_printf(&b, "# HELP flotilla_request_body_bytes_total Request body bytes received.\n"
                  "# TYPE flotilla_request_body_bytes_total counter\n"
                  "flotilla_request_body_bytes_total %llu\n",
              (unsigned long long)atomic_load(&m->bytes_in));
    sb_printf(&b, "# HELP flotilla_checkins_rate_limited_total Check-ins answered 429.\n"
                  "# TYPE flotilla_checkins_rate_limited_total counter\n"
                  "flotilla_checkins_rate_limited_total %llu\n",
              (unsigned long long)atomic_load(&m->rate_limited));
    sb_printf(&b, "# HELP flotilla_auth_cache_total Client authentications by cache result.\n"
                  "# TYPE flotilla_auth_cache_total counter\n"
                  "flotilla_auth_cache_total{result=\"hit\"} %llu\n"
                  "flotilla_auth_cache_total{result=\"miss\"} %llu\n",
              (unsigned long long)atomic_load(&m->auth_cache_hits),
              (unsigned long long)atomic_load(&m->auth_cache_misses));
    sb_printf(&b, "# HELP flotilla_auth_revoked_total Client requests refused because the "
                  "client is revoked (401 token_revoked).\n"
                  "# TYPE flotilla_auth_revoked_total counter\n"
                  "flotilla_auth_revoked_total %llu\n",
              (unsigned long long)atomic_load(&m->auth_revoked));
    sb_printf(&b, "# HELP flotilla_long_polls_parked_total Result requests suspended.\n"
                  "# TYPE flotilla_long_polls_parked_total counter\n"
                  "flotilla_long_polls_parked_total %llu\n",
              (unsigned long long)atomic_load(&m->long_polls_parked));
    sb_printf(&b, "# HELP flotilla_updates_accepted_total Masked inputs and plain updates "
                  "folded into a sum.\n# TYPE flotilla_updates_accepted_total counter\n"
                  "flotilla_updates_accepted_total %llu\n",
              (unsigned long long)atomic_load(&m->updates_accepted));
    sb_printf(&b, "# HELP flotilla_rounds_refused_budget_total Rounds not started: privacy "
                  "budget.\n# TYPE flotilla_rounds_refused_budget_total counter\n"
                  "flotilla_rounds_refused_budget_total %llu\n",
              (unsigned long long)atomic_load(&m->rounds_refused_budget));
    sb_printf(&b, "# HELP flotilla_response_body_bytes_total Response body bytes sent.\n"
                  "# TYPE flotilla_response_body_bytes_total counter\n"
                  "flotilla_response_body_bytes_total %llu\n",
              (unsigned long long)atomic_load(&m->bytes_out));
    sb_printf(&b, "# HELP flotilla_update_bytes_total Bytes of accepted masked inputs and plain "
                  "updates.\n# TYPE flotilla_update_bytes_total counter\n"
                  "flotilla_update_bytes_total %llu\n",
              (unsigned long long)atomic_load(&m->update_bytes));
    sb_printf(&b, "# HELP flotilla_model_download_bytes_total Model bytes served to devices.\n"
                  "# TYPE flotilla_model_download_bytes_total counter\n"
                  "flotilla_model_download_bytes_total %llu\n",
              (unsigned long long)atomic_load(&m->model_bytes_out));
    sb_printf(&b, "# HELP flotilla_round_duration_seconds Rounds from first selection to the "
                  "end, by outcome.\n# TYPE flotilla_round_duration_seconds histogram\n");
    static const char *dur_outcomes[2] = {"completed", "abandoned"};
    for (int o = 0; o < 2; o++) {
        for (int i = 0; i < FL__COORD_DUR_BUCKETS; i++)
            sb_printf(&b, "flotilla_round_duration_seconds_bucket{outcome=\"%s\",le=\"%g\"} "
                          "%llu\n", dur_outcomes[o], fl__coord_dur_bounds[i],
                      (unsigned long long)atomic_load(&m->dur_bucket[o][i]));
        sb_printf(&b, "flotilla_round_duration_seconds_bucket{outcome=\"%s\",le=\"+Inf\"} %llu\n"
                      "flotilla_round_duration_seconds_sum{outcome=\"%s\"} %.3f\n"
                      "flotilla_round_duration_seconds_count{outcome=\"%s\"} %llu\n",
                  dur_outcomes[o], (unsigned long long)atomic_load(&m->dur_count[o]),
                  dur_outcomes[o], (double)atomic_load(&m->dur_sum_ms[o]) / 1000.0,
                  dur_outcomes[o], (unsigned long long)atomic_load(&m->dur_count[o]));
    }
    sb_printf(&b, "# HELP flotilla_aggregation_seconds Time to decode a sum, apply the "
                  "strategy and commit the round.\n# TYPE flotilla_aggregation_seconds summary\n"
                  "flotilla_aggregation_seconds_sum %.6f\nflotilla_aggregation_seconds_count "
                  "%llu\n",
              (double)atomic_load(&m->agg_sum_us) / 1e6,
              (unsigned long long)atomic_load(&m->agg_count));
    sb_printf(&b, "# HELP flotilla_updates_stale_rejected_total Buffered (FedBuff) updates "
                  "refused as too stale.\n# TYPE flotilla_updates_stale_rejected_total counter\n"
                  "flotilla_updates_stale_rejected_total %llu\n",
              (unsigned long long)atomic_load(&m->stale_rejected));
    sb_printf(&b, "# HELP flotilla_updates_clipped_total Plain updates whose L2 norm exceeded "
                  "the population's bound and were scaled down to it.\n"
                  "# TYPE flotilla_updates_clipped_total counter\n"
                  "flotilla_updates_clipped_total %llu\n",
              (unsigned long long)atomic_load(&m->updates_clipped));
    sb_printf(&b, "# HELP flotilla_norm_proofs_refused_total Secure-aggregation masked inputs "
                  "refused because their norm proof did not verify.\n"
                  "# TYPE flotilla_norm_proofs_refused_total counter\n"
                  "flotilla_norm_proofs_refused_total %llu\n",
              (unsigned long long)atomic_load(&m->norm_proofs_refused));
    /* Per-population gauges (and the store's WAL state) need the lock. */
    fl__coord_lock(co);
    fl_store_wal_stats ws;
    memset(&ws, 0, sizeof(ws));
    (void)fl_store_wal_stats_get(co->store, &ws);
    sb_printf(&b, "# HELP flotilla_storage_wal_frames Frames in the database's WAL at the last "
                  "commit (checkpoints fold them back from 1000 on).\n"
                  "# TYPE flotilla_storage_wal_frames gauge\nflotilla_storage_wal_frames %lld\n"
                  "# HELP flotilla_storage_checkpoints_total Automatic WAL checkpoints tried.\n"
                  "# TYPE flotilla_storage_checkpoints_total counter\n"
                  "flotilla_storage_checkpoints_total %llu\n"
                  "# HELP flotilla_storage_checkpoint_failures_total WAL checkpoints that failed "
                  "(full disk, I/O error): commits still succeed while the WAL has room.\n"
                  "# TYPE flotilla_storage_checkpoint_failures_total counter\n"
                  "flotilla_storage_checkpoint_failures_total %llu\n"
                  "# HELP flotilla_storage_checkpoint_failing 1 if the latest WAL checkpoint "
                  "failed.\n"
                  "# TYPE flotilla_storage_checkpoint_failing gauge\n"
                  "flotilla_storage_checkpoint_failing %d\n",
              (long long)ws.wal_frames, (unsigned long long)ws.checkpoints,
              (unsigned long long)ws.checkpoint_failures, ws.last_checkpoint_failed);
    sb_printf(&b, "# HELP flotilla_population_running 1 if the population forms rounds.\n"
                  "# TYPE flotilla_population_running gauge\n");
    for (size_t i = 0; i < co->n_pops; i++)
        sb_printf(&b, "flotilla_population_running{population=\"%s\"} %d\n", co->pops[i]->name,
                  co->pops[i]->running ? 1 : 0);
    sb_printf(&b, "# HELP flotilla_http_requests_in_flight Requests whose headers arrived and "
                  "that are not answered yet (this scrape included).\n"
                  "# TYPE flotilla_http_requests_in_flight gauge\n"
                  "flotilla_http_requests_in_flight %d\n",
              atomic_load(&co->inflight));
    uint64_t closed_deadline = 0, closed_eof = 0;
    fl__coord_http_closed(co, &closed_deadline, &closed_eof);
    sb_printf(&b, "# HELP flotilla_http_connections_closed_total Connections closed before "
                  "their request was complete: a request past its deadline "
                  "(limits.request_deadline_s; answered 408 first where the connection "
                  "allows), or a client that closed its side.\n"
                  "# TYPE flotilla_http_connections_closed_total counter\n"
                  "flotilla_http_connections_closed_total{reason=\"deadline\"} %llu\n"
                  "flotilla_http_connections_closed_total{reason=\"eof\"} %llu\n",
              (unsigned long long)closed_deadline, (unsigned long long)closed_eof);
    sb_printf(&b, "# HELP flotilla_long_polls_waiting Result requests parked now.\n"
                  "# TYPE flotilla_long_polls_waiting gauge\nflotilla_long_polls_waiting %zu\n",
              co->n_waiters);
    sb_printf(&b, "# HELP flotilla_round_selected Clients selected in the current round.\n"
                  "# TYPE flotilla_round_selected gauge\n");
    for (size_t i = 0; i < co->n_pops; i++)
        sb_printf(&b, "flotilla_round_selected{population=\"%s\"} %zu\n", co->pops[i]->name,
                  co->pops[i]->round ? co->pops[i]->round->n : (size_t)0);
    sb_printf(&b, "# HELP flotilla_population_rounds_total Rounds of the population ended by "
                  "this process, by outcome.\n# TYPE flotilla_population_rounds_total counter\n");
    for (size_t i = 0; i < co->n_pops; i++)
        sb_printf(&b, "flotilla_population_rounds_total{population=\"%s\",outcome=\"completed\"} "
                      "%llu\nflotilla_population_rounds_total{population=\"%s\",outcome="
                      "\"abandoned\"} %llu\n", co->pops[i]->name,
                  (unsigned long long)co->pops[i]->rounds_done[0], co->pops[i]->name,
                  (unsigned long long)co->pops[i]->rounds_done[1]);
    /* Clients per phase of the current round (or the last one): selected, then those whose
     * message of each phase was accepted. Plain rounds only have "masked" (the update). */
    sb_printf(&b, "# HELP flotilla_round_participants Clients of the current (else the last) "
                  "round: selected, and accepted per phase.\n"
                  "# TYPE flotilla_round_participants gauge\n");
    for (size_t i = 0; i < co->n_pops; i++) {
        const struct fl__coord_pop *p = co->pops[i];
        const struct fl__coord_round *r = p->round ? p->round : p->last;
        size_t per[FL__PH_COUNT] = {0};
        if (r)
            for (size_t j = 0; j < r->n; j++)
                for (int k = 0; k < FL__PH_COUNT; k++)
                    per[k] += (r->parts[j].posted >> k) & 1u;
        sb_printf(&b, "flotilla_round_participants{population=\"%s\",phase=\"selected\"} %zu\n",
                  p->name, r ? r->n : (size_t)0);
        for (int k = 0; k < FL__PH_COUNT; k++)
            if (k != FL__PH_CONSISTENCY)
                sb_printf(&b, "flotilla_round_participants{population=\"%s\",phase=\"%s\"} %zu\n",
                          p->name, fl__coord_phase_names[k], per[k]);
    }
    sb_printf(&b, "# HELP flotilla_dropouts_total Clients dropped from rounds, by the phase "
                  "they missed.\n# TYPE flotilla_dropouts_total counter\n");
    for (size_t i = 0; i < co->n_pops; i++)
        for (int k = 0; k < FL__PH_COUNT; k++)
            if (k != FL__PH_CONSISTENCY)
                sb_printf(&b, "flotilla_dropouts_total{population=\"%s\",phase=\"%s\"} %llu\n",
                          co->pops[i]->name, fl__coord_phase_names[k],
                          (unsigned long long)co->pops[i]->dropouts[k]);
    sb_printf(&b, "# HELP flotilla_privacy_epsilon_spent Epsilon of the population's privacy "
                  "ledger at its budget's delta.\n# TYPE flotilla_privacy_epsilon_spent gauge\n");
    for (size_t i = 0; i < co->n_pops; i++)
        if (co->pops[i]->epsilon_budget > 0)
            sb_printf(&b, "flotilla_privacy_epsilon_spent{population=\"%s\"} %.6g\n",
                      co->pops[i]->name, co->pops[i]->epsilon_spent);
    sb_printf(&b, "# HELP flotilla_privacy_epsilon_budget The population's epsilon budget.\n"
                  "# TYPE flotilla_privacy_epsilon_budget gauge\n");
    for (size_t i = 0; i < co->n_pops; i++)
        if (co->pops[i]->epsilon_budget > 0)
            sb_printf(&b, "flotilla_privacy_epsilon_budget{population=\"%s\"} %.6g\n",
                      co->pops[i]->name, co->pops[i]->epsilon_budget);
    sb_printf(&b, "# HELP flotilla_model_version Current model version of the population.\n"
                  "# TYPE flotilla_model_version gauge\n");
    for (size_t i = 0; i < co->n_pops; i++)
        sb_printf(&b, "flotilla_model_version{population=\"%s\"} %lld\n", co->pops[i]->name,
                  (long long)co->pops[i]->model_version);
    fl__coord_unlock(co);
    if (b.failed) {
        fl__free(fl__coord_alloc(co), b.p, b.cap);
        return NULL;
    }
    *size = b.cap;
    return b.p;
}
