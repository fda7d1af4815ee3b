/* The wire protocol shared by worker, client, CLI and peer workers.
 *
 * A frame is a fixed 32-byte little-endian header, then `meta_len` bytes of
 * metadata (encoded with the ds__wbuf / ds__rbuf codec below), then `data_len`
 * bytes of bulk data (values, concatenated in the order the metadata lists them).
 * Keeping bulk data out of the metadata lets a receiver parse the small part
 * first and then read the values straight into their destination (the arena on
 * the worker, the caller's buffer on the client) without staging copies.
 *
 * Requests carry a request id that the response echoes; a connection may
 * pipeline requests. A request with DS_FLAG_NOREPLY gets no response.
 * The codec does no I/O. Message layouts are documented per opcode in
 * DS_OPCODE_MAP below; every response's metadata starts with a string holding
 * the error message (empty on success). */
#ifndef DS_COMMON_WIRE_H
#define DS_COMMON_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DS_WIRE_MAGIC 0x53445259u /* "YRDS" little-endian */
#define DS_WIRE_VERSION 1
#define DS_WIRE_HEADER_LEN 32
/* Metadata of one frame is bounded: 100,000 keys of 1 KiB plus per-key fields. */
#define DS_WIRE_MAX_META (128u << 20)

/* Header flags. */
#define DS_FLAG_RESPONSE 0x01u
#define DS_FLAG_NOREPLY 0x02u
/* From a peer worker: act on the local store only, no cluster logic. The
 * worker honours it only on a connection that completed PEER_AUTH; from any
 * other connection the request is refused K_NOT_AUTHORIZED. */
#define DS_FLAG_PEER 0x04u
/* Requests only: the metadata starts with `str trace_id` (1..DS_TRACE_ID_MAX
 * bytes of [A-Za-z0-9._:-]), which the worker takes off before the opcode's
 * own layout below and prints in its log lines about the request
 * (Yuanrong's Context.set_trace_id). Frames without the flag are unchanged. */
#define DS_FLAG_TRACE 0x08u
#define DS_TRACE_ID_MAX 128
/* Every flag a request may carry. A request with another bit set is refused
 * K_INVALID (never guessed at); DS_FLAG_RESPONSE on a request is a protocol
 * error that closes the connection. */
#define DS_FLAG_REQUEST_MASK (DS_FLAG_NOREPLY | DS_FLAG_PEER | DS_FLAG_TRACE)

/* HELLO response features. */
#define DS_FEATURE_SETR 0x01u     /* the session mapped the arena and may send SETR */
#define DS_FEATURE_SHM_PINS 0x02u /* pins_offset names the session's pin table */
#define DS_FEATURE_LANE 0x04u     /* the worker gives request lanes (LANE, common/lane.h) */
/* Plain SETs and GETs without a wait are answered at once, never held for
 * another worker or a disk (a standalone worker without storage tiers): a
 * client may pipeline its threads' calls on one connection, where a held
 * answer would hold up every call behind it. */
#define DS_FEATURE_PIPELINE 0x08u

/* SETR flags. */
#define DS_SETR_PIN 0x01u
#define DS_SETR_SHM_PIN 0x02u

/* Per-key kinds in a GET response. */
#define DS_VAL_MISSING 0
#define DS_VAL_INLINE 1 /* bytes follow in the data section */
#define DS_VAL_SHM 2    /* bytes are in the arena at offset; pinned by handle */
#define DS_VAL_UCX 3    /* UCX_GET only: bytes come as a UCX tagged message (tag + index) */

/* A worker's UCX send waits this long past the receiver's own deadline
 * before it is ended and its pin dropped (UCX_PULL, UCX_GET). */
#define DS_UCX_SEND_GRACE_MS 1000u

/* GET request flags. */
#define DS_GET_WANT_SHM 0x01u /* client mapped the arena; large values may come as DS_VAL_SHM */
#define DS_GET_PIN 0x02u      /* zero-copy: every found value comes as DS_VAL_SHM, pinned */

