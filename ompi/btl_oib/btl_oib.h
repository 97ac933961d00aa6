/*
 * btl_oib.h: the `oib` BTL component of Open MPI 4.1 (BTL API 3.1.0), which moves Open MPI's
 * bytes over the openib transport (include/openib.h, linked in as a static library).
 *
 * This is the part that touches Open MPI's objects (MCA variables, the BTL base, opal_output),
 * so it is C: the OBJ_* and OPAL_MODEX_* macros and the inline free-list helpers have no
 * binding in Rust. Everything it asks of the transport goes through the C ABI of openib.h.
 */
#ifndef MCA_BTL_OIB_H
#define MCA_BTL_OIB_H

#include "opal_config.h"

#include <pthread.h>

#include "opal/class/opal_free_list.h"
#include "opal/mca/btl/btl.h"
#include "opal/mca/btl/base/base.h"
#include "opal/mca/rcache/rcache.h"
#include "opal/util/proc.h"

#include "openib.h"

/* btl_oib_own_rank's default: on, so that osc rdma takes oib for windows without a flag
 * (docs/OMPI.md, "The own rank"). It was off while a fetch-and-op contended across nodes hung
 * (atomics refused with a code osc rdma retries for ever: "One-sided MPI"). */
#define OIB_OWN_RANK_DEFAULT true

BEGIN_C_DECLS

/* The component: Open MPI's component structure first (the loader reads it by that type),
 * then the values of our MCA variables (registered in btl_oib_component.c). */
/* The most modules (ports) of one process; the transport reads at most 64 modex slots. */
#define MCA_BTL_OIB_MAX_MODULES 16

typedef struct mca_btl_oib_component_t {
    mca_btl_base_component_3_0_0_t super;

    /* MCA variables, each mapped onto the transport setting named in its description. A NULL
     * or empty string, or a number left at its default, leaves the environment's setting
     * (or the transport's default) alone. */
    char *if_include;  /* btl_oib_if_include  -> OPENIB_IF_INCLUDE */
    char *if_exclude;  /* btl_oib_if_exclude  -> OPENIB_IF_EXCLUDE */
    char *cpc_include; /* btl_oib_cpc_include -> OPENIB_CPC_INCLUDE */
    char *cpc_exclude; /* btl_oib_cpc_exclude -> OPENIB_CPC_EXCLUDE */
    int gid_index;     /* btl_oib_gid_index   -> OPENIB_GID_INDEX (-1: unset) */
    int recv_depth;    /* btl_oib_recv_depth  -> OPENIB_RECV_DEPTH (0: unset) */
    /* btl_oib_connect_at_init: connect to every reachable peer in the first add_procs
     * (openib_connect_all, up to connect_timeout ms) instead of on first use (the default
     * since every CPC starts a connection from either side of a pair). */
    bool connect_at_init;
    /* btl_oib_own_rank: add_procs reports the own rank reachable (the transport's loopback
     * endpoint), which makes osc rdma take oib for windows (docs/OMPI.md, "The own rank"). */
    bool own_rank;
    int connect_timeout;

    /* Every module btl_init made, one per usable port (their finalize clears their entry);
     * component progress progresses each. */
    struct mca_btl_oib_module_t *modules[MCA_BTL_OIB_MAX_MODULES];
    int num_modules;
} mca_btl_oib_component_t;

OPAL_MODULE_DECLSPEC extern mca_btl_oib_component_t mca_btl_oib_component;

/* The defaults every module starts from (eager limit, max send size, flags, ...); registered
 * as btl_oib_eager_limit, btl_oib_max_send_size, ... by mca_btl_base_param_register. */
extern mca_btl_base_module_t mca_btl_oib_module_defaults;

/* A peer: the transport addresses it by its rank in the job (its vpid; peers of another job
 * are not reachable). */
struct mca_btl_base_endpoint_t {
    opal_proc_t *proc;
    uint32_t rank;
    /* Set once its failure was reported (mca_btl_oib_endpoint_failed): one error callback
     * per failed endpoint. */
    int failed;
    /* The text handed to the error callback (the PML may keep it until it aborts; ob1
     * prints it when it aborts). */
    char failure[160];
    /* Removed by del_procs: the transport's endpoint is gone and failures are not reported;
     * the structure stays (late completions name it) until add_procs revives it or finalize
     * frees it. */
    int removed;
};
typedef struct mca_btl_base_endpoint_t mca_btl_base_endpoint_t;

/* A send descriptor: one segment, its bytes in the free list's payload buffer (up to
 * btl_max_send_size). */
