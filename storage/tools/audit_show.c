/* flotilla-audit show (human-readable entries) and export (JSON Lines, CSV). */

#include <stdlib.h>
#include <string.h>

#include "audit_tool.h"

/* "version 12 (sha256 1a2b3c4d5e6f...)" or "none". */
static void fmt_model(char *out, size_t cap, const json_t *m) {
    if (!json_is_object(m)) {
        snprintf(out, cap, "none");
        return;
    }
    snprintf(out, cap, "version %lld (sha256 %.16s...)", tool_int(m, "version"),
             tool_str(m, "sha256"));
}

static void print_regions(FILE *out, const json_t *regions) {
    const char *k;
    json_t *v;
    int first = 1;
    json_object_foreach((json_t *)regions, k, v) { // GCOVR_EXCL_BR_LINE Jansson macro internals
        fprintf(out, "%s%s %lld", first ? "" : ", ", k, (long long)json_integer_value(v));
        first = 0;
    }
    if (first)
        fprintf(out, "(none)");
}

static void show_entry(FILE *out, long long seq, const json_t *e) {
    char t[32], a[40], b[40], c[40], m1[120], m2[120];
    if (!json_is_object(e)) { // GCOVR_EXCL_BR_LINE macro's NULL test: entries are never NULL
        fprintf(out, "#%lld  (unreadable entry)\n\n", seq);
        return;
    }
    const char *type = tool_str(e, "type");
    tool_fmt_time(t, tool_int(e, "time"));
    fprintf(out, "#%lld  %s  %s", seq, t, type);
    if (json_object_get(e, "population"))
        fprintf(out, "  population \"%s\" (id %lld)", tool_str(e, "population"),
                tool_int(e, "population_id"));
    fprintf(out, "\n");
    if (strcmp(type, "round") == 0) {
        const json_t *d = json_object_get(e, "dropped_by_phase");
        char t0[32], t1[32];
        tool_fmt_time(t0, tool_int(e, "started_at"));
        tool_fmt_time(t1, tool_int(e, "ended_at"));
        fprintf(out, "      round %lld (id %lld): %s, %s .. %s\n", tool_int(e, "round"),
                tool_int(e, "round_id"), tool_str(e, "outcome"), t0, t1);
        fmt_model(m1, sizeof(m1), json_object_get(e, "model_in"));
        fmt_model(m2, sizeof(m2), json_object_get(e, "model_out"));
        fprintf(out, "      model: %s -> %s\n", m1, m2);
        fprintf(out,
                "      clients: %lld checked in, %lld selected, %lld completed, %lld dropped "
                "(advertise %lld, share %lld, masked %lld, consistency %lld, unmask %lld)\n",
                tool_int(e, "counts.checked_in"), tool_int(e, "counts.selected"),
                tool_int(e, "counts.completed"), tool_int(e, "counts.dropped"),
                tool_int(d, "advertise"), tool_int(d, "share"), tool_int(d, "masked"),
                tool_int(d, "consistency"), tool_int(d, "unmask"));
        const json_t *sa = json_object_get(e, "secagg");
        if (json_is_object(sa))
            fprintf(out,
                    "      secure aggregation: n=%lld clients, neighbourhoods of k=%lld, "
                    "threshold t=%lld\n",
                    tool_int(sa, "n"), tool_int(sa, "k"), tool_int(sa, "t"));
        else
            fprintf(out, "      secure aggregation: off\n");
        if (json_is_object(sa) && json_object_get(sa, "active"))
            fprintf(out,
                    "      secagg mode: active (dropouts checked by the devices), device "
                    "authority key SHA-256 %s\n",
                    tool_str(sa, "authority_key_sha256"));
        else if (json_is_object(sa))
            fprintf(out, "      secagg mode: semi-honest\n");
        if (json_is_object(sa) && json_object_get(sa, "revealed_seeds"))
            fprintf(out, "      revealed pairwise seeds: the survivors revealed the mask seeds "
                         "they shared with devices that left before masking\n");
        const json_t *np = json_object_get(sa, "norm_proof");
        if (json_object_size(np) > 0) /* 0 for NULL or a non-object too */
            fprintf(out,
                    "      norm proofs: squared L2 norm of the first %lld coordinates <= %lld "
                    "(lattice units^2), coordinates in %lld bits, weight in 1..%lld\n",
                    tool_int(np, "dim"), tool_int(np, "bound2"), tool_int(np, "bits"),
                    tool_int(np, "weight_max"));
        const json_t *dp = json_object_get(e, "dp");
        tool_fmt_e9(a, tool_int(dp, "clip_norm_e9"));
        tool_fmt_e9(b, tool_int(dp, "noise_multiplier_e9"));
        tool_fmt_e9(c, tool_int(dp, "sampling_rate_e9"));
        fprintf(out,
                "      dp: %s, clip norm %s, noise multiplier %s, sampling rate %s, steps %lld\n",
                tool_str(dp, "mechanism"), a, b, c, tool_int(dp, "steps"));
        const json_t *p = json_object_get(e, "privacy");
        char d1[40], d2[40];
        tool_fmt_e9(a, tool_int(p, "epsilon_spent_e9"));
        tool_fmt_e9(b, tool_int(p, "epsilon_total_e9"));
        tool_fmt_e9(c, tool_int(p, "budget_epsilon_e9"));
        tool_fmt_e18(d1, tool_int(p, "delta_e18"));
        tool_fmt_e18(d2, tool_int(p, "budget_delta_e18"));
        fprintf(out, "      privacy: epsilon spent %s, total %s of budget %s; delta %s of %s\n", a,
                b, c, d1, d2);
        fprintf(out, "      regions: ");
        print_regions(out, json_object_get(e, "regions"));
        fprintf(out, "\n      task config sha256 %s, coordinator %s\n",
                tool_str(e, "task_config_sha256"), tool_str(e, "coordinator"));
    } else if (strcmp(type, "population_created") == 0 || strcmp(type, "config_changed") == 0) {
        tool_fmt_e9(a, tool_int(e, "budget.epsilon_e9"));
        tool_fmt_e18(b, tool_int(e, "budget.delta_e18"));
        const json_t *allowed = json_object_get(e, "allowed_regions");
        char *regions = json_dumps(allowed, JSON_COMPACT);
        if (allowed && !regions)
            tool_nomem();
        fprintf(out, "      budget epsilon %s, delta %s; allowed regions %s; config sha256 %s\n", a,
                b, regions ? regions : "?", tool_str(e, "config_sha256"));
        free(regions);
    } else if (strcmp(type, "model_registered") == 0) {
        fmt_model(m1, sizeof(m1), json_object_get(e, "model"));
        fprintf(out, "      current model is now %s\n", m1);
    } else if (strcmp(type, "budget_refused") == 0) {
        const json_t *p = json_object_get(e, "privacy");
        tool_fmt_e9(a, tool_int(p, "epsilon_total_e9"));
        tool_fmt_e9(b, tool_int(p, "epsilon_requested_e9"));
        tool_fmt_e9(c, tool_int(p, "budget_epsilon_e9"));
        fprintf(out,
                "      round %lld refused: epsilon would reach %s (spent so far %s, budget %s)\n",
                tool_int(e, "round"), b, a, c);
    } else if (strcmp(type, "erasure") == 0) {
        fprintf(out,
                "      client pseudonym %s erased: %lld registry row(s), %lld participation(s)\n",
                tool_str(e, "client"), tool_int(e, "deleted.clients"),
                tool_int(e, "deleted.participations"));
    } else if (strcmp(type, "client_revoked") == 0) {
        tool_fmt_time(a, tool_int(e, "revoked_at"));
        fprintf(out, "      client pseudonym %s revoked (excluded from rounds) at %s\n",
                tool_str(e, "client"), a);
    } else if (strcmp(type, "client_reinstated") == 0) {
        fprintf(out, "      client pseudonym %s reinstated (may take part in rounds again)\n",
                tool_str(e, "client"));
    } else if (strcmp(type, "retention") == 0) {
        tool_fmt_time(a, tool_int(e, "cutoff"));
        fprintf(out,
                "      retention %lld days: data older than %s deleted: %lld client(s), %lld "
                "participation(s)\n",
                tool_int(e, "retention_ms") / 86400000LL, a, tool_int(e, "deleted.clients"),
                tool_int(e, "deleted.participations"));
    }
    fprintf(out, "\n");
}