/* The operation table, shared by worker, client and CLI: X(name, number, text).
 * Layouts (req -> resp), "str" = u32 length + bytes, "key" = str, n = u32:
 *
 * HELLO   req: u32 proto, u64 session (0 = new), u8 want_shm, str token, str session_key,
 *              [u64 proof_session, str proof_challenge]
 *         resp: str err, u64 session, u64 arena_size, u32 inline_max, str worker_id,
 *               u32 pid, u64 index_offset, u32 index_slots, u32 index_keymax,
 *               str session_key, str unix_socket, str local_proof, u32 features,
 *               u64 pins_offset;
 *               features: DS_FEATURE_* bits of what this session may use;
 *               pins_offset: the arena offset of the session's table of
 *               readers' shared pins (common/shm_index.h), 0 = none.
 *               Discovery: unix_socket is the absolute path of the worker's
 *               Unix socket ("" when it has none). A client that reached the
 *               worker over TCP connects there and says HELLO with
 *               proof_session = the id of the TCP session it holds open and
 *               proof_challenge = 1..64 random hex characters of its own; on
 *               the Unix socket only, the worker answers local_proof =
 *               hex(HMAC-SHA256(that TCP session's key, challenge)) (common/
 *               auth.h), else "". The TCP session key was told to that TCP
 *               connection alone, so only the worker at host:port can prove
 *               it: see "Discovery" in docs/design.md for the threat model.
 *               when want_shm was granted the arena memfd rides along with
 *               the response as SCM_RIGHTS, and index_slots > 0 says where
 *               the shared GET index (common/shm_index.h) lies in the arena.
 *               Sessions: the session id is a random 64-bit value, and the
 *               response's session_key (32 lowercase hex characters, 128
 *               random bits, sent on every successful HELLO) is what a later
 *               HELLO joining that session must send as its session_key
 *               (empty when creating one). worker_id (16 lowercase hex
 *               characters, random per worker start) is the worker's
 *               identity: a client never keeps a session across two. Refusals:
 *               unknown session -> K_NOT_FOUND; wrong or missing key, or a
 *               join over another transport (TCP vs Unix socket) than the
 *               session was created on -> K_NOT_AUTHORIZED.
 *               Fields are appended, never reordered: the index fields and
 *               the session keys come last so older peers, which stop
 *               reading earlier, ignore them (and a reader parses each group
 *               only when bytes remain).
 * SET     req: u8 mode, u32 ttl, u8 existence, n, n*(key, u64 len); data = values
 *         resp: str err, n, n*u32 status
 * GET     req: i32 sub_timeout_ms, u8 flags, n, n*key
 *         resp: str err, n, n*(u8 kind, u64 size, [kind SHM: u64 offset, u64 handle]);
 *               data = the inline values in order
 * UCX_GET req: the GET layout, then u64 tag, u64 max_size, u32 wait_ms, str ucx_address
 *         A remote client's get over UCX (it set enable_ucx / DS_CLIENT_UCX=1): as
 *         GET, but a found value larger than the worker's inline_max and at most
 *         max_size bytes comes as kind UCX (size only; nothing in the data section):
 *         the worker sends it from its arena with a UCX tagged send to tag + i (i:
 *         the key's index) on the client's UCX worker (ucx_address: hex, 2..2048
 *         characters), pinning the object until UCX is done with it, or for at most
 *         wait_ms + DS_UCX_SEND_GRACE_MS (the send is then ended). The client posts a
 *         receive for each such value into its destination buffer. Larger values
 *         and small ones come inline. A worker without --enable_rdma: K_NOT_SUPPORTED.
 *         ucx_address must be the one this session registered with UCX_ADDR (else
 *         K_INVALID): the worker never hands an unvetted address to UCX.
 * UCX_ADDR req: str ucx_address            resp: str err
 *         Registers the client's UCX worker address for its session, before its
 *         first UCX_GET (and again when it changes). UCX aborts the process that
 *         parses a malformed address, so the worker has a throwaway helper
 *         (ds_ucx_check, next to its binary) create an endpoint to it first, and
 *         answers once that is done: K_OK, or K_INVALID with the helper's reason.
 * CREATE  req: u8 mode, u32 ttl, u8 existence, n, n*(key, u64 size)
 *         resp: str err, n, n*(u32 status, u64 offset, u64 handle)
 * PUBLISH req: n, n*u64 handle            resp: str err, n, n*u32 status
 * RELEASE req: n, n*u64 handle            resp: str err (usually sent NOREPLY)
 * DEL     req: n, n*key                   resp: str err, n, n*u32 status
 * EXIST   req: n, n*key                   resp: str err, n, n*u8 exists
 * EXPIRE  req: u32 ttl, n, n*key          resp: str err, n, n*u32 status
 * QSIZE   req: n, n*key                   resp: str err, n, n*(u32 status, u64 size)
 * GENKEY  req: str prefix                 resp: str err, str key
 * HEALTH  req: (empty)                    resp: str err
 * STATS   req: (empty)                    resp: str err, str json
 * SHUTDOWN req: (empty)                   resp: str err  (accepted on the Unix socket only)
 *
 * READ    req: n, n*(key, u64 offset, u64 size)  (size 0 = to the end of the value)
 *         resp: str err, n, n*(u32 status, u8 kind, u64 size, [kind SHM: u64 offset,
 *               u64 handle]); data = the inline ranges in order
 *         Only the range's bytes travel: a local client (flag-free: it asks over the
 *         Unix socket with the arena mapped) gets kind SHM, the arena offset of the
 *         range's first byte and a pin on the whole value; a remote one gets the
 *         range inline. A missing key: K_NOT_FOUND, kind MISSING; offset beyond the
 *         value's size: K_INVALID, kind MISSING; a range past the end is cut at the
 *         end. The overall status is K_OK when any key was read, else the first
 *         failure's.
 * RLATCH  req: u32 timeout_ms, n, n*key   resp: str err, n, n*u32 status
 *         read latches held by the session for timeout_ms (1..INT32_MAX): a SET,
 *         PUBLISH or DEL of a latched key waits until every latch on it is released
 *         or has timed out, then proceeds. A missing key: K_NOT_FOUND. Latches are
 *         released when the session ends.
 * UNRLATCH req: n, n*key                  resp: str err, n, n*u32 status
 *         releases one latch of this session per key (none held: K_NOT_FOUND)
 * WLATCH  req: u32 timeout_ms, n, n*key   resp: str err, n, n*u32 status
 *         write latches held by the session until UNWLATCH, the session's end or
 *         --max_read_latch_timeout_ms (timeout_ms is checked as RLATCH's and
 *         bounds only the client's retries). Another session's write latch, or
 *         (for WLATCH) its read latch, on the key: K_TRY_AGAIN; RLATCH also
 *         answers K_TRY_AGAIN while another session write-latches the key. SET,
 *         PUBLISH and DEL of other sessions wait while a write latch is held.
 * UNWLATCH req: n, n*key                  resp: str err, n, n*u32 status
 *         In a cluster the four latch operations are applied at each key's ring
 *         owner (OWNED below), so they hold for writers on every worker.
 * SETR    req: u64 space, u64 want, u8 flags, u8 mode, u32 ttl, u8 existence, n,
 *              n*(key, u64 offset, u64 len)
 *         resp: str err, [n, n*u32 status,] then ALWAYS as the metadata's last
 *               24 bytes (also after an error): u64 space, u64 offset, u64 len,
 *               and with flags DS_SETR_PIN one more u64: pin
 *         A set in one round trip for a local client (session mapped the
 *         arena): the values already lie in arena space the session holds (a
 *         reservation, "space", named by a session handle like a pin), and
 *         the request names where: each range [offset, offset + len) must be
 *         64-byte aligned, inside the space, and the ranges in ascending,
 *         non-overlapping order; else the whole request fails K_INVALID and
 *         nothing is published (the space stays as it was). The space before
 *         and between the ranges is freed; what follows the last range stays
 *         reserved. n = 0 only trades the space in (space 0 = none held).
 *         The answer's trailer is the session's space after the request: at
 *         least want bytes when the worker granted them (0 = none: the worker
 *         refused, out of memory or over its reservation budget), always
 *         under a new handle (the old one stops working, so a replayed
 *         request fails). want 0 gives the space back. A space is released
 *         like a pin (RELEASE) and with its session; it is never evicted.
 *         DS_SETR_PIN (exactly one key): the session also keeps a pin on the
 *         object written (published or not, as a CREATE buffer holds its
 *         object), released with RELEASE; 0 when the key failed. With
 *         DS_SETR_SHM_PIN too, the client holds the value's range itself in
 *         its shared pin table (common/shm_index.h), written before the
 *         request: the worker takes no pin (answers 0) and keeps the range
 *         allocated while a table names it, so the view costs no RELEASE.
 *         Remote (TCP) sessions: K_NOT_SUPPORTED.
 * LANE    req: (empty)   resp: str err, u64 hub_offset, u64 lane_offset, u32 gen
 *         (Unix socket, session with the arena, DS_FEATURE_LANE) gives the
 *         connection a request lane in the arena (common/lane.h); the worker's
 *         doorbell eventfd rides along as SCM_RIGHTS. The connection's later
 *         requests may come through the lane. None free: K_OUT_OF_MEMORY;
 *         asked twice: K_INVALID.
 * GREF    req: i32 delta, n, n*key        resp: str err, n, n*(u32 status, u32 count)
 *         global reference counts (ObjectClient.g_increase_ref / g_decrease_ref /
 *         query_global_ref_num): delta +1, -1 or 0 (query). A key may be
 *         referenced before it is put. When a count returns to 0 the key is deleted.
 *         References are the session's: a session decreases only those it added
 *         (others: K_NOT_FOUND), and when it ends the worker drops all of them.
 *         Standalone only: in a cluster the count lives on the worker the
 *         client talks to.
 *         delta DS_GREF_NEST (2): nested references (Yuanrong's publish with
 *         nested_object_keys): key[0], the parent, holds key[1..n-1] (n up to
 *         DS_MAX_BATCH + 1) in place of the keys it held before. A held key is
 *         not deleted while held, though its count be 0 (count reports the
 *         clients' references only); when the parent goes (its count and holds
 *         0), its holds go too. Every key gets the same status; the parent's
 *         count is its entry's.
 * SEAL    req: n, n*key                   resp: str err, n, n*u32 status
 *         (Yuanrong's Buffer.seal) marks each key's current version sealed on
 *         this worker and, in a cluster, at its owner (SEAL_OWNED): a later
 *         SET, PUBLISH or SETR of the key by any client
 *         answers K_OC_ALREADY_SEALED and the sealed version stays (a DEL still
 *         deletes it). A missing key: K_NOT_FOUND.
 *
 * Streams (docs/streams.md; a handle is a producer's or consumer's id):
 * SC_CREATE_PRODUCER req: str stream, u64 page_size, u64 max_stream_size,
 *         u8 auto_cleanup, u64 retain_for_num_consumers, u64 reserve_size,
 *         u8 encrypt_stream[, u64 delay_flush_time_ms (absent: 0)]
 *                                                  resp: str err, u64 handle
 * SC_CLOSE_PRODUCER / SC_CLOSE_CONSUMER req: u64 handle   resp: str err
 * SC_SUBSCRIBE req: str stream, str subscription, u8 type   resp: str err, u64 handle
 * SC_SEND req: u64 handle, i32 timeout_ms (-1: none given), n, n*str element
 *         resp: str err (appended in order; waits while the stream is full)
 * SC_RECEIVE req: u64 handle, u32 expect_num (0 = any), u32 timeout_ms
 *         resp: str err, n, n*(u64 id, u32 size); data: the elements' bytes
 * SC_ACK  req: u64 handle, u64 element_id                   resp: str err
 * SC_DELETE_STREAM req: str stream                          resp: str err
 * SC_QUERY req: str stream    resp: str err, u64 producer_workers, u64 consumers
 * Between workers (peer-only; docs/streams.md, cluster/cluster_stream.c):
 * SC_PEER_REG req: str stream, str worker, u64 seq, u32 producers, u32 consumers
 *         (to the stream's owner: worker's local counts; an older seq is ignored)
 *         resp: str err
 * SC_PEER_PUSH req: str stream, str origin, u64 0, i32 timeout_ms, n, n*str element
 *         appended on the receiving worker (waiting for room like a SEND); the
 *         owner passes them on to the other workers with consumers
 *         resp: str err
 * SC_PEER_QUERY req: str stream   resp: as SC_QUERY's, from the owner's table
 * SC_PEER_DELETE req: str stream, str worker (the one whose client asked)
 *         to the owner: refused K_SC_STREAM_IN_USE while any worker has a
 *         producer or consumer; else every other worker drops its copy
 *         (SC_PEER_DROP) and the owner forgets the stream   resp: str err
 * SC_PEER_DROP req: str stream   the worker deletes its copy (kept while it
 *         has producers or consumers: K_SC_STREAM_IN_USE)   resp: str err
 *
 * Cluster (worker to worker; see src/worker/cluster/cluster_int.h):
 * LOCATE  req: i32 wait_ms, u32 inline_max, n, n*key
 *         (to the key's owner; waits until every key is known, up to wait_ms)
 *         resp: str err, n, n*(u8 found, u64 size, u64 version, str location, str value)
 *         value: the bytes themselves when the owner holds that version and they fit
 *         in what is left of inline_max (at most DS_LOCATE_INLINE_MAX), else empty
 * META_PUT req: str location, u8 only_if_unknown, n, n*(key, u64 size, u64 version)
 *         resp: str err, n, n*u32 status  (after superseded copies elsewhere were dropped)
 *         only_if_unknown=1 (a re-registration): a key with a copy elsewhere is left
 *         alone and answered K_DUPLICATED (the sender's copy is older: it drops it)
 * META_DEL req: str location, u8 everywhere, n, n*(key, u64 version)
 *         everywhere=0: the copy at location (that version) is gone (evicted, expired);
 *         everywhere=1: delete the key on every worker but location (which did it itself)
 *         resp: str err, n, n*u32 status
 * DROP    req: n, n*(key, u64 max_version) resp: str err, n, n*u32 status
 *         delete the local copy if its version <= max_version; tell nobody
 * UCX_PULL req: key, u64 size, u64 tag, str requester, [u32 wait_ms]
 *         (--enable_rdma; to where the key lives; wait_ms: how long the requester
 *         waits, after which, plus DS_UCX_SEND_GRACE_MS, the owner ends the send
 *         and drops its pin; absent = 60 s)
 *         the owner sends the value of exactly size bytes with UCX to tag at the requester
 *         (its UCX address from its membership record) and answers once UCX is done:
 *         resp: str err, u8 via_ucx; via_ucx=0 (no UCX route to the requester): the value
 *         is the data section instead. K_NOT_FOUND: no such key of that size here.
 * OWNED   req: str origin, u64 session, u32 op, i32 arg, n, n*key
 *         resp: str err, n, n*(u32 status, u32 count)
 *         (to the keys' ring owner) an RLATCH, UNRLATCH, WLATCH, UNWLATCH (arg: the
 *         timeout in ms) or GREF (arg: delta -1, 0 or 1) a client of origin asked
 *         for, applied by the owner for the holder (origin, session); a key may
 *         repeat (a rebuild after an owner change sends one entry per latch or
 *         reference). count: GREF's count, else 0. Answered once every member
 *         has the LATCH_HINTs of the latches it granted.
 * LATCH_WAIT req: str origin, u64 session, n, n*key   resp: str err[, n, n*u32 status]
 *         (to the keys' owner) answers once no latch there blocks a write of the
 *         keys by (origin, session): none of another holder's write latches, no
 *         read latch. The writer's worker sends it before publishing. The
 *         statuses (K_OC_ALREADY_SEALED for a sealed key, else K_OK) say
 *         which keys the write must refuse.
 * LATCH_HINT req: n, n*(key, u32 ms)   resp: str err
 *         (from an owner to every member) the key is latched for up to ms: a
 *         write of it on the member first asks the owner (LATCH_WAIT). The
 *         member answers once its writes of the keys that had passed that
 *         check are recorded at the owner (their META_PUT answered).
 * HOLDER_END req: str origin, u64 session (0: every session of origin)
 *         resp: str err
 *         the session's latches and references at this owner are dropped.
 * SEAL_OWNED req: n, n*key   resp: str err, n, n*u32 status
 *         (to the keys' owner) a client's SEAL: the owner marks the key's
 *         current version sealed (K_NOT_FOUND: it knows no copy) and hints it
 *         to every member (LATCH_HINT, ms UINT32_MAX) before it answers, so a
 *         write of the key anywhere asks it first (LATCH_WAIT, whose answer
 *         names the sealed keys).
 * NEST_OWNED req: as GREF with delta NEST   resp: as GREF's
 *         (to the parent's owner) a client's nested references, kept there.
 * NEST_HOLD req: n, n*(key, i32 delta, str parent)   resp: str err
 *         (from a parent's owner to a nested key's owner) the parent holds
 *         the key (delta 1; once per parent, so it may be said again after a
 *         ring change) or lets it go (-1: a key left with no reference and no
 *         hold is deleted everywhere).
 * OWNER_REBUILD req: u8 what, n, n*entry   resp: str err
 *         (after a ring change, to the keys' new owner) what 0, entry (key,
 *         str loc, u64 version): the key's version at loc is sealed; the
 *         owner records the mark unless it has one and hints the key to every
 *         member as SEAL_OWNED does. what 1, entry (parent, kid): the parent
 *         holds the kid (held at the kid's owner already); the owner adds it
 *         to the parent's list.
 * REBUILD_DONE req: str from, u64 ring_id   resp: str err
 *         (after a ring change, from every member to every other) everything
 *         `from` sent to new owners for the members whose identity is ring_id
 *         (OWNED rebuilds, OWNER_REBUILD, NEST_HOLD) has been answered. A new
 *         owner answers K_TRY_AGAIN for the holds, latches, seals and nests of
 *         the keys that came to it with the change, and holds back their
 *         LATCH_WAITs, until every member said so (or --node_timeout_s passed).
 * MIGRATE req: str from, n, n*(key, u64 size, u64 version, u8 write_mode, u32 ttl_s)
 *         (a leaving worker, from, to the ring successor it hands keys to, or a
 *         worker moving objects toward a less used one; cluster_migrate.c,
 *         cluster_rebalance.c)
 *         the receiver pulls each value from `from` (a peer GET), publishes it
 *         unless it holds the key already, and moves the key's location at its
 *         owner with META_MOVE before answering: resp: str err, n, n*u32 status
 *         (K_OK: moved; K_DUPLICATED: the receiver had the key or the owner
 *         knows a newer copy; other: not moved, the sender may try again);
 *         a receiver that is leaving too refuses the whole batch: K_SHUTTING_DOWN
 * META_MOVE req: str from, str to, n*(key, u64 size, u64 from_version, u64 to_version)
 *         (to the key's owner) the key's location becomes `to` when the owner's
 *         current copy is from's from_version, or when it knows none; from's
 *         copy is then dropped before the answer: resp: str err, n, n*u32 status
 *         (K_DUPLICATED: the owner knows another copy; `to` drops its own)
 * USAGE req: (none)   resp: str err, u64 used_bytes, u64 total_bytes
 *         the worker's shared memory use, for --enable_memory_rebalance
 *         (cluster_rebalance.c)
 * PEER_AUTH req: u8 step, str from, str nonce_a, then step 2 only: str nonce_b, str proof_a
 *         resp: str err, then step 1 only: str nonce_b, str proof_b
 *         A worker proves to another that it is a cluster member, and the other
 *         proves it back (docs/security.md). The initiator (from: its member
 *         address) sends a fresh nonce_a (64 hex digits); the acceptor answers
 *         its own nonce_b and proof_b; the initiator checks proof_b and sends
 *         proof_a (repeating from and both nonces: the acceptor keeps no
 *         state between the steps; its nonce_b is derived from the connection
 *         and the step-1 fields, so it is checked again). A proof is hex(HMAC-SHA256(cluster
 * secret, transcript)) with
 *         --cluster_secret_file, else the hex Ed25519 signature of the
 *         transcript by the prover's member key, whose public half its etcd
 *         record carries as peer_key. transcript = "ds-peer-auth-v1\n" role
 *         "\n" from "\n" to "\n" nonce_a "\n" nonce_b, role "acceptor" or
 *         "initiator" (so a proof is never valid for the other direction) and
 *         to the acceptor's member address. Only after step 2 succeeded does
 *         the connection count as a peer's: the peer-only operations (LOCATE,
 *         META_PUT, META_DEL, DROP, UCX_PULL, OWNED, LATCH_WAIT, LATCH_HINT,
 *         HOLDER_END, SEAL_OWNED, NEST_OWNED, NEST_HOLD, OWNER_REBUILD, REBUILD_DONE) and
 *         DS_FLAG_PEER are refused K_NOT_AUTHORIZED on every other connection.
 *         from not a member in etcd: K_TRY_AGAIN (its record may not have
 *         arrived yet); a wrong proof: K_NOT_AUTHORIZED. Standalone:
 *         K_NOT_SUPPORTED.
 *
 * Copies (src/worker/cluster/cluster_repl.c; peer-only like the above). A
 * write is named by its origin worker and the origin's version of it.
 * REPL_PUT req: key, u8 write_mode, u32 ttl_second, str origin, u64 origin_version,
 *         u32 want; data section: the value (the one request besides SET with one)
 *         resp: str err, u64 version (of the copy the receiver now holds)
 * REPL_META req: str origin, u8 rereg, n, n*(key, u64 size, u64 origin_version, u32 want,
 *         u32 h, h*(str holder, u64 version))
 *         resp: str err, n, n*u32 status (after superseded copies were dropped)
 *         rereg=0: a new write, recorded with its holders (the first one is
 *         the origin); rereg=1: holders registering again after a ring change:
 *         added to the same write, or, when another write is recorded,
 *         answered K_DUPLICATED (the holder drops its copy); rereg=2: a copy
 *         made again (REPL_COPY): added to the same write, else K_NOT_FOUND
 *         (the copy is dropped)
 * REPL_COPY req: key, u64 version, str target, str origin, u64 origin_version, u32 want
 *         (owner to a holder) push that copy to target, then tell the owner
 *         (REPL_META rereg=2); answered once the push is queued: resp: str err
 * HOT_ADD req: key, str source, u64 source_version, str holder
 *         (to the owner) record holder's hot copy of the copy source@source_version;
 *         K_NOT_FOUND when that copy is no longer current (the holder discards it)
 * HOT_DROP req: n, n*key   resp: str err
 *         drop the hot copies of these keys (or cancel the ones not yet kept)
 */
