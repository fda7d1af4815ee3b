/* The storage tiers' index of what the L2 holds (worker/ops/tier.c), built
 * by ds__tier_init from an sfs directory in a temp folder, with no worker
 * running: every valid object is indexed with its size and write mode,
 * expired ones are deleted at start, a key whose deadline passes later
 * reads as absent and its file is deleted, a forgotten key is no longer
 * held, the counters follow, the index grows past its first buckets, and an
 * unknown --l2_cache_type is refused with a message naming it. */
#include "worker/ops/tier_int.h"
#include "worker/ops/worker.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char root[128];

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/ds-tierix-XXXXXX");
    return mkdtemp(root) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes an object of n bytes straight into the sfs directory, as an
 * earlier worker would have. */
static void put(const char *key, size_t n, uint64_t ttl_wall_ms, uint8_t mode)
{
    char err[600];
    ds_l2_t *l2 = ds__l2_sfs_open(root, err, sizeof(err));
    if (l2 == NULL) fail_msg("sfs open: %s", err);
    uint8_t *v = calloc(1, n ? n : 1);
    ds_l2_meta_t m = {n, 1, ttl_wall_ms, mode};
    if (l2->ops->put(l2, key, strlen(key), v, &m, err, sizeof(err)) != 0)
        fail_msg("sfs put: %s", err);
    free(v);
    l2->ops->destroy(l2);
}

/* The object's file is in the directory. */
static bool on_disk(const char *key)
{
    char name[600], path[800];
    assert_int_equal(ds__l2_sfs_name(key, strlen(key), name, sizeof(name)), 0);
    snprintf(path, sizeof(path), "%s/%s", root, name);
    struct stat st;
    return stat(path, &st) == 0;
}

/* A server with just what the tiers use: the flags and an event loop. */
static ds_server_t *server(const char *type)
{
    ds_server_t *srv = calloc(1, sizeof(*srv));
    assert_non_null(srv);
    char *argv[] = {"datasystem_worker", "--l2_cache_type", (char *)type, "--sfs_path", root};
    char err[600];
    if (ds__flags_parse(&srv->cfg, 5, argv, err, sizeof(err)) != 0) fail_msg("flags: %s", err);
    srv->net.loop = ds__loop_create();
    assert_non_null(srv->net.loop);
    return srv;
}

static void server_free(ds_server_t *srv)
{
    ds__tier_destroy(srv);
    ds__loop_destroy(srv->net.loop);
    free(srv);
}

static bool has(ds_server_t *srv, const char *key)
{
    return ds__tier_has(srv, key, (uint32_t)strlen(key));
}

static void test_index_built_at_start(void **state)
{
    (void)state;
    uint64_t now = wall_ms();
    put("ix-small", 100, 0, DS_WRITE_THROUGH_L2_CACHE);
    put("ix-large", 70000, 0, DS_WRITE_BACK_L2_CACHE);
    put("ix-later", 10, now + 3600 * 1000, DS_WRITE_THROUGH_L2_CACHE);
    put("ix-expired", 10, now - 1000, DS_WRITE_THROUGH_L2_CACHE);
    assert_true(on_disk("ix-expired"));

    ds_server_t *srv = server("sfs");
    char err[600];
    if (ds__tier_init(srv, err, sizeof(err)) != 0) fail_msg("tier init: %s", err);
    ds_tier_counters_t c;
    assert_true(ds__tier_counters(srv, &c));
    assert_true(c.l2_on);
    assert_false(c.spill_on);
    assert_int_equal(c.objects, 3);
    assert_int_equal(c.bytes, 100 + 70000 + 10);
    assert_true(has(srv, "ix-small"));
    assert_true(has(srv, "ix-large"));
    assert_true(has(srv, "ix-later"));
    assert_false(has(srv, "ix-expired"));
    assert_false(has(srv, "ix-missing"));
    assert_false(has(srv, "ix-smal"));   /* a prefix is another key */
    assert_false(on_disk("ix-expired")); /* deleted by the scan */

    ent_t *e = ds__tier_ix_find(&srv->tier->ix, "ix-large", 8);
    assert_non_null(e);
    assert_int_equal(e->size, 70000);
    assert_int_equal(e->mode, DS_WRITE_BACK_L2_CACHE);
    assert_int_equal(e->ttl_wall_ms, 0);
    e = ds__tier_ix_find(&srv->tier->ix, "ix-later", 8);
    assert_non_null(e);
    assert_int_equal(e->ttl_wall_ms, now + 3600 * 1000);

    /* Forgetting a key: no longer held, counters follow; the file stays
     * (removing the entry is the index's part only). */
    ds__tier_ix_remove(&srv->tier->ix, "ix-large", 8);
    assert_false(has(srv, "ix-large"));
    assert_null(ds__tier_ix_find(&srv->tier->ix, "ix-large", 8));
    assert_true(ds__tier_counters(srv, &c));
    assert_int_equal(c.objects, 2);
    assert_int_equal(c.bytes, 110);
    assert_true(on_disk("ix-large"));
    /* Removing what is not there changes nothing. */
    ds__tier_ix_remove(&srv->tier->ix, "ix-large", 8);
    assert_true(ds__tier_counters(srv, &c));
    assert_int_equal(c.objects, 2);
    server_free(srv);
}

