/* Faults a single worker must survive: a restart under a connected client
 * (a clear error, then the client reconnects by itself; buffers from before
 * stay readable) and raw garbage written to both of its sockets (an error
 * answer or a closed connection; the worker keeps serving everyone else). */
#include "harness.h"

#include "common/clock.h"
#include "common/net.h"
#include "common/wire.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

static dst_worker_t W;

static int setup(void **state)
{
    (void)state;
    return dst_worker_start(&W, 64, NULL);
}

static int teardown(void **state)
{
    (void)state;
    dst_worker_stop(&W);
    return 0;
}

static void test_restart_with_connected_client(void **state)
{
    (void)state;
    if (dst_worker_external(&W)) skip();
    ds_client_t *l = dst_connect(&W, DS_TRANSPORT_LOCAL);
    ds_client_t *r = dst_connect(&W, DS_TRANSPORT_TCP);
    const size_t sz = 1 << 20;
    uint8_t *v = malloc(sz);
    dst_fill(v, sz, 77);
    assert_int_equal(ds_kv_set(l, "before-restart", v, sz, NULL), DS_K_OK);
    const char *k = "before-restart";
    ds_buffer_t *b = NULL;
    assert_int_equal(ds_kv_get_buffers(l, 1, &k, 0, &b), DS_K_OK);
    assert_int_equal(dst_worker_restart(&W), 0);
    ds_client_t *cs[2] = {l, r};
    for (int i = 0; i < 2; i++) {
        int ok_at = -1;
        for (int attempt = 0; attempt < 5 && ok_at < 0; attempt++) {
            ds_status_t st = ds_kv_set(cs[i], "after-restart", "x", 1, NULL);
            if (st == DS_K_OK) {
                ok_at = attempt;
            } else {
                assert_true(st == DS_K_CLIENT_WORKER_DISCONNECT || st == DS_K_RPC_UNAVAILABLE);
                assert_true(strlen(ds_last_error()) > 10);
                usleep(100000);
            }
        }
        assert_true(ok_at >= 0 && ok_at <= 2);
        /* the restarted worker is empty: the old key is gone, cleanly */
        void *out = NULL;
        size_t len;
        assert_int_equal(ds_kv_get(cs[i], "before-restart", 0, &out, &len), DS_K_NOT_FOUND);
    }
    /* a buffer taken before the restart still reads its bytes */
    assert_true(dst_check(ds_buffer_data(b), sz, 77));
    ds_buffer_release(b);
    assert_true(ds_client_is_local(l));
    ds_client_close(l);
    ds_client_close(r);
    free(v);
}

/* Sends bytes raw, then reads what the worker answers for up to 2 s: every
 * frame must decode, and the exchange must end in an error answer or a closed
 * connection (a leading OK is allowed for a valid HELLO). */
static void send_raw(int fd, const void *p, size_t n)
{
    ds__write_full(fd, p, n, ds__now_ms() + 2000);
    static uint8_t resp[1 << 16];
    size_t have = 0, pos = 0;
    uint64_t dl = ds__now_ms() + 2000;
    for (;;) {
        while (have - pos >= DS_WIRE_HEADER_LEN) {
            ds_wire_header_t h;
            char err[128];
            assert_int_equal(ds__wire_header_decode(resp + pos, 1u << 30, &h, err, sizeof(err)), 0);
            assert_true(h.flags & DS_FLAG_RESPONSE);
            if (h.status != DS_K_OK) return;
            assert_int_equal(h.opcode, DS_OP_HELLO);
            if (have - pos < DS_WIRE_HEADER_LEN + h.meta_len + h.data_len) break;
            pos += DS_WIRE_HEADER_LEN + h.meta_len + h.data_len;
        }
        ssize_t got = recv(fd, resp + have, sizeof(resp) - have, MSG_DONTWAIT);
        if (got == 0) return;                                           /* closed by the worker */
        if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return; /* reset */
        if (got > 0) {
            have += (size_t)got;
            continue;
        }
        if (ds__now_ms() > dl) return; /* still waiting for more bytes: fine too */
        usleep(5000);
    }
}

static int raw_conn(bool unix_sock)
{
    char err[256], path[300];
    if (!unix_sock) return ds__tcp_connect(W.host, W.port, 2000, err, sizeof(err));
    ds__socket_path(W.sockdir, W.host, W.port, path, sizeof(path));
    return ds__unix_connect(path, 2000, err, sizeof(err));
}