#define DS_OPCODE_MAP(X)                                                                           \
    X(HELLO, 1, "hello")                                                                           \
    X(SET, 2, "set")                                                                               \
    X(GET, 3, "get")                                                                               \
    X(CREATE, 4, "create")                                                                         \
    X(PUBLISH, 5, "publish")                                                                       \
    X(RELEASE, 6, "release")                                                                       \
    X(DEL, 7, "del")                                                                               \
    X(EXIST, 8, "exist")                                                                           \
    X(EXPIRE, 9, "expire")                                                                         \
    X(QSIZE, 10, "query_size")                                                                     \
    X(GENKEY, 11, "generate_key")                                                                  \
    X(HEALTH, 12, "health_check")                                                                  \
    X(STATS, 13, "stats")                                                                          \
    X(SHUTDOWN, 14, "shutdown")                                                                    \
    X(LOCATE, 15, "locate")                                                                        \
    X(META_PUT, 16, "meta_put")                                                                    \
    X(META_DEL, 17, "meta_del")                                                                    \
    X(DROP, 18, "drop")                                                                            \
    X(READ, 19, "read")                                                                            \
    X(RLATCH, 20, "rlatch")                                                                        \
    X(UNRLATCH, 21, "unrlatch")                                                                    \
    X(GREF, 22, "global_ref")                                                                      \
    X(SETR, 23, "set_reserved")                                                                    \
    X(UCX_PULL, 24, "ucx_pull")                                                                    \
    X(UCX_GET, 25, "ucx_get")                                                                      \
    X(UCX_ADDR, 26, "ucx_address")                                                                 \
    X(LANE, 27, "lane")                                                                            \
    X(PEER_AUTH, 28, "peer_auth")                                                                  \
    X(WLATCH, 29, "wlatch")                                                                        \
    X(UNWLATCH, 30, "unwlatch")                                                                    \
    X(OWNED, 31, "owned")                                                                          \
    X(LATCH_WAIT, 32, "latch_wait")                                                                \
    X(LATCH_HINT, 33, "latch_hint")                                                                \
    X(HOLDER_END, 34, "holder_end")                                                                \
    X(SEAL, 35, "seal")                                                                            \
    X(SEAL_OWNED, 36, "seal_owned")                                                                \
    X(NEST_OWNED, 37, "nest_owned")                                                                \
    X(NEST_HOLD, 38, "nest_hold")                                                                  \
    X(OWNER_REBUILD, 39, "owner_rebuild")                                                          \
    X(SC_CREATE_PRODUCER, 40, "sc_create_producer")                                                \
    X(SC_CLOSE_PRODUCER, 41, "sc_close_producer")                                                  \
    X(SC_SUBSCRIBE, 42, "sc_subscribe")                                                            \
    X(SC_CLOSE_CONSUMER, 43, "sc_close_consumer")                                                  \
    X(SC_SEND, 44, "sc_send")                                                                      \
    X(SC_RECEIVE, 45, "sc_receive")                                                                \
    X(SC_ACK, 46, "sc_ack")                                                                        \
    X(SC_DELETE_STREAM, 47, "sc_delete_stream")                                                    \
    X(SC_QUERY, 48, "sc_query")                                                                    \
    X(SC_PEER_REG, 49, "sc_peer_reg")                                                              \
    X(SC_PEER_PUSH, 50, "sc_peer_push")                                                            \
    X(SC_PEER_QUERY, 51, "sc_peer_query")                                                          \
    X(SC_PEER_DELETE, 52, "sc_peer_delete")                                                        \
    X(SC_PEER_DROP, 53, "sc_peer_drop")                                                            \
    X(MIGRATE, 60, "migrate")                                                                      \
    X(META_MOVE, 61, "meta_move")                                                                  \
    X(USAGE, 62, "usage")                                                                          \
    X(REBUILD_DONE, 67, "rebuild_done")                                                            \
    X(REPL_PUT, 70, "repl_put")                                                                    \
    X(REPL_META, 71, "repl_meta")                                                                  \
    X(REPL_COPY, 72, "repl_copy")                                                                  \
    X(HOT_ADD, 73, "hot_add")                                                                      \
    X(HOT_DROP, 74, "hot_drop")

