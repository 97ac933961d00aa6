/*
 * openib.h: the C ABI of the openib RDMA transport (libopenib.so).
 *
 * Build the library with `cargo build --release -p openib-capi` (target/release/libopenib.so);
 * link with `-I include -L target/release -lopenib`, or dlopen("libopenib.so") and dlsym the
 * functions below. docs/CAPI.md has the details.
 *
 * Conventions
 * - Every function that can fail returns an int: OPENIB_OK (0) or a negative
 *   enum openib_error value (some return a count or a rank instead, said below). After a
 *   failure, openib_last_error() describes it.
 * - Every pointer argument is checked: NULL gives OPENIB_ERR_INVALID unless a function says
 *   NULL is allowed. Out-parameters named *_out are optional (NULL: not wanted).
 * - No function blocks longer than it says: openib_open (a collective wire-up over all ranks;
 *   openib_open_runtime runs none: only the host's put, and get when a peer is first used),
 *   openib_flush and openib_connect_all (up to their timeout) and openib_close (its flush, up to
 *   10 s). Everything else returns at once; operations complete through openib_progress.
 *
 * Threads
 * - Any thread may call any function. A handle serialises its calls with one lock: several
 *   threads may send, put, get and progress on one handle at once.
 * - Receive callbacks run inside openib_progress (and openib_flush, openib_connect_all) on the
 *   calling thread, WITH THE HANDLE'S LOCK HELD (other threads' calls wait for it). A callback
 *   may call the same handle on its own thread: openib_send, openib_send_mem,
 *   openib_send_nocopy, openib_sendi, openib_put, openib_get, the atomics, openib_mem_alloc,
 *   openib_set_handler and openib_del_procs work as anywhere else (an MPI layer answers a
 *   rendezvous from its callback); openib_progress returns 0 at once (the messages behind this
 *   one wait for the progress call that runs the callback, so one peer's messages never
 *   overtake a callback still running); openib_flush, openib_connect_all,
 *   openib_poll_completion and openib_close are refused with OPENIB_ERR_REENTRANT (they wait on
 *   progress or on the completions the running progress call holds). Completions of calls made
 *   inside a callback are polled as usual after openib_progress returns.
 *   openib_rank, openib_size, openib_eager_limit, openib_mem_ptr,
 *   openib_mem_len, openib_mem_remote, openib_last_error and openib_strerror take no lock and
 *   may be called anywhere.
 * - openib_close must not run while another thread still uses the handle.
 */
#ifndef OPENIB_H
#define OPENIB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: 0 is success, every error is negative. */
enum openib_error {
    OPENIB_OK = 0,
    OPENIB_ERR_INVALID = -1,         /* bad argument: NULL pointer, tag 0, len 0, wrong handle,
                                        misaligned atomic */
    OPENIB_ERR_NO_VERBS = -2,        /* libibverbs cannot be loaded (openib ports: exit 3) */
    OPENIB_ERR_NO_DEVICE = -3,       /* no RDMA device (openib ports: exit 4) */
    OPENIB_ERR_SETUP = -4,           /* wire-up failed: no usable port, bad settings, ... */
    OPENIB_ERR_RUNTIME = -5,         /* the runtime (openib run, PMIx) or modex exchange failed */
    OPENIB_ERR_NO_PATH = -6,         /* no port pair or CPC connects to that peer */
    OPENIB_ERR_BAD_PEER = -7,        /* peer rank out of range */
    OPENIB_ERR_ENDPOINT_FAILED = -8, /* the connection to that peer failed (it stays failed) */
    OPENIB_ERR_TOO_LARGE = -9,       /* openib_sendi message above openib_eager_limit() */
    OPENIB_ERR_RANGE = -10,          /* offset + len outside a local or remote region */
    OPENIB_ERR_TIMEOUT = -11,        /* flush or connect_all did not finish in time */
    OPENIB_ERR_VERBS = -12,          /* a verbs call failed */
    OPENIB_ERR_REENTRANT = -13,      /* a call that cannot run inside the same handle's receive
                                        callback (flush, connect_all, poll_completion, close) */
    OPENIB_ERR_PANIC = -14,          /* internal bug; the handle can only be closed */
    OPENIB_ERR_OTHER = -15,          /* another transport error (see openib_last_error) */
    OPENIB_ERR_BUSY = -16,           /* openib_sendi cannot post now: progress, then retry */
    OPENIB_ERR_EXCLUDED = -17        /* openib_group_create: this process is left out of the new
                                      * group (openib_last_error says by whom and why) */
};

