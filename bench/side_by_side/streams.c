/* The streams phase: this project's stream cache (producer, consumers on
 * STREAM subscriptions, acks) next to Redis Streams (XADD, XREADGROUP,
 * XACK), with the machine's Unix-socket ping-pong measured in the same run.
 *
 * Every system runs the same two loops, one element per request on both
 * sides (no pipelining, no batching of sends):
 *  - throughput: a producer thread sends N elements as fast as the server
 *    takes them; each consumer thread receives whatever is there (up to 256
 *    at a time) and acknowledges the last one received. The rate is N over
 *    the time from the first send until the last consumer has every element.
 *  - latency: the producer stamps the send time into an element, sends it,
 *    and waits until every consumer has received it before the next one; a
 *    consumer's sample is its receive time minus the stamp (one clock: the
 *    threads share the process).
 * Four consumers are four subscriptions (Redis: four consumer groups of one
 * consumer each), so each consumer receives every element: the fan-out that
 * a pipeline edge with several readers needs.
 *
 * Targets, as ratios from this run: local (shared memory over the worker's
 * Unix socket, against redis-unix) 1 KiB element throughput at least 3x
 * Redis, TCP at least 1x, and the local producer-to-consumer p50 for 1 KiB
 * with one consumer at most 2x the machine's 1 KiB Unix-socket ping-pong.
 * The results go to streams_bench.{txt,json} in the run's results folder. */
#include "bench/side_by_side/sbs.h"

#include "bench/limits.h"
#include "common/clock.h"
#include "ds/kv_client.h"
#include "ds/stream_client.h"

#include <hiredis/hiredis.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONSUMERS 4
#define RECV_BATCH 256
#define RECV_TIMEOUT_MS 1000
/* A measurement gives up when no element arrives for this long. */
#define STALL_MS 20000

typedef struct {
    sbs_kind_t kind;
    size_t size;
    int consumers;
    bool latency;
    /* results */
    double elems_per_s;
    dsb_lat_t lat;
} st_run_t;

/* One consumer: its own connection (ds client or Redis connection). */
typedef struct {
    const sbs_env_t *env;
    sbs_kind_t kind;
    int idx;
    const char *stream;
    size_t size;
    long n;              /* elements to receive */
    bool latency;        /* record stamp latencies into ns[] */
    uint64_t *ns;        /* n samples when latency */
    atomic_long *got;    /* latency mode: elements received, summed over the consumers */
    pthread_mutex_t *mu; /* with cv: wakes the producer when got grows */
    pthread_cond_t *cv;
    ds_client_t *dc;
    ds_consumer_t *cs;
    redisContext *rc;
    long received;
    uint64_t done_ns;
    atomic_int failed; /* set by any thread, read by the producer */
} st_cons_t;

static int ds_open(const sbs_env_t *env, sbs_kind_t kind, ds_client_t **out)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = env->worker->host;
    o.port = env->worker->port;
    o.transport = kind == SBS_DS_LOCAL ? DS_TRANSPORT_LOCAL : DS_TRANSPORT_TCP;
    if (ds_client_connect(&o, out) != DS_K_OK) {
        fprintf(stderr, "sbs streams: %s connect: %s\n", sbs_kind_name(kind), ds_last_error());
        return -1;
    }
    return 0;
}

