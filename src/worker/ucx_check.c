/* ds_ucx_check HEX: whether this host's UCX can create an endpoint to the
 * UCX worker address HEX (exit 0), or not (exit 2, the reason on stderr).
 *
 * A worker with --enable_rdma runs it before it creates an endpoint to an
 * address a remote client sent (UCX_ADDR, see common/wire.h): UCX parses
 * addresses with assertions, not checks, so a malformed one aborts the
 * process that parses it (`address.c: Assertion ... failed`). Parsing it in
 * this throwaway process first, with the same UCX and the same UCX_*
 * settings (inherited), means a hostile client can crash only this helper.
 * It exits right after ucp_ep_create, before UCX sends anything. */
#include "common/ucx_common.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void ep_err(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    (void)arg;
    (void)ep;
    (void)st;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: ds_ucx_check HEX-ADDRESS\n");
        return 2;
    }
    /* Nothing of the worker's (sockets, the arena) stays open here. */
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    alarm(10); /* bounded, whatever UCX does */
    static uint8_t bin[DS_UCX_ADDR_HEX_MAX / 2];
    ssize_t n = ds__ucx_from_hex(argv[1], strlen(argv[1]), bin, sizeof(bin));
    if (n <= 0) {
        fprintf(stderr, "not lowercase hex of 2..%d characters\n", DS_UCX_ADDR_HEX_MAX);
        return 2;
    }
    char err[512], self[DS_UCX_ADDR_HEX_MAX + 1];
    ucp_context_h ctx;
    ucp_worker_h worker;
    if (ds__ucx_open("the address check", UCS_THREAD_MODE_SINGLE, &ctx, &worker, self, err,
                     sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .address = (const ucp_address_t *)bin,
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = {.cb = ep_err, .arg = NULL}};
    ucp_ep_h h;
    ucs_status_t st = ucp_ep_create(worker, &ep, &h);
    if (st == UCS_OK) {
        /* Parsed. Out at once, with no progress: the wire-up to the client
         * that UCX has queued is never sent, so the client's UCX sees at
         * most a connection that closes (driving the wire-up and then
         * closing made UCX 1.13 abort in the client, a REP still pending on
         * an endpoint that failed). */
        _exit(0);
    }
    fprintf(stderr, "ucp_ep_create: %s\n", ucs_status_string(st));
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    return 2;
}
