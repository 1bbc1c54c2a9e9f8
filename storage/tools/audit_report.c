/* flotilla-audit report: one self-contained HTML file (inline CSS, charts drawn here as
 * inline SVG, no scripts, no external resources) with the verification verdict, and per
 * population: epsilon spent over rounds against the budget, participation and dropouts per
 * round, regions, model lineage and every round's parameters. */

#include <stdlib.h>
#include <string.h>

#include "audit_tool.h"

#define W 760 /* chart width, px */
#define H 260 /* chart height, px */
#define ML 64 /* left margin (y labels) */
#define MR 16 /* right margin */
#define MT 16 /* top margin */
#define MB 40 /* bottom margin (x labels) */

/* Writes s with &, <, >, " escaped. */
static void esc(FILE *out, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        default:
            fputc(*s, out);
        }
    }
}

static double sx(size_t i, size_t n) {
    return ML + (n <= 1 ? (W - ML - MR) / 2.0 : (double)i * (W - ML - MR) / (double)(n - 1));
}

static double sy(double v, double max) {
    return MT + (H - MT - MB) * (1.0 - (max > 0 ? v / max : 0));
}

/* Axes, horizontal grid lines with labels at 5 steps of max, and x labels. */
static void axes(FILE *out, double max, const long long *xlabels, size_t n, const char *ylabel) {
    fprintf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"axis\"/>\n", ML, H - MB,
            W - MR, H - MB);
    fprintf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"axis\"/>\n", ML, MT, ML,
            H - MB);
    for (int k = 0; k <= 5; k++) {
        double v = max * k / 5.0, y = sy(v, max);
        fprintf(out, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/>\n", ML, y,
                W - MR, y);
        fprintf(out, "<text x=\"%d\" y=\"%.1f\" class=\"yl\">%.3g</text>\n", ML - 6, y + 4, v);
    }
    size_t step = n > 12 ? (n + 11) / 12 : 1;
    for (size_t i = 0; i < n; i += step)
        fprintf(out, "<text x=\"%.1f\" y=\"%d\" class=\"xl\">%lld</text>\n", sx(i, n), H - MB + 16,
                xlabels[i]);
    fprintf(out, "<text x=\"%d\" y=\"%d\" class=\"xl\">round</text>\n", (W + ML) / 2, H - 6);
    fprintf(out, "<text x=\"12\" y=\"%d\" class=\"yt\" transform=\"rotate(-90 12 %d)\">", H / 2,
            H / 2);
    esc(out, ylabel);
    fputs("</text>\n", out);
}

/* Rounds and refusals of one population, in log order. */
struct point {
    long long round;  /* round number */
    int refused;      /* 1 for a budget refusal */
    int completed;    /* 1 for a completed round */
    double eps_total; /* cumulative epsilon after it (refusal: requested total) */
    long long checked_in, selected, done, dropped;
};

static void chart_epsilon(FILE *out, const struct point *p, size_t n, double budget) {
    double max = budget;
    long long *xl = calloc(n ? n : 1, sizeof(long long));
    if (!xl) {
        tool_nomem();
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i].eps_total > max)
            max = p[i].eps_total;
        xl[i] = p[i].round;
    }
    max *= 1.1;
    fprintf(out,
            "<svg class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "role=\"img\" aria-label=\"epsilon over rounds\">\n",
            W, H, W, H);
    axes(out, max, xl, n, "epsilon (cumulative)");
    fprintf(out, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"budget\"/>\n", ML,
            sy(budget, max), W - MR, sy(budget, max));
    fprintf(out, "<text x=\"%d\" y=\"%.1f\" class=\"blabel\">budget %.4g</text>\n", W - MR - 4,
            sy(budget, max) - 6, budget);
    fputs("<polyline class=\"eps\" points=\"", out);
    for (size_t i = 0; i < n; i++)
        if (!p[i].refused)
            fprintf(out, "%.1f,%.1f ", sx(i, n), sy(p[i].eps_total, max));
    fputs("\"/>\n", out);
    for (size_t i = 0; i < n; i++) {
        double x = sx(i, n), y = sy(p[i].eps_total, max);
        if (p[i].refused)
            fprintf(out,
                    "<path class=\"refused\" d=\"M%.1f %.1fl8 8m0 -8l-8 8\"><title>round %lld "
                    "refused: would reach %.4g</title></path>\n",
                    x - 4, y - 4, p[i].round, p[i].eps_total);
        else
            fprintf(out,
                    "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" class=\"epsdot\"><title>round "
                    "%lld: epsilon %.4g</title></circle>\n",
                    x, y, p[i].round, p[i].eps_total);
    }
    fputs("</svg>\n", out);
    free(xl);
}

