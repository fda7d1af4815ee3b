/* The plain refusal a worker at its connection limit sends at accept. */
#ifndef DS_WORKER_NET_REFUSE_H
#define DS_WORKER_NET_REFUSE_H

/* Writes one plain HELLO answer (K_RUNTIME_ERROR, naming the connection
 * limit) to the freshly accepted fd, drops any input already there and
 * closes fd. Best effort: a client that is gone is not an error. */
void ds__net_refuse_at_limit(int fd);

#endif