int tool_show(struct tool_bundle *tb, FILE *out, long long from_round, long long to_round,
              const char *population, long long from_seq, long long to_seq) {
    size_t n = json_array_size(tb->entries), shown = 0;
    int by_round = from_round > 0 || to_round >= 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(tb->entries, i);
        long long seq = (long long)i;
        if (seq < from_seq || (to_seq >= 0 && seq > to_seq))
            continue;
        if (population && strcmp(tool_str(e, "population"), population) != 0)
            continue;
        if (by_round) {
            if (strcmp(tool_str(e, "type"), "round") != 0 &&
                strcmp(tool_str(e, "type"), "budget_refused") != 0)
                continue;
            long long r = tool_int(e, "round");
            if (r < from_round || (to_round >= 0 && r > to_round))
                continue;
        }
        show_entry(out, seq, e);
        shown++;
    }
    fprintf(out, "%zu of %zu entries shown; bundle %s\n", shown, n,
            tool_oom              ? "verified, listing INCOMPLETE (out of memory)"
            : tb->status == FL_OK ? "VERIFIED"
                                  : "NOT VERIFIED");
    return 0;
}

/* RFC 4180 field: quoted when it holds a comma, quote or newline. */
static void csv_field(FILE *out, const char *s, int last) {
    if (strpbrk(s, ",\"\r\n")) {
        fputc('"', out);
        for (; *s; s++) {
            if (*s == '"')
                fputc('"', out);
            fputc(*s, out);
        }
        fputc('"', out);
    } else {
        fputs(s, out);
    }
    fputs(last ? "\r\n" : ",", out);
}

