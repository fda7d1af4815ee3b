/* Hostile clients, spoken to in the raw protocol (it_hostile_raw.h), each
 * test against a fresh worker:
 *
 * - Pipelined wake: a connection that pipelines a waiting GET and a SET of
 *   the same key in one write, while other connections wait on that key.
 *   Waking the waits must not resume that connection from inside another
 *   connection's publish (a worker that does so frees a wait its caller is
 *   still walking: heap-use-after-free). Every answer is checked by request
 *   id against the histories that are legal.
 * - Pipelined answers: a connection's pipelined requests are answered in
 *   order, in a few writes rather than one per answer.
 * - EMFILE: a worker out of file descriptors keeps serving its clients,
 *   does not spin on its listener, says so in its log, and accepts again once
 *   descriptors are free.
 * - Length wrap: per-key SET lengths whose u64 sum wraps around to the data
 *   length are refused with K_INVALID, and nothing is stored.
 * - Sessions: session ids are random 64-bit values guarded by a per-session
 *   key; joining needs the key and the Unix socket, so a TCP client cannot
 *   take over (or release the pins of) a local client's session, and a
 *   restarted worker knows none of the old sessions.
 *
 * Each test prints what it measured before asserting. */
#include "harness.h"
#include "it_fault_util.h"
#include "it_hostile_raw.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;

/* ---- fixture: one worker per test ---- */

/* True while the worker process runs (a zombie has crashed or exited). */
static bool worker_alive(void)
{
    if (dst_worker_external(&W)) return true;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)W.pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

/* Prints the sanitizer report of a worker that died, once per worker. */
static pid_t death_printed;

static void print_death(void)
{
    if (death_printed == W.pid) return;
    death_printed = W.pid;
    FILE *f = fopen(W.logpath, "r");
    if (f == NULL) return;
    /* The report's headings and the top frames of each stack. */
    char line[1024];
    int printing = 0, printed = 0, frame;
    while (fgets(line, sizeof(line), f) && printed < 60) {
        if (strstr(line, "ERROR: AddressSanitizer") || strstr(line, "runtime error")) printing = 1;
        bool top = sscanf(line, " #%d ", &frame) == 1 && frame < 6;
        if (printing && (top || strstr(line, "Sanitizer") || strstr(line, " by thread") ||
                         strstr(line, " of size ") || strstr(line, " located "))) {
            printf("#   worker log: %s", line);
            printed++;
        }
    }
    fclose(f);
    if (printed == 0) printf("#   (no sanitizer report in %s)\n", W.logpath);
}

static int start_worker(void **state)
{
    (void)state;
    return dst_worker_start(&W, 64, NULL);
}

static int stop_worker(void **state)
{
    (void)state;
    if (!worker_alive()) {
        printf("# the worker (pid %d) died during the test\n", (int)W.pid);
        print_death();
    }
    int st = dst_worker_stop(&W);
    if (st > 0)
        printf("# worker exit status %#x (%s %d)\n", st, WIFSIGNALED(st) ? "signal" : "exit code",
               WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    return 0;
}

/* Checks that the worker lives and answers a HEALTH on a new connection. */
static bool worker_healthy(const char *when)
{
    bool alive = worker_alive();
    hr_conn_t h;
    uint32_t st = UINT32_MAX;
    if (alive && hr_open_hello(&h, &W, false) == 0) {
        uint64_t id = hr_health(&h);
        hr_frame_t *f = hr_flush(&h) == 0 ? hr_answer(&h, id, ds__now_ms() + 2000) : NULL;
        if (f) st = f->h.status;
    }
    if (alive) hr_close(&h);
    printf("# %s: worker %s, HEALTH status %d\n", when, alive ? "alive" : "DEAD",
           st == UINT32_MAX ? -1 : (int)st);
    if (!alive) print_death();
    return alive && st == 0;
}

/* A GET of key on a new connection: its status (-1: no answer) and value. */
static int get_now(const char *key, char *val, size_t cap)
{
    val[0] = '\0';
    hr_conn_t g;
    if (hr_open_hello(&g, &W, true) != 0) return -1;
    uint64_t id = hr_get(&g, key, 0, 0);
    hr_frame_t *f = hr_flush(&g) == 0 ? hr_answer(&g, id, ds__now_ms() + 2000) : NULL;
    int st = f ? (int)f->h.status : -1;
    if (f && st == 0) hr_get_value(f, val, cap, NULL);
    hr_close(&g);
    return st;
}

/* The status of a GET answer and, when OK, its inline value. */
static int answer_value(const hr_frame_t *f, char *val, size_t cap)
{
    val[0] = '\0';
    if (f == NULL) return -1;
    if (f->h.status == 0 && hr_get_value(f, val, cap, NULL) != DS_VAL_INLINE) return -2;
    return (int)f->h.status;
}

static void show(const char *who, const hr_frame_t *f)
{
    char d[400];
    printf("#   %-14s %s\n", who, hr_describe(f, d, sizeof(d)));
}

static bool one_of(const char *v, const char *const *set, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(v, set[i]) == 0) return true;
    return false;
}

/* ---- 1. pipelined wake ---- */

