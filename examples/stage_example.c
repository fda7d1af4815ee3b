/* How a pipeline stage uses the connector (the README quotes this file; the
 * test suite builds it and runs it against a worker).
 *
 * Stage 0 (thinker) puts a hidden-state tensor and its token ids for request
 * "req-1" on edge 0 -> 1; stage 1 (talker) rebuilds the same key from the
 * request id and the edge and gets the payload, waiting up to
 * get_sub_timeout_ms for it; then the request is cleaned up. Both ends run in
 * this one process for brevity; in a pipeline each is its own process, with
 * the same spec (usually from the stage config: omni_transfer_config_find).
 *
 *   stage_example [HOST:PORT]        default 127.0.0.1:31501 */
#include <stdio.h>
#include <string.h>

#include "omni/connector.h"

int main(int argc, char **argv)
{
    char host[256] = "127.0.0.1", *port = "31501";
    if (argc > 1) {
        snprintf(host, sizeof(host), "%s", argv[1]);
        char *colon = strrchr(host, ':');
        if (colon == NULL) return fprintf(stderr, "usage: stage_example [HOST:PORT]\n"), 2;
        *colon = '\0';
        port = colon + 1;
    }

    /* The runtime.connectors entry of the stage config, as a spec. */
    omni_kv_t extra[] = {{"host", host}, {"port", port}, {"get_sub_timeout_ms", "1000"}};
    omni_connector_spec_t spec = {"YuanrongConnector", extra, 3};
    omni_connector_t *conn = NULL;
    if (omni_factory_create(&spec, &conn) != DS_K_OK) {
        fprintf(stderr, "stage_example: %s\n", ds_last_error());
        return 1;
    }

    /* Stage 0: {"hidden": float32[4, 8], "token_ids": [...]} under "req-1". */
    float hidden[4][8];
    for (int i = 0; i < 32; i++)
        hidden[i / 8][i % 8] = (float)i / 8.0f;
    int64_t shape[] = {4, 8};
    omni_value_t *payload = omni_value_new_map(), *ids = omni_value_new_array();
    for (int t = 0; t < 4; t++)
        omni_array_push(ids, omni_value_new_int(151644 + t));
    omni_map_set(payload, "token_ids", ids);
    omni_map_set(payload, "hidden",
                 omni_value_new_tensor_ref(OMNI_DTYPE_FLOAT32, shape, 2, hidden, sizeof(hidden)));
    omni_data_t data = omni_data_value(payload);
    size_t size = 0;
    ds_status_t st = omni_connector_put(conn, "0", "1", "req-1", &data, &size, NULL);
    omni_value_free(payload);
    if (st != DS_K_OK) {
        fprintf(stderr, "stage_example: put: %s\n", ds_last_error());
        omni_connector_free(conn);
        return 1;
    }
    printf("stage 0: put req-1 on edge 0->1 (%zu bytes)\n", size);

    /* Stage 1: same request id and edge, so the same key "req-1:0_1". */
    omni_received_t *got = NULL;
    st = omni_connector_get(conn, "0", "1", "req-1", NULL, &got);
    if (st == DS_K_NOT_FOUND) {
        fprintf(stderr, "stage_example: nothing arrived within get_sub_timeout_ms\n");
    } else if (st == DS_K_OK) {
        const omni_value_t *v = NULL;
        omni_tensor_view_t t;
        if (omni_received_value(got, &v) == DS_K_OK &&
            omni_value_get_tensor(omni_map_get(v, "hidden"), &t) == DS_K_OK) {
            float last;
            memcpy(&last, (const char *)t.data + t.nbytes - sizeof(last), sizeof(last));
            printf("stage 1: got req-1: hidden float32[%lld, %lld], %zu token ids, last %.3f\n",
                   (long long)t.shape[0], (long long)t.shape[1],
                   omni_value_len(omni_map_get(v, "token_ids")), last);
        } else {
            st = DS_K_INVALID;
        }
        omni_received_free(got); /* releases the pinned buffer */
    }
    if (st != DS_K_OK) fprintf(stderr, "stage_example: get: %s\n", ds_last_error());

    omni_connector_cleanup(conn, "req-1"); /* deletes req-1's keys on every edge */
    omni_health_t h;
    omni_connector_health(conn, &h);
    printf("health: %s, puts %llu, gets %llu, bytes %llu, errors %llu\n", h.status,
           (unsigned long long)h.puts, (unsigned long long)h.gets,
           (unsigned long long)h.bytes_transferred, (unsigned long long)h.errors);
    omni_connector_free(conn);
    return st == DS_K_OK ? 0 : 1;
}