static void csv_int(FILE *out, const json_t *e, const char *path) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%lld", tool_int(e, path));
    csv_field(out, buf, 0);
}

static void csv_e9(FILE *out, const json_t *e, const char *path) {
    char buf[40];
    tool_fmt_e9(buf, tool_int(e, path));
    csv_field(out, buf, 0);
}

int tool_export(struct tool_bundle *tb, FILE *out, int csv) {
    size_t n = json_array_size(tb->entries);
    if (!csv) {
        /* JSON Lines: the entries byte for byte, so leaves can be recomputed from them. */
        for (size_t i = 0; i < n; i++) {
            size_t el = 0;
            const char *p = fl_store_audit_bundle_entry(tb->b, i, &el);
            if (p) { // GCOVR_EXCL_BR_LINE unreachable: i < entry count, so the entry exists
                fwrite(p, 1, el, out);
                fputc('\n', out);
            }
        }
        return 0;
    }
    fputs("seq,time,type,population,round,outcome,checked_in,selected,completed,dropped,"
          "secagg_n,secagg_k,secagg_t,secagg_mode,dp_mechanism,clip_norm,noise_multiplier,"
          "sampling_rate,"
          "epsilon_spent,epsilon_total,epsilon_budget,model_in,model_out,regions,detail\r\n",
          out);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(tb->entries, i);
        char buf[64], t[32], regions[1024] = "", detail[200] = "";
        const char *type = tool_str(e, "type");
        const json_t *sa = json_object_get(e, "secagg");
        int round = strcmp(type, "round") == 0;
        snprintf(buf, sizeof(buf), "%zu", i);
        csv_field(out, buf, 0);
        tool_fmt_time(t, tool_int(e, "time"));
        csv_field(out, t, 0);
        csv_field(out, type, 0);
        csv_field(out, tool_str(e, "population"), 0);
        if (round || strcmp(type, "budget_refused") == 0)
            csv_int(out, e, "round");
        else
            csv_field(out, "", 0);
        csv_field(out, tool_str(e, "outcome"), 0);
        const char *ints[] = {"counts.checked_in", "counts.selected", "counts.completed",
                              "counts.dropped",    "secagg.n",        "secagg.k",
                              "secagg.t"};
        for (int k = 0; k < 7; k++) {
            if (round)
                csv_int(out, e, ints[k]);
            else
                csv_field(out, "", 0);
        }
        /* secagg_mode: semi-honest, or active:<authority key SHA-256>; empty without secagg */
        char mode[80] = "";
        if (round && json_is_object(sa) && json_object_get(sa, "active"))
            snprintf(mode, sizeof(mode), "active:%.64s", tool_str(sa, "authority_key_sha256"));
        else if (round && json_is_object(sa))
            snprintf(mode, sizeof(mode), "semi-honest");
        csv_field(out, mode, 0);
        csv_field(out, round ? tool_str(json_object_get(e, "dp"), "mechanism") : "", 0);
        const char *e9s[] = {"dp.clip_norm_e9",          "dp.noise_multiplier_e9",
                             "dp.sampling_rate_e9",      "privacy.epsilon_spent_e9",
                             "privacy.epsilon_total_e9", "privacy.budget_epsilon_e9"};
        for (int k = 0; k < 6; k++) {
            if (round || (strcmp(type, "budget_refused") == 0 && k >= 4))
                csv_e9(out, e, e9s[k]);
            else
                csv_field(out, "", 0);
        }
        const char *m[] = {"model_in", "model_out"};
        for (int k = 0; k < 2; k++) {
            const json_t *mo = json_object_get(e, m[k]);
            if (json_is_object(mo))
                snprintf(buf, sizeof(buf), "%lld:%.16s", tool_int(mo, "version"),
                         tool_str(mo, "sha256"));
            else
                buf[0] = '\0';
            csv_field(out, buf, 0);
        }
        const char *k;
        json_t *v; /* the loop below: Jansson macro internals excluded */
        json_object_foreach(json_object_get(e, "regions"), k, v) { // GCOVR_EXCL_BR_LINE
            size_t at = strlen(regions);
            snprintf(regions + at, sizeof(regions) - at, "%s%s=%lld", at ? ";" : "", k,
                     (long long)json_integer_value(v));
        }
        csv_field(out, regions, 0);
        if (strcmp(type, "erasure") == 0 || strcmp(type, "client_reinstated") == 0)
            snprintf(detail, sizeof(detail), "client %s", tool_str(e, "client"));
        else if (strcmp(type, "client_revoked") == 0) {
            char a[32];
            tool_fmt_time(a, tool_int(e, "revoked_at"));
            snprintf(detail, sizeof(detail), "client %s revoked at %s", tool_str(e, "client"), a);
        }
        else if (strcmp(type, "retention") == 0)
            snprintf(detail, sizeof(detail), "deleted %lld clients, %lld participations",
                     tool_int(e, "deleted.clients"), tool_int(e, "deleted.participations"));
        else if (strcmp(type, "budget_refused") == 0) {
            char a[40];
            tool_fmt_e9(a, tool_int(e, "privacy.epsilon_requested_e9"));
            snprintf(detail, sizeof(detail), "requested epsilon total %s", a);
        } else if (strcmp(type, "model_registered") == 0) {
            snprintf(detail, sizeof(detail), "model %lld", tool_int(e, "model.version"));
        } else if (round && json_object_size(json_object_get(sa, "norm_proof")) > 0) {
            /* not a column of its own: the 0.2 column layout stays as it was */
            const json_t *np = json_object_get(sa, "norm_proof");
            snprintf(detail, sizeof(detail),
                     "norm proof: bits %lld, bound2 %lld, dim %lld, weight_max %lld",
                     tool_int(np, "bits"), tool_int(np, "bound2"), tool_int(np, "dim"),
                     tool_int(np, "weight_max"));
        }
        csv_field(out, detail, 1);
    }
    return 0;
}
