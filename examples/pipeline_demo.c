/* pipeline_demo: a three-stage vLLM-Omni-style pipeline (thinker -> talker
 * -> code2wav) whose stages are separate processes exchanging hidden states,
 * token ids and audio-code chunks through the connectors a stage config
 * names (examples/pipeline.yaml: YuanrongConnector on both edges).
 *
 *   pipeline_demo --config FILE [--worker_address H:P] [--stage_workers A,B,C] [--requests N]
 *                 [--window N] [--max_wait_s S] [--talker_edge keys|stream]
 *
 * The orchestrator (this file) starts the stages (this binary with --stage N,
 * pipeline_stages.c), lets the thinker run at most --window requests ahead of
 * code2wav, shows a live progress line, checks every finished waveform
 * against the same chain computed in one process, and prints per-edge
 * latency and throughput and whether the store was left clean. Exit status 0
 * only when every request arrived intact. --worker_address overrides the
 * host and port of every edge's connector (scripts/demo.sh passes the worker
 * it started); without it the config's own address is used. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "omni/transfer_config.h"
#include "pipeline_demo.h"
#include "pipeline_model.h"

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct {
    pid_t pid;
    int out_fd; /* its reports; -1 at EOF */
    int in_fd;  /* its stdin: credits (thinker), EOF = shut down; -1 once closed */
    char buf[4096];
    size_t len;
    int status;
} child_t;

