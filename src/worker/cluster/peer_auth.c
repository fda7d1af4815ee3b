/* Proofs between peers (see peer_auth.h). */
#include "worker/cluster/peer_auth.h"

#include "common/clock.h"
#include "common/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DS_SECRET_RECHECK_MS 1000

struct ds_peer_auth {
    char self[300];
    char pub[DS_AUTH_PUB_HEX + 1];
    ds_auth_key_t *key;
    char nonce_key[DS_AUTH_HEX_LEN + 1];
    char path[512];     /* "" = no cluster secret */
    pthread_mutex_t mu; /* guards what follows: the secrets and the file's identity */
    char secrets[2][256];
    int nsecrets;
    struct stat seen;
    uint64_t checked_ms;
    _Atomic uint64_t failures;
};

static const char *what = "cluster secret file";

ds_peer_auth_t *ds__peer_auth_new(const char *self, const char *secret_file, char *err,
                                  size_t err_cap)
{
    ds_peer_auth_t *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&a->mu, NULL);
    snprintf(a->self, sizeof(a->self), "%s", self);
    snprintf(a->path, sizeof(a->path), "%s", secret_file ? secret_file : "");
    a->key = ds__auth_key_new(a->pub);
    if (a->key == NULL || ds__auth_challenge(a->nonce_key) != 0) {
        snprintf(err, err_cap, "cannot make the member key (libcrypto failed)");
        ds__peer_auth_free(a);
        return NULL;
    }
    if (a->path[0]) {
        if (stat(a->path, &a->seen) != 0 ||
            (a->nsecrets = ds__auth_read_secrets(a->path, what, a->secrets, err, err_cap)) < 0) {
            if (a->nsecrets >= 0) snprintf(err, err_cap, "cannot read %s %s", what, a->path);
            ds__peer_auth_free(a);
            return NULL;
        }
        a->checked_ms = ds__now_ms();
    }
    return a;
}

void ds__peer_auth_free(ds_peer_auth_t *a)
{
    if (a == NULL) return;
    ds__auth_key_free(a->key);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

const char *ds__peer_auth_self(const ds_peer_auth_t *a)
{
    return a->self;
}

const char *ds__peer_auth_pub(const ds_peer_auth_t *a)
{
    return a->pub;
}

bool ds__peer_auth_has_secret(const ds_peer_auth_t *a)
{
    return a->path[0] != '\0';
}

/* With a->mu held: reads the secret file again when it changed (a rotation
 * step). A file that became unreadable or invalid keeps the secrets in use
 * and says so once per change. */
static void do_reload(ds_peer_auth_t *a)
{
    uint64_t now = ds__now_ms();
    if (now - a->checked_ms < DS_SECRET_RECHECK_MS) return;
    a->checked_ms = now;
    struct stat st;
    if (stat(a->path, &st) != 0) return;
    if (st.st_ino == a->seen.st_ino && st.st_size == a->seen.st_size &&
        st.st_mtim.tv_sec == a->seen.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == a->seen.st_mtim.tv_nsec)
        return;
    a->seen = st;
    char s[2][256], err[300];
    int n = ds__auth_read_secrets(a->path, what, s, err, sizeof(err));
    if (n < 0) {
        DS_LOG_WARN("cluster: %s; keeping the secrets read before", err);
        return;
    }
    memcpy(a->secrets, s, sizeof(s));
    a->nsecrets = n;
    DS_LOG_INFO("cluster: read %d secret(s) from %s", n, a->path);
}

static int transcript(char *buf, size_t cap, const char *role, const char *from, const char *to,
                      const char *na, const char *nb)
{
    int n = snprintf(buf, cap, "ds-peer-auth-v1\n%s\n%s\n%s\n%s\n%s", role, from, to, na, nb);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

int ds__peer_auth_prove(ds_peer_auth_t *a, const char *role, const char *from, const char *to,
                        const char *nonce_a, const char *nonce_b, char out[DS_PEER_PROOF_MAX + 1])
{
    char t[1024];
    int n = transcript(t, sizeof(t), role, from, to, nonce_a, nonce_b);
    if (n < 0) return -1;
    if (!a->path[0]) return ds__auth_sign(a->key, t, (size_t)n, out);
    pthread_mutex_lock(&a->mu);
    do_reload(a);
    ds__auth_hmac_hex(a->secrets[0], t, (size_t)n, out);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

bool ds__peer_auth_check(ds_peer_auth_t *a, const char *role, const char *from, const char *to,
                         const char *nonce_a, const char *nonce_b, const char *proof, size_t plen,
                         const char *peer_pub)
{
    char t[1024];
    int n = transcript(t, sizeof(t), role, from, to, nonce_a, nonce_b);
    if (n < 0) return false;
    if (!a->path[0]) return ds__auth_sig_verify(peer_pub, t, (size_t)n, proof, plen);
    bool ok = false;
    pthread_mutex_lock(&a->mu);
    do_reload(a);
    for (int i = 0; i < a->nsecrets; i++) {
        char want[DS_AUTH_HEX_LEN + 1];
        ds__auth_hmac_hex(a->secrets[i], t, (size_t)n, want);
        /* Both secrets are always tried: the time taken says nothing. */
        ok |= plen == DS_AUTH_HEX_LEN && ds__auth_equal(want, proof, DS_AUTH_HEX_LEN);
    }
    pthread_mutex_unlock(&a->mu);
    return ok;
}

void ds__peer_auth_nonce(ds_peer_auth_t *a, uint64_t conn_id, const char *from, const char *nonce_a,
                         char out[DS_AUTH_HEX_LEN + 1])
{
    char t[600];
    int n = snprintf(t, sizeof(t), "ds-peer-nonce\n%llu\n%s\n%s", (unsigned long long)conn_id, from,
                     nonce_a);
    ds__auth_hmac_hex(a->nonce_key, t,
                      n < 0                   ? 0
                      : (size_t)n < sizeof(t) ? (size_t)n
                                              : sizeof(t) - 1,
                      out);
}

bool ds__peer_auth_nonce_ok(const char *p, size_t len)
{
    if (len != DS_AUTH_HEX_LEN) return false;
    for (size_t i = 0; i < len; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) return false;
    return true;
}

void ds__peer_auth_failed(ds_peer_auth_t *a)
{
    atomic_fetch_add_explicit(&a->failures, 1, memory_order_relaxed);
}

uint64_t ds__peer_auth_failures(const ds_peer_auth_t *a)
{
    return atomic_load_explicit(&((ds_peer_auth_t *)a)->failures, memory_order_relaxed);
}
