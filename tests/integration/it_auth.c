/* Shared-secret authentication: a worker started with --auth_token_file
 * serves TCP clients only after they answer its HMAC challenge; clients
 * without the secret, or with a wrong one, get K_NOT_AUTHORIZED and nothing
 * else; raw requests before authenticating are refused and the connection
 * closed; the Unix socket (a 0700 directory) needs no secret. */
#include "harness.h"

#include "common/clock.h"
#include "common/net.h"
#include "common/wire.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;
static char secret_path[300];
static const char *SECRET = "correct horse battery staple";

static int setup(void **state)
{
    (void)state;
    snprintf(secret_path, sizeof(secret_path), "/tmp/dst-auth-%d", (int)getpid());
    FILE *f = fopen(secret_path, "w");
    if (f == NULL) return -1;
    fprintf(f, "%s\n", SECRET);
    fclose(f);
    chmod(secret_path, 0600);
    char extra[400];
    snprintf(extra, sizeof(extra), "--auth_token_file %s", secret_path);
    /* The harness's readiness probe is a TCP client without a token: give it
     * the secret through the environment the harness reads. */
    setenv("DS_TEST_TOKEN", SECRET, 1);
    return dst_worker_start(&W, 32, extra);
}

static int teardown(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    unlink(secret_path);
    return 0;
}

static ds_status_t try_connect(ds_transport_t t, const char *token, ds_client_t **out)
{
    ds_client_options_t o;
    ds_client_options_init(&o);
    o.host = W.host;
    o.port = W.port;
    o.transport = t;
    o.token = token;
    o.unix_socket_dir = W.sockdir;
    return ds_client_connect(&o, out);
}

static void test_tcp_needs_the_secret(void **state)
{
    (void)state;
    ds_client_t *c = NULL;
    assert_int_equal(try_connect(DS_TRANSPORT_TCP, NULL, &c), DS_K_NOT_AUTHORIZED);
    assert_null(c);
    assert_non_null(strstr(ds_last_error(), "token"));
    assert_int_equal(try_connect(DS_TRANSPORT_TCP, "wrong secret", &c), DS_K_NOT_AUTHORIZED);
    assert_non_null(strstr(ds_last_error(), "authentication failed"));
    assert_int_equal(try_connect(DS_TRANSPORT_TCP, SECRET, &c), DS_K_OK);
    assert_int_equal(ds_kv_set(c, "authed", "yes", 3, NULL), DS_K_OK);
    void *v;
    size_t len;
    assert_int_equal(ds_kv_get(c, "authed", 0, &v, &len), DS_K_OK);
    assert_memory_equal(v, "yes", 3);
    ds_free(v);
    ds_client_close(c);
    assert_true(dst_stat(&W, "clients.auth_failures") >= 1);
}

static void test_unix_socket_is_trusted(void **state)
{
    (void)state;
    ds_client_t *c = NULL;
    assert_int_equal(try_connect(DS_TRANSPORT_LOCAL, NULL, &c), DS_K_OK);
    void *v;
    size_t len;
    assert_int_equal(ds_kv_get(c, "authed", 0, &v, &len), DS_K_OK);
    ds_free(v);
    ds_client_close(c);
}

static void test_raw_requests_refused(void **state)
{
    (void)state;
    char err[256];
    for (unsigned op = DS_OP_SET; op < DS_OP__MAX; op++) {
        if (ds__opcode_name(op) == NULL) continue; /* a gap between opcode ranges */
        int fd = ds__tcp_connect(W.host, W.port, 2000, err, sizeof(err));
        assert_true(fd >= 0);
        uint8_t hb[DS_WIRE_HEADER_LEN];
        ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                              .version = DS_WIRE_VERSION,
                              .opcode = (uint16_t)op,
                              .req_id = 7};
        ds__wire_header_encode(&h, hb);
        assert_int_equal(ds__write_full(fd, hb, sizeof(hb), ds__now_ms() + 2000), 0);
        assert_int_equal(ds__read_full(fd, hb, sizeof(hb), ds__now_ms() + 2000), 0);
        assert_int_equal(ds__wire_header_decode(hb, 1u << 20, &h, err, sizeof(err)), 0);
        assert_int_equal(h.status, DS_K_NOT_AUTHORIZED);
        assert_int_equal(h.data_len, 0);
        char meta[512];
        assert_true(h.meta_len < sizeof(meta));
        assert_int_equal(ds__read_full(fd, meta, h.meta_len, ds__now_ms() + 2000), 0);
        /* ... and nothing else: the worker closes the connection */
        char more;
        uint64_t dl = ds__now_ms() + 2000;
        ssize_t r;
        do {
            r = recv(fd, &more, 1, MSG_DONTWAIT);
        } while (r < 0 && ds__now_ms() < dl && (usleep(5000), 1));
        assert_true(r <= 0);
        close(fd);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_needs_the_secret),
        cmocka_unit_test(test_unix_socket_is_trusted),
        cmocka_unit_test(test_raw_requests_refused),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