/* B waits on k; A pipelines GET-wait k + SET k "a" in one write; C sets
 * k "c". A connection's requests run in order, so A's SET runs only after
 * A's GET is answered, and that GET can only have been woken by C's publish:
 * A's GET = "c", and "a" is the last write (final GET "a"). B is woken by
 * the same publish; it gets "c" when answered at once, or "a" when a worker
 * that answers woken waits after the current event answers B after A's
 * resumed SET ran. Both are legal; a missing answer, another status or
 * value, or a dead worker is not. */
static void test_pipelined_wake(void **state)
{
    (void)state;
    hr_conn_t a, b, c;
    assert_int_equal(hr_open_hello(&a, &W, true), 0);
    assert_int_equal(hr_open_hello(&b, &W, false), 0);
    assert_int_equal(hr_open_hello(&c, &W, true), 0);
    uint64_t gb = hr_get(&b, "k", 3000, 0);
    assert_int_equal(hr_flush(&b), 0);
    usleep(100000);
    uint64_t ga = hr_get(&a, "k", 3000, 0);
    uint64_t sa = hr_set(&a, "k", "a");
    assert_int_equal(hr_flush(&a), 0);
    usleep(100000);
    uint64_t sc = hr_set(&c, "k", "c");
    assert_int_equal(hr_flush(&c), 0);
    uint64_t dl = ds__now_ms() + 5000;
    hr_frame_t *fb = hr_answer(&b, gb, dl), *fga = hr_answer(&a, ga, dl);
    hr_frame_t *fsa = hr_answer(&a, sa, dl), *fsc = hr_answer(&c, sc, dl);
    printf("# pipelined wake: B GET-wait k; A GET-wait k + SET k=a in one write; C SET k=c\n");
    show("B GET-wait", fb);
    show("A GET-wait", fga);
    show("A SET", fsa);
    show("C SET", fsc);
    bool healthy = worker_healthy("after the wake");
    char vb[64], va[64], fin[64] = "";
    int stb = answer_value(fb, vb, sizeof(vb)), sta = answer_value(fga, va, sizeof(va));
    int stf = healthy ? get_now("k", fin, sizeof(fin)) : -1;
    printf("#   final GET k: status %d value '%s'\n", stf, fin);
    hr_close(&a);
    hr_close(&b);
    hr_close(&c);

    assert_true(healthy);
    assert_int_equal(stb, DS_K_OK);
    assert_int_equal(sta, DS_K_OK);
    const char *legal[] = {"c", "a"};
    assert_true(one_of(vb, legal, 2));
    assert_string_equal(va, "c");
    assert_non_null(fsa);
    assert_int_equal(fsa->h.status, DS_K_OK);
    assert_non_null(fsc);
    assert_int_equal(fsc->h.status, DS_K_OK);
    assert_int_equal(stf, DS_K_OK);
    assert_string_equal(fin, "a");
}

/* 8 connections wait on k; 3 connections each pipeline GET-wait k + SET k
 * "p<i>" + DEL k + GET k in one write; then a setter sets k "c". Every wait
 * is woken and answered with a value k had: "c" or a pipeline's value (a
 * pipeline's own wait never sees its own value, which is set after it is
 * answered); each pipeline's SET is OK, its DEL OK or NOT_FOUND (another
 * pipeline's DEL may come between), its GET NOT_FOUND or a pipeline's value;
 * the final GET likewise. */