static void chart_participation(FILE *out, const struct point *p, size_t n) {
    size_t m = 0;
    double max = 1;
    for (size_t i = 0; i < n; i++)
        if (!p[i].refused) {
            m++;
            if (p[i].checked_in > max)
                max = (double)p[i].checked_in;
        }
    long long *xl = calloc(m ? m : 1, sizeof(long long));
    if (!xl) {
        tool_nomem();
        return;
    }
    size_t j = 0;
    for (size_t i = 0; i < n; i++)
        if (!p[i].refused)
            xl[j++] = p[i].round;
    max *= 1.1;
    fprintf(out,
            "<svg class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "role=\"img\" aria-label=\"participation per round\">\n",
            W, H, W, H);
    axes(out, max, xl, m, "clients");
    double bw = m ? (W - ML - MR) / (double)m * 0.6 : 10;
    if (bw > 28)
        bw = 28;
    j = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i].refused)
            continue;
        double x = sx(j++, m) - bw / 2;
        double y0 = sy(0, max), yc = sy((double)p[i].done, max);
        double yd = sy((double)(p[i].done + p[i].dropped), max);
        fprintf(out,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"done\">"
                "<title>round %lld: %lld completed</title></rect>\n",
                x, yc, bw, y0 - yc, p[i].round, p[i].done);
        fprintf(out,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"dropped\">"
                "<title>round %lld: %lld dropped</title></rect>\n",
                x, yd, bw, yc - yd, p[i].round, p[i].dropped);
        double yi = sy((double)p[i].checked_in, max);
        fprintf(out,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"checkin\">"
                "<title>round %lld: %lld checked in</title></line>\n",
                x - 3, yi, x + bw + 3, yi, p[i].round, p[i].checked_in);
    }
    fputs("</svg>\n", out);
    fputs("<p class=\"legend\"><span class=\"sw done\"></span> completed "
          "<span class=\"sw dropped\"></span> dropped "
          "<span class=\"sw checkin\"></span> checked in</p>\n",
          out);
    free(xl);
}

/* Region totals over the population's rounds, as horizontal bars. */
static void chart_regions(FILE *out, const json_t *totals) {
    size_t n = json_object_size(totals);
    if (n == 0) {
        fputs("<p>No rounds with region counts.</p>\n", out);
        return;
    }
    double max = 1;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)totals, k, v) { // GCOVR_EXCL_BR_LINE Jansson macro internals
        if ((double)json_integer_value(v) > max)
            max = (double)json_integer_value(v);
    }
    int bh = 22, h = (int)n * (bh + 8) + 16;
    fprintf(out,
            "<svg class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "role=\"img\" aria-label=\"selected clients per region\">\n",
            W, h, W, h);
    int i = 0;
    json_object_foreach((json_t *)totals, k, v) { // GCOVR_EXCL_BR_LINE Jansson macro internals
        double len = (W - 160 - MR - 80) * (double)json_integer_value(v) / max;
        int y = 8 + i * (bh + 8);
        fprintf(out, "<text x=\"150\" y=\"%d\" class=\"yl\">", y + 16);
        esc(out, k);
        fprintf(out,
                "</text><rect x=\"160\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
                "class=\"region\"/><text x=\"%.1f\" y=\"%d\" class=\"vl\">%lld</text>\n",
                y, len, bh, 166 + len, y + 16, (long long)json_integer_value(v));
        i++;
    }
    fputs("</svg>\n", out);
}