static redisContext *redis_open(const sbs_env_t *env, sbs_kind_t kind)
{
    struct timeval tv = {5, 0};
    redisContext *c = kind == SBS_REDIS_UNIX
                          ? redisConnectUnixWithTimeout(env->redis->unix_path, tv)
                          : redisConnectWithTimeout(env->redis->host, env->redis->port, tv);
    if (c == NULL || c->err) {
        fprintf(stderr, "sbs streams: redis connect: %s\n", c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    struct timeval io = {30, 0};
    redisSetTimeout(c, io);
    return c;
}

/* Runs a Redis command given as argv; returns the reply or NULL (message on
 * stderr) on a connection error or an error reply. */
static redisReply *rcmd(redisContext *c, int argc, const char **argv, const size_t *lens)
{
    redisReply *r = redisCommandArgv(c, argc, argv, lens);
    if (r == NULL) {
        fprintf(stderr, "sbs streams: redis %s: %s\n", argv[0], c->errstr);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "sbs streams: redis %s: %s\n", argv[0], r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static int rsimple(redisContext *c, int argc, const char **argv)
{
    redisReply *r = rcmd(c, argc, argv, NULL);
    if (r == NULL) return -1;
    freeReplyObject(r);
    return 0;
}

static void record(st_cons_t *c, const uint8_t *p, size_t len)
{
    if (len != c->size) {
        fprintf(stderr, "sbs streams: consumer %d got %zu bytes, expected %zu\n", c->idx, len,
                c->size);
        c->failed = 1;
        return;
    }
    if (c->latency && c->received < c->n) {
        uint64_t stamp;
        memcpy(&stamp, p, sizeof(stamp));
        c->ns[c->received] = ds__now_ns() - stamp;
    }
    c->received++;
}

/* Latency mode: tells the producer that n more elements were received and
 * acknowledged. The producer sends the next element only then, so that
 * element finds the consumer waiting in its next receive, not still busy
 * acknowledging the last (which would add the ack's round trip to it). */
static void signal_got(st_cons_t *c, long n)
{
    if (!c->latency) return;
    pthread_mutex_lock(c->mu);
    atomic_fetch_add(c->got, n);
    pthread_cond_signal(c->cv);
    pthread_mutex_unlock(c->mu);
}

static void *ds_consumer_thread(void *arg)
{
    st_cons_t *c = arg;
    uint64_t last = ds__now_ms();
    while (c->received < c->n && !c->failed) {
        ds_element_t *els = NULL;
        size_t n = 0;
        ds_status_t st = ds_consumer_receive(c->cs, c->latency ? 1 : 0, RECV_TIMEOUT_MS, &els, &n);
        if (st != DS_K_OK) {
            fprintf(stderr, "sbs streams: receive: %s\n", ds_last_error());
            c->failed = 1;
            break;
        }
        if (n == 0) {
            if (ds__now_ms() - last > STALL_MS) {
                fprintf(stderr, "sbs streams: consumer %d stalled at %ld of %ld\n", c->idx,
                        c->received, c->n);
                c->failed = 1;
            }
            continue;
        }
        last = ds__now_ms();
        for (size_t i = 0; i < n; i++)
            record(c, els[i].ptr, els[i].size);
        uint64_t id = els[n - 1].id;
        ds_elements_free(els);
        if (ds_consumer_ack(c->cs, id) != DS_K_OK) {
            fprintf(stderr, "sbs streams: ack: %s\n", ds_last_error());
            c->failed = 1;
        }
        signal_got(c, (long)n);
    }
    c->done_ns = ds__now_ns();
    return NULL;
}

static void *redis_consumer_thread(void *arg)
{
    st_cons_t *c = arg;
    char group[16], name[16], count[16], block[16];
    snprintf(group, sizeof(group), "g%d", c->idx);
    snprintf(name, sizeof(name), "c%d", c->idx);
    snprintf(count, sizeof(count), "%d", c->latency ? 1 : RECV_BATCH);
    snprintf(block, sizeof(block), "%d", RECV_TIMEOUT_MS);
    const char *rd[] = {"XREADGROUP", "GROUP", group,     name,      "COUNT", count,
                        "BLOCK",      block,   "STREAMS", c->stream, ">"};
    const char *ack[2 + 3 + RECV_BATCH];
    size_t acklen[2 + 3 + RECV_BATCH];
    uint64_t last = ds__now_ms();
    while (c->received < c->n && !c->failed) {
        redisReply *r = rcmd(c->rc, 11, rd, NULL);
        if (r == NULL) {
            c->failed = 1;
            break;
        }
        if (r->type == REDIS_REPLY_NIL || r->elements == 0) {
            freeReplyObject(r);
            if (ds__now_ms() - last > STALL_MS) {
                fprintf(stderr, "sbs streams: redis consumer %d stalled\n", c->idx);
                c->failed = 1;
            }
            continue;
        }
        last = ds__now_ms();
        /* [[stream, [[id, [field, value]], ...]]] */
        redisReply *entries = r->element[0]->element[1];
        int na = 0;
        ack[na] = "XACK", acklen[na++] = 4;
        ack[na] = c->stream, acklen[na++] = strlen(c->stream);
        ack[na] = group, acklen[na++] = strlen(group);
        for (size_t i = 0; i < entries->elements && na < (int)(sizeof(ack) / sizeof(ack[0])); i++) {
            redisReply *e = entries->element[i];
            redisReply *fv = e->element[1];
            if (fv->elements < 2) {
                c->failed = 1;
                break;
            }
            record(c, (const uint8_t *)fv->element[1]->str, fv->element[1]->len);
            ack[na] = e->element[0]->str, acklen[na++] = e->element[0]->len;
        }
        redisReply *a = rcmd(c->rc, na, ack, acklen);
        if (a == NULL)
            c->failed = 1;
        else
            freeReplyObject(a);
        signal_got(c, (long)entries->elements);
        freeReplyObject(r);
    }
    c->done_ns = ds__now_ns();
    return NULL;
}

/* One measurement: sets up the stream and consumers, runs the producer on
 * this thread, and fills r. */
static int st_measure(const sbs_opts_t *o, const sbs_env_t *env, st_run_t *r, long n, int seq)
{
    (void)o;
    bool ds = sbs_kind_is_ds(r->kind);
    char stream[64];
    snprintf(stream, sizeof(stream), "sbs-stream-%d-%d", (int)getpid(), seq);
    st_cons_t cons[MAX_CONSUMERS];
    memset(cons, 0, sizeof(cons));
    atomic_long got = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    uint8_t *val = malloc(r->size);
    uint64_t *ns = r->latency ? calloc((size_t)n * (size_t)r->consumers, sizeof(uint64_t)) : NULL;
    if (val == NULL || (r->latency && ns == NULL)) {
        free(val);
        free(ns);
        return -1;
    }
    sbs_warm(val, r->size, 0x5a);
    int rc = -1, started = 0;
    uint64_t t0 = 0;
    bool send_failed = false;
    ds_client_t *pc = NULL;
    ds_producer_t *prod = NULL;
    redisContext *pr = NULL;

    for (int i = 0; i < r->consumers; i++) {
        st_cons_t *c = &cons[i];
        *c = (st_cons_t){.env = env,
                         .kind = r->kind,
                         .idx = i,
                         .stream = stream,
                         .size = r->size,
                         .n = n,
                         .latency = r->latency,
                         .ns = ns ? ns + (size_t)i * (size_t)n : NULL,
                         .got = &got,
                         .mu = &mu,
                         .cv = &cv};
        if (ds) {
            char sub[16];
            snprintf(sub, sizeof(sub), "sub%d", i);
            if (ds_open(env, r->kind, &c->dc) != 0) goto out;
            if (ds_stream_subscribe(c->dc, stream, sub, DS_SUB_STREAM, &c->cs) != DS_K_OK) {
                fprintf(stderr, "sbs streams: subscribe: %s\n", ds_last_error());
                goto out;
            }
        } else {
            c->rc = redis_open(env, r->kind);
            if (c->rc == NULL) goto out;
            char group[16];
            snprintf(group, sizeof(group), "g%d", i);
            const char *mk[] = {"XGROUP", "CREATE", stream, group, "$", "MKSTREAM"};
            if (rsimple(c->rc, 6, mk) != 0) goto out;
        }
    }
    if (ds) {
        if (ds_open(env, r->kind, &pc) != 0) goto out;
        ds_producer_conf_t conf = DS_PRODUCER_CONF_INIT;
        conf.delay_flush_time_ms = 0; /* wake the consumer at once, as XADD does */
        if (ds_stream_create_producer(pc, stream, &conf, &prod) != DS_K_OK) {
            fprintf(stderr, "sbs streams: create_producer: %s\n", ds_last_error());
            goto out;
        }
    } else {
        pr = redis_open(env, r->kind);
        if (pr == NULL) goto out;
    }
    pthread_t tid[MAX_CONSUMERS];
    for (; started < r->consumers; started++)
        if (pthread_create(&tid[started], NULL, ds ? ds_consumer_thread : redis_consumer_thread,
                           &cons[started]) != 0)
            goto join;

    const char *xadd[] = {"XADD", stream, "*", "d", (const char *)val};
    size_t xlen[] = {4, strlen(stream), 1, 1, r->size};
    t0 = ds__now_ns();
    for (long i = 0; i < n && !send_failed; i++) {
        if (r->latency) {
            uint64_t stamp = ds__now_ns();
            memcpy(val, &stamp, sizeof(stamp));
        }
        if (ds) {
            if (ds_producer_send(prod, val, r->size, -1) != DS_K_OK) {
                fprintf(stderr, "sbs streams: send: %s\n", ds_last_error());
                send_failed = true;
            }
        } else {
            redisReply *x = rcmd(pr, 5, xadd, xlen);
            if (x == NULL)
                send_failed = true;
            else
                freeReplyObject(x);
        }
        if (r->latency) {
            /* Every consumer has this element before the next is sent; the
             * producer sleeps meanwhile (a spinning producer would take a
             * core from the consumers and the server on a small machine). */
            long want = (i + 1) * r->consumers;
            uint64_t deadline = ds__now_ms() + STALL_MS;
            pthread_mutex_lock(&mu);
            while (atomic_load(&got) < want && ds__now_ms() < deadline) {
                bool bad = false;
                for (int k = 0; k < r->consumers; k++)
                    bad |= cons[k].failed != 0;
                if (bad) break;
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 100 * 1000 * 1000;
                if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
                pthread_cond_timedwait(&cv, &mu, &ts);
            }
            pthread_mutex_unlock(&mu);
            if (atomic_load(&got) < want) send_failed = true;
        }
    }
    if (send_failed)
        for (int k = 0; k < r->consumers; k++)
            cons[k].failed = 1;
join:
    for (int k = 0; k < started; k++)
        pthread_join(tid[k], NULL);
    if (started == r->consumers && !send_failed) {
        uint64_t end = t0;
        bool bad = false;
        for (int k = 0; k < r->consumers; k++) {
            if (cons[k].failed || cons[k].received != n) bad = true;
            if (cons[k].done_ns > end) end = cons[k].done_ns;
        }
        if (!bad) {
            /* A latency run's rate is paced by the round trips: not reported. */
            if (!r->latency) r->elems_per_s = (double)n / ((double)(end - t0) / 1e9);
            if (r->latency) dsb_lat_from(ns, (size_t)n * (size_t)r->consumers, &r->lat);
            rc = 0;
        }
    }
out:
    for (int i = 0; i < r->consumers; i++) {
        if (cons[i].cs) ds_consumer_close(cons[i].cs);
        if (cons[i].dc) ds_client_close(cons[i].dc);
        if (cons[i].rc) redisFree(cons[i].rc);
    }
    if (prod) ds_producer_close(prod);
    if (pc) {
        ds_stream_delete(pc, stream); /* best effort: auto_cleanup is off */
        ds_client_close(pc);
    }
    if (pr) {
        const char *del[] = {"DEL", stream};
        rsimple(pr, 2, del);
        redisFree(pr);
    }
    free(val);
    free(ns);
    return rc;
}

static const char *lat_note(const st_run_t *r)
{
    return r->latency ? "latency" : "throughput";
}

int sbs_phase_streams(const sbs_opts_t *o, const sbs_env_t *env)
{
    static const size_t sizes[] = {SBS_KIB, 64 * SBS_KIB};
    static const int ncons[] = {1, 4};
    static const sbs_kind_t kinds[] = {SBS_DS_LOCAL, SBS_REDIS_UNIX, SBS_DS_REMOTE, SBS_REDIS_TCP};
    enum { NRUNS = 2 * 2 * 2 * 4 };
    st_run_t runs[NRUNS];
    int nr = 0, seq = 0, failed = 0;
    double load0[3] = {0};
    getloadavg(load0, 3);

    /* The ping-pong is measured at the start and again just before the
     * latency runs; the faster of the two is the limit (a burst of load
     * from elsewhere during one of them would otherwise loosen the target). */
    int ping_iters = o->quick ? 2000 : 20000;
    dsb_lat_t ping, ping2;
    if (dsb_unix_rtt(SBS_KIB, ping_iters, &ping) != 0) return -1;
    printf("  streams: unix ping-pong 1 KiB p50 %.1f us p99 %.1f us\n", ping.p50_us, ping.p99_us);

    for (int lat = 0; lat < 2; lat++) {
        if (lat == 1) {
            if (dsb_unix_rtt(SBS_KIB, ping_iters, &ping2) != 0) return -1;
            printf("  streams: unix ping-pong 1 KiB p50 %.1f us p99 %.1f us (again)\n",
                   ping2.p50_us, ping2.p99_us);
            if (ping2.p50_us < ping.p50_us) ping = ping2;
        }
        for (size_t si = 0; si < 2; si++)
            for (size_t ci = 0; ci < 2; ci++)
                for (size_t ki = 0; ki < 4; ki++) {
                    st_run_t *r = &runs[nr++];
                    *r = (st_run_t){.kind = kinds[ki],
                                    .size = sizes[si],
                                    .consumers = ncons[ci],
                                    .latency = lat != 0,
                                    .elems_per_s = NAN};
                    r->lat.p50_us = r->lat.p99_us = NAN;
                    long n = lat                    ? (o->quick ? 300 : 2000)
                             : sizes[si] == SBS_KIB ? (o->quick ? 5000 : 50000)
                                                    : (o->quick ? 500 : 3000);
                    if (st_measure(o, env, r, n, seq++) != 0) {
                        fprintf(stderr, "sbs streams: %s %s %zu B x%d failed\n",
                                sbs_kind_name(r->kind), lat_note(r), r->size, r->consumers);
                        failed++;
                        continue;
                    }
                    if (r->latency)
                        printf("  streams %-10s latency    %6zu B x%d: p50 %8.1f us  p99 %8.1f "
                               "us\n",
                               sbs_kind_name(r->kind), r->size, r->consumers, r->lat.p50_us,
                               r->lat.p99_us);
                    else
                        printf("  streams %-10s throughput %6zu B x%d: %10.0f elements/s\n",
                               sbs_kind_name(r->kind), r->size, r->consumers, r->elems_per_s);
                }
    }
    double load1[3] = {0};
    getloadavg(load1, 3);

    /* The rows next to their Redis peers, and the targets. */
    char txt[600], jsn[600];
    snprintf(txt, sizeof(txt), "%s/streams_bench.txt", o->out_dir);
    snprintf(jsn, sizeof(jsn), "%s/streams_bench.json", o->out_dir);
    FILE *ft = fopen(txt, "w"), *fj = fopen(jsn, "w");
    if (ft == NULL || fj == NULL) {
        if (ft) fclose(ft);
        if (fj) fclose(fj);
        return -1;
    }
    FILE *outs[2] = {stdout, ft};
    for (int f = 0; f < 2; f++) {
        FILE *w = outs[f];
        fprintf(w,
                "streams: this project's stream cache vs Redis Streams (XADD / XREADGROUP / "
                "XACK), one element per request, %s run (sbs --phases streams)\n"
                "load average before %.2f %.2f %.2f, after %.2f %.2f %.2f (2 shared cores)\n"
                "unix ping-pong 1 KiB (the faster of two measurements): p50 %.1f us, p99 %.1f "
                "us\n\n",
                o->quick ? "quick" : "full", load0[0], load0[1], load0[2], load1[0], load1[1],
                load1[2], ping.p50_us, ping.p99_us);
        fprintf(w, "%-11s %-10s %7s %4s %14s %10s %10s %9s\n", "system", "measure", "size", "cons",
                "elements/s", "p50 us", "p99 us", "vs redis");
    }
    fprintf(fj,
            "{\n  \"load_before\": [%.2f, %.2f, %.2f],\n  \"load_after\": [%.2f, %.2f, %.2f],\n",
            load0[0], load0[1], load0[2], load1[0], load1[1], load1[2]);
    fprintf(fj, "  \"unix_rtt_1k_p50_us\": %.2f,\n  \"unix_rtt_1k_p99_us\": %.2f,\n  \"rows\": [\n",
            ping.p50_us, ping.p99_us);
    for (int i = 0; i < nr; i++) {
        st_run_t *r = &runs[i];
        /* The Redis peer is the next run (local -> unix, remote -> tcp). */
        const st_run_t *peer = sbs_kind_is_ds(r->kind) ? &runs[i + 1] : NULL;
        double vs = NAN;
        if (peer)
            vs = r->latency ? r->lat.p50_us / peer->lat.p50_us : r->elems_per_s / peer->elems_per_s;
        for (int f = 0; f < 2; f++)
            fprintf(outs[f], "%-11s %-10s %7zu %4d %14.0f %10.1f %10.1f %9.2f\n",
                    sbs_kind_name(r->kind), lat_note(r), r->size, r->consumers, r->elems_per_s,
                    r->lat.p50_us, r->lat.p99_us, vs);
        fprintf(fj,
                "    {\"system\": \"%s\", \"measure\": \"%s\", \"size\": %zu, \"consumers\": %d, "
                "\"elements_per_s\": %.1f, \"p50_us\": %.2f, \"p99_us\": %.2f, \"vs_redis\": "
                "%.3f}%s\n",
                sbs_kind_name(r->kind), lat_note(r), r->size, r->consumers,
                isnan(r->elems_per_s) ? -1.0 : r->elems_per_s,
                isnan(r->lat.p50_us) ? -1.0 : r->lat.p50_us,
                isnan(r->lat.p99_us) ? -1.0 : r->lat.p99_us, isnan(vs) ? -1.0 : vs,
                i + 1 < nr ? "," : "");
    }
    fprintf(fj, "  ],\n  \"targets\": [\n");

    /* runs[] order: latency-major, then size, consumers, kind (4 kinds). */
#define RUN(lat, si, ci, ki) (&runs[(((lat)*2 + (si)) * 2 + (ci)) * 4 + (ki)])
    typedef struct {
        char what[128];
        double value, limit;
        bool at_least;
    } target_t;
    target_t t[5];
    int nt = 0;
    for (int ci = 0; ci < 2; ci++) {
        const st_run_t *a = RUN(0, 0, ci, 0), *b = RUN(0, 0, ci, 1);
        t[nt] = (target_t){"", a->elems_per_s / b->elems_per_s, 3.0, true};
        snprintf(t[nt++].what, sizeof(t[0].what),
                 "local 1 KiB throughput, %d consumer(s): ds-local / redis-unix", ncons[ci]);
        a = RUN(0, 0, ci, 2), b = RUN(0, 0, ci, 3);
        t[nt] = (target_t){"", a->elems_per_s / b->elems_per_s, 1.0, true};
        snprintf(t[nt++].what, sizeof(t[0].what),
                 "TCP 1 KiB throughput, %d consumer(s): ds-remote / redis-tcp", ncons[ci]);
    }
    t[nt] = (target_t){"", RUN(1, 0, 0, 0)->lat.p50_us / ping.p50_us, 2.0, false};
    snprintf(t[nt++].what, sizeof(t[0].what),
             "local 1 KiB producer-to-consumer p50 / unix ping-pong p50 (1 consumer)");
    for (int f = 0; f < 2; f++)
        fprintf(outs[f], "\ntargets:\n");
    for (int i = 0; i < nt; i++) {
        bool met = !isnan(t[i].value) &&
                   (t[i].at_least ? t[i].value >= t[i].limit : t[i].value <= t[i].limit);
        for (int f = 0; f < 2; f++)
            fprintf(outs[f], "  %-74s %6.2fx (%s %.0fx) %s\n", t[i].what, t[i].value,
                    t[i].at_least ? ">=" : "<=", t[i].limit, met ? "met" : "MISSED");
        fprintf(fj, "    {\"what\": \"%s\", \"ratio\": %.3f, \"limit\": %.1f, \"met\": %s}%s\n",
                t[i].what, isnan(t[i].value) ? -1.0 : t[i].value, t[i].limit,
                met ? "true" : "false", i + 1 < nt ? "," : "");
    }
    fprintf(fj, "  ]\n}\n");
    fclose(ft);
    fclose(fj);
    printf("  streams: results in %s and %s\n", txt, jsn);
    return failed ? -1 : 0;
}