/* The transport of this process. Opaque; from openib_open, released by openib_close. */
typedef struct openib_t openib_t;

/* A registered memory region: allocated by the transport (openib_mem_alloc) or the caller's
 * memory registered where it is (openib_mem_register). Opaque; released by openib_mem_free. */
typedef struct openib_mem_t openib_mem_t;

/* Where a peer finds a region: plain data, 24 bytes without padding, meant to be sent to the
 * peer as bytes (with openib_send) between processes of the same architecture. */
typedef struct openib_remote_t {
    uint64_t addr;     /* virtual address of the region's first byte */
    uint32_t rkey;     /* remote key */
    uint32_t reserved; /* 0 */
    uint64_t len;      /* length in bytes */
} openib_remote_t;

/* A finished send, put, get or atomic. */
typedef struct openib_completion_t {
    uint32_t peer;  /* the rank it went to */
    uint64_t token; /* the token its call returned */
    int status;     /* OPENIB_OK, or a negative openib_error (then openib_last_error() says why) */
} openib_completion_t;

/* Receive callback: a message of `len` bytes with `tag` from rank `src`. `data` is valid only
 * during the call (copy what you keep; do not read it when len is 0). Runs with the handle's
 * lock held and may send, put and get on the same handle: see "Threads" above. Messages from
 * one peer arrive in the order they were sent. */
typedef void (*openib_recv_cb)(void *ctx, uint32_t src, uint8_t tag, const void *data,
                               size_t len);

/* --- lifetime ----------------------------------------------------------------------------- */

/* Opens the transport of this process. The runtime comes from the environment, as for
 * `openib bench`: under `openib run` the embedded runtime, under mpirun/srun PMIx, otherwise a
 * singleton (OPENIB_RUNTIME forces one). Settings come from the environment
 * (OPENIB_EAGER_LIMIT, OPENIB_RECV_DEPTH, OPENIB_CPC_INCLUDE, ...; logs: OPENIB_LOG, e.g.
 * "debug"), not from a settings file. Wire-up is collective: every rank calls openib_open.
 * Connections are made on first use (or by openib_connect_all).
 * On success *out is the handle; on failure *out is NULL and the code says why, e.g.
 * OPENIB_ERR_NO_DEVICE on a machine without RDMA (openib_last_error() names the reason and how
 * to create a SoftRoCE device). */
int openib_open(openib_t **out);

/* The host's runtime, for openib_open_runtime: an MPI library's modex (Open MPI's
 * OPAL_MODEX_SEND / OPAL_MODEX_RECV), whose fence the host runs itself after every component
 * has published. The transport calls the callbacks with `ctx`, from openib_open_runtime and
 * later from any thread that calls a function on the handle (openib_reachable, a send,
 * openib_progress when a peer connects first), until openib_close. */