static const char *STYLE =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2em auto;"
    "max-width:1100px;color:#1c2430;padding:0 1em}"
    "h1{font-size:1.6em}h2{border-bottom:2px solid #d8dee8;padding-bottom:.2em;margin-top:2em}"
    "table{border-collapse:collapse;margin:.6em 0;font-size:.88em}"
    "th,td{border:1px solid #d8dee8;padding:.25em .5em;text-align:right;white-space:nowrap}"
    "th{background:#f2f5f9}td.l,th.l{text-align:left}"
    ".verdict{padding:1em;border-radius:6px;font-weight:600;margin:1em 0}"
    ".ok{background:#e3f6e8;border:2px solid #2e8b57}.bad{background:#fde8e8;border:2px solid "
    "#c0392b}"
    "code{font-size:.85em;word-break:break-all}"
    ".axis{stroke:#444;stroke-width:1}.grid{stroke:#e4e8ee;stroke-width:1}"
    ".yl{font-size:11px;text-anchor:end;fill:#333}.xl{font-size:11px;text-anchor:middle;fill:#333}"
    ".yt{font-size:12px;text-anchor:middle;fill:#333}.vl{font-size:11px;fill:#333}"
    ".budget{stroke:#c0392b;stroke-width:2;stroke-dasharray:6 4}"
    ".blabel{font-size:12px;fill:#c0392b;text-anchor:end}"
    ".eps{fill:none;stroke:#1f6fb2;stroke-width:2}.epsdot{fill:#1f6fb2}"
    ".refused{stroke:#c0392b;stroke-width:2.5;fill:none}"
    ".done{fill:#2e8b57}.dropped{fill:#e67e22}.checkin{stroke:#1c2430;stroke-width:2}"
    ".region{fill:#7d5ba6}"
    ".legend{font-size:.85em}.sw{display:inline-block;width:12px;height:12px;margin:0 .3em 0 "
    "1em;vertical-align:middle}.sw.done{background:#2e8b57}.sw.dropped{background:#e67e22}"
    ".sw.checkin{background:#1c2430;height:3px}"
    ".note{color:#555;font-size:.9em}";