static void test_pipelined_wake_many(void **state)
{
    (void)state;
    enum { NW = 8, NP = 3 };
    hr_conn_t w[NW], p[NP], s;
    uint64_t wid[NW], pid[NP][4];
    for (int i = 0; i < NW; i++) {
        assert_int_equal(hr_open_hello(&w[i], &W, i % 2 == 0), 0);
        wid[i] = hr_get(&w[i], "k", 3000, 0);
        assert_int_equal(hr_flush(&w[i]), 0);
    }
    usleep(100000);
    char pv[NP][16];
    for (int i = 0; i < NP; i++) {
        snprintf(pv[i], sizeof(pv[i]), "p%d", i);
        assert_int_equal(hr_open_hello(&p[i], &W, i % 2 == 1), 0);
        pid[i][0] = hr_get(&p[i], "k", 3000, 0);
        pid[i][1] = hr_set(&p[i], "k", pv[i]);
        pid[i][2] = hr_del(&p[i], "k");
        pid[i][3] = hr_get(&p[i], "k", 0, 0);
        assert_int_equal(hr_flush(&p[i]), 0);
    }
    usleep(100000);
    assert_int_equal(hr_open_hello(&s, &W, false), 0);
    uint64_t sid = hr_set(&s, "k", "c");
    assert_int_equal(hr_flush(&s), 0);

    uint64_t dl = ds__now_ms() + 5000;
    printf("# %d waiters on k, %d pipelines (GET-wait, SET, DEL, GET), then SET k=c\n", NW, NP);
    char v[64];
    int bad_waits = 0, bad_pipes = 0;
    const char *wake_legal[] = {"c", "p0", "p1", "p2"};
    for (int i = 0; i < NW + NP; i++) {
        hr_frame_t *f =
            i < NW ? hr_answer(&w[i], wid[i], dl) : hr_answer(&p[i - NW], pid[i - NW][0], dl);
        char who[32];
        snprintf(who, sizeof(who), i < NW ? "waiter %d" : "pipe %d GET-w", i < NW ? i : i - NW);
        show(who, f);
        int st = answer_value(f, v, sizeof(v));
        bool own = i >= NW && strcmp(v, pv[i - NW]) == 0;
        if (st != 0 || !one_of(v, wake_legal, 4) || own) bad_waits++;
    }
    const char *get_legal[] = {"p0", "p1", "p2"};
    for (int i = 0; i < NP; i++) {
        hr_frame_t *fs = hr_answer(&p[i], pid[i][1], dl), *fd = hr_answer(&p[i], pid[i][2], dl);
        hr_frame_t *fg = hr_answer(&p[i], pid[i][3], dl);
        char who[32];
        snprintf(who, sizeof(who), "pipe %d SET", i);
        show(who, fs);
        snprintf(who, sizeof(who), "pipe %d DEL", i);
        show(who, fd);
        snprintf(who, sizeof(who), "pipe %d GET", i);
        show(who, fg);
        int gst = answer_value(fg, v, sizeof(v));
        if (fs == NULL || fs->h.status != 0 || fd == NULL ||
            (fd->h.status != 0 && fd->h.status != DS_K_NOT_FOUND) ||
            !(gst == DS_K_NOT_FOUND || (gst == 0 && one_of(v, get_legal, 3))))
            bad_pipes++;
    }
    hr_frame_t *fs = hr_answer(&s, sid, dl);
    show("setter SET", fs);
    bool healthy = worker_healthy("after the wake");
    char fin[64] = "";
    int stf = healthy ? get_now("k", fin, sizeof(fin)) : -1;
    printf("#   final GET k: status %d value '%s'; %d bad waits, %d bad pipelines\n", stf, fin,
           bad_waits, bad_pipes);
    for (int i = 0; i < NW; i++)
        hr_close(&w[i]);
    for (int i = 0; i < NP; i++)
        hr_close(&p[i]);
    hr_close(&s);

    assert_true(healthy);
    assert_int_equal(bad_waits, 0);
    assert_int_equal(bad_pipes, 0);
    assert_non_null(fs);
    assert_int_equal(fs->h.status, DS_K_OK);
    assert_true(stf == DS_K_NOT_FOUND || (stf == 0 && one_of(fin, get_legal, 3)));
}

/* One connection pipelines GET-wait k, SET k, DEL k, GET k, SET k2, GET k2
 * behind a wait; nothing may be answered until another connection sets k,
 * then every answer comes in request order with the values of that order:
 * "c", OK, OK, NOT_FOUND, OK, "x". */
static void test_pipelined_in_order(void **state)
{
    (void)state;
    hr_conn_t p, s;
    assert_int_equal(hr_open_hello(&p, &W, false), 0);
    assert_int_equal(hr_open_hello(&s, &W, true), 0);
    uint64_t ids[6];
    ids[0] = hr_get(&p, "k", 3000, 0);
    ids[1] = hr_set(&p, "k", "v1");
    ids[2] = hr_del(&p, "k");
    ids[3] = hr_get(&p, "k", 0, 0);
    ids[4] = hr_set(&p, "k2", "x");
    ids[5] = hr_get(&p, "k2", 0, 0);
    assert_int_equal(hr_flush(&p), 0);
    uint32_t early = hr_collect(&p, 1, ds__now_ms() + 300);
    uint64_t t0 = ds__now_ms();
    uint64_t sid = hr_set(&s, "k", "c");
    assert_int_equal(hr_flush(&s), 0);
    uint32_t got = hr_collect(&p, 6, ds__now_ms() + 5000);
    uint64_t took = ds__now_ms() - t0;
    hr_frame_t *fs = hr_answer(&s, sid, ds__now_ms() + 2000);
    printf("# one connection: GET-wait k, SET k, DEL k, GET k, SET k2, GET k2; then SET k=c\n");
    printf("#   answered before the SET: %u; after: %u in %llu ms\n", early, got,
           (unsigned long long)took);
    for (uint32_t i = 0; i < got; i++) {
        char who[32];
        snprintf(who, sizeof(who), "answer %u", i);
        show(who, &p.got[i]);
    }
    show("setter SET", fs);
    bool healthy = worker_healthy("after the pipeline");

    assert_true(healthy);
    assert_int_equal(early, 0);
    assert_int_equal(got, 6);
    const int want_st[6] = {0, 0, 0, DS_K_NOT_FOUND, 0, 0};
    const char *want_v[6] = {"c", NULL, NULL, NULL, NULL, "x"};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(p.got[i].h.req_id, ids[i]); /* in request order */
        assert_int_equal(p.got[i].h.status, want_st[i]);
        if (want_v[i]) {
            char v[64];
            assert_int_equal(answer_value(&p.got[i], v, sizeof(v)), 0);
            assert_string_equal(v, want_v[i]);
        }
    }
    assert_non_null(fs);
    assert_int_equal(fs->h.status, DS_K_OK);
    hr_close(&p);
    hr_close(&s);
}