#define OPENIB_RUNTIME_OPS_VERSION 1
/* get's result when `rank` published nothing under `key`. */
#define OPENIB_RUNTIME_NOT_FOUND 1
typedef struct openib_runtime_ops_t {
    uint32_t version;  /* OPENIB_RUNTIME_OPS_VERSION */
    uint32_t rank;     /* this process's rank in the job (0..size-1) */
    uint32_t size;     /* the number of ranks in the job */
    uint32_t reserved; /* 0 */
    const char *node;  /* this process's node name (NULL: the host name); copied at open */
    void *ctx;
    /* Publishes `len` bytes under `key` for every process of the job (visible to them after
     * the host's fence); 0, or negative on failure. Called once, by openib_open_runtime. */
    int (*put)(void *ctx, const char *key, const void *value, size_t len);
    /* Hands the puts to the host's runtime; NULL when the host commits itself. 0 or negative. */
    int (*commit)(void *ctx);
    /* The value `rank` published under `key`: 0 with *value_out and *len_out set,
     * OPENIB_RUNTIME_NOT_FOUND when it published none (the transport then treats the rank as
     * unreachable, without waiting), or negative on failure. */
    int (*get)(void *ctx, uint32_t rank, const char *key, void **value_out, size_t *len_out);
    /* Frees a value get returned, once the transport copied it; NULL: the host keeps it. */
    void (*release)(void *ctx, void *value);
} openib_runtime_ops_t;

/* Opens the transport of this process on the host's runtime `ops` instead of the
 * environment's: discovers the ports, opens the CPC services, publishes this process's
 * modex with ONE put (and commit) and returns WITHOUT a fence; the host runs its own fence
 * afterwards, and each peer's modex is read with get when first needed (openib_reachable, an
 * operation to it, or its connection attempt). put and get are required (OPENIB_ERR_INVALID);
 * rank >= size or another version is OPENIB_ERR_INVALID. A process without a usable port
 * fails here (OPENIB_ERR_SETUP, OPENIB_ERR_NO_DEVICE, ...; openib_last_error names each port
 * and why) and publishes nothing: its peers find it unreachable, nobody waits for it.
 * Settings come from the environment, as for openib_open. */
int openib_open_runtime(const openib_runtime_ops_t *ops, openib_t **out);

/* The number of usable ports of this machine under the settings (OPENIB_IF_INCLUDE /
 * OPENIB_IF_EXCLUDE, ...) in *count (0 with OPENIB_OK when none is usable; no libibverbs or no
 * device: OPENIB_ERR_NO_VERBS / OPENIB_ERR_NO_DEVICE). A host that wants one transport per port
 * opens the i-th with OPENIB_PORT_INDEX=i and OPENIB_HOST_SLOT=n set in the environment (n
 * counts the transports opened so far: slots are contiguous from 0; slot 0 publishes under
 * "oibH", slot n under "oibH<n>"). Each transport reaches a peer through the peer's transport
 * on the same subnet, in slot order (docs/TRANSPORT.md, "Several ports"). */
int openib_usable_ports(uint32_t *count);

/* The port handle `t` serves, "device:port" (e.g. "rxe0:1"), NUL-terminated into `buf` of
 * `len` bytes: OPENIB_OK, or OPENIB_ERR_RANGE when it does not fit (buf then holds ""). */
int openib_port_name(openib_t *t, char *buf, size_t len);

/* Whether rank `peer` can be reached: 1 yes (a port pair and a CPC connect to it; the
 * connection itself is made on first use), 0 no (openib_last_error says why: it published no
 * modex, no common subnet or CPC, or it was removed), or a negative error
 * (OPENIB_ERR_BAD_PEER for a rank outside the job). On a handle of openib_open_runtime the
 * first call for a peer reads its modex through the host's get. */
int openib_reachable(openib_t *t, uint32_t peer);

/* This process's own rank is a peer like any other: openib_reachable gives 1 for it, and
 * openib_send, openib_send_mem, openib_send_nocopy, openib_sendi, openib_put, openib_get, the
 * atomics and their *_addr forms take it. Its endpoint is a loopback queue pair made on first
 * use: a message to oneself reaches the callback from a later openib_progress call (never from
 * inside the send), its completion names the own rank, and puts, gets and atomics on one's
 * own registered memory go through the device, atomic with peers' atomics on the same words.
 * openib_del_procs removes it like any other rank. */

