/* The disk queue: the loop's side (jobs collected during a turn and
 * handed over in one go, deletions queued for a backend, the waiter a
 * request's answer waits on) and the disk I/O thread that runs every
 * backend call in queue order and hands finished jobs back through an
 * eventfd (see ../THREADS.md). */
#include "worker/ops/tier_int.h"

#include "common/clock.h"
#include "common/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* JOB_RETTL: an object only on disk gets a new deadline: read it, write it
 * back with j->meta.ttl_wall_ms (same temporary-file-and-rename write). */
static int run_rettl(job_t *j)
{
    ds_l2_t *l2 = j->be;
    void *buf = malloc(j->meta.size ? j->meta.size : 1);
    if (buf == NULL) {
        snprintf(j->err, sizeof(j->err), "out of memory for %llu bytes",
                 (unsigned long long)j->meta.size);
        return -1;
    }
    ds_l2_meta_t m;
    int rc = l2->ops->get(l2, j->key, j->keylen, buf, j->meta.size, &m, j->err, sizeof(j->err));
    if (rc == 0) {
        m.ttl_wall_ms = j->meta.ttl_wall_ms;
        rc = l2->ops->put(l2, j->key, j->keylen, buf, &m, j->err, sizeof(j->err));
    }
    free(buf);
    return rc;
}

static void run_job(job_t *j)
{
    ds_l2_t *l2 = j->be;
    const char *key = j->obj ? j->obj->key : j->key;
    uint32_t kl = j->obj ? j->obj->keylen : j->keylen;
    j->err[0] = '\0';
    switch (j->kind) {
    case JOB_PUT:
        if (atomic_load(&j->superseded)) { /* a newer value of the key follows */
            j->skipped = true;
            j->rc = 0;
            break;
        }
        j->rc = l2->ops->put(l2, key, kl, j->data, &j->meta, j->err, sizeof(j->err));
        break;
    case JOB_GET:
        j->rc = l2->ops->get(l2, key, kl, j->data, j->obj->size, &j->meta, j->err, sizeof(j->err));
        break;
    case JOB_DEL:
        j->rc = l2->ops->del(l2, key, kl, j->err, sizeof(j->err));
        break;
    case JOB_NOP: /* marks a point in the queue: everything before it is done */
        j->rc = 0;
        break;
    case JOB_RETTL:
        j->rc = run_rettl(j);
        break;
    case JOB_HEAD: /* sfs: the header only (see l2.h) */
        j->rc = l2->ops->get(l2, key, kl, NULL, 0, &j->meta, j->err, sizeof(j->err));
        break;
    }
}

/* Hands finished jobs (a list, in order) back to the loop. */
static void post_done(ds_tier_t *t, job_t *l)
{
    pthread_mutex_lock(&t->mu);
    while (l) {
        job_t *next = l->next;
        l->next = t->done;
        t->done = l;
        l = next;
    }
    pthread_mutex_unlock(&t->mu);
    uint64_t one = 1;
    ssize_t w = write(t->done_fd, &one, sizeof(one));
    (void)w;
}

/* Takes jobs in order until told to stop with nothing left: a clean stop
 * flushes the write-back queue. A write or delete the L2 answers with
 * DS_L2_PENDING (group commit) is held until a sync covers it (every held
 * job is the L2's, in queue order): the backend syncs when its batch is due,
 * or at once when the queue is empty. Other jobs are handed back as they
 * finish, ahead of held ones. With nothing queued or held, the L2 does its
 * upkeep (compaction), a bounded step at a time so that a job waits for one
 * step at most, unless the worker is stopping. The thread is named
 * "ds-disk-io". */
void *ds__tier_io_thread(void *arg)
{
    ds_tier_t *t = arg;
    /* named for ps -L, top -H and debuggers (at most 15 characters) */
    (void)pthread_setname_np(pthread_self(), "ds-disk-io");
    job_t *held = NULL, **held_tail = &held;
    char err[sizeof(held->err)];
    bool upkeep = false; /* the L2's upkeep has another step to do */
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (t->todo == NULL && !atomic_load(&t->stop) && !upkeep)
            pthread_cond_wait(&t->cv, &t->mu);
        job_t *j = t->todo;
        if (j) {
            t->todo = j->next;
            if (t->todo == NULL) t->todo_tail = NULL;
        }
        bool idle = t->todo == NULL;
        pthread_mutex_unlock(&t->mu);
        if (j == NULL && atomic_load(&t->stop)) break;
        if (j == NULL) { /* nothing queued: the next step of the upkeep */
            upkeep = held == NULL && t->l2->ops->maintain(t->l2);
            continue;
        }
        run_job(j);
        j->next = NULL;
        if (j->rc == DS_L2_PENDING) {
            *held_tail = j;
            held_tail = &j->next;
        } else {
            post_done(t, j);
        }
        if (held) {
            err[0] = '\0';
            int s = t->l2->ops->sync(t->l2, idle, err, sizeof(err));
            if (s != 0) {
                for (job_t *h = held; h; h = h->next) {
                    h->rc = s > 0 ? 0 : -1;
                    if (s < 0) snprintf(h->err, sizeof(h->err), "%s", err);
                }
                post_done(t, held);
                held = NULL;
                held_tail = &held;
            }
        }
        if (idle && held == NULL && !atomic_load(&t->stop) && t->l2 && t->l2->ops->maintain)
            upkeep = t->l2->ops->maintain(t->l2);
    }
    return NULL;
}