/* A key whose deadline passes while indexed reads as absent from then on,
 * and its file is deleted (queued to the I/O thread; done by the time the
 * tiers stop). */
static void test_expires_while_indexed(void **state)
{
    (void)state;
    uint64_t deadline = wall_ms() + 300;
    put("ix-brief", 10, deadline, DS_WRITE_THROUGH_L2_CACHE);
    put("ix-stays", 10, 0, DS_WRITE_THROUGH_L2_CACHE);
    ds_server_t *srv = server("sfs");
    char err[600];
    if (ds__tier_init(srv, err, sizeof(err)) != 0) fail_msg("tier init: %s", err);
    /* Indexed unless the start took longer than its 300 ms. */
    bool indexed = ds__tier_ix_find(&srv->tier->ix, "ix-brief", 8) != NULL;
    for (int i = 0; i < 100 && wall_ms() <= deadline; i++)
        usleep(20000);
    assert_true(wall_ms() > deadline);
    assert_false(has(srv, "ix-brief"));
    assert_null(ds__tier_ix_find(&srv->tier->ix, "ix-brief", 8));
    assert_true(has(srv, "ix-stays"));
    ds_tier_counters_t c;
    assert_true(ds__tier_counters(srv, &c));
    assert_int_equal(c.objects, 1);
    server_free(srv);
    if (indexed) assert_false(on_disk("ix-brief"));
    assert_true(on_disk("ix-stays"));
}

/* More objects than the index's first 1024 buckets: it grows and finds
 * each. */
static void test_grows(void **state)
{
    (void)state;
    enum { N = 1100 };
    char key[32];
    char err[600];
    ds_l2_t *l2 = ds__l2_sfs_open(root, err, sizeof(err));
    assert_non_null(l2);
    for (int i = 0; i < N; i++) {
        int n = snprintf(key, sizeof(key), "grow-%d", i);
        ds_l2_meta_t m = {(uint64_t)(i % 50), 1, 0, DS_WRITE_THROUGH_L2_CACHE};
        char v[64] = {0};
        assert_int_equal(l2->ops->put(l2, key, (size_t)n, v, &m, err, sizeof(err)), 0);
    }
    l2->ops->destroy(l2);
    ds_server_t *srv = server("sfs");
    if (ds__tier_init(srv, err, sizeof(err)) != 0) fail_msg("tier init: %s", err);
    const ds_dict_t *table = &srv->tier->ix.table;
    assert_true(table->ht[0].size + table->ht[1].size > 1024);
    assert_int_equal(ds__dict_verify(table), 0);
    uint64_t bytes = 0;
    for (int i = 0; i < N; i++) {
        int n = snprintf(key, sizeof(key), "grow-%d", i);
        ent_t *e = ds__tier_ix_find(&srv->tier->ix, key, (uint32_t)n);
        assert_non_null(e);
        assert_int_equal(e->size, (uint64_t)(i % 50));
        bytes += (uint64_t)(i % 50);
    }
    ds_tier_counters_t c;
    assert_true(ds__tier_counters(srv, &c));
    assert_int_equal(c.objects, N);
    assert_int_equal(c.bytes, bytes);
    server_free(srv);
}

/* No backend named: the tiers stay off. An unknown one is refused with a
 * message naming the flag and the value. */
static void test_backend_choice(void **state)
{
    (void)state;
    ds_server_t *srv = server("none");
    char err[600] = "";
    assert_int_equal(ds__tier_init(srv, err, sizeof(err)), 0);
    assert_null(srv->tier);
    ds_tier_counters_t c;
    assert_false(ds__tier_counters(srv, &c));
    server_free(srv);

    srv = server("s3");
    assert_int_equal(ds__tier_init(srv, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "--l2_cache_type 's3'"));
    assert_null(srv->tier);
    server_free(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_index_built_at_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expires_while_indexed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backend_choice, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