/* Closes the handle: first flushes for up to 10 s (as openib_flush: receive callbacks may
 * still run), then releases every connection, queue pair, cached registration and the port,
 * and frees the handle. The handle is freed in every case, also when the flush fails: then the
 * result is the flush's error (OPENIB_ERR_TIMEOUT, ...) and what was still queued or in flight
 * is dropped. Completions not yet taken with openib_poll_completion are discarded. After
 * OPENIB_ERR_PANIC it releases without flushing. Regions still allocated stay valid until
 * openib_mem_free. NULL is a no-op (OPENIB_OK). Not from a receive callback of the same handle
 * (OPENIB_ERR_REENTRANT, nothing freed); no other thread may use the handle during or after. */
int openib_close(openib_t *t);

/* This process's rank (0..size-1), or a negative error. */
int openib_rank(const openib_t *t);

/* The number of ranks in the job, or a negative error. */
int openib_size(const openib_t *t);

/* The largest message openib_send sends eagerly, and the largest openib_sendi accepts (bytes),
 * or a negative error. */
int openib_eager_limit(const openib_t *t);

/* --- messages ----------------------------------------------------------------------------- */

/* Sets (or replaces) the callback for messages with `tag` (1..255; 0 is the transport's own:
 * OPENIB_ERR_INVALID). `cb` must not be NULL; it is called with `ctx` from whichever thread
 * calls openib_progress. Messages of a tag without a callback are dropped (with a warning). */
int openib_set_handler(openib_t *t, uint8_t tag, openib_recv_cb cb, void *ctx);

/* Sends `len` bytes from `buf` (NULL allowed when len is 0) with `tag` to rank `peer`,
 * connecting on first use. Any size: up to openib_eager_limit() the message goes eagerly (one
 * send through a bounce buffer); above it and up to OPENIB_EAGER_TRAIN_LIMIT as a train of eager
 * pieces; above that by rendezvous (the data is copied into a registered buffer of the
 * transport's registration cache; the peer takes it with RDMA, by the peer's
 * OPENIB_RNDV_PROTOCOL: it names a landing buffer and this process writes into it (write, the
 * default on hardware), it reads the buffer and acknowledges (read), or this process writes the
 * first half while the peer reads the rest (split, the default on rxe and siw)).
 * The data is copied before the call returns either way: `buf` may be reused at once. The send
 * completes later, as a completion with the token written to *token_out (optional): eager when
 * the data left this process, rendezvous when the data is in the peer's memory. Messages to one peer, of
 * any mix of sizes and of openib_send, openib_send_mem, openib_send_nocopy and openib_sendi,
 * reach its callbacks in the order they were sent. */
int openib_send(openib_t *t, uint32_t peer, uint8_t tag, const void *buf, size_t len,
                uint64_t *token_out);

/* Sends mem[offset, offset+len) (a registered region of `t`) with `tag` to rank `peer`, as
 * openib_send does, but above openib_eager_limit() without a copy: the bytes go straight from
 * the region (RDMA-written into the peer's landing buffer, or read by the peer). Those bytes must not change, and the region should not be freed,
 * until the completion with *token_out (optional); freeing it earlier is memory-safe (the send
 * keeps the registration) but the peer then receives unspecified data. Up to the eager limit
 * the bytes are copied before the call returns. OPENIB_ERR_RANGE if the range is not inside
 * the region; OPENIB_ERR_INVALID for a region of another handle. */
int openib_send_mem(openib_t *t, uint32_t peer, uint8_t tag, openib_mem_t *mem, size_t offset,
                    size_t len, uint64_t *token_out);

