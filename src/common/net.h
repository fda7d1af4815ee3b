/* Socket helpers shared by worker, client and CLI: address parsing, where a
 * worker's Unix socket lives, connecting with a deadline, and passing the arena
 * file descriptor over a Unix socket. */
#ifndef DS_COMMON_NET_H
#define DS_COMMON_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Parses "host:port" (host may be empty, meaning 127.0.0.1). Returns 0 or -1
 * with a message. host_cap >= 64 recommended. */
int ds__parse_hostport(const char *s, char *host, size_t host_cap, int *port, char *err,
                       size_t err_cap);

/* The default directory for worker Unix sockets: $DS_UNIX_SOCKET_DIR, else
 * /tmp/yr-datasystem-<uid>. Created 0700 by the worker. */
void ds__default_socket_dir(char *out, size_t cap);
/* <dir>/worker-<host>-<port>.sock; dir NULL = default. Returns -1 if too long. */
int ds__socket_path(const char *dir, const char *host, int port, char *out, size_t cap);

/* True when host names an address of this machine (loopback or a local
 * interface), so the worker's Unix socket may be reachable. */
bool ds__host_is_local(const char *host);

/* Connects a TCP socket (TCP_NODELAY set) or a Unix socket, waiting at most
 * timeout_ms. Returns the blocking fd, or -1 with a message. */
int ds__tcp_connect(const char *host, int port, int timeout_ms, char *err, size_t err_cap);
int ds__unix_connect(const char *path, int timeout_ms, char *err, size_t err_cap);

/* A TCP port of host (an IPv4 address; NULL or unparsable: 127.0.0.1) the
 * kernel just handed out and nothing listens on (bound, then released), for
 * tests and benchmarks that start servers; -1 on failure. */
int ds__free_tcp_port(const char *host);

/* Creates a listening socket. TCP: SO_REUSEADDR, bound to exactly host:port.
 * Unix: removes a stale socket file first. Non-blocking. -1 with a message. */
int ds__tcp_listen(const char *host, int port, char *err, size_t err_cap);
int ds__unix_listen(const char *path, char *err, size_t err_cap);

/* Sends buf with one fd attached (SCM_RIGHTS) on a Unix socket. Returns bytes
 * sent (possibly short, like send) or -1. */
ssize_t ds__send_with_fd(int sock, const void *buf, size_t len, int fd);
/* Receives up to len bytes; if an fd rides along it is stored in *fd (else -1). */
ssize_t ds__recv_with_fd(int sock, void *buf, size_t len, int *fd);

/* Blocking full read/write with a deadline (monotonic ms, 0 = none). Return 0,
 * or -1 with errno (ETIMEDOUT on deadline, EPIPE/ECONNRESET when closed; a clean
 * EOF before all bytes gives ECONNRESET). */
int ds__write_full(int fd, const void *buf, size_t len, uint64_t deadline_ms);
int ds__read_full(int fd, void *buf, size_t len, uint64_t deadline_ms);

#endif
