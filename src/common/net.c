/* Socket helpers (see net.h). */
#include "common/net.h"

#include "common/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int ds__parse_hostport(const char *s, char *host, size_t host_cap, int *port, char *err,
                       size_t err_cap)
{
    if (s == NULL || *s == '\0') {
        snprintf(err, err_cap, "address is empty (expected host:port)");
        return -1;
    }
    const char *colon = strrchr(s, ':');
    if (colon == NULL) {
        snprintf(err, err_cap, "address '%s' has no port (expected host:port)", s);
        return -1;
    }
    size_t hl = (size_t)(colon - s);
    if (hl >= host_cap) {
        snprintf(err, err_cap, "host in address '%s' is too long", s);
        return -1;
    }
    char *end = NULL;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end != '\0' || p <= 0 || p > 65535) {
        snprintf(err, err_cap, "port in address '%s' is not a number in 1..65535", s);
        return -1;
    }
    if (hl == 0) {
        snprintf(host, host_cap, "127.0.0.1");
    } else {
        memcpy(host, s, hl);
        host[hl] = '\0';
    }
    *port = (int)p;
    return 0;
}

void ds__default_socket_dir(char *out, size_t cap)
{
    const char *env = getenv("DS_UNIX_SOCKET_DIR");
    if (env && *env)
        snprintf(out, cap, "%s", env);
    else
        snprintf(out, cap, "/tmp/yr-datasystem-%u", (unsigned)getuid());
}

int ds__socket_path(const char *dir, const char *host, int port, char *out, size_t cap)
{
    char d[256];
    if (dir == NULL || *dir == '\0') {
        ds__default_socket_dir(d, sizeof(d));
        dir = d;
    }
    /* "localhost" and 127.0.0.1 name the same worker: one socket name. */
    if (strcmp(host, "localhost") == 0) host = "127.0.0.1";
    int n = snprintf(out, cap, "%s/worker-%s-%d.sock", dir, host, port);
    if (n < 0 || (size_t)n >= cap || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return -1;
    return 0;
}

bool ds__host_is_local(const char *host)
{
    if (strcmp(host, "localhost") == 0) return true;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1) {
        if ((ntohl(a4.s_addr) >> 24) == 127) return true;
    } else {
        struct in6_addr a6;
        if (inet_pton(AF_INET6, host, &a6) != 1) return false;
        if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) return false;
    bool found = false;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
        if (i->ifa_addr == NULL) continue;
        char buf[INET6_ADDRSTRLEN];
        if (i->ifa_addr->sa_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf, sizeof(buf));
        else if (i->ifa_addr->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, buf, sizeof(buf));
        else
            continue;
        found = strcmp(buf, host) == 0;
    }
    freeifaddrs(ifs);
    return found;
}

static int wait_fd(int fd, short events, uint64_t deadline_ms)
{
    for (;;) {
        int to = -1;
        if (deadline_ms) {
            uint64_t now = ds__now_ms();
            if (now >= deadline_ms) {
                errno = ETIMEDOUT;
                return -1;
            }
            to = (int)(deadline_ms - now);
        }
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, to);
        if (r > 0) return 0;
        if (r == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (errno != EINTR) return -1;
    }
}

static int connect_deadline(int fd, const struct sockaddr *sa, socklen_t sl, int timeout_ms)
{
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int r = connect(fd, sa, sl);
    if (r != 0 && (errno == EINPROGRESS || errno == EAGAIN)) {
        uint64_t dl = ds__now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 9000);
        if (wait_fd(fd, POLLOUT, dl) != 0) return -1;
        int soerr = 0;
        socklen_t l = sizeof(soerr);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &l);
        if (soerr) {
            errno = soerr;
            return -1;
        }
        r = 0;
    }
    fcntl(fd, F_SETFL, fl);
    return r;
}

int ds__tcp_connect(const char *host, int port, int timeout_ms, char *err, size_t err_cap)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0) {
        snprintf(err, err_cap, "cannot resolve '%s': %s", host, gai_strerror(g));
        return -1;
    }
    int fd = -1, saved = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (connect_deadline(fd, a->ai_addr, a->ai_addrlen, timeout_ms) == 0) break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, err_cap, "cannot connect to %s:%d: %s", host, port,
                 strerror(saved ? saved : ECONNREFUSED));
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

int ds__unix_connect(const char *path, int timeout_ms, char *err, size_t err_cap)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, err_cap, "socket path '%s' is too long", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, err_cap, "socket: %s", strerror(errno));
        return -1;
    }
    if (connect_deadline(fd, (struct sockaddr *)&sa, sizeof(sa), timeout_ms) != 0) {
        snprintf(err, err_cap, "cannot connect to %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int ds__free_tcp_port(const char *host)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (host && inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    int port = -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

int ds__tcp_listen(const char *host, int port, char *err, size_t err_cap)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0) {
        snprintf(err, err_cap, "cannot resolve '%s': %s", host, gai_strerror(g));
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, err_cap, "socket: %s", strerror(errno));
        freeaddrinfo(res);
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 512) != 0) {
        snprintf(err, err_cap, "cannot listen on %s:%d: %s", host, port, strerror(errno));
        close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    return fd;
}

int ds__unix_listen(const char *path, char *err, size_t err_cap)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, err_cap, "socket path '%s' is too long", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, err_cap, "socket: %s", strerror(errno));
        return -1;
    }
    /* Only a stale socket may be removed: if something answers on it, a
     * live worker owns this address. */
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        close(probe);
        close(fd);
        snprintf(err, err_cap, "a worker already serves %s", path);
        return -1;
    }
    if (probe >= 0) close(probe);
    unlink(path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 512) != 0) {
        snprintf(err, err_cap, "cannot listen on %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    chmod(path, 0600);
    return fd;
}

ssize_t ds__send_with_fd(int sock, const void *buf, size_t len, int fd)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof(u));
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(sock, &msg, MSG_NOSIGNAL);
}

ssize_t ds__recv_with_fd(int sock, void *buf, size_t len, int *fd)
{
    *fd = -1;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0) return r;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
            c->cmsg_len >= CMSG_LEN(sizeof(int)))
            memcpy(fd, CMSG_DATA(c), sizeof(int));
    }
    return r;
}

int ds__write_full(int fd, const void *buf, size_t len, uint64_t deadline_ms)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL | (deadline_ms ? MSG_DONTWAIT : 0));
        if (w > 0) {
            p += w;
            len -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(fd, POLLOUT, deadline_ms) != 0) return -1;
            continue;
        }
        return -1;
    }
    return 0;
}

int ds__read_full(int fd, void *buf, size_t len, uint64_t deadline_ms)
{
    char *p = buf;
    while (len > 0) {
        ssize_t r = recv(fd, p, len, deadline_ms ? MSG_DONTWAIT : 0);
        if (r > 0) {
            p += r;
            len -= (size_t)r;
            continue;
        }
        if (r == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(fd, POLLIN, deadline_ms) != 0) return -1;
            continue;
        }
        return -1;
    }
    return 0;
}
