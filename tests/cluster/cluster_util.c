/* Cluster test helpers (see cluster_util.h). */
#include "cluster_util.h"

#include "common/clock.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void worker_flags(const ct_cluster_t *c, char *out, size_t cap)
{
    snprintf(out, cap,
             "--etcd_address %s --cluster_name %s --node_timeout_s %d --heartbeat_interval_ms %d",
             c->etcd.address, c->name, CT_NODE_TIMEOUT_S, CT_HEARTBEAT_MS);
}

int ct_cluster_start(ct_cluster_t *c, int n, const int *arena_mb)
{
    return ct_cluster_start_with(c, n, arena_mb, NULL);
}

int ct_cluster_start_with(ct_cluster_t *c, int n, const int *arena_mb, const char *const *extra)
{
    memset(c, 0, sizeof(*c));
    if (n > CT_MAX_WORKERS) return -1;
    c->n = n;
    snprintf(c->name, sizeof(c->name), "ct%d", (int)getpid());
    if (dst_etcd_start(&c->etcd, NULL) != 0) return -1;
    char base[512];
    worker_flags(c, base, sizeof(base));
    for (int i = 0; i < n; i++) {
        char host[32], flags[768];
        snprintf(flags, sizeof(flags), "%s%s%s", base, extra && extra[i] ? " " : "",
                 extra && extra[i] ? extra[i] : "");
        snprintf(host, sizeof(host), "127.0.0.%d", 11 + i);
        c->arena_mb[i] = arena_mb ? arena_mb[i] : 64;
        if (dst_worker_start_on(&c->w[i], host, c->arena_mb[i], flags) != 0) {
            fprintf(stderr, "worker %d on %s did not start\n", i, host);
            return -1;
        }
    }
    if (ct_wait_members(c, n, 15000) < 0) {
        fprintf(stderr, "the workers did not all see %d members\n", n);
        return -1;
    }
    return 0;
}

int ct_worker_add(ct_cluster_t *c, const char *extra)
{
    if (c->n >= CT_MAX_WORKERS) return -1;
    int i = c->n;
    char base[512], host[32], flags[768];
    worker_flags(c, base, sizeof(base));
    snprintf(flags, sizeof(flags), "%s%s%s", base, extra ? " " : "", extra ? extra : "");
    snprintf(host, sizeof(host), "127.0.0.%d", 11 + i);
    c->arena_mb[i] = c->arena_mb[i] > 0 ? c->arena_mb[i] : 64; /* preset by the test, or 64 */
    if (dst_worker_start_on(&c->w[i], host, c->arena_mb[i], flags) != 0) {
        fprintf(stderr, "worker %d on %s did not start\n", i, host);
        return -1;
    }
    c->n++;
    int running = 0; /* workers stopped before (pid 0) are no members */
    for (int k = 0; k < c->n; k++)
        running += c->w[k].pid > 0;
    return ct_wait_members(c, running, 15000) < 0 ? -1 : 0;
}

int ct_worker_restart(ct_cluster_t *c, int i)
{
    return dst_worker_restart(&c->w[i]);
}

int ct_wait_members(ct_cluster_t *c, int n, int timeout_ms)
{
    uint64_t t0 = ds__now_ms();
    for (int i = 0; i < c->n; i++) {
        if (c->w[i].pid <= 0) continue;
        int left = timeout_ms - (int)(ds__now_ms() - t0);
        if (left < 0 || dst_wait_members(&c->w[i], n, left) < 0) {
            fprintf(stderr, "worker %s:%d sees %d members, not %d\n", c->w[i].host, c->w[i].port,
                    (int)dst_stat(&c->w[i], "cluster.members"), n);
            return -1;
        }
    }
    return (int)(ds__now_ms() - t0);
}

void ct_cluster_stop(ct_cluster_t *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->w[i].pid > 0) dst_worker_stop_sig(&c->w[i], SIGINT); /* no planned exit */
    dst_etcd_destroy(&c->etcd);
}

/* The cluster of ct_group_setup and ct_group_teardown. */
static ct_cluster_t *group_cluster;
static int group_n;

