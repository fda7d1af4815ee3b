/* The refusal at the connection limit: written before any TLS byte, so that
 * a TLS client reads the worker's status and reason instead of a handshake
 * error about the bytes (client/conn.c). Tests drive it against a real TLS
 * client, so it lives apart from the accept path that calls it. */
#include "worker/net/refuse.h"

#include "common/wire.h"
#include "ds/status.h"
#include "worker/net/limits.h"

#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

void ds__net_refuse_at_limit(int fd)
{
    ds_wbuf_t w;
    ds__wbuf_init(&w);
    ds__wbuf_cstr(&w, "worker has reached its connection limit (" DS_STRINGIFY(
                          DS_CONNS_PER_CLIENT) " per --max_client_num)");
    uint8_t hdr[DS_WIRE_HEADER_LEN];
    ds_wire_header_t h = {.magic = DS_WIRE_MAGIC,
                          .version = DS_WIRE_VERSION,
                          .flags = DS_FLAG_RESPONSE,
                          .opcode = DS_OP_HELLO,
                          .status = DS_K_RUNTIME_ERROR,
                          .meta_len = (uint32_t)w.len};
    ds__wire_header_encode(&h, hdr);
    /* One write, so that a TLS client's failed handshake holds all of it:
     * there is no session yet, the frame goes plain. */
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {w.buf, w.len}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t wr = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)wr;
    ds__wbuf_free(&w);
    /* Input already here (a TLS ClientHello) would turn the close into a
     * reset that can discard the refusal before the client reads it: drop
     * what has arrived, without waiting for more. */
    char sink[2048];
    for (int i = 0; i < 8 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
        ;
    shutdown(fd, SHUT_WR);
    close(fd);
}