static void header(uint8_t *out, uint16_t op, uint32_t meta_len, uint64_t data_len)
{
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .opcode = op,
                          .meta_len = meta_len,
                          .req_id = 1,
                          .data_len = data_len};
    ds__wire_header_encode(&h, out);
}

static void test_garbage_on_both_sockets(void **state)
{
    (void)state;
    ds_client_t *good = dst_connect(&W, DS_TRANSPORT_LOCAL);
    assert_int_equal(ds_kv_set(good, "survivor", "alive", 5, NULL), DS_K_OK);
    uint64_t x = 12345;
    for (int u = 0; u < 2; u++) {
        for (int round = 0; round < 40; round++) {
            int fd = raw_conn(u == 1);
            assert_true(fd >= 0);
            uint8_t buf[8192];
            size_t n = 0;
            switch (round % 8) {
            case 0: /* pure noise */
                n = 1 + (size_t)(x % sizeof(buf));
                for (size_t i = 0; i < n; i++) {
                    x = x * 6364136223846793005ull + 1;
                    buf[i] = (uint8_t)(x >> 56);
                }
                break;
            case 1: /* right magic, absurd metadata length */
                header(buf, DS_OP_HELLO, 0xffffffffu, 0);
                n = DS_WIRE_HEADER_LEN;
                break;
            case 2: /* unknown opcode */
                header(buf, 999, 0, 0);
                n = DS_WIRE_HEADER_LEN;
                break;
            case 3: /* data before HELLO */
                header(buf, DS_OP_GET, 4, 0);
                memset(buf + DS_WIRE_HEADER_LEN, 0xff, 4);
                n = DS_WIRE_HEADER_LEN + 4;
                break;
            case 4: /* truncated HELLO metadata */
                header(buf, DS_OP_HELLO, 3, 0);
                n = DS_WIRE_HEADER_LEN + 3;
                memset(buf + DS_WIRE_HEADER_LEN, 1, 3);
                break;
            case 5: /* enormous data section */
                header(buf, DS_OP_SET, 0, UINT64_MAX / 2);
                n = DS_WIRE_HEADER_LEN;
                break;
            case 6: { /* valid HELLO, then a SET announcing 10,000 keys in 8 bytes */
                ds_wbuf_t m;
                ds__wbuf_init(&m);
                ds__wbuf_u32(&m, DS_WIRE_VERSION);
                ds__wbuf_u64(&m, 0);
                ds__wbuf_u8(&m, 0);
                ds__wbuf_cstr(&m, "");
                header(buf, DS_OP_HELLO, (uint32_t)m.len, 0);
                memcpy(buf + DS_WIRE_HEADER_LEN, m.buf, m.len);
                n = DS_WIRE_HEADER_LEN + m.len;
                ds__wbuf_free(&m);
                uint8_t *p = buf + n;
                header(p, DS_OP_SET, 10, 5);
                memset(p + DS_WIRE_HEADER_LEN, 0, 10);
                p[DS_WIRE_HEADER_LEN + 6] = 0x10; /* n = 10000ish */
                p[DS_WIRE_HEADER_LEN + 7] = 0x27;
                memcpy(p + DS_WIRE_HEADER_LEN + 10, "abcde", 5);
                n += DS_WIRE_HEADER_LEN + 15;
                break;
            }
            default: /* a response frame sent to the worker */
                header(buf, DS_OP_HEALTH, 0, 0);
                buf[5] = DS_FLAG_RESPONSE;
                n = DS_WIRE_HEADER_LEN;
            }
            send_raw(fd, buf, n);
            close(fd);
            /* the worker keeps serving others, data intact */
            void *v = NULL;
            size_t len = 0;
            assert_int_equal(ds_kv_get(good, "survivor", 0, &v, &len), DS_K_OK);
            assert_memory_equal(v, "alive", 5);
            ds_free(v);
        }
    }
    assert_true(dst_stat(&W, "clients.protocol_errors") >= 40);
    ds_client_close(good);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_garbage_on_both_sockets),
        cmocka_unit_test(test_restart_with_connected_client),
    };
    return dst_run_group_tests(tests, setup, teardown);
}