static int spawn(const pd_opts_t *o, int stage, child_t *c)
{
    int out[2], in[2];
    if (pipe(out) != 0 || pipe(in) != 0) return -1;
    char sn[16], rq[16], wn[16], mw[16];
    snprintf(sn, sizeof(sn), "%d", stage);
    snprintf(rq, sizeof(rq), "%d", o->requests);
    snprintf(wn, sizeof(wn), "%d", o->window);
    snprintf(mw, sizeof(mw), "%d", o->max_wait_s);
    const char *argv[16] = {
        "pipeline_demo", "--stage", sn, "--config", o->config, "--requests", rq, "--window", wn,
        "--max_wait_s",  mw};
    int argc = 11;
    if (o->streaming) {
        argv[argc++] = "--talker_edge";
        argv[argc++] = "stream";
    }
    const char *addr = o->stage_workers[stage] ? o->stage_workers[stage] : o->worker_address;
    if (addr != NULL) {
        argv[argc++] = "--worker_address";
        argv[argc++] = addr;
    }
    argv[argc] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the orchestrator */
        dup2(out[1], STDOUT_FILENO);
        dup2(in[0], STDIN_FILENO);
        close(out[0]);
        close(out[1]);
        close(in[0]);
        close(in[1]);
        execv("/proc/self/exe", (char *const *)argv);
        fprintf(stderr, "pipeline_demo: cannot run stage %d: %s\n", stage, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    close(in[0]);
    *c = (child_t){.pid = pid, .out_fd = out[0], .in_fd = in[1], .status = -1};
    return 0;
}

/* Closes the stages' stdin: every request is through, so they may close
 * their connectors (a SharedMemoryConnector reclaims what it put and nobody
 * consumed, so a producer closing early would take its last payloads away),
 * report their health and exit. */
static void shut_down(child_t *kids, int nk)
{
    for (int i = 0; i < nk; i++) {
        if (kids[i].in_fd >= 0) close(kids[i].in_fd);
        kids[i].in_fd = -1;
    }
}

/* Handles one report line; false on a fatal stage error. */
static bool handle(pd_run_t *r, child_t *thinker, char *line)
{
    int e, q, s;
    unsigned long long a, b;
    size_t bytes;
    char name[64], what[64];
    pd_rec_t *x;
    if (sscanf(line, "P %d %d %d %llu %llu %zu", &e, &q, &s, &a, &b, &bytes) == 6) {
        if ((x = pd_rec(r, e, q, s)) != NULL) {
            x->put_start = a;
            x->put_end = b;
            x->bytes = bytes;
        }
    } else if (sscanf(line, "G %d %d %d %llu %llu %zu", &e, &q, &s, &a, &b, &bytes) == 6) {
        if ((x = pd_rec(r, e, q, s)) != NULL) {
            x->get_start = a;
            x->get_end = b;
        }
    } else if (sscanf(line, "S %d %d", &s, &q) == 2) {
        if (s >= 0 && s < PD_STAGES) r->done[s]++;
    } else if (sscanf(line, "D %d %llu %zu", &q, &a, &bytes) == 3) {
        size_t want_samples;
        uint64_t want = pm_reference(q, &want_samples);
        if (want == a && want_samples == bytes)
            r->verified++;
        else
            r->mismatched++;
        if (thinker->in_fd >= 0 && write(thinker->in_fd, "c", 1) != 1) {
            close(thinker->in_fd); /* the thinker is gone; its exit status tells why */
            thinker->in_fd = -1;
        }
    } else if (sscanf(line, "X %d %d %63s", &s, &q, what) == 3) {
        r->corrupt++;
        if (r->corrupt <= 5) fprintf(stderr, "\nstage %d: request %d: bad %s\n", s, q, what);
    } else if (line[0] == 'H' && r->nhealth < 8) {
        unsigned long long v[8];
        char role[8];
        if (sscanf(line, "H %d %d %7s %63s %llu %llu %llu %llu %llu %llu %llu %llu", &s, &e, role,
                   name, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 12)
            snprintf(r->health[r->nhealth++], sizeof(r->health[0]),
                     "%-8s %-3s %d->%d: puts %llu gets %llu bytes %llu errors %llu timeouts %llu "
                     "not_found %llu transport %llu decode %llu",
                     s >= 0 && s < PD_STAGES ? pd_stage_names[s] : "?", role, e, e + 1, v[0], v[1],
                     v[2], v[3], v[4], v[5], v[6], v[7]);
    } else if (line[0] == 'E') {
        fprintf(stderr, "\n%s\n", line + 2);
        return false;
    }
    return true;
}

/* Reads what a child wrote and handles each complete line. */
static bool drain(pd_run_t *r, child_t *c, child_t *thinker)
{
    ssize_t n = read(c->out_fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
    if (n <= 0) {
        if (n < 0 && errno == EINTR) return true;
        close(c->out_fd);
        c->out_fd = -1;
        return true;
    }
    c->len += (size_t)n;
    c->buf[c->len] = '\0';
    bool ok = true;
    char *start = c->buf, *nl;
    while ((nl = strchr(start, '\n')) != NULL) {
        *nl = '\0';
        ok = handle(r, thinker, start) && ok;
        start = nl + 1;
    }
    c->len = strlen(start);
    memmove(c->buf, start, c->len + 1);
    return ok;
}

static void progress(const pd_run_t *r, bool final)
{
    static uint64_t last;
    uint64_t t = now_ns();
    bool tty = isatty(STDOUT_FILENO);
    if (!final && t - last < (tty ? 100000000ull : 2000000000ull)) return;
    last = t;
    int n = r->requests, d = r->done[2], width = 24, fill = n > 0 ? d * width / n : width;
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    double secs = (double)(t - r->t_start) / 1e9;
    printf("%s[%s] %d/%d requests  thinker %d  talker %d  code2wav %d  %.1f s  %.0f req/s%s",
           tty ? "\r" : "", bar, d, n, r->done[0], r->done[1], r->done[2], secs,
           secs > 0 ? d / secs : 0, tty && !final ? "" : "\n");
    fflush(stdout);
}

static void usage(void)
{
    fprintf(stderr, "usage: pipeline_demo --config FILE [--worker_address H:P] "
                    "[--stage_workers H:P,H:P,H:P] [--requests N] [--window N] [--max_wait_s S]\n"
                    "                     [--talker_edge keys|stream]\n");
}

/* The address the edge 0 -> 1 connector uses, for the leftover check. */
static int store_address(const pd_opts_t *o, char *host, size_t cap, int *port)
{
    const char *addr = o->stage_workers[0] ? o->stage_workers[0] : o->worker_address;
    snprintf(host, cap, "127.0.0.1");
    *port = 35001;
    omni_transfer_config_t *cfg = NULL;
    if (addr == NULL && omni_transfer_config_load(o->config, &cfg) == DS_K_OK) {
        const omni_connector_spec_t *s = omni_transfer_config_find(cfg, "0", "1");
        snprintf(host, cap, "%s", omni_spec_get_string(s, "host", "127.0.0.1"));
        *port = atoi(omni_spec_get_string(s, "port", "35001"));
        omni_transfer_config_free(cfg);
        return 0;
    }
    if (addr == NULL) return -1;
    snprintf(host, cap, "%s", addr);
    char *colon = strrchr(host, ':');
    if (colon == NULL) return -1;
    *colon = '\0';
    *port = atoi(colon + 1);
    return 0;
}

static int orchestrate(const pd_opts_t *o)
{
    pd_run_t r;
    child_t kids[PD_STAGES];
    char host[256];
    int port;
    if (pd_run_init(&r, o->requests) != 0 || store_address(o, host, sizeof(host), &port) != 0) {
        fprintf(stderr, "pipeline_demo: bad --worker_address or out of memory\n");
        return 2;
    }
    omni_transfer_config_t *cfg = NULL;
    if (omni_transfer_config_load(o->config, &cfg) != DS_K_OK) {
        fprintf(stderr, "pipeline_demo: %s\n", ds_last_error());
        return 2;
    }
    for (int e = 0; e < PD_EDGES; e++) {
        char from[16], to[16];
        snprintf(from, sizeof(from), "%d", e);
        snprintf(to, sizeof(to), "%d", e + 1);
        const omni_connector_spec_t *s = omni_transfer_config_find(cfg, from, to);
        snprintf(r.connector[e], sizeof(r.connector[e]), "%s", s ? s->name : "(none)");
    }
    omni_transfer_config_free(cfg);
    printf("pipeline: thinker -> talker -> code2wav, %d requests, window %d, talker -> code2wav "
           "edge: %s\n",
           o->requests, o->window,
           o->streaming ? "one stream of chunks per request" : "one key per chunk");
    printf("config %s: edge 0->1 %s, edge 1->2 %s; worker %s:%d\n", o->config, r.connector[0],
           r.connector[1], host, port);

    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    r.t_start = now_ns();
    int nk = 0;
    bool ok = true;
    for (; nk < PD_STAGES && ok; nk++)
        ok = spawn(o, nk, &kids[nk]) == 0;
    uint64_t last_event = now_ns(), stall_ns = (uint64_t)(o->max_wait_s + 5) * 1000000000ull;
    while (ok && !interrupted) {
        struct pollfd p[PD_STAGES];
        int open = 0;
        for (int i = 0; i < nk; i++) {
            p[i] = (struct pollfd){kids[i].out_fd, POLLIN, 0};
            open += kids[i].out_fd >= 0;
        }
        if (open == 0) break;
        int n = poll(p, (nfds_t)nk, 100);
        for (int i = 0; i < nk && n > 0; i++) {
            if (p[i].revents == 0) continue;
            ok = drain(&r, &kids[i], &kids[0]) && ok;
            last_event = now_ns();
        }
        if (r.verified + r.mismatched == o->requests) shut_down(kids, nk);
        progress(&r, false);
        if (now_ns() - last_event > stall_ns) {
            fprintf(stderr, "\npipeline_demo: no progress for %d s\n", o->max_wait_s + 5);
            ok = false;
        }
    }
    r.t_end = now_ns();
    if (!ok || interrupted)
        for (int i = 0; i < nk; i++)
            kill(kids[i].pid, SIGTERM);
    shut_down(kids, nk);
    for (int i = 0; i < nk; i++) {
        int st;
        if (kids[i].out_fd >= 0) close(kids[i].out_fd);
        if (waitpid(kids[i].pid, &st, 0) == kids[i].pid)
            kids[i].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (kids[i].status != 0) ok = false;
    }
    progress(&r, true);
    if (interrupted) {
        fprintf(stderr, "pipeline_demo: interrupted\n");
        pd_run_free(&r);
        return 130;
    }

    int lost = o->requests - r.verified - r.mismatched;
    printf("verified: %d/%d waveforms match the single-process reference (FNV-1a checksums); "
           "%d mismatched, %d lost; %d payloads failed their check on arrival\n",
           r.verified, o->requests, r.mismatched, lost, r.corrupt);
    pd_print_report(&r);
    size_t left = 0, total = 0;
    if (pd_count_leftovers(&r, host, port, &left, &total) == 0)
        printf("\nstore: %zu of the run's %zu keys left after cleanup\n", left, total);
    else
        printf("\nstore: could not check for leftover keys: %s\n", ds_last_error());
    for (int i = 0; i < nk; i++)
        if (kids[i].status != 0)
            printf("stage %d (%s) exited with status %d\n", i, pd_stage_names[i], kids[i].status);
    bool good = ok && r.verified == o->requests && r.corrupt == 0 && left == 0;
    printf("%s\n", good ? "PASS: every payload arrived intact" : "FAIL");
    pd_run_free(&r);
    return good ? 0 : 1;
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

int main(int argc, char **argv)
{
    pd_opts_t o = {NULL, NULL, 200, 32, -1, 30, {NULL}, 0};
    static char workers[1024];
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = v != NULL;
        if (ok && strcmp(a, "--config") == 0)
            o.config = v;
        else if (ok && strcmp(a, "--worker_address") == 0) {
            o.worker_address = v;
            ok = strchr(v, ':') != NULL;
        } else if (ok && strcmp(a, "--stage_workers") == 0) {
            snprintf(workers, sizeof(workers), "%s", v);
            char *save = NULL;
            int k = 0;
            for (char *t = strtok_r(workers, ",", &save); t && k < PD_STAGES;
                 t = strtok_r(NULL, ",", &save))
                o.stage_workers[k++] = t;
            ok = k == PD_STAGES;
        } else if (ok && strcmp(a, "--requests") == 0)
            ok = parse_int(v, 1, 1000000, &o.requests);
        else if (ok && strcmp(a, "--window") == 0)
            ok = parse_int(v, 1, 100000, &o.window);
        else if (ok && strcmp(a, "--max_wait_s") == 0)
            ok = parse_int(v, 1, 3600, &o.max_wait_s);
        else if (ok && strcmp(a, "--talker_edge") == 0) {
            ok = strcmp(v, "stream") == 0 || strcmp(v, "keys") == 0;
            o.streaming = strcmp(v, "stream") == 0;
        } else if (ok && strcmp(a, "--stage") == 0)
            ok = parse_int(v, 0, PD_STAGES - 1, &o.stage);
        else
            ok = false;
        if (!ok) {
            fprintf(stderr, "pipeline_demo: bad argument '%s'%s%s\n", a, v ? " " : "", v ? v : "");
            usage();
            return 2;
        }
    }
    if (o.config == NULL) {
        usage();
        return 2;
    }
    return o.stage >= 0 ? pd_run_stage(&o) : orchestrate(&o);
}
