/* TLS sessions over TCP sockets (see tls.h).
 *
 * Sessions talk to their socket through a BIO of our own rather than
 * OpenSSL's socket BIO: that one writes with write(2), which raises SIGPIPE
 * when the other side has gone, and a library may not kill its caller for
 * that. Ours sends with MSG_NOSIGNAL, and it buffers both ways, because
 * OpenSSL moves data one record (at most 16 KiB) at a time:
 * - Reading, each recv takes up to a buffer's worth (64 KiB in a worker,
 *   which holds many sessions; 256 KiB in a client, which reads the large
 *   answers) and OpenSSL's record reads are served from it, the first
 *   straight from the socket (recvmsg fills OpenSSL's wanted bytes first,
 *   then the buffer). OpenSSL's own read-ahead is off: it moves what it
 *   holds back to the front of its buffer at every record, a copy of up to
 *   the whole buffer per 16 KiB, which cost more than the cipher.
 * - Writing, the records of one ds__tls_writev of more than one record are
 *   gathered and leave in one send, not as a send (and, with TCP_NODELAY, a
 *   segment and a wake-up of the reader) per 16 KiB. Records that did not
 *   all fit in the socket stay in the session; the caller repeats the write
 *   (tls.h's rule) and is told the bytes are taken only once they are out,
 *   so a caller that stops writing never leaves bytes behind.
 *
 * Choices: TLS 1.2 at least; AES-128-GCM first, and the server's order
 * wins over a client's (the CPU does AES in hardware; AES-256 takes 14
 * rounds to its 10 for no need of ours); no session tickets (a
 * connection is long-lived, and a ticket is a write the server would make
 * after the handshake, outside any request); no renegotiation, so a read
 * never needs a write and a write never needs a read. */
#include "common/tls.h"

#include "common/clock.h"

#include <errno.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#define DS_TLS_STAGE (16u << 10)
#define DS_TLS_RECORD (16u << 10) /* the most plaintext in one record */
#define DS_TLS_READ_BUF (64u << 10)
#define DS_TLS_READ_BUF_CLIENT (256u << 10)
/* Room for the records of one gathered write: DS_TLS_WRITE_MAX of
 * plaintext in records of DS_TLS_RECORD, each with at most 256 bytes of
 * header, nonce, padding and tag (29 with AES-GCM in TLS 1.2), and a few
 * more records (a key update) to spare. */
#define DS_TLS_FIRST 512u
#define DS_TLS_GATHER (DS_TLS_WRITE_MAX + (DS_TLS_WRITE_MAX / DS_TLS_RECORD + 4) * 256u)
#define DS_TLS_SLICE_MS 100

struct ds_tls_ctx {
    SSL_CTX *ssl;
    bool server;
    size_t read_buf; /* each session's receive buffer */
    char pass[256];
};

struct ds_tls {
    SSL *ssl;
    int fd;
    pthread_mutex_t mu;
    /* A write that said EAGAIN: its length, which the next write repeats. */
    size_t wpend;
    /* Bytes a read could return wait inside the session: set by the reading
     * thread after each read, so that ds__tls_pending (asked by that same
     * thread) needs no lock and never waits for a writer's SSL_write. A
     * read that wanted the socket leaves at most part of a record, nothing
     * a read could return yet. */
    atomic_bool pend;
    /* Received ciphertext OpenSSL has not asked for yet: rbuf[rpos..rlen)
     * (allocated at the first read, rcap bytes). */
    uint8_t *rbuf;
    size_t rcap, rpos, rlen;
    /* Gathered records not yet in the socket: wbuf[woff..wlen) (allocated
     * at the first write of more than one record). gather is set while
     * ds__tls_writev's SSL_write runs; wplain is the plaintext those
     * records carry, reported to the caller once they are out. */
    uint8_t *wbuf;
    size_t woff, wlen, wplain;
    bool gather;
    /* The first bytes received before the handshake ended: a refusal sent
     * without TLS (ds__tls_first_bytes). */
    bool hs_done;
    size_t nfirst;
    uint8_t first[DS_TLS_FIRST];
    uint8_t stage[DS_TLS_STAGE];
};

static _Thread_local char last_err[256];