void ct_group_cluster(ct_cluster_t *c, int n)
{
    group_cluster = c;
    group_n = n;
}

int ct_group_setup(void **state)
{
    (void)state;
    return group_cluster ? ct_cluster_start(group_cluster, group_n, NULL) : -1;
}

int ct_group_teardown(void **state)
{
    (void)state;
    if (group_cluster) ct_cluster_stop(group_cluster);
    return 0;
}

ds_client_t *ct_client(ct_cluster_t *c, int i, ds_transport_t t)
{
    return dst_connect(&c->w[i], t);
}

ds_status_t ct_set(ds_client_t *cl, const char *key, size_t len, uint64_t seed)
{
    uint8_t *v = malloc(len);
    if (v == NULL) return DS_K_OUT_OF_MEMORY;
    dst_fill(v, len, seed);
    ds_status_t st = ds_kv_set(cl, key, v, len, NULL);
    free(v);
    return st;
}

bool ct_read_ok(ds_client_t *cl, const char *key, size_t len, uint64_t seed, int32_t wait_ms)
{
    void *v = NULL;
    size_t got = 0;
    ds_status_t st = ds_kv_get(cl, key, wait_ms, &v, &got);
    bool ok = st == DS_K_OK && got == len && dst_check(v, got, seed);
    if (!ok)
        fprintf(stderr, "read '%s': status %d (%s), %zu bytes (want %zu), pattern %s\n", key,
                (int)st, st == DS_K_OK ? "" : ds_last_error(), got, len,
                st == DS_K_OK && got == len ? "wrong" : "-");
    ds_free(v);
    return ok;
}

bool ct_read_buffer_ok(ds_client_t *cl, const char *key, size_t len, uint64_t seed)
{
    ds_buffer_t *b = NULL;
    ds_status_t st = ds_kv_get_buffers(cl, 1, &key, 0, &b);
    bool ok =
        st == DS_K_OK && b && ds_buffer_size(b) == len && dst_check(ds_buffer_data(b), len, seed);
    if (!ok)
        fprintf(stderr, "buffer '%s': status %d (%s), %zu bytes (want %zu)\n", key, (int)st,
                st == DS_K_OK ? "" : ds_last_error(), b ? ds_buffer_size(b) : 0, len);
    ds_buffer_release(b);
    return ok;
}

int ct_set_find_owner(ct_cluster_t *c, ds_client_t *cl, const char *key, size_t len, uint64_t seed)
{
    double before[CT_MAX_WORKERS];
    for (int n = 0; n < c->n; n++)
        before[n] = dst_stat(&c->w[n], "cluster.owned_keys");
    if (ct_set(cl, key, len, seed) != DS_K_OK) return -1;
    for (int n = 0; n < c->n; n++)
        if (dst_stat(&c->w[n], "cluster.owned_keys") == before[n] + 1) return n;
    return -1;
}

ds_status_t ct_get_status(ds_client_t *cl, const char *key, int32_t wait_ms)
{
    void *v = NULL;
    size_t got = 0;
    ds_status_t st = ds_kv_get(cl, key, wait_ms, &v, &got);
    ds_free(v);
    return st;
}

size_t ct_key_len(int i)
{
    return ((size_t)1024 << (i % 12)) - (size_t)(i % 5) * 8; /* 1 KiB .. 2 MiB */
}

void ct_key_name(char *out, size_t cap, const char *prefix, int i)
{
    snprintf(out, cap, "%s-%03d", prefix, i);
}

int ct_set_keys(ds_client_t *const *cl, int ncl, const char *prefix, uint64_t seed0)
{
    int n = 0;
    for (int i = 0; i < CT_NKEYS; i++) {
        char key[64];
        ct_key_name(key, sizeof(key), prefix, i);
        ds_status_t st = ct_set(cl[i % ncl], key, ct_key_len(i), seed0 + (uint64_t)i);
        if (st == DS_K_OK)
            n++;
        else
            fprintf(stderr, "set '%s' through client %d: status %d (%s)\n", key, i % ncl, (int)st,
                    ds_last_error());
    }
    return n;
}