/* Sends len bytes of buf with `tag` to rank `peer`, as openib_send does, but above
 * openib_eager_limit() without a copy: buf is registered for this transfer (deregistered when
 * it ends) and the peer takes the bytes by RDMA. Those bytes must stay allocated and unchanged
 * until the completion with *token_out (optional; then wait for the completion some other way,
 * e.g. openib_flush). Up to the eager limit the bytes are copied before the call returns.
 * Registering costs about what copying costs on real hardware and much less than copying
 * under emulation (docs/PERFORMANCE.md); for buffers sent again and again, openib_mem_alloc
 * and openib_send_mem register once. */
int openib_send_nocopy(openib_t *t, uint32_t peer, uint8_t tag, const void *buf, size_t len,
                       uint64_t *token_out);

/* Immediate send of at most openib_eager_limit() bytes (above: OPENIB_ERR_TOO_LARGE): posted
 * now, copied before the call returns, or not at all: OPENIB_ERR_BUSY when it cannot be posted
 * at once (the connection is not up yet, earlier operations to that peer are still queued, or
 * no credit or send slot is free). Then call openib_progress and retry (or use openib_send).
 * The first call to an unconnected peer starts the connection and returns OPENIB_ERR_BUSY.
 * It has no token and reports no completion; openib_flush waits until the peer has it. */
int openib_sendi(openib_t *t, uint32_t peer, uint8_t tag, const void *buf, size_t len);

/* --- registered memory and RDMA ------------------------------------------------------------ */

/* Allocates `len` (> 0) zeroed, 8-byte aligned bytes registered for local and remote access
 * (remote read, write and atomics) and writes the region to *out (NULL on failure). The
 * region belongs to `t`: use it only with `t`. */
int openib_mem_alloc(openib_t *t, size_t len, openib_mem_t **out);

/* Registers `len` (> 0) bytes at `ptr`, memory the caller owns (malloc'ed, static, mmap'ed,
 * any alignment), for local and remote access (remote read, write and atomics) and writes
 * the region to *out (NULL on failure). The region belongs to `t`. openib_mem_ptr,
 * openib_mem_len and openib_mem_remote work on it as on an allocated region (ptr and len),
 * and so do openib_send_mem, openib_put/get, the atomics and their *_addr forms.
 * openib_mem_free only deregisters it: the memory is not freed and stays the caller's. The
 * memory must stay allocated until openib_mem_free AND every operation on the region has
 * completed (the kernel pins its pages meanwhile; freeing them earlier lets peers' writes land
 * in memory the allocator hands out again). Errors: OPENIB_ERR_INVALID (NULL ptr, len 0),
 * OPENIB_ERR_VERBS (the device refused the registration, e.g. over the locked-memory limit;
 * openib_last_error says why). */
int openib_mem_register(openib_t *t, void *ptr, size_t len, openib_mem_t **out);

/* The region's memory, openib_mem_len(mem) bytes, which the caller reads and writes directly.
 * Peers' puts, gets and atomics access it too: read it only after a completion or a message
 * says a put or atomic into it is done. NULL for a NULL region. */
void *openib_mem_ptr(const openib_mem_t *mem);

/* The region's length in bytes (0 for a NULL region). */
size_t openib_mem_len(const openib_mem_t *mem);

/* Writes the region's remote handle to *out, for a peer's puts, gets and atomics. */
int openib_mem_remote(const openib_mem_t *mem, openib_remote_t *out);

/* Frees a region (deregisters it, then frees its memory). An operation still in flight keeps
 * the registration alive until it completes, but its data is then unspecified. NULL is a
 * no-op (OPENIB_OK). A region of openib_mem_register is only deregistered (once its last
 * operation in flight completes); its memory is not freed. */
int openib_mem_free(openib_mem_t *mem);

/* RDMA write of mem[offset, offset+len) to the peer's region `remote` at `roffset`. Checked:
 * both ranges must lie inside their regions (OPENIB_ERR_RANGE). `mem` must stay allocated and
 * unchanged until the completion with *token_out (optional): then the data is in place at the
 * peer, and a message sent after that completion arrives after the data. */