typedef struct mca_btl_oib_frag_t {
    mca_btl_base_descriptor_t base;
    mca_btl_base_segment_t segment;
    struct mca_btl_base_endpoint_t *endpoint;
    uint64_t token;                     /* the transport's token while a send is in flight */
    struct mca_btl_oib_frag_t *next;    /* in the module's list of sends in flight */
    int early_status; /* its completion's status, when progress polled it before it was listed */
} mca_btl_oib_frag_t;
OBJ_CLASS_DECLARATION(mca_btl_oib_frag_t);

/* A registration handle (btl_register_mem), as ob1 copies it into its headers for the peer:
 * plain data, the transport's remote handle (24 bytes: address, rkey, length). */
struct mca_btl_base_registration_handle_t {
    openib_remote_t remote;
};

/* The local side of a registration: the registration cache's record (first: grdma allocates
 * these from its free list and keys them by address range), the transport's region, then the
 * handle given out (the BTL gets the handle back and finds the region in front of it). Without
 * a cache (btl_oib_rdma.c) it is allocated here and `base.rcache` is NULL. */
typedef struct mca_btl_oib_reg_t {
    mca_rcache_base_registration_t base;
    openib_mem_t *mem;
    mca_btl_base_registration_handle_t handle;
} mca_btl_oib_reg_t;

/* A send's completion that came before its poster listed the descriptor (btl_oib_module.c):
 * kept by token until the poster claims it. */
typedef struct mca_btl_oib_token_t {
    struct mca_btl_oib_token_t *next;
    uint64_t token;
    int status;
} mca_btl_oib_token_t;

/* A put, get or atomic of the upper layer, posted as one or more transport operations
 * (pieces) whose token is this record's address (btl_oib_rdma.c); its callback runs from
 * progress once every piece completed. From the module's free list `rdma_ops`. */
typedef struct mca_btl_oib_rdma_t {
    opal_free_list_item_t super;
    struct mca_btl_oib_rdma_t *next; /* in the module's queue of finished operations */
    struct mca_btl_base_endpoint_t *endpoint;
    void *local_address;
    struct mca_btl_base_registration_handle_t *local_handle;
    mca_btl_base_rdma_completion_fn_t cbfunc;
    void *cbcontext, *cbdata;
    int pending; /* pieces not completed, +1 while the poster posts them (atomic) */
    int status;  /* the first failure of a piece (an openib error), or OPENIB_OK (atomic) */
} mca_btl_oib_rdma_t;


/* The module: one per usable port of the process (its transport serves that port). */
typedef struct mca_btl_oib_module_t {
    mca_btl_base_module_t super;
    openib_t *t;
    uint32_t rank, size;
    opal_free_list_t frags;
    /* Sends in flight, oldest first (completions come back in about that order), and sends
     * whose completion came before they were listed (ready for progress to finish).
     * send_lock is never held across a transport call: a receive callback runs with the
     * transport's lock held and ob1 sends from it, so the order is always the transport's
     * lock, then send_lock, then rdma_lock. */
    pthread_mutex_t send_lock;
    mca_btl_oib_frag_t *sends_head, *sends_tail;
    /* ready_head (and rdma's done_head) are written with atomic stores: progress peeks at
     * them without the lock. */
    mca_btl_oib_frag_t *ready_head, *ready_tail;
    /* Set by finalize before it closes the transport: the close's flush may still receive,
     * but ob1 (whose callbacks may already be unloaded) is no longer told. */
    volatile bool closing;
    /* Endpoints by rank, made by add_procs. */
    mca_btl_base_endpoint_t **endpoints;
    mca_btl_base_module_error_cb_fn_t error_cb;
    /* RDMA (btl_oib_rdma.c): operations (a free list), operations whose pieces all
     * completed before their poster finished (waiting for progress to run their callback)
     * and early send completions by token, both under rdma_lock; rdma_inflight counts the
     * operations whose callback has not run (btl_flush waits for 0). */
    pthread_mutex_t rdma_lock;
    opal_free_list_t rdma_ops;
    bool rdma_ops_made; /* rdma_ops constructed and initialised (finalize may come first) */
    mca_btl_oib_token_t *early;
    mca_btl_oib_rdma_t *done_head, *done_tail;
    int64_t rdma_inflight;
    /* Where the old values of non-fetching atomics land (never read). */
    openib_mem_t *scratch;
    /* Counters, printed at finalize (btl_base_verbose 5): how a test sees the RDMA path. */
    uint64_t n_reg, n_put, put_bytes, n_get, get_bytes, n_atomic;
    /* btl_oib_connect_at_init ran (in the first add_procs). */
    bool connected_at_init;
    /* The registration cache (btl_oib_rdma.c; NULL: none, every registration is made and
     * released per request), the name of its grdma cache, and the transport regions it made
     * and released (n_mr, n_mr_freed; n_reg counts what the upper layer asked for). */
    mca_rcache_base_module_t *rcache;
    char rcache_name[48];
    uint64_t n_mr, n_mr_freed;
    /* Which module of the process (0, 1, ...: one per usable port, its transport's modex
     * slot) and its port's name; sends posted (btl_send and sendi; may miss a few under
     * concurrent senders), printed at finalize. */
    int index;
    char port[64];
    uint64_t n_send;
} mca_btl_oib_module_t;