/* One connection pipelines SET k and 40 GETs of k in one write: every answer
 * comes, in request order, with the value, and the worker writes them
 * together (the small answers to what one read brought go out in one write)
 * rather than one write per answer. */
static void test_pipelined_answers_coalesce(void **state)
{
    (void)state;
    enum { GETS = 40 };
    hr_conn_t p;
    assert_int_equal(hr_open_hello(&p, &W, true), 0);
    double w0 = dst_stat(&W, "socket_writes");
    uint64_t ids[GETS + 1];
    ids[0] = hr_set(&p, "k", "v");
    for (int i = 1; i <= GETS; i++)
        ids[i] = hr_get(&p, "k", 0, 0);
    assert_int_equal(hr_flush(&p), 0);
    uint32_t got = hr_collect(&p, GETS + 1, ds__now_ms() + 5000);
    double writes = dst_stat(&W, "socket_writes") - w0;
    printf("# one connection: SET k + %d GETs of k in one write: %u answers, %.0f socket writes "
           "(one of them the first stats answer)\n",
           GETS, got, writes);
    assert_int_equal(got, GETS + 1);
    for (int i = 0; i <= GETS; i++) {
        assert_int_equal(p.got[i].h.req_id, ids[i]);
        assert_int_equal(p.got[i].h.status, 0);
        if (i == 0) continue;
        char v[16];
        assert_int_equal(answer_value(&p.got[i], v, sizeof(v)), 0);
        assert_string_equal(v, "v");
    }
    /* One write per answer would be 41 (+1). */
    assert_true(writes >= 1 && writes <= 8);
    hr_close(&p);
}

/* While 4 connections wait on a key, another pipelines GET-wait + SET of it
 * and closes (shutdown + close) right after its write, and a setter sets the
 * key: in half the rounds just after the close, in the other half just
 * before it (so the publish finds the closer parked, with its SET still
 * unread, and its hang-up comes while it resumes). The closer's SET may or
 * may not have run, so each wait gets "x" or "c"; the setter is answered;
 * the worker survives. 12 rounds, alternating TCP and Unix for the closer. */
static void test_pipelined_then_close(void **state)
{
    (void)state;
    enum { NW = 4, ROUNDS = 12 };
    int bad = 0;
    const char *legal[] = {"x", "c"};
    printf("# %d rounds: %d waiters; a closer pipelines GET-wait + SET and closes; SET k=c "
           "after (even rounds) or before (odd rounds) the close\n",
           ROUNDS, NW);
    for (int r = 0; r < ROUNDS && worker_alive(); r++) {
        char key[32];
        snprintf(key, sizeof(key), "kc%d", r);
        hr_conn_t w[NW], x, s;
        uint64_t wid[NW];
        for (int i = 0; i < NW; i++) {
            assert_int_equal(hr_open_hello(&w[i], &W, i % 2 == 0), 0);
            wid[i] = hr_get(&w[i], key, 3000, 0);
            assert_int_equal(hr_flush(&w[i]), 0);
        }
        bool set_first = r % 2 == 1;
        assert_int_equal(hr_open_hello(&x, &W, (r / 2) % 2 == 0), 0);
        assert_int_equal(hr_open_hello(&s, &W, (r / 2) % 2 == 1), 0);
        usleep(50000);
        (void)hr_get(&x, key, 3000, 0);
        (void)hr_set(&x, key, "x");
        assert_int_equal(hr_flush(&x), 0);
        uint64_t sid = hr_set(&s, key, "c");
        if (set_first) {
            usleep(20000); /* the closer is parked, its SET unread */
            assert_int_equal(hr_flush(&s), 0);
        }
        shutdown(x.fd, SHUT_RDWR);
        hr_close(&x);
        if (!set_first) assert_int_equal(hr_flush(&s), 0);
        uint64_t dl = ds__now_ms() + 5000;
        char v[64], line[256];
        int n = snprintf(line, sizeof(line), "#   round %d: waiters", r);
        for (int i = 0; i < NW; i++) {
            int st = answer_value(hr_answer(&w[i], wid[i], dl), v, sizeof(v));
            if (st != 0 || !one_of(v, legal, 2)) bad++;
            n += snprintf(line + n, sizeof(line) - (size_t)n, " %d:'%s'", st, v);
            hr_close(&w[i]);
        }
        hr_frame_t *fs = hr_answer(&s, sid, dl);
        if (fs == NULL || fs->h.status != 0) bad++;
        printf("%s; setter status %d\n", line, fs ? (int)fs->h.status : -1);
        hr_close(&s);
    }
    bool healthy = worker_healthy("after the rounds");
    int finals_bad = 0;
    for (int r = 0; r < ROUNDS && healthy; r++) {
        char key[32], v[64];
        snprintf(key, sizeof(key), "kc%d", r);
        if (get_now(key, v, sizeof(v)) != 0 || !one_of(v, legal, 2)) finals_bad++;
    }
    printf("#   %d bad answers, %d keys with a wrong final value\n", bad, finals_bad);
    assert_true(healthy);
    assert_int_equal(bad, 0);
    assert_int_equal(finals_bad, 0);
}

