/* Status codes shared by every layer: worker, client SDK, CLI, connector and the
 * Python bindings. The numbers mirror Yuanrong Datasystem's StatusCode so that
 * logs and Python exceptions read the same as there. One X-macro table generates
 * the enum, the names and the default messages. */
#ifndef DATASYSTEM_STATUS_H
#define DATASYSTEM_STATUS_H

#include "ds/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DS_STATUS_MAP(X)                                                                           \
    X(K_OK, 0, "ok")                                                                               \
    X(K_DUPLICATED, 1, "duplicated")                                                               \
    X(K_INVALID, 2, "invalid argument")                                                            \
    X(K_NOT_FOUND, 3, "not found")                                                                 \
    X(K_RUNTIME_ERROR, 5, "runtime error")                                                         \
    X(K_OUT_OF_MEMORY, 6, "out of memory")                                                         \
    X(K_IO_ERROR, 7, "i/o error")                                                                  \
    X(K_NOT_READY, 8, "not ready")                                                                 \
    X(K_NOT_AUTHORIZED, 9, "not authorized")                                                       \
    X(K_TRY_AGAIN, 19, "try again")                                                                \
    X(K_SHUTTING_DOWN, 21, "shutting down")                                                        \
    X(K_CLIENT_WORKER_DISCONNECT, 23, "client lost its connection to the worker")                  \
    X(K_WORKER_TIMEOUT, 24, "worker timeout")                                                      \
    X(K_NOT_FOUND_IN_L2CACHE, 26, "not found in the L2 cache")                                     \
    X(K_NOT_SUPPORTED, 36, "not supported")                                                        \
    X(K_RPC_DEADLINE_EXCEEDED, 1001, "rpc deadline exceeded")                                      \
    X(K_RPC_UNAVAILABLE, 1002, "rpc unavailable")                                                  \
    X(K_OC_ALREADY_SEALED, 2000, "object already sealed")                                          \
    X(K_WRITE_BACK_QUEUE_FULL, 2003, "write-back queue full")                                      \
    X(K_OC_KEY_ALREADY_EXIST, 2004, "key already exists")                                          \
    X(K_SC_STREAM_NOT_FOUND, 3000, "stream not found")                                             \
    X(K_SC_PRODUCER_NOT_FOUND, 3001, "producer not found")                                         \
    X(K_SC_CONSUMER_NOT_FOUND, 3002, "consumer not found")                                         \
    X(K_SC_STREAM_IN_USE, 3006, "stream in use")                                                   \
    X(K_SC_ALREADY_CLOSED, 3009, "already closed")                                                 \
    X(K_FUTURE_TIMEOUT, 5002, "future timed out")                                                  \
    X(K_CUDA_ERROR, 5003, "CUDA error")

typedef enum {
#define DS__STATUS_ENUM(name, num, msg) DS_##name = num,
    DS_STATUS_MAP(DS__STATUS_ENUM)
#undef DS__STATUS_ENUM
} ds_status_t;

/* "K_NOT_FOUND" for DS_K_NOT_FOUND; "K_UNKNOWN" for a number not in the table. */
DS_EXPORT const char *ds_status_name(int code);
/* A short default message for the code ("not found"). */
DS_EXPORT const char *ds_status_message(int code);

/* The message of the last failing call made by this thread through any ds_ or
 * omni_ function, e.g. "key 'a b' has invalid byte 0x20 at offset 1". Never NULL;
 * valid until this thread's next call into the library. */
DS_EXPORT const char *ds_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
