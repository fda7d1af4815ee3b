/* The machine's own limits, measured in the same run as the store so that
 * dsbench reports ratios rather than absolute numbers that drift on a shared
 * machine: memcpy into warm memory (glibc's, and `rep movsb`, the other way
 * the client's large copies may take, on one thread; glibc's on two), a Unix-socket and a TCP
 * ping-pong round trip between two processes, and a plain loopback TCP stream
 * into a warm buffer. */
#include "bench/limits.h"

#include "bench/stats.h"
#include "common/clock.h"
#include "common/copy.h"
#include "common/lane.h"
#include "common/net.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void libc_copy(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

static double copy_gbps(size_t size, int iters, void (*copy)(void *, const void *, size_t))
{
    uint8_t *a = malloc(size), *b = malloc(size);
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, size);
    memset(b, 2, size); /* warm both: no page faults inside the timed copies */
    uint64_t *t = calloc((size_t)iters, sizeof(*t));
    for (int i = 0; t && i < iters; i++) {
        uint64_t t0 = ds__now_ns();
        copy(b, a, size);
        __asm__ volatile("" ::"r"(b) : "memory");
        t[i] = ds__now_ns() - t0;
    }
    dsb_lat_t l = {0};
    if (t) dsb_lat_from(t, (size_t)iters, &l);
    free(t);
    free(a);
    free(b);
    return l.p50_us > 0 ? (double)size / (l.p50_us * 1e3) : 0;
}

double dsb_memcpy_gbps(size_t size, int iters)
{
    return copy_gbps(size, iters, libc_copy);
}

/* Leaves the process's own copy choice (DS_COPY, the size classes' trials)
 * alone: a benchmark linking the client statically shares it. */
double dsb_movsb_gbps(size_t size, int iters)
{
    return ds__copy_movsb_ok() ? copy_gbps(size, iters, ds__copy_movsb) : 0;
}

/* Two threads copying one buffer, half each: the calling thread and a
 * helper that polls for the go and is pinned off the caller's CPU. The
 * client's large copies (wide copies, common/copy.h) split the same way
 * but wake a sleeping helper, so this bounds them from above. */
typedef struct {
    _Atomic int go, done; /* round numbers; go < 0: stop */
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
} half_t;

static void *second_half(void *arg)
{
    half_t *h = arg;
    for (int seen = 0;;) {
        int g;
        while ((g = atomic_load(&h->go)) == seen)
            ds__cpu_relax();
        if (g < 0) return NULL;
        seen = g;
        memcpy(h->dst + h->n / 2, h->src + h->n / 2, h->n - h->n / 2);
        atomic_store(&h->done, g);
    }
}

double dsb_copy2_gbps(size_t size, int iters)
{
    cpu_set_t cpus, off;
    int me = sched_getcpu();
    if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0 || CPU_COUNT(&cpus) < 2 || me < 0) return 0;
    off = cpus;
    CPU_CLR(me, &off);
    uint8_t *a = malloc(size), *b = malloc(size);
    uint64_t *t = calloc((size_t)iters, sizeof(*t));
    half_t h = {.dst = b, .src = a, .n = size};
    pthread_t tid;
    double gbps = 0;
    if (a && b && t && pthread_create(&tid, NULL, second_half, &h) == 0) {
        pthread_setaffinity_np(tid, sizeof(off), &off);
        memset(a, 1, size);
        memset(b, 2, size);
        for (int i = 0; i < iters; i++) {
            uint64_t t0 = ds__now_ns();
            atomic_store(&h.go, i + 1);
            memcpy(b, a, size / 2);
            while (atomic_load(&h.done) != i + 1)
                ds__cpu_relax();
            t[i] = ds__now_ns() - t0;
        }
        atomic_store(&h.go, -1);
        pthread_join(tid, NULL);
        dsb_lat_t l = {0};
        dsb_lat_from(t, (size_t)iters, &l);
        gbps = l.p50_us > 0 ? (double)size / (l.p50_us * 1e3) : 0;
    }
    free(t);
    free(a);
    free(b);
    return gbps;
}