const char *ds__tls_last_error(void)
{
    return last_err;
}

/* ---- the socket BIO ---- */

static BIO_METHOD *sock_method;
static pthread_once_t sock_once = PTHREAD_ONCE_INIT;

static int retryable(int e)
{
    return e == EAGAIN || e == EWOULDBLOCK || e == EINTR;
}

/* Sends the gathered records: 0 when none are left, else -1 with errno
 * (EAGAIN: the socket is full). */
static int wflush(ds_tls_t *t)
{
    while (t->woff < t->wlen) {
        ssize_t w = send(t->fd, t->wbuf + t->woff, t->wlen - t->woff, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        t->woff += (size_t)w;
    }
    t->woff = t->wlen = 0;
    return 0;
}

static int sock_write(BIO *b, const char *in, int len)
{
    ds_tls_t *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (t->gather && t->wlen + (size_t)len <= DS_TLS_GATHER) {
        memcpy(t->wbuf + t->wlen, in, (size_t)len);
        t->wlen += (size_t)len;
        return len;
    }
    /* Gathered records go first (and one that does not fit sends them). */
    if (t->wlen > t->woff && wflush(t) != 0) {
        if (retryable(errno)) BIO_set_retry_write(b);
        return -1;
    }
    ssize_t w = send(t->fd, in, (size_t)len, MSG_NOSIGNAL);
    if (w < 0 && retryable(errno)) BIO_set_retry_write(b);
    return (int)w;
}

static void keep_first(ds_tls_t *t, const void *p, size_t n)
{
    if (n > DS_TLS_FIRST - t->nfirst) n = DS_TLS_FIRST - t->nfirst;
    memcpy(t->first + t->nfirst, p, n);
    t->nfirst += n;
}

static int sock_read(BIO *b, char *out, int len)
{
    ds_tls_t *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (t->rpos < t->rlen) {
        size_t n = t->rlen - t->rpos;
        if (n > (size_t)len) n = (size_t)len;
        memcpy(out, t->rbuf + t->rpos, n);
        t->rpos += n;
        return (int)n;
    }
    t->rpos = t->rlen = 0;
    struct iovec v[2] = {{out, (size_t)len}, {t->rbuf, t->rcap}};
    struct msghdr m = {.msg_iov = v, .msg_iovlen = t->rbuf ? 2 : 1};
    ssize_t r = recvmsg(t->fd, &m, 0);
    if (r < 0 && retryable(errno)) BIO_set_retry_read(b);
    if (r > 0 && !t->hs_done) {
        keep_first(t, out, r < len ? (size_t)r : (size_t)len);
        if (r > len) keep_first(t, t->rbuf, (size_t)r - (size_t)len);
    }
    if (r > len) {
        t->rlen = (size_t)r - (size_t)len;
        r = len;
    }
    return (int)r;
}

static long sock_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    (void)ptr;
    if (cmd != BIO_CTRL_FLUSH) return 0;
    ds_tls_t *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (t->wlen > t->woff && wflush(t) != 0) {
        if (retryable(errno)) BIO_set_retry_write(b);
        return -1;
    }
    return 1;
}

static int sock_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static void sock_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "ds socket");
    if (m == NULL) return;
    BIO_meth_set_write(m, sock_write);
    BIO_meth_set_read(m, sock_read);
    BIO_meth_set_ctrl(m, sock_ctrl);
    BIO_meth_set_create(m, sock_create);
    sock_method = m;
}

/* ---- messages ---- */

/* The reason of OpenSSL's last queued error, or fallback. */
static void ssl_reason(char *err, size_t cap, const char *what, const char *fallback)
{
    unsigned long e = ERR_peek_last_error();
    char buf[200];
    if (e) {
        const char *r = ERR_reason_error_string(e);
        if (r)
            snprintf(buf, sizeof(buf), "%s", r);
        else
            ERR_error_string_n(e, buf, sizeof(buf));
    } else {
        snprintf(buf, sizeof(buf), "%s", fallback);
    }
    snprintf(err, cap, "%s: %s", what, buf);
    ERR_clear_error();
}

