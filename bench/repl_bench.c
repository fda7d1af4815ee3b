/* repl_bench: the client side of bench/repl_bench.sh (copies of a write on
 * more than one worker, docs/replication.md). Each command prints one JSON
 * object.
 *
 *   repl_bench hot DIR A_ADDR B_ADDR SIZE ITERS
 *       per round: a key of SIZE bytes set through worker A; a local client
 *       of worker B gets it twice by zero-copy buffer (the first get pulls
 *       it from A, the second is served by B's hot copy, once B kept it);
 *       and a key set through B itself, got through B (a local get); the
 *       keys are deleted at the end of the round. p50 of each, and the
 *       second get against the local one.
 *   repl_bench set DIR ADDR SIZE ITERS
 *       set latency through a local client of the worker at ADDR.
 *
 * The first read of every key is checked against the pattern written. */
#include "bench/stats.h"
#include "common/clock.h"
#include "common/net.h"
#include "ds/kv_client.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ds_client_t *connect_to(const char *addr, const char *dir)
{
    char host[256], err[256];
    int port;
    if (ds__parse_hostport(addr, host, sizeof(host), &port, err, sizeof(err)) != 0) {
        fprintf(stderr, "repl_bench: %s\n", err);
        return NULL;
    }
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = host;
    o.port = port;
    o.transport = DS_TRANSPORT_LOCAL;
    o.unix_socket_dir = dir;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK)
        fprintf(stderr, "repl_bench: connect %s: %s\n", addr, ds_last_error());
    return c;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        if ((i & 7) == 0) x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)(x >> ((i & 7) * 8));
    }
}

/* One timed zero-copy get; checks the bytes when want is given. */
static int timed_get(ds_client_t *c, const char *key, const uint8_t *want, size_t size,
                     uint64_t *ns)
{
    ds_buffer_t *b = NULL;
    uint64_t t0 = ds__now_ns();
    ds_status_t st = ds_kv_get_buffers(c, 1, &key, 0, &b);
    *ns = ds__now_ns() - t0;
    int rc = 0;
    if (st != DS_K_OK || ds_buffer_size(b) != size) {
        fprintf(stderr, "repl_bench: get %s: %s\n", key, ds_last_error());
        rc = 1;
    } else if (want && memcmp(ds_buffer_data(b), want, size) != 0) {
        fprintf(stderr, "repl_bench: get %s: wrong bytes\n", key);
        rc = 1;
    }
    ds_buffer_release(b);
    return rc;
}

static void lat_json(const char *name, uint64_t *ns, int n, bool comma)
{
    dsb_lat_t l;
    dsb_lat_from(ns, (size_t)n, &l);
    printf("\"%s\": {\"iters\": %d, \"p50_us\": %.1f, \"p99_us\": %.1f}%s", name, n, l.p50_us,
           l.p99_us, comma ? ", " : "");
}

static double p50(uint64_t *ns, int n)
{
    dsb_lat_t l;
    dsb_lat_from(ns, (size_t)n, &l);
    return l.p50_us;
}

static int hot(const char *dir, const char *a_addr, const char *b_addr, size_t size, int iters)
{
    ds_client_t *a = connect_to(a_addr, dir), *b = connect_to(b_addr, dir);
    uint8_t *v = malloc(size);
    uint64_t *first = calloc((size_t)iters, 8), *second = calloc((size_t)iters, 8),
             *local = calloc((size_t)iters, 8);
    if (!a || !b || !v || !first || !second || !local) return 1;
    for (int i = 0; i < iters; i++) {
        char kr[64], kl[64];
        snprintf(kr, sizeof(kr), "rb-remote-%d", i);
        snprintf(kl, sizeof(kl), "rb-local-%d", i);
        fill(v, size, (uint64_t)i);
        if (ds_kv_set(a, kr, v, size, NULL) != DS_K_OK ||
            ds_kv_set(b, kl, v, size, NULL) != DS_K_OK) {
            fprintf(stderr, "repl_bench: set: %s\n", ds_last_error());
            return 1;
        }
        if (timed_get(b, kr, v, size, &first[i]) != 0) return 1;
        /* B keeps the hot copy once A (or whichever worker owns the key)
         * recorded it: one round trip after the first get returned. */
        usleep(200 * 1000);
        /* Both timed gets find the worker awake (its polling window open):
         * an untimed request first, and the two in alternating order. */
        uint64_t warm;
        if (timed_get(b, kl, NULL, size, &warm) != 0) return 1;
        if (i % 2 == 0) {
            if (timed_get(b, kr, v, size, &second[i]) != 0) return 1;
            if (timed_get(b, kl, v, size, &local[i]) != 0) return 1;
        } else {
            if (timed_get(b, kl, v, size, &local[i]) != 0) return 1;
            if (timed_get(b, kr, v, size, &second[i]) != 0) return 1;
        }
        const char *keys[] = {kr, kl};
        (void)ds_kv_del(a, 2, keys, NULL);
    }
    printf("{\"size\": %zu, ", size);
    lat_json("first_get_remote", first, iters, true);
    lat_json("second_get_hot_copy", second, iters, true);
    lat_json("local_get", local, iters, true);
    double pl = p50(local, iters), ps = p50(second, iters);
    printf("\"second_vs_local\": %.3f}\n", pl > 0 ? ps / pl : 0);
    ds_client_close(a);
    ds_client_close(b);
    free(v);
    free(first);
    free(second);
    free(local);
    return 0;
}

static int set_lat(const char *dir, const char *addr, size_t size, int iters)
{
    ds_client_t *c = connect_to(addr, dir);
    uint8_t *v = malloc(size);
    uint64_t *ns = calloc((size_t)iters, 8);
    if (!c || !v || !ns) return 1;
    fill(v, size, size);
    for (int i = 0; i < iters; i++) {
        char k[64];
        snprintf(k, sizeof(k), "rb-set-%zu-%d", size, i % 64);
        uint64_t t0 = ds__now_ns();
        ds_status_t st = ds_kv_set(c, k, v, size, NULL);
        ns[i] = ds__now_ns() - t0;
        if (st != DS_K_OK) {
            fprintf(stderr, "repl_bench: set %s: %s\n", k, ds_last_error());
            return 1;
        }
    }
    printf("{\"size\": %zu, ", size);
    lat_json("set", ns, iters, false);
    printf("}\n");
    ds_client_close(c);
    free(v);
    free(ns);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 7 && strcmp(argv[1], "hot") == 0)
        return hot(argv[2], argv[3], argv[4], strtoull(argv[5], NULL, 10), atoi(argv[6]));
    if (argc == 6 && strcmp(argv[1], "set") == 0)
        return set_lat(argv[2], argv[3], strtoull(argv[4], NULL, 10), atoi(argv[5]));
    fprintf(stderr, "usage: repl_bench hot DIR A_ADDR B_ADDR SIZE ITERS | "
                    "set DIR ADDR SIZE ITERS\n");
    return 2;
}