int ct_count_keys(ds_client_t *cl, const char *prefix, uint64_t seed0, bool *ok, const char *who)
{
    int n = 0, shown = 0;
    for (int i = 0; i < CT_NKEYS; i++) {
        char key[64];
        ct_key_name(key, sizeof(key), prefix, i);
        bool good = cl && ct_read_ok(cl, key, ct_key_len(i), seed0 + (uint64_t)i, 0);
        if (ok) ok[i] = good;
        if (good)
            n++;
        else if (shown++ < 5)
            fprintf(stderr, "%s: key %s did not read back\n", who, key);
    }
    return n;
}

int ct_count_on(ct_cluster_t *c, int w, const char *prefix, uint64_t seed0)
{
    char who[32];
    snprintf(who, sizeof(who), "worker %d", w);
    ds_client_t *cl = ct_client(c, w, w % 2 ? DS_TRANSPORT_TCP : DS_TRANSPORT_LOCAL);
    if (cl == NULL) return -1;
    int ok = ct_count_keys(cl, prefix, seed0, NULL, who);
    ds_client_close(cl);
    return ok;
}

void *ct_reader_main(void *arg)
{
    ct_reader_t *r = arg;
    size_t (*key_len)(int) = r->key_len ? r->key_len : ct_key_len;
    ds_client_t *cl = ct_client(r->c, r->worker, DS_TRANSPORT_TCP);
    if (cl == NULL) {
        r->misses = -1;
        return NULL;
    }
    for (int i = 0; !atomic_load(&r->stop) && r->reads < 2000000; i = (i + 1) % CT_NKEYS) {
        char key[64];
        ct_key_name(key, sizeof(key), r->prefix, i);
        r->reads++;
        if (!ct_read_ok(cl, key, key_len(i), r->seed0 + (uint64_t)i, 0) && r->misses++ == 0)
            snprintf(r->first_miss, sizeof(r->first_miss), "%s", key);
    }
    ds_client_close(cl);
    return NULL;
}

void *ct_writer_main(void *arg)
{
    ct_writer_t *w = arg;
    ds_client_t *c = w->connect ? w->connect(w->node) : ct_client(w->c, w->node, DS_TRANSPORT_TCP);
    w->st = c ? ct_set(c, w->key, w->len, w->seed) : DS_K_RUNTIME_ERROR;
    ds_client_close(c);
    atomic_store(&w->done, true);
    return NULL;
}

bool ct_writer_finished(ct_writer_t *w, int ms)
{
    for (int i = 0; i < ms / 20 && !atomic_load(&w->done); i++)
        usleep(20000);
    return atomic_load(&w->done);
}

int ct_dscli_stop(dst_worker_t *w, const char *netns, char *out, size_t cap)
{
    char bin[512], in_ns[128] = "", cmd[1400];
    dst_build_path("src/cli/dscli", bin, sizeof(bin));
    if (netns) snprintf(in_ns, sizeof(in_ns), "/usr/sbin/ip netns exec %s ", netns);
    snprintf(cmd, sizeof(cmd),
             "%senv -u DS_UNIX_SOCKET_DIR %s stop -w %s:%d --unix_socket_dir %s -t 60 2>&1", in_ns,
             bin, w->host, w->port, w->sockdir);
    FILE *p = popen(cmd, "r");
    if (p == NULL) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    fprintf(stderr, "$ dscli stop -w %s:%d%s%s\n%s", w->host, w->port, netns ? " in " : "",
            netns ? netns : "", out);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char tail[700];
        snprintf(tail, sizeof(tail), "tail -n 40 %s >&2", w->logpath);
        if (system(tail) != 0) fprintf(stderr, "(no log at %s)\n", w->logpath);
    }
    /* Reaps it: it has exited, cleanly (under ASan: without a report). */
    int ws = dst_worker_stop(w);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        fprintf(stderr, "worker %s:%d exited with status 0x%x\n", w->host, w->port, ws);
        return -2;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
