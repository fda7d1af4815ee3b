/* Connection limits that the flag table's help texts spell out too: a
 * header of macros only, so flags.c (also built into dscli) can include it
 * without the connection layer. */
#ifndef DS_WORKER_NET_LIMITS_H
#define DS_WORKER_NET_LIMITS_H

/* Connections each client may hold (the client library's pool of 64 plus
 * its anchor, with room): the worker serves --max_client_num times this.
 * A plain integer, so that strings can spell it (DS_STRINGIFY). */
#define DS_CONNS_PER_CLIENT 70

#define DS_STRINGIFY_(x) #x
#define DS_STRINGIFY(x) DS_STRINGIFY_(x)

#endif