/* Child echoes msg-sized messages until EOF. */
static void echo_loop(int fd, size_t msg)
{
    char *buf = malloc(msg);
    while (buf && ds__read_full(fd, buf, msg, 0) == 0)
        if (ds__write_full(fd, buf, msg, 0) != 0) break;
    free(buf);
    _exit(0);
}

static int pingpong(int fd, size_t msg, int iters, dsb_lat_t *out)
{
    char *buf = calloc(1, msg);
    uint64_t *lat = calloc((size_t)iters, sizeof(*lat));
    if (buf == NULL || lat == NULL) {
        free(buf);
        free(lat);
        return -1;
    }
    for (int i = 0; i < iters; i++) {
        uint64_t t0 = ds__now_ns();
        if (ds__write_full(fd, buf, msg, 0) != 0 || ds__read_full(fd, buf, msg, 0) != 0) {
            free(buf);
            free(lat);
            return -1;
        }
        lat[i] = ds__now_ns() - t0;
    }
    dsb_lat_from(lat, (size_t)iters, out);
    free(buf);
    free(lat);
    return 0;
}

int dsb_unix_rtt(size_t msg, int iters, dsb_lat_t *out)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (pid == 0) {
        close(sv[0]);
        echo_loop(sv[1], msg);
    }
    close(sv[1]);
    int r = pingpong(sv[0], msg, iters, out);
    close(sv[0]);
    waitpid(pid, NULL, 0);
    return r;
}

/* A listening TCP socket on 127.0.0.1 with an ephemeral port. */
static int tcp_listener(int *port)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0) {
        if (lfd >= 0) close(lfd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return lfd;
}

int dsb_tcp_rtt(const char *bind_host, size_t msg, int iters, dsb_lat_t *out)
{
    (void)bind_host;
    int port;
    int lfd = tcp_listener(&port);
    if (lfd < 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(lfd);
        return -1;
    }
    if (pid == 0) {
        int fd = accept(lfd, NULL, NULL);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        echo_loop(fd, msg);
    }
    close(lfd);
    char err[256];
    int fd = ds__tcp_connect("127.0.0.1", port, 5000, err, sizeof(err));
    int r = fd < 0 ? -1 : pingpong(fd, msg, iters, out);
    if (fd >= 0) close(fd);
    waitpid(pid, NULL, 0);
    return r;
}

double dsb_tcp_stream_gbps(size_t size, int iters)
{
    int port;
    int lfd = tcp_listener(&port);
    if (lfd < 0) return 0;
    pid_t pid = fork();
    if (pid < 0) {
        close(lfd);
        return 0;
    }
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL); /* the parent's handler must not run here */
        int fd = accept(lfd, NULL, NULL);
        uint8_t *buf = malloc(size);
        memset(buf, 7, size);
        for (int i = 0; i < iters; i++)
            if (ds__write_full(fd, buf, size, 0) != 0) break;
        _exit(0);
    }
    close(lfd);
    char err[256];
    int fd = ds__tcp_connect("127.0.0.1", port, 5000, err, sizeof(err));
    uint8_t *buf = malloc(size);
    uint64_t *t = calloc((size_t)iters, sizeof(*t));
    int done = 0;
    if (fd >= 0 && buf && t) {
        memset(buf, 0, size); /* warm, like the store's get_into buffer */
        for (; done < iters; done++) {
            uint64_t t0 = ds__now_ns();
            if (ds__read_full(fd, buf, size, 0) != 0) break;
            t[done] = ds__now_ns() - t0;
        }
    }
    dsb_lat_t l = {0};
    if (done > 0) dsb_lat_from(t, (size_t)done, &l);
    free(t);
    free(buf);
    if (fd >= 0) close(fd);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    return l.p50_us > 0 ? (double)size / (l.p50_us * 1e3) : 0;
}