typedef enum {
#define DS__OP_ENUM(name, num, text) DS_OP_##name = num,
    DS_OPCODE_MAP(DS__OP_ENUM)
#undef DS__OP_ENUM
        DS_OP__MAX
} ds_opcode_t;

/* GREF's delta for nested references (see GREF above). */
#define DS_GREF_NEST 2

/* "get" for DS_OP_GET; NULL for an unknown number. */
const char *ds__opcode_name(unsigned op);
/* Worker-to-worker operations: served only on a connection that completed
 * PEER_AUTH. */
bool ds__opcode_peer_only(unsigned op);

typedef struct {
    uint32_t magic;
    uint8_t version;
    uint8_t flags;
    uint16_t opcode;
    uint32_t status;
    uint32_t meta_len;
    uint64_t req_id;
    uint64_t data_len;
} ds_wire_header_t;

void ds__wire_header_encode(const ds_wire_header_t *h, uint8_t out[DS_WIRE_HEADER_LEN]);
/* Decodes and validates magic, version, opcode range and meta_len against
 * DS_WIRE_MAX_META, and data_len against max_data. Returns 0, or -1 with a
 * message in err (err_cap bytes). */
int ds__wire_header_decode(const uint8_t in[DS_WIRE_HEADER_LEN], uint64_t max_data,
                           ds_wire_header_t *h, char *err, size_t err_cap);