/* Jobs are collected on the loop and handed to the thread in one go at
 * the end of the loop's turn (submit_flush, from ds__tier_tick), after the
 * turn's answers went out: a write-back SET does not pay for waking the
 * thread, and a batch of jobs costs one lock and one wake. */
void ds__tier_submit(ds_tier_t *t, job_t *j)
{
    t->depth++;
    if (j->w) j->w->pending++;
    j->next = NULL;
    if (t->pend_tail)
        t->pend_tail->next = j;
    else
        t->pend = j;
    t->pend_tail = j;
}

void ds__tier_submit_flush(ds_tier_t *t)
{
    if (t->pend == NULL) return;
    pthread_mutex_lock(&t->mu);
    if (t->todo_tail)
        t->todo_tail->next = t->pend;
    else
        t->todo = t->pend;
    t->todo_tail = t->pend_tail;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    t->pend = t->pend_tail = NULL;
}

/* Queues the deletion of key's file in a backend (no index change); the
 * job, or NULL when out of memory. */
job_t *ds__tier_submit_del(ds_tier_t *t, bool spill, const char *key, uint32_t keylen)
{
    job_t *j = calloc(1, sizeof(*j));
    char *k = malloc(keylen + 1);
    if (j == NULL || k == NULL) {
        free(j);
        free(k);
        t->c.errors++;
        DS_LOG_ERROR("out of memory queueing the deletion of '%.*s'",
                     (int)(keylen > 64 ? 64 : keylen), key);
        return NULL;
    }
    memcpy(k, key, keylen);
    k[keylen] = '\0';
    j->kind = JOB_DEL;
    j->be = spill ? t->spill : t->l2;
    j->spill = spill;
    j->key = k;
    j->keylen = keylen;
    ds__tier_submit(t, j);
    return j;
}

/* The waiter of the request being handled: its answer waits for every job
 * that joins it (ds__tier_hold_answer). NULL on out of memory. */
waiter_t *ds__tier_open_waiter(ds_tier_t *t)
{
    if (t->open == NULL) t->open = calloc(1, sizeof(*t->open));
    return t->open;
}

/* Queues the deletion of key's L2 copy for key idx of the request being
 * handled, whose answer waits for it; e: the index entry being removed,
 * restored if the delete fails (restore), else only reported. Without
 * memory to wait, the delete is queued unwatched. */
void ds__tier_del_waited(ds_tier_t *t, const char *key, uint32_t keylen, uint32_t idx,
                         const ent_t *e, bool restore)
{
    waiter_t *w = idx == DS_TIER_UNWATCHED ? NULL : ds__tier_open_waiter(t);
    job_t *j = ds__tier_submit_del(t, false, key, keylen);
    if (w == NULL || j == NULL) return;
    j->w = w;
    w->pending++;
    j->idx = idx;
    j->restore = restore;
    j->meta.size = e->size;
    j->meta.write_mode = e->mode;
    j->meta.ttl_wall_ms = e->ttl_wall_ms;
}

/* A watched L2 delete failed: the request learns it, and a DEL's key keeps
 * its copy in the index unless a newer value came meanwhile. */
void ds__tier_del_failed(ds_server_t *srv, job_t *j)
{
    ds_tier_t *t = srv->tier;
    waiter_t *w = j->w;
    if (w && w->st && j->idx < w->n) {
        w->st[j->idx] = DS_K_IO_ERROR;
        if (w->first[0] == '\0')
            snprintf(w->first, sizeof(w->first), "L2 delete of '%.*s' failed: %.300s",
                     (int)(j->keylen > 64 ? 64 : j->keylen), j->key, j->err);
    }
    if (j->restore && ds__tier_ix_find(&t->ix, j->key, j->keylen) == NULL &&
        ds__store_lookup(srv->store, j->key, j->keylen, ds__now_ms()) == NULL)
        ds__tier_ix_put(&t->ix, j->key, j->keylen, &j->meta);
}