int openib_put(openib_t *t, uint32_t peer, openib_mem_t *mem, size_t offset,
               const openib_remote_t *remote, uint64_t roffset, size_t len, uint64_t *token_out);

/* RDMA read of the peer's region `remote` at `roffset` into mem[offset, offset+len). The data is
 * in `mem` when the completion with *token_out (optional) is reported. */
int openib_get(openib_t *t, uint32_t peer, openib_mem_t *mem, size_t offset,
               const openib_remote_t *remote, uint64_t roffset, size_t len, uint64_t *token_out);

/* 64-bit remote atomics on the 8 bytes of the peer's region `remote` at `roffset`. The target
 * address (remote->addr + roffset) must be 8-byte aligned (OPENIB_ERR_INVALID otherwise; the
 * regions of openib_mem_alloc are, so a roffset that is a multiple of 8 is) and inside the
 * region (OPENIB_ERR_RANGE), as must mem[offset, offset+8). When the completion with
 * *token_out (optional) is reported, the target's old value is in mem[offset, offset+8) in host
 * byte order (an offset that is a multiple of 8 keeps it aligned). The atomics of one
 * handle to one peer are executed in the order they were called. They are atomic with respect
 * to other RDMA atomics on the target, not to the target process's own loads and stores: the
 * owner reads the value after a message says the atomics are done (a message sent after their
 * completions arrives after them). */

/* Adds `add` (modulo 2^64) to the target. */
int openib_fetch_add(openib_t *t, uint32_t peer, openib_mem_t *mem, size_t offset,
                     const openib_remote_t *remote, uint64_t roffset, uint64_t add,
                     uint64_t *token_out);

/* Writes `swap` to the target if it equals `compare`; the old value says whether it did (it
 * equals `compare` then). */
int openib_compare_swap(openib_t *t, uint32_t peer, openib_mem_t *mem, size_t offset,
                        const openib_remote_t *remote, uint64_t roffset, uint64_t compare,
                        uint64_t swap, uint64_t *token_out);

/* Put, get and atomics by address (what an MPI layer holds: a local address inside a
 * registration and a remote address inside a peer's registration handle). The same as
 * openib_put, openib_get, openib_fetch_add and openib_compare_swap with
 * offset = local - openib_mem_ptr(local_mem) and roffset = remote_addr - remote->addr; both
 * ranges (len bytes, 8 for atomics) must lie inside their regions (OPENIB_ERR_RANGE,
 * openib_last_error says which: "local" or "remote"). `local` NULL is OPENIB_ERR_INVALID.
 * A remote handle whose key the peer does not know (a foreign or stale handle) is not caught
 * here: the operation's completion carries the failure (OPENIB_ERR_VERBS or
 * OPENIB_ERR_ENDPOINT_FAILED, and the connection to that peer fails, as verbs make it). */
int openib_put_addr(openib_t *t, uint32_t peer, const void *local, openib_mem_t *local_mem,
                    uint64_t remote_addr, const openib_remote_t *remote, size_t len,
                    uint64_t *token_out);
int openib_get_addr(openib_t *t, uint32_t peer, void *local, openib_mem_t *local_mem,
                    uint64_t remote_addr, const openib_remote_t *remote, size_t len,
                    uint64_t *token_out);
int openib_fetch_add_addr(openib_t *t, uint32_t peer, void *local, openib_mem_t *local_mem,
                          uint64_t remote_addr, const openib_remote_t *remote, uint64_t add,
                          uint64_t *token_out);
int openib_compare_swap_addr(openib_t *t, uint32_t peer, void *local, openib_mem_t *local_mem,
                             uint64_t remote_addr, const openib_remote_t *remote,
                             uint64_t compare, uint64_t swap, uint64_t *token_out);