/* Growable write buffer for metadata. Allocation failure sets oom and turns
 * further writes into no-ops; check it once at the end. */
typedef struct {
    uint8_t *buf;
    size_t len;
    size_t cap;
    bool oom;
    bool borrowed; /* buf is the caller's storage (ds__wbuf_init_on): never freed */
} ds_wbuf_t;

void ds__wbuf_init(ds_wbuf_t *w);
/* Starts on the caller's storage (cap bytes, which must outlive w), and
 * moves to the heap only when it outgrows it: an answer built on the stack
 * costs no allocation. ds__wbuf_free is still due. */
void ds__wbuf_init_on(ds_wbuf_t *w, void *storage, size_t cap);
void ds__wbuf_free(ds_wbuf_t *w);
void ds__wbuf_reset(ds_wbuf_t *w);
void ds__wbuf_u8(ds_wbuf_t *w, uint8_t v);
void ds__wbuf_u32(ds_wbuf_t *w, uint32_t v);
void ds__wbuf_i32(ds_wbuf_t *w, int32_t v);
void ds__wbuf_u64(ds_wbuf_t *w, uint64_t v);
void ds__wbuf_bytes(ds_wbuf_t *w, const void *p, size_t n); /* raw, no length */
void ds__wbuf_str(ds_wbuf_t *w, const void *p, size_t n);   /* u32 length + bytes */
void ds__wbuf_cstr(ds_wbuf_t *w, const char *s);            /* str of strlen(s) */
/* Reserves n bytes and returns where they go (NULL when oom). */
uint8_t *ds__wbuf_reserve(ds_wbuf_t *w, size_t n);

/* Bounds-checked reader. Reading past the end sets err and yields zeros / empty
 * strings, so a parser can read every field and check err once. */
typedef struct {
    const uint8_t *p;
    size_t len;
    size_t pos;
    bool err;
} ds_rbuf_t;

void ds__rbuf_init(ds_rbuf_t *r, const void *p, size_t len);
uint8_t ds__rbuf_u8(ds_rbuf_t *r);
uint32_t ds__rbuf_u32(ds_rbuf_t *r);
int32_t ds__rbuf_i32(ds_rbuf_t *r);
uint64_t ds__rbuf_u64(ds_rbuf_t *r);
/* Points *p into the buffer (not NUL-terminated) and returns the length. */
uint32_t ds__rbuf_str(ds_rbuf_t *r, const char **p);
/* Reads a count that must be <= max and leave room for at least min_each bytes
 * per element; otherwise sets err. Guards allocations sized by a peer. */
uint32_t ds__rbuf_count(ds_rbuf_t *r, uint32_t max, size_t min_each);
bool ds__rbuf_done(const ds_rbuf_t *r); /* no error and everything consumed */

#endif