/* Everything about one population. */
static void population_section(FILE *out, struct tool_bundle *tb, long long pid) {
    size_t n = json_array_size(tb->entries), np = 0;
    /* n >= 1: called for a population_created entry of the bundle */
    struct point *pts = calloc(n ? n : 1, sizeof(*pts)); // GCOVR_EXCL_BR_LINE
    json_t *regions = json_object();
    if (!pts || !regions) {
        tool_nomem();
        free(pts);
        json_decref(regions);
        return;
    }
    const json_t *created = NULL;
    double budget = 0, budget_delta = 0;
    char a[40], b[40], c[40], d[40], t[32];
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(tb->entries, i);
        if (tool_int(e, "population_id") != pid)
            continue;
        const char *type = tool_str(e, "type");
        if (strcmp(type, "population_created") == 0 || strcmp(type, "config_changed") == 0) {
            if (!created)
                created = e;
            budget = (double)tool_int(e, "budget.epsilon_e9") * 1e-9;
            budget_delta = (double)tool_int(e, "budget.delta_e18") * 1e-18;
        } else if (strcmp(type, "round") == 0) {
            struct point *p = &pts[np++];
            p->round = tool_int(e, "round");
            p->completed = strcmp(tool_str(e, "outcome"), "completed") == 0;
            p->eps_total = (double)tool_int(e, "privacy.epsilon_total_e9") * 1e-9;
            p->checked_in = tool_int(e, "counts.checked_in");
            p->selected = tool_int(e, "counts.selected");
            p->done = tool_int(e, "counts.completed");
            p->dropped = tool_int(e, "counts.dropped");
            const char *k;
            json_t *v; /* the loop below: Jansson macro internals excluded */
            json_object_foreach(json_object_get(e, "regions"), k, v) { // GCOVR_EXCL_BR_LINE
                json_t *prev = json_object_get(regions, k);
                if (json_object_set_new(regions, k,
                                        json_integer(json_integer_value(v) +
                                                     (prev ? json_integer_value(prev) : 0))))
                    tool_nomem();
            }
        } else if (strcmp(type, "budget_refused") == 0) {
            struct point *p = &pts[np++];
            p->round = tool_int(e, "round");
            p->refused = 1;
            p->eps_total = (double)tool_int(e, "privacy.epsilon_requested_e9") * 1e-9;
        }
    }
    fputs("<h2>Population &ldquo;", out);
    /* created is never NULL: the caller passes the id of a population_created entry */
    esc(out, created ? tool_str(created, "population") : "?"); // GCOVR_EXCL_BR_LINE
    fprintf(out, "&rdquo; (id %lld)</h2>\n", pid);
    double last = 0;
    size_t rounds = 0, completed = 0, refused = 0;
    long long sel = 0, dropped = 0;
    for (size_t i = 0; i < np; i++) {
        if (pts[i].refused) {
            refused++;
            continue;
        }
        rounds++;
        completed += (size_t)pts[i].completed;
        last = pts[i].eps_total;
        sel += pts[i].selected;
        dropped += pts[i].dropped;
    }
    fprintf(out,
            "<table><tr><th class=\"l\">privacy budget</th><td>epsilon %.6g, delta %.3g</td></tr>"
            "<tr><th class=\"l\">epsilon spent</th><td>%.6g (%.1f%% of the budget)</td></tr>"
            "<tr><th class=\"l\">rounds logged</th><td>%zu (%zu completed, %zu abandoned), %zu "
            "refused for budget</td></tr>"
            "<tr><th class=\"l\">clients selected / dropped</th><td>%lld / %lld (%.1f%%)</td></tr>",
            budget, budget_delta, last, budget > 0 ? 100.0 * last / budget : 0.0, rounds, completed,
            rounds - completed, refused, sel, dropped,
            sel ? 100.0 * (double)dropped / (double)sel : 0.0);
    if (created) { // GCOVR_EXCL_BR_LINE never NULL, as above
        const json_t *allowed = json_object_get(created, "allowed_regions");
        char *ar = json_dumps(allowed, JSON_COMPACT);
        if (allowed && !ar)
            tool_nomem();
        fputs("<tr><th class=\"l\">allowed regions</th><td class=\"l\">", out);
        esc(out, ar && strcmp(ar, "[]") ? ar : "any");
        fputs("</td></tr>\n", out);
        free(ar);
    }
    fputs("</table>\n<h3>Epsilon spent over rounds, against the budget</h3>\n", out);
    chart_epsilon(out, pts, np, budget);
    fputs("<h3>Participation and dropouts per round</h3>\n", out);
    chart_participation(out, pts, np);
    fputs("<h3>Selected clients per region (all rounds)</h3>\n", out);
    chart_regions(out, regions);

    fputs("<h3>Model lineage</h3>\n<table><tr><th class=\"l\">entry</th><th class=\"l\">event"
          "</th><th>model in</th><th>model out</th><th class=\"l\">SHA-256 out</th></tr>\n",
          out);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(tb->entries, i);
        if (tool_int(e, "population_id") != pid)
            continue;
        const char *type = tool_str(e, "type");
        if (strcmp(type, "model_registered") == 0) {
            fprintf(out,
                    "<tr><td class=\"l\">#%zu</td><td class=\"l\">model registered</td><td></td>"
                    "<td>%lld</td><td class=\"l\"><code>",
                    i, tool_int(e, "model.version"));
            esc(out, tool_str(json_object_get(e, "model"), "sha256"));
            fputs("</code></td></tr>\n", out);
        } else if (strcmp(type, "round") == 0 && strcmp(tool_str(e, "outcome"), "completed") == 0) {
            fprintf(out,
                    "<tr><td class=\"l\">#%zu</td><td class=\"l\">round %lld</td><td>%lld</td>"
                    "<td>%lld</td><td class=\"l\"><code>",
                    i, tool_int(e, "round"), tool_int(e, "model_in.version"),
                    tool_int(e, "model_out.version"));
            esc(out, tool_str(json_object_get(e, "model_out"), "sha256"));
            fputs("</code></td></tr>\n", out);
        }
    }
    fputs("</table>\n", out);

    fputs("<h3>Rounds</h3>\n<table><tr><th>entry</th><th>round</th><th class=\"l\">outcome</th>"
          "<th class=\"l\">ended (UTC)</th><th>checked in</th><th>selected</th><th>completed</th>"
          "<th>dropped</th><th>secagg n/k/t</th><th class=\"l\">secagg mode</th>"
          "<th class=\"l\">DP mechanism</th><th>clip</th>"
          "<th>noise</th><th>q</th><th>&epsilon; spent</th><th>&epsilon; total</th></tr>\n",
          out);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(tb->entries, i);
        if (tool_int(e, "population_id") != pid)
            continue;
        const char *type = tool_str(e, "type");
        if (strcmp(type, "budget_refused") == 0) {
            tool_fmt_e9(a, tool_int(e, "privacy.epsilon_requested_e9"));
            tool_fmt_time(t, tool_int(e, "time"));
            fprintf(out,
                    "<tr><td>#%zu</td><td>%lld</td><td class=\"l\"><b>refused</b> (would reach "
                    "&epsilon; %s)</td><td class=\"l\">%s</td><td colspan=\"12\"></td></tr>\n",
                    i, tool_int(e, "round"), a, t);
            continue;
        }
        if (strcmp(type, "round") != 0)
            continue;
        const json_t *sa = json_object_get(e, "secagg");
        const json_t *nproof = json_object_get(sa, "norm_proof");
        char sec[160] = "off";
        if (json_object_size(nproof) > 0) /* 0 for NULL or a non-object too */
            snprintf(sec, sizeof(sec), "%lld/%lld/%lld, norm&sup2; &le; %lld (%lld bits)",
                     tool_int(sa, "n"), tool_int(sa, "k"), tool_int(sa, "t"),
                     tool_int(nproof, "bound2"), tool_int(nproof, "bits"));
        else if (json_is_object(sa))
            snprintf(sec, sizeof(sec), "%lld/%lld/%lld", tool_int(sa, "n"), tool_int(sa, "k"),
                     tool_int(sa, "t"));
        tool_fmt_time(t, tool_int(e, "ended_at"));
        tool_fmt_e9(a, tool_int(e, "dp.clip_norm_e9"));
        tool_fmt_e9(b, tool_int(e, "dp.noise_multiplier_e9"));
        tool_fmt_e9(c, tool_int(e, "dp.sampling_rate_e9"));
        tool_fmt_e9(d, tool_int(e, "privacy.epsilon_spent_e9"));
        fprintf(out,
                "<tr><td>#%zu</td><td>%lld</td><td class=\"l\">%s</td><td class=\"l\">%s</td>"
                "<td>%lld</td><td>%lld</td><td>%lld</td><td>%lld</td><td>%s</td>"
                "<td class=\"l\">",
                i, tool_int(e, "round"),
                strcmp(tool_str(e, "outcome"), "completed") == 0 ? "completed" : "abandoned", t,
                tool_int(e, "counts.checked_in"), tool_int(e, "counts.selected"),
                tool_int(e, "counts.completed"), tool_int(e, "counts.dropped"), sec);
        /* secagg mode: which rounds had protection against a coordinator lying about
         * dropouts (active), and under which device authority */
        if (json_is_object(sa) && json_object_get(sa, "active")) {
            fputs("active, authority key SHA-256 <code>", out);
            esc(out, tool_str(sa, "authority_key_sha256"));
            fputs("</code>", out);
        } else if (json_is_object(sa)) {
            fputs("semi-honest", out);
        } else {
            fputs("&ndash;", out);
        }
        if (json_is_object(sa) && json_object_get(sa, "revealed_seeds"))
            fputs(", revealed seeds", out);
        fputs("</td><td class=\"l\">", out);
        esc(out, tool_str(json_object_get(e, "dp"), "mechanism"));
        char tot[40];
        tool_fmt_e9(tot, tool_int(e, "privacy.epsilon_total_e9"));
        fprintf(out, "</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", a, b, c,
                d, tot);
    }
    fputs("</table>\n", out);
    json_decref(regions);
    free(pts);
}