/* The same four by address, with the token the completion carries chosen by the caller
 * instead of drawn by the transport: `token` must have OPENIB_CALLER_TOKEN set
 * (OPENIB_ERR_INVALID otherwise); its other 63 bits are the caller's (a pointer to its record
 * of the operation, say), so the caller finds the operation from the completion alone, with
 * no table of tokens and no race between posting and polling. The transport's own tokens
 * (token_out of every other call) count up from 1 and never have that bit: the bit tells a
 * completion of these calls from the others. Tokens need not be unique; each operation
 * reports one completion. */
#define OPENIB_CALLER_TOKEN (UINT64_C(1) << 63)
int openib_put_addr_token(openib_t *t, uint32_t peer, const void *local, openib_mem_t *local_mem,
                          uint64_t remote_addr, const openib_remote_t *remote, size_t len,
                          uint64_t token);
int openib_get_addr_token(openib_t *t, uint32_t peer, void *local, openib_mem_t *local_mem,
                          uint64_t remote_addr, const openib_remote_t *remote, size_t len,
                          uint64_t token);
int openib_fetch_add_addr_token(openib_t *t, uint32_t peer, void *local, openib_mem_t *local_mem,
                                uint64_t remote_addr, const openib_remote_t *remote,
                                uint64_t add, uint64_t token);
int openib_compare_swap_addr_token(openib_t *t, uint32_t peer, void *local,
                                   openib_mem_t *local_mem, uint64_t remote_addr,
                                   const openib_remote_t *remote, uint64_t compare,
                                   uint64_t swap, uint64_t token);

/* --- progress and completions ------------------------------------------------------------- */

/* Makes progress: connections, work completions, receive callbacks (run here), queued sends and
 * credit returns. Returns the number of work completions handled (>= 0), or a negative error.
 * Call it often: nothing moves without it. */
int openib_progress(openib_t *t);

/* openib_progress, then up to `max` completions taken as by openib_poll_completion, oldest
 * first, into out[0 .. *taken_out - 1]; one call and one lock for a poll loop. Returns the
 * progress count (>= 0) or a negative error (nothing taken). A failed completion has a negative
 * status, sets openib_last_error and ends the batch (it is the last one taken). `out` may be NULL only with
 * `max` 0; `taken_out` may be NULL. Inside a receive callback of the handle: 0, none taken. */
int openib_progress_poll(openib_t *t, openib_completion_t *out, size_t max, size_t *taken_out);

/* Takes the oldest completion of a send, put, get or atomic: returns 1 and fills *out, 0 when
 * there is none, or a negative error. Every send, put, get and atomic reports one, whether or
 * not its token was asked for, and they are kept until taken here: a program must take them
 * (a warning is logged once a million or more wait, and at each doubling). */
int openib_poll_completion(openib_t *t, openib_completion_t *out);

/* Progresses until nothing is queued or in flight on any live connection, or `timeout_ms`
 * passed (OPENIB_ERR_TIMEOUT). Holds the handle's lock meanwhile. Completions stay available
 * to openib_poll_completion. */
int openib_flush(openib_t *t, uint32_t timeout_ms);

/* As openib_flush, except that the immediate sends (openib_sendi) after each connection's last
 * operation that reports a completion are not waited for: every send, put, get and atomic is
 * complete and everything queued posted, but those last immediate sends may still be on their
 * way. For removing peers that are leaving too (MPI_Finalize): to learn that they arrived,
 * openib_flush posts a request the peer must acknowledge, and a peer that already closed its
 * connection never does (the request is retried OPENIB_RETRY_COUNT times, each after
 * OPENIB_ACK_TIMEOUT, 0.44 s at the defaults). */
int openib_quiesce(openib_t *t, uint32_t timeout_ms);

/* Connects to every reachable peer now instead of on first use (wire-up timing, benchmarks);
 * OPENIB_ERR_TIMEOUT after `timeout_ms`. Collective in practice: peers must progress too. */