/* ---- 2. out of file descriptors ---- */

static int count_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL) return -1;
    int n = 0;
    for (struct dirent *e = readdir(d); e; e = readdir(d))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* A line of the worker's log that mentions accept and the errno's text. */
static bool log_mentions_emfile(char *found, size_t cap)
{
    found[0] = '\0';
    FILE *f = fopen(W.logpath, "r");
    if (f == NULL) return false;
    char line[1024], low[1024];
    bool hit = false;
    while (!hit && fgets(line, sizeof(line), f)) {
        size_t i = 0;
        for (; line[i] && i < sizeof(low) - 1; i++)
            low[i] = (char)tolower((unsigned char)line[i]);
        low[i] = '\0';
        hit =
            strstr(low, "accept") && (strstr(low, "emfile") || strstr(low, "too many open files") ||
                                      strstr(low, "descriptor"));
        if (hit) snprintf(found, cap, "%s", line);
    }
    fclose(f);
    return hit;
}

static void test_emfile(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    enum { LIMIT = 64, MAX_CONNS = 200 };
    hr_conn_t pre;
    assert_int_equal(hr_open_hello(&pre, &W, false), 0);
    int fds_before = count_fds(W.pid);
    struct rlimit rl;
    assert_int_equal(prlimit(W.pid, RLIMIT_NOFILE, NULL, &rl), 0);
    rl.rlim_cur = LIMIT;
    assert_int_equal(prlimit(W.pid, RLIMIT_NOFILE, &rl, NULL), 0);

    /* Open connections until HELLOs go unanswered (or are refused), then a
     * few more that queue in the listen backlog. */
    static hr_conn_t flood[MAX_CONNS];
    int nflood = 0, answered = 0, refused = 0;
    while (nflood < MAX_CONNS && refused < 4) {
        if (hr_open(&flood[nflood], &W, false) != 0) break;
        int rc = hr_hello(&flood[nflood], 0, false, "", 500);
        nflood++;
        if (rc == 0 && flood[nflood - 1].hello_status == 0)
            answered++;
        else
            refused++;
    }
    int fds_full = count_fds(W.pid);

    /* The client connected before still gets answers. */
    uint64_t t0 = ds__now_ms();
    uint64_t hid = hr_health(&pre);
    uint64_t sid = hr_set(&pre, "emfile-k", "still-here");
    uint64_t gid = hr_get(&pre, "emfile-k", 0, 0);
    int pre_ok = hr_flush(&pre) == 0;
    hr_frame_t *fh = hr_answer(&pre, hid, t0 + 2000), *fs = hr_answer(&pre, sid, t0 + 2000);
    hr_frame_t *fg = hr_answer(&pre, gid, t0 + 2000);
    char v[64];
    int gst = answer_value(fg, v, sizeof(v));
    pre_ok = pre_ok && fh && fh->h.status == 0 && fs && fs->h.status == 0 && gst == 0 &&
             strcmp(v, "still-here") == 0;
    uint64_t pre_ms = ds__now_ms() - t0;

    /* Its CPU time over 2 s while the listener cannot accept. */
    long tk0 = fu_cpu_ticks(W.pid);
    usleep(2000000);
    long tk1 = fu_cpu_ticks(W.pid);
    double cpu_s = (double)(tk1 - tk0) / (double)sysconf(_SC_CLK_TCK);
    char logline[1024];
    bool logged = log_mentions_emfile(logline, sizeof(logline));

    /* Free the descriptors: a new client works within 2 s. */
    for (int i = 0; i < nflood; i++)
        hr_close(&flood[i]);
    t0 = ds__now_ms();
    bool recovered = false;
    while (!recovered && ds__now_ms() < t0 + 2000) {
        hr_conn_t n;
        if (hr_open(&n, &W, false) == 0 && hr_hello(&n, 0, false, "", 500) == 0 &&
            n.hello_status == 0) {
            uint64_t id = hr_health(&n);
            hr_frame_t *f = hr_flush(&n) == 0 ? hr_answer(&n, id, t0 + 2000) : NULL;
            recovered = f && f->h.status == 0;
        }
        hr_close(&n);
        if (!recovered) usleep(50000);
    }
    uint64_t rec_ms = ds__now_ms() - t0;
    hr_close(&pre);

    printf("# EMFILE: worker fds %d before, RLIMIT_NOFILE %d, %d at the limit\n", fds_before, LIMIT,
           fds_full);
    printf("#   flood: %d connections, %d answered, %d unanswered or refused\n", nflood, answered,
           refused);
    printf("#   connected client: %s in %llu ms\n", pre_ok ? "answered" : "NOT answered",
           (unsigned long long)pre_ms);
    printf("#   worker CPU over 2 s at the limit: %.2f s (allowed < 0.3)\n", cpu_s);
    printf("#   log line about accept/EMFILE: %s", logged ? logline : "none\n");
    printf("#   after closing the flood: new client %s after %llu ms\n",
           recovered ? "served" : "NOT served", (unsigned long long)rec_ms);
    assert_true(refused > 0);
    assert_true(pre_ok);
    assert_true(tk0 >= 0 && tk1 >= 0);
    assert_true(cpu_s < 0.3);
    assert_true(logged);
    assert_true(recovered);
    assert_true(worker_healthy("at the end"));
}