static int pass_cb(char *buf, int size, int rwflag, void *u)
{
    (void)rwflag;
    const char *p = u;
    int n = (int)strlen(p);
    if (n >= size) n = size - 1;
    memcpy(buf, p, (size_t)n);
    return n;
}

static int read_pass(const char *path, char *out, size_t cap, char *err, size_t err_cap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, err_cap, "cannot read the passphrase file %s: %s", path, strerror(errno));
        return -1;
    }
    size_t n = fread(out, 1, cap - 1, f);
    fclose(f);
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
        out[--n] = '\0';
    return 0;
}

ds_tls_ctx_t *ds__tls_ctx_new(const ds_tls_conf_t *conf, char *err, size_t err_cap)
{
    pthread_once(&sock_once, sock_method_init);
    if (sock_method == NULL) {
        snprintf(err, err_cap, "TLS: cannot set up the socket BIO");
        return NULL;
    }
    ds_tls_ctx_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, err_cap, "TLS: out of memory");
        return NULL;
    }
    c->server = conf->server;
    c->ssl = SSL_CTX_new(conf->server ? TLS_server_method() : TLS_client_method());
    if (c->ssl == NULL) {
        ssl_reason(err, err_cap, "TLS: cannot create a context", "unknown error");
        free(c);
        return NULL;
    }
    SSL_CTX *s = c->ssl;
    SSL_CTX_set_min_proto_version(s, TLS1_2_VERSION);
    SSL_CTX_set_options(s, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                               SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_TICKET |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
    /* Buffers stay with the session (no SSL_MODE_RELEASE_BUFFERS: freeing
     * and allocating them per record costs page faults); a repeated write
     * may come from a moved buffer (the caller's iovecs, or the stage). */
    SSL_CTX_set_mode(s, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_clear_mode(s, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_ciphersuites(s, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                                "TLS_CHACHA20_POLY1305_SHA256");
    SSL_CTX_set_cipher_list(s, "ECDHE+AES128+AESGCM:ECDHE+AES256+AESGCM:ECDHE+CHACHA20:!aNULL");
    SSL_CTX_set_read_ahead(s, 0);
    /* A client reads large values (a get); a worker holds many sessions. */
    c->read_buf = conf->server ? DS_TLS_READ_BUF : DS_TLS_READ_BUF_CLIENT;
    if (conf->server) SSL_CTX_set_num_tickets(s, 0);
    const char *fail = NULL;
    char what[700];
    if (conf->passphrase_path && conf->passphrase_path[0]) {
        if (read_pass(conf->passphrase_path, c->pass, sizeof(c->pass), err, err_cap) != 0) {
            ds__tls_ctx_free(c);
            return NULL;
        }
        SSL_CTX_set_default_passwd_cb(s, pass_cb);
        SSL_CTX_set_default_passwd_cb_userdata(s, c->pass);
    }
    bool has_cert = conf->cert && conf->cert[0];
    bool has_key = conf->key && conf->key[0];
    if (conf->server && !has_cert) {
        snprintf(err, err_cap, "TLS: a server needs a certificate and its key");
        ds__tls_ctx_free(c);
        return NULL;
    }
    if (has_cert != has_key) {
        snprintf(err, err_cap, "TLS: a certificate needs its key and a key its certificate");
        ds__tls_ctx_free(c);
        return NULL;
    }
    if (has_cert && SSL_CTX_use_certificate_chain_file(s, conf->cert) != 1) {
        snprintf(what, sizeof(what), "TLS: cannot load the certificate %s", conf->cert);
        fail = what;
    } else if (has_key && SSL_CTX_use_PrivateKey_file(s, conf->key, SSL_FILETYPE_PEM) != 1) {
        if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
            snprintf(what, sizeof(what), "TLS: the key %s does not match the certificate %s",
                     conf->key, conf->cert);
        else
            snprintf(what, sizeof(what), "TLS: cannot load the private key %s", conf->key);
        fail = what;
    } else if (has_key && SSL_CTX_check_private_key(s) != 1) {
        snprintf(what, sizeof(what), "TLS: the key %s does not match the certificate %s", conf->key,
                 conf->cert);
        fail = what;
    } else if (conf->ca && conf->ca[0] && SSL_CTX_load_verify_locations(s, conf->ca, NULL) != 1) {
        snprintf(what, sizeof(what), "TLS: cannot load the CA file %s", conf->ca);
        fail = what;
    } else if (!(conf->ca && conf->ca[0]) && SSL_CTX_set_default_verify_paths(s) != 1) {
        snprintf(what, sizeof(what), "TLS: cannot load the system's CA certificates");
        fail = what;
    }
    if (fail) {
        ssl_reason(err, err_cap, fail, "not a PEM file of the right kind");
        ds__tls_ctx_free(c);
        return NULL;
    }
    if (!conf->server) {
        SSL_CTX_set_verify(s, SSL_VERIFY_PEER, NULL);
    } else if (conf->verify_peer) {
        SSL_CTX_set_verify(s, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        if (conf->ca && conf->ca[0]) {
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(conf->ca);
            if (names) SSL_CTX_set_client_CA_list(s, names);
        }
    }
    ERR_clear_error();
    return c;
}

void ds__tls_ctx_free(ds_tls_ctx_t *c)
{
    if (c == NULL) return;
    SSL_CTX_free(c->ssl);
    memset(c->pass, 0, sizeof(c->pass));
    free(c);
}

ds_tls_t *ds__tls_new(ds_tls_ctx_t *ctx, int fd, char *err, size_t err_cap)
{
    ds_tls_t *t = calloc(1, sizeof(*t));
    BIO *b = t ? BIO_new(sock_method) : NULL;
    if (t) t->ssl = SSL_new(ctx->ssl);
    if (t == NULL || b == NULL || t->ssl == NULL) {
        snprintf(err, err_cap, "TLS: out of memory for a session");
        BIO_free(b);
        if (t) SSL_free(t->ssl);
        free(t);
        return NULL;
    }
    /* On a blocking socket OpenSSL's reads and writes block in the kernel:
     * slices of DS_TLS_SLICE_MS make them come back (EAGAIN, then
     * WANT_READ / WANT_WRITE), so the callers' loops see their deadlines,
     * the handshake's included. A caller may set its own receive timeout
     * later (the client does). Non-blocking sockets ignore both. */
    struct timeval tv = {.tv_sec = 0, .tv_usec = DS_TLS_SLICE_MS * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    t->rcap = ctx->read_buf;
    t->rbuf = malloc(t->rcap); /* none: reads go straight to OpenSSL */
    BIO_set_data(b, t);
    SSL_set_bio(t->ssl, b, b);
    if (ctx->server)
        SSL_set_accept_state(t->ssl);
    else
        SSL_set_connect_state(t->ssl);
    t->fd = fd;
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

void ds__tls_free(ds_tls_t *t)
{
    if (t == NULL) return;
    SSL_free(t->ssl);
    pthread_mutex_destroy(&t->mu);
    free(t->rbuf);
    free(t->wbuf);
    free(t);
}

/* Whether a read could return bytes without the socket: OpenSSL holds a
 * record, or the receive buffer holds ciphertext. */
static bool has_pending(ds_tls_t *t)
{
    return SSL_has_pending(t->ssl) == 1 || t->rpos < t->rlen;
}

/* Why the handshake failed, in words: the refused certificate, the other
 * side's alert, or the socket's end. */
static void handshake_reason(ds_tls_t *t, int r, int e, int sys_errno, char *err, size_t cap)
{
    long v = SSL_get_verify_result(t->ssl);
    if (v != X509_V_OK) {
        snprintf(err, cap, "TLS handshake failed: the other side's certificate was refused: %s",
                 X509_verify_cert_error_string(v));
        ERR_clear_error();
        return;
    }
    if (e == SSL_ERROR_SYSCALL && ERR_peek_last_error() == 0) {
        if (r == 0 || sys_errno == 0 || sys_errno == ECONNRESET || sys_errno == EPIPE)
            snprintf(err, cap, "TLS handshake failed: the other side closed the connection");
        else
            snprintf(err, cap, "TLS handshake failed: %s", strerror(sys_errno));
        return;
    }
    ssl_reason(err, cap, "TLS handshake failed", "protocol error");
}

int ds__tls_handshake_step(ds_tls_t *t, short *events, char *err, size_t err_cap)
{
    pthread_mutex_lock(&t->mu);
    ERR_clear_error();
    errno = 0;
    int r = SSL_do_handshake(t->ssl);
    int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(t->ssl, r);
    int sys_errno = errno;
    int rc = 1;
    if (e == SSL_ERROR_WANT_READ) {
        *events = POLLIN;
        rc = 0;
    } else if (e == SSL_ERROR_WANT_WRITE) {
        *events = POLLOUT;
        rc = 0;
    } else if (e != SSL_ERROR_NONE) {
        handshake_reason(t, r, e, sys_errno, err, err_cap);
        snprintf(last_err, sizeof(last_err), "%s", err);
        rc = -1;
    }
    if (rc == 1) {
        t->hs_done = true;
        atomic_store_explicit(&t->pend, has_pending(t), memory_order_relaxed);
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int ds__tls_handshake(ds_tls_t *t, uint64_t deadline_ms, char *err, size_t err_cap)
{
    for (;;) {
        short ev = 0;
        int r = ds__tls_handshake_step(t, &ev, err, err_cap);
        if (r != 0) return r > 0 ? 0 : -1;
        uint64_t now = ds__now_ms();
        if (now >= deadline_ms) {
            snprintf(err, err_cap, "TLS handshake timed out");
            return -1;
        }
        struct pollfd p = {.fd = t->fd, .events = ev};
        uint64_t left = deadline_ms - now;
        if (poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left) < 0 && errno != EINTR) {
            snprintf(err, err_cap, "TLS handshake: poll: %s", strerror(errno));
            return -1;
        }
    }
}

/* errno for a failed read or write: e is SSL_get_error's answer. */
static void set_io_errno(int e, int sys_errno, bool reading)
{
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return;
    }
    if (e == SSL_ERROR_SYSCALL && ERR_peek_last_error() == 0) {
        errno = sys_errno ? sys_errno : (reading ? ECONNRESET : EPIPE);
        return;
    }
    ssl_reason(last_err, sizeof(last_err), "TLS", "protocol error");
    errno = EPROTO;
}

ssize_t ds__tls_recv(ds_tls_t *t, void *buf, size_t len)
{
    if (len > INT_MAX) len = INT_MAX;
    if (len == 0) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&t->mu);
    ERR_clear_error();
    errno = 0;
    int r = SSL_read(t->ssl, buf, (int)len);
    if (r > 0) {
        atomic_store_explicit(&t->pend, has_pending(t), memory_order_relaxed);
        pthread_mutex_unlock(&t->mu);
        return r;
    }
    int sys_errno = errno;
    int e = SSL_get_error(t->ssl, r);
    atomic_store_explicit(&t->pend, e != SSL_ERROR_WANT_READ && has_pending(t),
                          memory_order_relaxed);
    if (e == SSL_ERROR_ZERO_RETURN) {
        pthread_mutex_unlock(&t->mu);
        return 0;
    }
    set_io_errno(e, sys_errno, true);
    int saved = errno;
    pthread_mutex_unlock(&t->mu);
    errno = saved;
    return -1;
}

ssize_t ds__tls_writev(ds_tls_t *t, const struct iovec *iov, int n)
{
    pthread_mutex_lock(&t->mu);
    const void *buf;
    size_t len = 0;
    if (n <= 0) {
        pthread_mutex_unlock(&t->mu);
        return 0;
    }
    if (t->wplain) {
        /* The repeat of a write whose records did not all go out: its
         * bytes are taken once they have. */
        ssize_t done = -1;
        if (wflush(t) == 0) {
            done = (ssize_t)t->wplain;
            t->wplain = 0;
        }
        int saved = errno;
        pthread_mutex_unlock(&t->mu);
        errno = saved;
        return done;
    }
    bool direct = t->wpend ? iov[0].iov_len >= t->wpend : iov[0].iov_len >= DS_TLS_STAGE;
    if (direct) {
        /* A large piece: straight from where it is, at most
         * DS_TLS_WRITE_MAX (or exactly what the last try wrote). */
        buf = iov[0].iov_base;
        len = t->wpend ? t->wpend : iov[0].iov_len;
        if (len > DS_TLS_WRITE_MAX) len = DS_TLS_WRITE_MAX;
    } else {
        /* Small pieces together into one record, filled up with the start
         * of a large piece that follows: a frame's header then does not
         * leave alone (a segment, and a wake-up of a reader that can do
         * nothing with it but wait for the value), and the reader's first
         * read brings the value's first bytes with it. A repeat stages the
         * same bytes again. */
        size_t cap = t->wpend ? t->wpend : DS_TLS_STAGE;
        for (int i = 0; i < n && len < cap; i++) {
            size_t k = iov[i].iov_len;
            if (k > cap - len) k = cap - len;
            memcpy(t->stage + len, iov[i].iov_base, k);
            len += k;
        }
        if (t->wpend && len != t->wpend) {
            pthread_mutex_unlock(&t->mu);
            snprintf(last_err, sizeof(last_err), "TLS: a write was not repeated");
            errno = EINVAL;
            return -1;
        }
        buf = t->stage;
    }
    if (len == 0) {
        pthread_mutex_unlock(&t->mu);
        return 0;
    }
    /* More than one record: gathered, to leave in one send (see above). A
     * write OpenSSL has begun (wpend) finishes the way it began. */
    if (len > DS_TLS_RECORD && !t->wpend && t->wbuf == NULL) t->wbuf = malloc(DS_TLS_GATHER);
    t->gather = len > DS_TLS_RECORD && !t->wpend && t->wbuf != NULL;
    ERR_clear_error();
    errno = 0;
    int r = SSL_write(t->ssl, buf, (int)len);
    bool gathered = t->gather;
    t->gather = false;
    if (r > 0) {
        t->wpend = 0;
        if (gathered && wflush(t) != 0) {
            int saved = errno;
            if (retryable(saved)) {
                t->wplain = (size_t)r;
                saved = EAGAIN;
            }
            pthread_mutex_unlock(&t->mu);
            errno = saved;
            return -1;
        }
        pthread_mutex_unlock(&t->mu);
        return r;
    }
    int sys_errno = errno;
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) t->wpend = len;
    set_io_errno(e, sys_errno, false);
    int saved = errno;
    pthread_mutex_unlock(&t->mu);
    errno = saved;
    return -1;
}

size_t ds__tls_first_bytes(ds_tls_t *t, void *buf, size_t cap)
{
    pthread_mutex_lock(&t->mu);
    size_t n = t->nfirst < cap ? t->nfirst : cap;
    memcpy(buf, t->first, n);
    pthread_mutex_unlock(&t->mu);
    return n;
}

bool ds__tls_pending(ds_tls_t *t)
{
    return atomic_load_explicit(&t->pend, memory_order_relaxed);
}

static int wait_sock(int fd, short ev, uint64_t deadline_ms)
{
    uint64_t now = ds__now_ms();
    if (deadline_ms && now >= deadline_ms) {
        errno = ETIMEDOUT;
        return -1;
    }
    uint64_t left = deadline_ms ? deadline_ms - now : 1000;
    struct pollfd p = {.fd = fd, .events = ev};
    int r = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
    if (r < 0 && errno != EINTR) return -1;
    return 0;
}

int ds__tls_write_full(ds_tls_t *t, int fd, const void *buf, size_t len, uint64_t deadline_ms)
{
    const uint8_t *p = buf;
    while (len > 0) {
        struct iovec v = {.iov_base = (void *)p, .iov_len = len};
        ssize_t w = ds__tls_writev(t, &v, 1);
        if (w > 0) {
            p += w;
            len -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN) return -1;
        if (wait_sock(fd, POLLOUT, deadline_ms) != 0) return -1;
    }
    return 0;
}

int ds__tls_read_full(ds_tls_t *t, int fd, void *buf, size_t len, uint64_t deadline_ms)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t r = ds__tls_recv(t, p, len);
        if (r > 0) {
            p += r;
            len -= (size_t)r;
            continue;
        }
        if (r == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (errno != EAGAIN) return -1;
        if (wait_sock(fd, POLLIN, deadline_ms) != 0) return -1;
    }
    return 0;
}