int openib_connect_all(openib_t *t, uint32_t timeout_ms);

/* Removes the endpoints of the `n` ranks in `peers` (NULL allowed when n is 0), as when those
 * processes leave the job: their queued and in-flight operations complete with status
 * OPENIB_ERR_ENDPOINT_FAILED (poll them), their connections and buffers are released, and
 * later operations to them give OPENIB_ERR_BAD_PEER. The peers are not told (they remove this
 * rank themselves). A rank outside the job gives OPENIB_ERR_BAD_PEER and removes nothing; ranks
 * removed before are ignored; this process's own rank is removed like any other. */
int openib_del_procs(openib_t *t, const uint32_t *peers, size_t n);

/* Makes ranks removed by openib_del_procs peers again (an MPI layer adding back a process it
 * removed): each gets a fresh endpoint, connected on first use (on a handle of
 * openib_open_runtime its modex is read again through the host's get). Both processes must
 * have removed each other first (a peer still connected to the old endpoint drops the new
 * connection). This process's own rank, removed, is reachable again (a fresh loopback queue
 * pair on first use). Ranks not removed are ignored; a rank outside the job gives
 * OPENIB_ERR_BAD_PEER and adds nothing. */
int openib_add_procs(openib_t *t, const uint32_t *peers, size_t n);

/* --- creating a group that survives failures (issue 32) ----------------------------------- */

/* Creates a group from the group ranks[0..n) this process passes (its own view: the others'
 * may differ), with every process of it calling with the same NUL-terminated `tag`; the
 * survivors come out with the same decision even when processes die before or during the call
 * (docs/RUNTIME.md, "Creating a group that survives failures": the new group is the
 * intersection of the groups of the participants, less those agreed dead). Collective over
 * the processes named, peer to peer over this transport (tag 0x3f is the protocol's from the
 * first call on: openib_set_handler of it then gives OPENIB_ERR_INVALID). Failures are found
 * locally: the runtime's failure notices, failed connections, and the deadline `timeout_ms`.
 * The handle's lock is held for the call (other threads' calls on it wait).
 * On return `group[0..*group_len)` holds the new group and `failed[0..*failed_len)` the ranks
 * agreed dead, both ascending: `*group_len` and `*failed_len` give the arrays' capacities
 * (openib_size() always suffices) and receive the lengths (OPENIB_ERR_RANGE, with the length
 * needed, when one is too small). Returns:
 * - OPENIB_OK: this process is a member of the new group (*who = UINT32_MAX).
 * - OPENIB_ERR_EXCLUDED: the decision leaves this process out; the arrays hold the decision as
 *   the members hold it and *who the rank whose group lacks this process (UINT32_MAX when the
 *   others agreed it dead); openib_last_error says why.
 * - OPENIB_ERR_TIMEOUT: no decision within timeout_ms (a named process that never called, or
 *   one hung but not dead); *who is the lowest rank it still waited for, openib_last_error
 *   names them all; the arrays are untouched.
 * - OPENIB_ERR_INVALID: NULL tag or lengths, or this rank not in ranks[0..n).
 * After deciding, the handle keeps answering the protocol's late messages from
 * openib_progress until the next openib_group_create or openib_close: keep progressing (or
 * run a fence of your runtime while another thread progresses) until the others decided
 * before closing. `who` may be NULL. */
int openib_group_create(openib_t *t, const uint32_t *ranks, size_t n, const char *tag,
                        uint32_t timeout_ms, uint32_t *group, size_t *group_len,
                        uint32_t *failed, size_t *failed_len, uint32_t *who);

/* --- errors ------------------------------------------------------------------------------- */

/* The message of the last failed call on this thread, naming the function and the reason
 * ("" if none failed yet). Never NULL; valid until the next failing call on this thread. */
const char *openib_last_error(void);

/* A static description of an error code ("unknown error code" for other values). */
const char *openib_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* OPENIB_H */