/* ---- 3. per-key lengths whose sum wraps ---- */

/* A two-key SET announcing lens[0] + lens[1] == 8 (mod 2^64) with 8 data
 * bytes, and a HEALTH right behind it in the same write. */
static void send_wrapping_set(hr_conn_t *c, const char *k0, const char *k1, uint64_t l0,
                              uint64_t l1, uint64_t *set_id, uint64_t *health_id)
{
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u8(&m, 0);
    ds__wbuf_u32(&m, 0);
    ds__wbuf_u8(&m, 0);
    ds__wbuf_u32(&m, 2);
    ds__wbuf_cstr(&m, k0);
    ds__wbuf_u64(&m, l0);
    ds__wbuf_cstr(&m, k1);
    ds__wbuf_u64(&m, l1);
    *set_id = hr_add(c, DS_OP_SET, &m, "ABCDEFGH", 8);
    *health_id = hr_health(c);
    ds__wbuf_free(&m);
}

static void test_length_wrap(void **state)
{
    (void)state;
    hr_conn_t k;
    assert_int_equal(hr_open_hello(&k, &W, true), 0);
    uint64_t id = hr_set(&k, "keep", "intact-value");
    assert_int_equal(hr_flush(&k), 0);
    hr_frame_t *f = hr_answer(&k, id, ds__now_ms() + 2000);
    assert_non_null(f);
    assert_int_equal(f->h.status, DS_K_OK);
    hr_close(&k);
    double objs0 = dst_stat(&W, "objects.count");

    const uint64_t big = UINT64_MAX - 7; /* 2^64 - 8 */
    const uint64_t lens[2][2] = {{big, 16}, {16, big}};
    int set_st[2], health_same[2], st_k0[2], st_k1[2];
    char err[2][256];
    for (int i = 0; i < 2; i++) {
        char k0[24], k1[24], v[64];
        snprintf(k0, sizeof(k0), "wrap%da", i);
        snprintf(k1, sizeof(k1), "wrap%db", i);
        hr_conn_t c;
        assert_int_equal(hr_open_hello(&c, &W, i == 1), 0);
        uint64_t sid, hid;
        send_wrapping_set(&c, k0, k1, lens[i][0], lens[i][1], &sid, &hid);
        assert_int_equal(hr_flush(&c), 0);
        uint64_t dl = ds__now_ms() + 2000;
        hr_frame_t *fs = hr_answer(&c, sid, dl), *fh = hr_answer(&c, hid, dl);
        set_st[i] = fs ? (int)fs->h.status : -1;
        snprintf(err[i], sizeof(err[i]), "%s", fs ? fs->err : "");
        health_same[i] = fh ? (int)fh->h.status : -1;
        hr_close(&c);
        st_k0[i] = get_now(k0, v, sizeof(v));
        st_k1[i] = get_now(k1, v, sizeof(v));
        printf("# wrapping SET lens {%llu, %llu}, data_len 8: SET status %d (%s), HEALTH behind "
               "it %d; GET %s %d, GET %s %d\n",
               (unsigned long long)lens[i][0], (unsigned long long)lens[i][1], set_st[i],
               fs ? err[i] : "no answer within 2 s", health_same[i], k0, st_k0[i], k1, st_k1[i]);
    }
    usleep(100000);
    double objs1 = dst_stat(&W, "objects.count");
    char keep[64];
    int keep_st = get_now("keep", keep, sizeof(keep));
    bool healthy = worker_healthy("after the wrapping SETs");
    printf("#   objects.count %.0f before, %.0f after; GET keep: %d '%s'\n", objs0, objs1, keep_st,
           keep);

    assert_true(healthy);
    assert_int_equal(keep_st, DS_K_OK);
    assert_string_equal(keep, "intact-value");
    for (int i = 0; i < 2; i++) {
        assert_int_equal(set_st[i], DS_K_INVALID);
        assert_true(strlen(err[i]) > 0);
        assert_int_equal(st_k0[i], DS_K_NOT_FOUND);
        assert_int_equal(st_k1[i], DS_K_NOT_FOUND);
    }
    assert_true(objs1 == objs0);
}

/* ---- 4. sessions ---- */

