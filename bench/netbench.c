/* netbench: the pieces of bench/cluster_bench.sh that run inside network
 * namespaces. Raw TCP limits between two hosts (a server that streams or
 * echoes, a client that times it) and the store's get of one key from a
 * given worker, timed the same way, so that the script can print the store
 * against the link it runs over. Each client prints one JSON object.
 *
 *   netbench serve HOST PORT                        stream / echo server (runs until killed)
 *   netbench stream HOST PORT SIZE ITERS            server -> client, GB/s at the median
 *   netbench rtt HOST PORT MSG ITERS                ping-pong of MSG bytes, p50/p99 us
 *   netbench put [-t local|tcp] [-d DIR] HOST:PORT KEY SIZE
 *   netbench get [-t local|tcp] [-d DIR] HOST:PORT KEY SIZE ITERS
 *
 * get reads by zero-copy buffer on a local client (the worker hands over the
 * arena range it pulled into) and into a warm buffer over TCP; the first read
 * is checked against the pattern put wrote. */
#include "bench/stats.h"
#include "common/clock.h"
#include "common/net.h"
#include "ds/kv_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void pattern(uint8_t *p, size_t n, uint64_t seed, bool check, bool *ok)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        uint8_t b = (uint8_t)(x >> ((i & 7) * 8));
        if (!check)
            p[i] = b;
        else if (p[i] != b) {
            *ok = false;
            return;
        }
    }
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- raw TCP ---- */

static void serve_conn(int fd)
{
    nodelay(fd);
    uint8_t hdr[13];
    if (ds__read_full(fd, hdr, sizeof(hdr), 0) != 0) _exit(0);
    uint64_t size;
    uint32_t iters;
    memcpy(&size, hdr + 1, 8);
    memcpy(&iters, hdr + 9, 4);
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL) _exit(1);
    memset(buf, 7, size);
    if (hdr[0] == 'S') {
        for (uint32_t i = 0; i < iters; i++)
            if (ds__write_full(fd, buf, size, 0) != 0) break;
    } else {
        while (ds__read_full(fd, buf, size, 0) == 0)
            if (ds__write_full(fd, buf, size, 0) != 0) break;
    }
    _exit(0);
}

static int serve(const char *host, int port)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (lfd < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
        bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 16) != 0) {
        perror("netbench serve");
        return 1;
    }
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue;
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(lfd);
            serve_conn(fd);
        }
        close(fd);
    }
}

