/* TLS over the TCP sockets of workers, clients and peers (OpenSSL's libssl).
 *
 * One context per process side (the worker's server side, its peer-client
 * side, a client): certificate, key and the CA that peers' certificates must
 * chain to. One session (ds_tls_t) per connected socket; it works on the
 * socket as it is, blocking or not: the calls below return like recv and
 * sendmsg do (EAGAIN when the socket has no room or no data), so callers keep
 * their own waiting. Unix sockets never use it.
 *
 * Rules the callers keep:
 * - A session's calls are serialized by its own mutex, so one thread may
 *   write while another reads (the worker's bulk sender and its loop). Only
 *   one thread may write at a time and only one may read at a time.
 * - A write that returned EAGAIN must be repeated with the same bytes first
 *   (at least as many; ds__tls_writev takes care of it while the caller's
 *   iovecs start where they did).
 * - Decrypted (or received) bytes can wait inside the session where epoll
 *   does not see them: after stopping short of EAGAIN, a reader looks at
 *   ds__tls_pending before waiting for the socket.
 *
 * Verification: a peer's certificate must chain to the CA file (else to the
 * system's default CAs); host names are not checked, since every worker and
 * client of a deployment holds a certificate of the deployment's own CA.
 * With verify_peer on the server side, clients must present such a
 * certificate too. */
#ifndef DS_COMMON_TLS_H
#define DS_COMMON_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct ds_tls_ctx ds_tls_ctx_t;
typedef struct ds_tls ds_tls_t;

typedef struct {
    bool server;
    const char *ca;              /* PEM CA bundle; NULL or "" = the system's default CAs */
    const char *cert;            /* PEM certificate (chain); required for a server */
    const char *key;             /* PEM private key of cert */
    const char *passphrase_path; /* file holding the key's passphrase; NULL or "" = none */
    /* Server: clients must present a certificate that chains to ca.
     * Client: ignored (a server's certificate is always verified). */
    bool verify_peer;
} ds_tls_conf_t;

/* Loads the files of conf. NULL with a message naming the file and what is
 * wrong with it. */
ds_tls_ctx_t *ds__tls_ctx_new(const ds_tls_conf_t *conf, char *err, size_t err_cap);
void ds__tls_ctx_free(ds_tls_ctx_t *ctx);

/* A session on the connected socket fd (which the caller keeps owning and
 * closes after ds__tls_free). NULL with a message. */
ds_tls_t *ds__tls_new(ds_tls_ctx_t *ctx, int fd, char *err, size_t err_cap);
void ds__tls_free(ds_tls_t *t);

/* One step of the handshake on a non-blocking socket: 1 done, 0 to be
 * called again once the socket has *events (POLLIN or POLLOUT) ready, -1
 * failed with a message (the certificate that was refused and why, or what
 * the other side sent). */
int ds__tls_handshake_step(ds_tls_t *t, short *events, char *err, size_t err_cap);
/* The whole handshake by deadline_ms (monotonic ms), whatever the socket's
 * blocking mode. 0, or -1 with a message. */
int ds__tls_handshake(ds_tls_t *t, uint64_t deadline_ms, char *err, size_t err_cap);

/* Like recv: bytes read, 0 at the other side's close, -1 with errno
 * (EAGAIN / EWOULDBLOCK: nothing decrypted yet; EPROTO: a TLS failure). */
ssize_t ds__tls_recv(ds_tls_t *t, void *buf, size_t len);
/* Like sendmsg: bytes taken (from the front of iov), or -1 with errno
 * (EAGAIN: no room; try again later with the same bytes first). Takes
 * small iovecs together into one record (filled up with the start of a
 * large iovec after them) and large ones at most DS_TLS_WRITE_MAX at a
 * time. The records of a write of more than one
 * record leave in one send; when they do not all fit in the socket the
 * write says EAGAIN, and its repeat reports their bytes once they are out
 * (so a caller that stops writing after a success leaves nothing behind). */
ssize_t ds__tls_writev(ds_tls_t *t, const struct iovec *iov, int n);
/* A write holds the session's lock while it encrypts and sends, and the
 * other thread's read waits that long: 256 KiB is ~0.1 ms at AES-GCM's
 * speed, and 16 records, enough to fill 64 KiB segments (see tls.c). */
#define DS_TLS_WRITE_MAX (256u << 10)
/* True while bytes wait inside the session (see above). Asked by the
 * reading thread; takes no lock. */
bool ds__tls_pending(ds_tls_t *t);
/* Up to cap of the first bytes the session received before its handshake
 * ended, as they came: after a failed handshake, what the other side sent
 * instead (a worker's refusal frame, sent without TLS). The count. */
size_t ds__tls_first_bytes(ds_tls_t *t, void *buf, size_t cap);
/* The last failure's reason, for messages (thread-local). */
const char *ds__tls_last_error(void);

/* Full blocking write/read through the session with a deadline, like
 * ds__write_full / ds__read_full (common/net.h). */
int ds__tls_write_full(ds_tls_t *t, int fd, const void *buf, size_t len, uint64_t deadline_ms);
int ds__tls_read_full(ds_tls_t *t, int fd, void *buf, size_t len, uint64_t deadline_ms);

#endif