int tool_report(struct tool_bundle *tb, FILE *out) {
    int ok = tb->status == FL_OK;
    size_t n = json_array_size(tb->entries);
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<title>Flotilla audit report</title>\n<style>",
          out);
    fputs(STYLE, out);
    fputs("</style></head><body>\n<h1>Flotilla audit report</h1>\n", out);
    fprintf(out, "<div class=\"verdict %s\" id=\"verdict\">", ok ? "ok" : "bad");
    esc(out, tb->verdict.message);
    if (!ok && tb->verdict.bad_entry >= 0)
        fprintf(out, "<br>First offending entry: #%lld (bundle line %lld).",
                (long long)tb->verdict.bad_entry, (long long)tb->verdict.bad_line);
    fputs("</div>\n", out);
    if (!ok)
        fputs("<p><b>The bundle did not verify: nothing below is authenticated.</b></p>\n", out);
    fputs("<table>", out);
    fputs("<tr><th class=\"l\">log (origin)</th><td class=\"l\"><code>", out);
    /* b is never NULL here: open keeps a handle on every failure but out of memory, and
     * out of memory ends the tool before any command runs */
    esc(out, tb->b ? fl_store_audit_bundle_origin(tb->b) : ""); // GCOVR_EXCL_BR_LINE
    fputs("</code></td></tr><tr><th class=\"l\">verifier key</th><td class=\"l\"><code>", out);
    esc(out, tb->b ? fl_store_audit_bundle_vkey(tb->b) : ""); // GCOVR_EXCL_BR_LINE as above
    size_t ncp = tb->b ? fl_store_audit_bundle_checkpoint_count(tb->b) : 0; // GCOVR_EXCL_BR_LINE
    char root[65] = "";
    if (ok) {
        static const char hex[] = "0123456789abcdef";
        for (int i = 0; i < 32; i++) {
            root[2 * i] = hex[tb->verdict.root[i] >> 4];
            root[2 * i + 1] = hex[tb->verdict.root[i] & 15];
        }
        root[64] = '\0';
    }
    fprintf(out,
            "</code></td></tr><tr><th class=\"l\">entries / checkpoints</th><td class=\"l\">%zu / "
            "%zu</td></tr><tr><th class=\"l\">signed root</th><td class=\"l\"><code>%s</code></td>"
            "</tr><tr><th class=\"l\">bundle SHA-256</th><td class=\"l\"><code>%s</code></td></tr>"
            "</table>\n",
            n, ncp, ok ? root : "(not verified)", tb->sha256);
    fputs("<p class=\"note\">What the verdict proves and what it does not: see the auditor's "
          "guide (docs/auditor-guide.md). Epsilon is the accountant's cumulative value as logged "
          "by the coordinator at each round; the log proves it was recorded, append-only, "
          "before each signed checkpoint.</p>\n",
          out);

    /* Populations in order of creation. */
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(tb->entries, i);
        if (strcmp(tool_str(e, "type"), "population_created") == 0)
            population_section(out, tb, tool_int(e, "population_id"));
    }

    fputs("<h2>Configuration, erasure, revocation and retention events</h2>\n"
          "<table><tr><th>entry</th>"
          "<th class=\"l\">time (UTC)</th><th class=\"l\">event</th><th class=\"l\">details</th>"
          "</tr>\n",
          out);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(tb->entries, i);
        const char *type = tool_str(e, "type");
        char t[32], a[40], b[40];
        tool_fmt_time(t, tool_int(e, "time"));
        if (strcmp(type, "config_changed") == 0) {
            tool_fmt_e9(a, tool_int(e, "budget.epsilon_e9"));
            fprintf(out,
                    "<tr><td>#%zu</td><td class=\"l\">%s</td><td class=\"l\">configuration "
                    "changed</td><td class=\"l\">",
                    i, t);
            esc(out, tool_str(e, "population"));
            fprintf(out, ": budget epsilon %s, config sha256 <code>", a);
            esc(out, tool_str(e, "config_sha256"));
            fputs("</code></td></tr>\n", out);
        } else if (strcmp(type, "erasure") == 0) {
            fprintf(out,
                    "<tr><td>#%zu</td><td class=\"l\">%s</td><td class=\"l\">erasure "
                    "request</td><td class=\"l\">client <code>",
                    i, t);
            esc(out, tool_str(e, "client"));
            fprintf(out, "</code>: %lld registry row(s), %lld participation(s) deleted</td></tr>\n",
                    tool_int(e, "deleted.clients"), tool_int(e, "deleted.participations"));
        } else if (strcmp(type, "client_revoked") == 0 ||
                   strcmp(type, "client_reinstated") == 0) {
            int rev = strcmp(type, "client_revoked") == 0;
            fprintf(out,
                    "<tr><td>#%zu</td><td class=\"l\">%s</td><td class=\"l\">client %s"
                    "</td><td class=\"l\">",
                    i, t, rev ? "revoked" : "reinstated");
            esc(out, tool_str(e, "population"));
            fputs(": client <code>", out);
            esc(out, tool_str(e, "client"));
            if (rev) {
                tool_fmt_time(a, tool_int(e, "revoked_at"));
                fprintf(out, "</code> excluded from rounds from %s</td></tr>\n", a);
            } else {
                fputs("</code> may take part in rounds again</td></tr>\n", out);
            }
        } else if (strcmp(type, "retention") == 0) {
            tool_fmt_time(b, tool_int(e, "cutoff"));
            fprintf(out,
                    "<tr><td>#%zu</td><td class=\"l\">%s</td><td class=\"l\">retention sweep"
                    "</td><td class=\"l\">%lld-day retention: data older than %s deleted "
                    "(%lld clients, %lld participations)</td></tr>\n",
                    i, t, tool_int(e, "retention_ms") / 86400000LL, b,
                    tool_int(e, "deleted.clients"), tool_int(e, "deleted.participations"));
        }
    }
    fputs("</table>\n", out);
    if (tool_oom)
        fputs("<div class=\"verdict bad\">This report is INCOMPLETE: flotilla-audit ran out of "
              "memory while writing it.</div>\n",
              out);
    fputs("<p class=\"note\">Generated by flotilla-audit from the bundle above, offline."
          "</p>\n</body></html>\n",
          out);
    return 0;
}