static int client_conn(const char *host, int port, char mode, uint64_t size, uint32_t iters)
{
    char err[256];
    int fd = ds__tcp_connect(host, port, 5000, err, sizeof(err));
    if (fd < 0) {
        fprintf(stderr, "netbench: %s\n", err);
        return -1;
    }
    nodelay(fd);
    uint8_t hdr[13];
    hdr[0] = (uint8_t)mode;
    memcpy(hdr + 1, &size, 8);
    memcpy(hdr + 9, &iters, 4);
    if (ds__write_full(fd, hdr, sizeof(hdr), 0) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int stream(const char *host, int port, uint64_t size, int iters)
{
    int fd = client_conn(host, port, 'S', size, (uint32_t)iters);
    uint8_t *buf = malloc(size);
    uint64_t *t = calloc((size_t)iters, sizeof(*t));
    if (fd < 0 || buf == NULL || t == NULL) return 1;
    memset(buf, 0, size); /* warm, like the store's get_into buffer */
    int done = 0;
    for (; done < iters; done++) {
        uint64_t t0 = ds__now_ns();
        if (ds__read_full(fd, buf, size, 0) != 0) break;
        t[done] = ds__now_ns() - t0;
    }
    close(fd);
    if (done == 0) return 1;
    dsb_lat_t l;
    dsb_lat_from(t, (size_t)done, &l);
    printf("{\"size\": %llu, \"iters\": %d, \"p50_us\": %.1f, \"gbps\": %.3f}\n",
           (unsigned long long)size, done, l.p50_us, (double)size / (l.p50_us * 1e3));
    return 0;
}

static int rtt(const char *host, int port, uint64_t msg, int iters)
{
    int fd = client_conn(host, port, 'R', msg, 0);
    uint8_t *buf = calloc(1, msg);
    uint64_t *t = calloc((size_t)iters, sizeof(*t));
    if (fd < 0 || buf == NULL || t == NULL) return 1;
    for (int i = 0; i < iters; i++) {
        uint64_t t0 = ds__now_ns();
        if (ds__write_full(fd, buf, msg, 0) != 0 || ds__read_full(fd, buf, msg, 0) != 0) return 1;
        t[i] = ds__now_ns() - t0;
    }
    close(fd);
    dsb_lat_t l;
    dsb_lat_from(t, (size_t)iters, &l);
    printf("{\"size\": %llu, \"iters\": %d, \"p50_us\": %.1f, \"p99_us\": %.1f}\n",
           (unsigned long long)msg, iters, l.p50_us, l.p99_us);
    return 0;
}

/* ---- the store ---- */

static ds_client_t *store_connect(const char *addr, ds_transport_t t, const char *dir)
{
    char host[256], err[256];
    int port;
    if (ds__parse_hostport(addr, host, sizeof(host), &port, err, sizeof(err)) != 0) {
        fprintf(stderr, "netbench: %s\n", err);
        return NULL;
    }
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = host;
    o.port = port;
    o.transport = t;
    o.unix_socket_dir = dir;
    ds_client_t *c = NULL;
    if (ds_client_connect(&o, &c) != DS_K_OK)
        fprintf(stderr, "netbench: connect %s: %s\n", addr, ds_last_error());
    return c;
}

static int put(ds_client_t *c, const char *key, uint64_t size)
{
    uint8_t *v = malloc(size);
    if (v == NULL) return 1;
    pattern(v, size, size, false, NULL);
    ds_status_t st = ds_kv_set(c, key, v, size, NULL);
    free(v);
    if (st != DS_K_OK) fprintf(stderr, "netbench: set %s: %s\n", key, ds_last_error());
    return st == DS_K_OK ? 0 : 1;
}

static int get(ds_client_t *c, const char *key, uint64_t size, int iters, bool local)
{
    uint8_t *buf = local ? NULL : malloc(size);
    uint64_t *t = calloc((size_t)iters, sizeof(*t));
    if ((!local && buf == NULL) || t == NULL) return 1;
    if (buf) memset(buf, 0, size);
    bool ok = true;
    for (int i = 0; i < iters && ok; i++) {
        uint64_t t0 = ds__now_ns();
        ds_status_t st;
        if (local) {
            ds_buffer_t *b = NULL;
            st = ds_kv_get_buffers(c, 1, &key, 0, &b);
            t[i] = ds__now_ns() - t0;
            if (st == DS_K_OK && i == 0) {
                ok = ds_buffer_size(b) == size;
                if (ok) pattern((uint8_t *)ds_buffer_data(b), size, size, true, &ok);
            }
            ds_buffer_release(b);
        } else {
            size_t len = 0;
            st = ds_kv_get_into(c, key, 0, buf, size, &len);
            t[i] = ds__now_ns() - t0;
            if (st == DS_K_OK && i == 0) {
                ok = len == size;
                if (ok) pattern(buf, size, size, true, &ok);
            }
        }
        if (st != DS_K_OK) {
            fprintf(stderr, "netbench: get %s: %s\n", key, ds_last_error());
            return 1;
        }
    }
    free(buf);
    if (!ok) {
        fprintf(stderr, "netbench: get %s: wrong bytes\n", key);
        return 1;
    }
    dsb_lat_t l;
    dsb_lat_from(t, (size_t)iters, &l);
    printf("{\"size\": %llu, \"iters\": %d, \"p50_us\": %.1f, \"p99_us\": %.1f, \"gbps\": %.3f}\n",
           (unsigned long long)size, iters, l.p50_us, l.p99_us, (double)size / (l.p50_us * 1e3));
    free(t);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: netbench serve HOST PORT | stream HOST PORT SIZE ITERS | "
                    "rtt HOST PORT MSG ITERS |\n"
                    "       put [-t local|tcp] [-d DIR] HOST:PORT KEY SIZE |\n"
                    "       get [-t local|tcp] [-d DIR] HOST:PORT KEY SIZE ITERS\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage();
    const char *cmd = argv[1];
    if (strcmp(cmd, "serve") == 0 && argc == 4) return serve(argv[2], atoi(argv[3]));
    if (strcmp(cmd, "stream") == 0 && argc == 6)
        return stream(argv[2], atoi(argv[3]), strtoull(argv[4], NULL, 10), atoi(argv[5]));
    if (strcmp(cmd, "rtt") == 0 && argc == 6)
        return rtt(argv[2], atoi(argv[3]), strtoull(argv[4], NULL, 10), atoi(argv[5]));
    if (strcmp(cmd, "put") != 0 && strcmp(cmd, "get") != 0) return usage();
    ds_transport_t t = DS_TRANSPORT_TCP;
    const char *dir = NULL;
    int i = 2;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (strcmp(argv[i], "-t") == 0)
            t = strcmp(argv[i + 1], "local") == 0 ? DS_TRANSPORT_LOCAL : DS_TRANSPORT_TCP;
        else if (strcmp(argv[i], "-d") == 0)
            dir = argv[i + 1];
        else
            return usage();
    }
    int want = strcmp(cmd, "put") == 0 ? 3 : 4;
    if (argc - i != want) return usage();
    ds_client_t *c = store_connect(argv[i], t, dir);
    if (c == NULL) return 1;
    uint64_t size = strtoull(argv[i + 2], NULL, 10);
    int rc = want == 3 ? put(c, argv[i + 1], size)
                       : get(c, argv[i + 1], size, atoi(argv[i + 3]), t == DS_TRANSPORT_LOCAL);
    ds_client_close(c);
    return rc;
}