static bool lower_hex(const char *s, size_t len)
{
    if (strlen(s) != len) return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

static uint64_t absdiff(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

/* Random 64-bit ids: two sessions made back to back are neither small nor
 * close (each rule fails for random ids with probability below 2^-31). */
static void test_session_ids_random(void **state)
{
    (void)state;
    hr_conn_t a, b, c;
    assert_int_equal(hr_open_hello(&a, &W, true), 0);
    assert_int_equal(hr_open_hello(&b, &W, true), 0);
    assert_int_equal(hr_open_hello(&c, &W, false), 0);
    printf("# session ids: %#018llx %#018llx %#018llx (unix, unix, tcp)\n",
           (unsigned long long)a.sid, (unsigned long long)b.sid, (unsigned long long)c.sid);
    hr_close(&a);
    hr_close(&b);
    hr_close(&c);
    const uint64_t small = UINT64_C(1) << 32, close_ = UINT64_C(1) << 20;
    assert_true(a.sid >= small && b.sid >= small && c.sid >= small);
    assert_true(absdiff(a.sid, b.sid) > close_);
    assert_true(absdiff(b.sid, c.sid) > close_);
}

/* The HELLO answer: worker_id of 16 lowercase hex digits, and a session key
 * of 32 after the index fields, different per session. */
static void test_session_hello_fields(void **state)
{
    (void)state;
    hr_conn_t a, b;
    assert_int_equal(hr_open_hello(&a, &W, true), 0);
    assert_int_equal(hr_open_hello(&b, &W, false), 0);
    printf("# worker_id '%s'; session keys '%s' (unix) and '%s' (tcp)\n", a.worker_id, a.skey,
           b.skey);
    hr_close(&a);
    hr_close(&b);
    assert_true(lower_hex(a.worker_id, 16));
    assert_string_equal(a.worker_id, b.worker_id);
    assert_true(lower_hex(a.skey, 32));
    assert_true(lower_hex(b.skey, 32));
    assert_string_not_equal(a.skey, b.skey);
}

/* Joins sid on a new connection; the HELLO status, or -1 without an answer. */
static int try_join(bool unix_sock, uint64_t sid, const char *key, hr_conn_t *keep)
{
    hr_conn_t c;
    int st = -1;
    if (hr_open(&c, &W, unix_sock) == 0 && hr_hello(&c, sid, false, key, 2000) == 0)
        st = (int)c.hello_status;
    printf("#   join %s sid %#llx key %s%s%s: status %d%s%s (sid back %#llx)\n",
           unix_sock ? "unix" : "tcp ", (unsigned long long)sid, key ? "'" : "",
           key ? key : "(none)", key ? "'" : "", st, c.hello_err[0] ? " " : "", c.hello_err,
           (unsigned long long)c.sid);
    if (keep)
        *keep = c;
    else
        hr_close(&c);
    return st;
}

/* A TCP client cannot join a local client's session: not without the key,
 * not with a wrong one, not even with the right one; a Unix client with the
 * right key can. An unknown sid is K_NOT_FOUND. */
static void test_session_hijack_refused(void **state)
{
    (void)state;
    hr_conn_t l;
    assert_int_equal(hr_open_hello(&l, &W, true), 0);
    printf("# local session %#llx key '%s'\n", (unsigned long long)l.sid, l.skey);
    const char *wrong = "0123456789abcdef0123456789abcdef";
    uint64_t unknown = l.sid ^ UINT64_C(0x8000000000000001);
    int tcp_none = try_join(false, l.sid, NULL, NULL);
    int tcp_empty = try_join(false, l.sid, "", NULL);
    int tcp_wrong = try_join(false, l.sid, wrong, NULL);
    int tcp_right = try_join(false, l.sid, l.skey, NULL);
    int unix_none = try_join(true, l.sid, NULL, NULL);
    int unix_wrong = try_join(true, l.sid, wrong, NULL);
    int unix_unknown = try_join(true, unknown, l.skey, NULL);
    int tcp_unknown = try_join(false, unknown, NULL, NULL);
    hr_conn_t j;
    int unix_right = try_join(true, l.sid, l.skey, &j);
    uint64_t joined_sid = j.sid;
    hr_close(&j);
    hr_close(&l);
    assert_int_equal(tcp_none, DS_K_NOT_AUTHORIZED);
    assert_int_equal(tcp_empty, DS_K_NOT_AUTHORIZED);
    assert_int_equal(tcp_wrong, DS_K_NOT_AUTHORIZED);
    assert_int_equal(tcp_right, DS_K_NOT_AUTHORIZED);
    assert_int_equal(unix_none, DS_K_NOT_AUTHORIZED);
    assert_int_equal(unix_wrong, DS_K_NOT_AUTHORIZED);
    assert_int_equal(unix_unknown, DS_K_NOT_FOUND);
    assert_int_equal(tcp_unknown, DS_K_NOT_FOUND);
    assert_int_equal(unix_right, DS_K_OK);
    assert_true(joined_sid == l.sid);
}

/* A value the local client pinned (GET with DS_GET_PIN) stays pinned while
 * an attacker over TCP tries to join the session (without and with the
 * stolen key) and sends RELEASE for the pin's handle on that connection; the
 * owner's own RELEASE then frees it. */
static void test_session_pin_survives_hijack(void **state)
{
    (void)state;
    hr_conn_t l;
    assert_int_equal(hr_open(&l, &W, true), 0);
    assert_int_equal(hr_hello(&l, 0, true, "", 3000), 0);
    assert_int_equal(l.hello_status, DS_K_OK);
    uint64_t id = hr_set(&l, "pinned", "precious");
    assert_int_equal(hr_flush(&l), 0);
    hr_frame_t *f = hr_answer(&l, id, ds__now_ms() + 2000);
    assert_non_null(f);
    assert_int_equal(f->h.status, DS_K_OK);
    double pinned0 = dst_stat(&W, "objects.pinned");
    id = hr_get(&l, "pinned", 0, DS_GET_PIN);
    assert_int_equal(hr_flush(&l), 0);
    f = hr_answer(&l, id, ds__now_ms() + 2000);
    assert_non_null(f);
    assert_int_equal(f->h.status, DS_K_OK);
    uint64_t handle = 0;
    char v[64];
    assert_int_equal(hr_get_value(f, v, sizeof(v), &handle), DS_VAL_SHM);
    double pinned1 = dst_stat(&W, "objects.pinned");
    printf("# local session %#llx pinned 'pinned' as handle %#llx; objects.pinned %.0f -> %.0f\n",
           (unsigned long long)l.sid, (unsigned long long)handle, pinned0, pinned1);

    int join_st[2], release_st[2];
    const char *keys[2] = {NULL, l.skey};
    for (int i = 0; i < 2; i++) {
        hr_conn_t a;
        join_st[i] = try_join(false, l.sid, keys[i], &a);
        release_st[i] = -1;
        if (a.fd >= 0) {
            ds_wbuf_t m;
            ds__wbuf_init(&m);
            ds__wbuf_u32(&m, 1);
            ds__wbuf_u64(&m, handle);
            uint64_t rid = hr_add(&a, DS_OP_RELEASE, &m, NULL, 0);
            ds__wbuf_free(&m);
            hr_frame_t *fr = hr_flush(&a) == 0 ? hr_answer(&a, rid, ds__now_ms() + 1000) : NULL;
            release_st[i] = fr ? (int)fr->h.status : -1;
        }
        hr_close(&a);
        printf("#   attacker %d: join status %d, its RELEASE answered %d (-1: none/closed)\n", i,
               join_st[i], release_st[i]);
    }
    double pinned2 = dst_stat(&W, "objects.pinned");
    ds_wbuf_t m;
    ds__wbuf_init(&m);
    ds__wbuf_u32(&m, 1);
    ds__wbuf_u64(&m, handle);
    id = hr_add(&l, DS_OP_RELEASE, &m, NULL, 0);
    ds__wbuf_free(&m);
    assert_int_equal(hr_flush(&l), 0);
    f = hr_answer(&l, id, ds__now_ms() + 2000);
    double pinned3 = dst_stat(&W, "objects.pinned");
    printf(
        "#   objects.pinned after the attacks %.0f, after the owner's RELEASE (status %d) %.0f\n",
        pinned2, f ? (int)f->h.status : -1, pinned3);
    hr_close(&l);

    assert_true(pinned1 == pinned0 + 1);
    assert_int_equal(join_st[0], DS_K_NOT_AUTHORIZED);
    assert_int_equal(join_st[1], DS_K_NOT_AUTHORIZED);
    assert_true(release_st[0] != DS_K_OK && release_st[1] != DS_K_OK);
    assert_true(pinned2 == pinned1);
    assert_non_null(f);
    assert_int_equal(f->h.status, DS_K_OK);
    assert_true(pinned3 == pinned0);
}

/* A restarted worker has a new worker_id and knows none of the old
 * sessions, even while it has sessions of its own. */
static void test_session_restart(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    hr_conn_t l;
    assert_int_equal(hr_open_hello(&l, &W, true), 0);
    uint64_t old_sid = l.sid;
    char old_key[128], old_id[128];
    snprintf(old_key, sizeof(old_key), "%s", l.skey);
    snprintf(old_id, sizeof(old_id), "%s", l.worker_id);
    hr_close(&l);
    assert_int_equal(dst_worker_restart(&W), 0);
    hr_conn_t n[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(hr_open_hello(&n[i], &W, i != 1), 0);
    printf("# restart: worker_id '%s' -> '%s'; old session %#llx; new sessions %#llx %#llx "
           "%#llx\n",
           old_id, n[0].worker_id, (unsigned long long)old_sid, (unsigned long long)n[0].sid,
           (unsigned long long)n[1].sid, (unsigned long long)n[2].sid);
    int unix_st = try_join(true, old_sid, old_key, NULL);
    int tcp_st = try_join(false, old_sid, NULL, NULL);
    char new_id[128];
    snprintf(new_id, sizeof(new_id), "%s", n[0].worker_id);
    for (int i = 0; i < 3; i++)
        hr_close(&n[i]);
    assert_string_not_equal(new_id, old_id);
    assert_int_equal(unix_st, DS_K_NOT_FOUND);
    assert_int_equal(tcp_st, DS_K_NOT_FOUND);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pipelined_wake, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_pipelined_wake_many, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_pipelined_in_order, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_pipelined_then_close, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_pipelined_answers_coalesce, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_emfile, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_length_wrap, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_session_ids_random, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_session_hello_fields, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_session_hijack_refused, start_worker, stop_worker),
        cmocka_unit_test_setup_teardown(test_session_pin_survives_hijack, start_worker,
                                        stop_worker),
        cmocka_unit_test_setup_teardown(test_session_restart, start_worker, stop_worker),
    };
    return dst_run_group_tests(tests, NULL, NULL);
}