/* Removes a finalized module from the component's list (progress no longer sees it). */
void mca_btl_oib_component_forget(mca_btl_oib_module_t *m);

/* Makes the module on an open transport (taken over: the module's finalize closes it), or
 * NULL with the transport closed, after a verbose line, and the reason in `why`. */
mca_btl_oib_module_t *mca_btl_oib_module_create(openib_t *t, char *why, size_t why_len);

/* btl_oib_connect_at_init: connects to every reachable peer, once (from the first add_procs,
 * after Open MPI's fence). */
void mca_btl_oib_connect_at_init(mca_btl_oib_module_t *m);

/* Progress of one module: the transport's (receive callbacks run inside), then its
 * completions. */
int mca_btl_oib_module_progress(mca_btl_oib_module_t *m);

/* RDMA (btl_oib_rdma.c): sets up the module's RDMA part and its table entries (register_mem,
 * put, get, atomics, flush; limits and handle size); OPAL_SUCCESS or an error (with a verbose
 * line). */
int mca_btl_oib_rdma_init(mca_btl_oib_module_t *m);
/* Releases every registration the cache still keeps (before openib_close: finalize) and the
 * cache itself; prints its counters (btl_base_verbose 5). Called once, by finalize. */
void mca_btl_oib_rdma_release(mca_btl_oib_module_t *m);
/* Prints the counters (btl_base_verbose 5) and releases what init made. */
void mca_btl_oib_rdma_fini(mca_btl_oib_module_t *m);
/* A completion of a put, get or atomic (its token has OPENIB_CALLER_TOKEN): 1 when it was its
 * operation's last piece (whose callback then ran), else 0. */
int mca_btl_oib_rdma_completion(mca_btl_oib_module_t *m, const openib_completion_t *c);
/* Keeps a send's completion that came before its descriptor was listed, for the poster. */
void mca_btl_oib_early_keep(mca_btl_oib_module_t *m, const openib_completion_t *c);
/* Runs the callbacks of the operations queued by their posters; how many. */
int mca_btl_oib_rdma_deliver(mca_btl_oib_module_t *m);
/* The endpoint of `rank` failed (the transport's `status`, `why` its reason: a completion's
 * openib_last_error()): the first time for that endpoint, one line at the default verbosity
 * naming the peer and the reason, then the registered error callback with that endpoint's
 * proc. Later failures of the same endpoint, failures during finalize and ranks without an
 * endpoint are not reported. Call it without send_lock and rdma_lock. */
void mca_btl_oib_endpoint_failed(mca_btl_oib_module_t *m, uint32_t rank, int status,
                                 const char *why);
/* The transport's error code (openib.h) as an OPAL code. */
int mca_btl_oib_opal_code(int rc);
/* Takes the early completion of `token` (one progress polled before its poster recorded the
 * token): true with its status in *status, false when there is none. */
bool mca_btl_oib_rdma_claim_early(mca_btl_oib_module_t *m, uint64_t token, int *status);
/* Put and get (also in the module defaults, so that btl_oib_put_limit/get_limit register). */
int mca_btl_oib_put(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                    void *local_address, uint64_t remote_address,
                    struct mca_btl_base_registration_handle_t *local_handle,
                    struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
                    int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                    void *cbcontext, void *cbdata);
int mca_btl_oib_get(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                    void *local_address, uint64_t remote_address,
                    struct mca_btl_base_registration_handle_t *local_handle,
                    struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
                    int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                    void *cbcontext, void *cbdata);

/* Copies the MCA variables the user set into the OPENIB_* environment variables that
 * openib_open reads. Returns OPAL_SUCCESS, or OPAL_ERR_BAD_PARAM (with a verbose line) when
 * a value cannot be passed on. */
int mca_btl_oib_apply_settings(void);

END_C_DECLS

#endif /* MCA_BTL_OIB_H */
