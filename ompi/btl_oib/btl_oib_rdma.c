/*
 * btl_oib_rdma.c: the module's one-sided part: register_mem/deregister_mem, put, get, the
 * 64-bit atomics (fetching add, non-fetching add, compare-and-swap) and flush, over the
 * transport's caller-memory registrations and operations by address (include/openib.h).
 *
 * Registration: openib_mem_register on the caller's memory (local write, remote read, write
 * and atomics whatever the flags ask); the handle ob1 copies to the peer is the transport's
 * 24-byte openib_remote_t. Through Open MPI's registration cache (rcache grdma, keyed by
 * address range, as its openib BTL does) while mpi_leave_pinned is on and Open MPI's memory
 * hooks invalidate the regions of freed or unmapped memory; ob1 registers a message's buffer
 * and deregisters it when the request completes, and the region stays for the next message
 * from the same memory. Otherwise (mpi_leave_pinned 0, no memory hooks) each registration is
 * released with its request. Finalize releases the cache before the transport closes.
 *
 * Completion: an operation is posted as pieces of at most OIB_RDMA_PIECE bytes, each with the
 * operation's own address as its token (openib_put_addr_token & co., OPENIB_CALLER_TOKEN set),
 * and its callback runs from progress once all its pieces completed, with the first failure's
 * status. Whichever thread progresses finds the operation from the completion alone: no table
 * of tokens, no lock. `pending` counts the pieces not completed plus one for the poster until
 * it has posted them all, so the count reaches zero exactly once: in progress (nearly always:
 * the completion comes after the post returned), or in the poster when every piece completed
 * before it finished, which queues the operation for the next progress call.
 */
#include "opal_config.h"

#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/memoryhooks/memory.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal_params.h"
#include "opal/util/output.h"

#include "btl_oib.h"

#define OIB_OUT (opal_btl_base_framework.framework_output)

/* What an atomic verbs cannot do returns (32-bit, float, an operation other than add, a
 * target not 8-byte aligned): btl.h names OPAL_ERR_NOT_AVAILABLE for these, but Open MPI
 * 4.1's osc rdma treats only OPAL_ERR_NOT_SUPPORTED as "use another way" (as the openib BTL
 * returns); with NOT_AVAILABLE it retries the atomic for ever while it holds the target's
 * accumulate lock (docs/OMPI.md, "One-sided MPI"). */
#define OIB_ATOMIC_REFUSED OPAL_ERR_NOT_SUPPORTED

/* The largest transport operation a put or get is cut into. */
#define OIB_RDMA_PIECE ((size_t) 1 << 20)

static inline mca_btl_oib_module_t *module_of(struct mca_btl_base_module_t *btl)
{
    return (mca_btl_oib_module_t *) btl;
}

static inline mca_btl_oib_reg_t *reg_of(struct mca_btl_base_registration_handle_t *h)
{
    return (mca_btl_oib_reg_t *) ((char *) h - offsetof(mca_btl_oib_reg_t, handle));
}

/* The transport registration of one cache record: [base, base + size) is what grdma asks for
 * (the request's pages, whole), registered for every access whatever the flags ask. A
 * refusal is OPAL_ERR_OUT_OF_RESOURCE, as the openib BTL's: grdma then deregisters the least
 * recently used region nobody uses and tries again, until none is left (pinned memory the
 * cache keeps must not make a registration fail). openib_mem_free takes no transport lock
 * (the region's own reference), so grdma may call it under its VMA lock. */
static int oib_rcache_reg(void *reg_data, void *base, size_t size,
                          mca_rcache_base_registration_t *rreg)
{
    mca_btl_oib_module_t *m = reg_data;
    mca_btl_oib_reg_t *reg = (mca_btl_oib_reg_t *) rreg;
    reg->mem = NULL;
    if (OPENIB_OK != openib_mem_register(m->t, base, size, &reg->mem)
        || OPENIB_OK != openib_mem_remote(reg->mem, &reg->handle.remote)) {
        opal_output_verbose(10, OIB_OUT, "btl: oib: register %zu bytes at %p: %s", size, base,
                            openib_last_error());
        (void) openib_mem_free(reg->mem);
        reg->mem = NULL;
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    __atomic_add_fetch(&m->n_mr, 1, __ATOMIC_RELAXED);
    return OPAL_SUCCESS;
}

/* Deregisters a record's transport region: when the cache drops it (unused and not kept,
 * memory freed or unmapped, finalize). Operations still in flight keep the transport's
 * registration until they complete. */
static int oib_rcache_dereg(void *reg_data, mca_rcache_base_registration_t *rreg)
{
    mca_btl_oib_module_t *m = reg_data;
    mca_btl_oib_reg_t *reg = (mca_btl_oib_reg_t *) rreg;
    int rc = openib_mem_free(reg->mem);
    reg->mem = NULL;
    __atomic_add_fetch(&m->n_mr_freed, 1, __ATOMIC_RELAXED);
    return OPENIB_OK == rc ? OPAL_SUCCESS : OPAL_ERROR;
}

/* Through the cache when there is one (a region of the cache covering [base, base + size) is
 * shared, its reference count raised), else a registration of its own. */
static struct mca_btl_base_registration_handle_t *
oib_register_mem(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                 void *base, size_t size, uint32_t flags)
{
    mca_btl_oib_module_t *m = module_of(btl);
    mca_btl_oib_reg_t *reg = NULL;
    if (NULL != m->rcache) {
        /* Every region allows every access, so any cached one covering the range serves. */
        mca_rcache_base_registration_t *rreg = NULL;
        int rc = m->rcache->rcache_register(m->rcache, base, size, 0, MCA_RCACHE_ACCESS_ANY,
                                            &rreg);
        if (OPAL_SUCCESS != rc || NULL == rreg) {
            return NULL;
        }
        __atomic_add_fetch(&m->n_reg, 1, __ATOMIC_RELAXED);
        return &((mca_btl_oib_reg_t *) rreg)->handle;
    }
    reg = calloc(1, sizeof *reg);
    if (NULL == reg) {
        return NULL;
    }
    if (OPAL_SUCCESS != oib_rcache_reg(m, base, size, &reg->base)) {
        free(reg);
        return NULL;
    }
    __atomic_add_fetch(&m->n_reg, 1, __ATOMIC_RELAXED);
    return &reg->handle;
}

/* Gives the registration back: to the cache (which keeps the region while mpi_leave_pinned
 * is on, until its memory is freed or unmapped or finalize), or deregisters it (the memory
 * is the caller's). */
static int oib_deregister_mem(struct mca_btl_base_module_t *btl,
                              struct mca_btl_base_registration_handle_t *handle)
{
    if (NULL == handle) {
        return OPAL_ERR_BAD_PARAM;
    }
    mca_btl_oib_module_t *m = module_of(btl);
    mca_btl_oib_reg_t *reg = reg_of(handle);
    if (NULL != reg->base.rcache) {
        return reg->base.rcache->rcache_deregister(reg->base.rcache, &reg->base);
    }
    int rc = oib_rcache_dereg(m, &reg->base);
    free(reg);
    return rc;
}

/* The token of a piece of `op`: the operation's address with the caller-token bit. */
static inline uint64_t op_token(mca_btl_oib_rdma_t *op)
{
    return (uint64_t) (uintptr_t) op | OPENIB_CALLER_TOKEN;
}

/* Runs the callback of a finished operation and gives it back. */
static void op_deliver(mca_btl_oib_module_t *m, mca_btl_oib_rdma_t *op)
{
    /* Counted done before its callback (btl.h: a flush need not wait for callbacks), so that
     * a callback that flushes does not wait for itself. */
    __atomic_sub_fetch(&m->rdma_inflight, 1, __ATOMIC_RELEASE);
    if (NULL != op->cbfunc) {
        op->cbfunc(&m->super, op->endpoint, op->local_address, op->local_handle, op->cbcontext,
                   op->cbdata, mca_btl_oib_opal_code(op->status));
    }
    /* A failed endpoint was reported when its completion was polled (module progress,
     * mca_btl_oib_endpoint_failed). */
    opal_free_list_return(&m->rdma_ops, &op->super);
}

/* Records a piece's failure (the first one's status stays). */
static void op_failed(mca_btl_oib_rdma_t *op, int status)
{
    int ok = OPENIB_OK;
    (void) __atomic_compare_exchange_n(&op->status, &ok, status, false, __ATOMIC_RELAXED,
                                       __ATOMIC_RELAXED);
}

/* Takes one count of `op` (a piece's or the poster's): true when it was the last. */
static inline bool op_count_done(mca_btl_oib_rdma_t *op)
{
    return 0 == __atomic_sub_fetch(&op->pending, 1, __ATOMIC_ACQ_REL);
}

int mca_btl_oib_rdma_completion(mca_btl_oib_module_t *m, const openib_completion_t *c)
{
    mca_btl_oib_rdma_t *op = (mca_btl_oib_rdma_t *) (uintptr_t) (c->token
                                                                  & ~OPENIB_CALLER_TOKEN);
    if (OPENIB_OK != c->status) {
        opal_output_verbose(1, OIB_OUT, "btl: oib: RDMA operation to rank %u failed: %s",
                            c->peer, openib_strerror(c->status));
        op_failed(op, c->status);
    }
    if (!op_count_done(op)) {
        return 0;
    }
    op_deliver(m, op);
    return 1;
}

/* The poster is done with `op`: its count goes; when the pieces all completed before that
 * (or none was posted), the operation waits for the next progress call in the module's
 * queue (the callback never runs inside the put, get or atomic call). */
static void op_release(mca_btl_oib_module_t *m, mca_btl_oib_rdma_t *op)
{
    if (!op_count_done(op)) {
        return;
    }
    op->next = NULL;
    pthread_mutex_lock(&m->rdma_lock);
    if (NULL == m->done_tail) {
        __atomic_store_n(&m->done_head, op, __ATOMIC_RELEASE); /* progress peeks */
    } else {
        m->done_tail->next = op;
    }
    m->done_tail = op;
    pthread_mutex_unlock(&m->rdma_lock);
}

int mca_btl_oib_rdma_deliver(mca_btl_oib_module_t *m)
{
    int count = 0;
    for (;;) {
        pthread_mutex_lock(&m->rdma_lock);
        mca_btl_oib_rdma_t *op = m->done_head;
        if (NULL != op) {
            __atomic_store_n(&m->done_head, op->next, __ATOMIC_RELEASE);
            if (NULL == m->done_head) {
                m->done_tail = NULL;
            }
        }
        pthread_mutex_unlock(&m->rdma_lock);
        if (NULL == op) {
            return count;
        }
        op_deliver(m, op);
        count++;
        /* An unlocked peek, as module progress's: one listed meanwhile waits for the next. */
        if (NULL == __atomic_load_n(&m->done_head, __ATOMIC_ACQUIRE)) {
            return count;
        }
    }
}

/* Early completions of sends (btl_oib_module.c): a send's completion polled before its
 * descriptor was listed is kept here by token, and claimed by the poster. */
void mca_btl_oib_early_keep(mca_btl_oib_module_t *m, const openib_completion_t *c)
{
    mca_btl_oib_token_t *e = malloc(sizeof *e);
    if (NULL == e) {
        return; /* the send's poster then waits for a completion that never comes */
    }
    e->token = c->token;
    e->status = c->status;
    pthread_mutex_lock(&m->rdma_lock);
    e->next = m->early;
    m->early = e;
    pthread_mutex_unlock(&m->rdma_lock);
}

bool mca_btl_oib_rdma_claim_early(mca_btl_oib_module_t *m, uint64_t token, int *status)
{
    pthread_mutex_lock(&m->rdma_lock);
    mca_btl_oib_token_t *prev = NULL, *e = m->early;
    while (NULL != e && e->token != token) {
        prev = e;
        e = e->next;
    }
    if (NULL != e) {
        if (NULL == prev) {
            m->early = e->next;
        } else {
            prev->next = e->next;
        }
        *status = e->status;
    }
    pthread_mutex_unlock(&m->rdma_lock);
    free(e);
    return NULL != e;
}

static mca_btl_oib_rdma_t *op_new(mca_btl_oib_module_t *m, struct mca_btl_base_endpoint_t *ep,
                                  void *local_address,
                                  struct mca_btl_base_registration_handle_t *local_handle,
                                  mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                                  void *cbdata)
{
    mca_btl_oib_rdma_t *op = (mca_btl_oib_rdma_t *) opal_free_list_get(&m->rdma_ops);
    if (NULL == op) {
        return NULL;
    }
    op->next = NULL;
    op->endpoint = ep;
    op->local_address = local_address;
    op->local_handle = local_handle;
    op->cbfunc = cbfunc;
    op->cbcontext = cbcontext;
    op->cbdata = cbdata;
    op->pending = 1; /* the poster's, until every piece is posted */
    op->status = OPENIB_OK;
    __atomic_add_fetch(&m->rdma_inflight, 1, __ATOMIC_RELAXED);
    return op;
}

/* An operation none of whose pieces was posted: dropped, `rc` returned (the upper layer
 * retries or fails; no callback). */
static int op_unposted(mca_btl_oib_module_t *m, mca_btl_oib_rdma_t *op, int rc)
{
    opal_free_list_return(&m->rdma_ops, &op->super);
    __atomic_sub_fetch(&m->rdma_inflight, 1, __ATOMIC_RELEASE);
    return mca_btl_oib_opal_code(rc);
}

static int rdma(const char *what, int write, struct mca_btl_base_module_t *btl,
                struct mca_btl_base_endpoint_t *ep, void *local_address, uint64_t remote_address,
                struct mca_btl_base_registration_handle_t *local_handle,
                struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
                mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata)
{
    mca_btl_oib_module_t *m = module_of(btl);
    if (NULL == ep || NULL == local_handle || NULL == remote_handle) {
        opal_output_verbose(10, OIB_OUT, "btl: oib: %s without an endpoint or a handle", what);
        return OPAL_ERR_BAD_PARAM;
    }
    mca_btl_oib_rdma_t *op = op_new(m, ep, local_address, local_handle, cbfunc, cbcontext,
                                    cbdata);
    if (NULL == op) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    openib_mem_t *mem = reg_of(local_handle)->mem;
    const openib_remote_t *remote = &remote_handle->remote;
    uint64_t token = op_token(op);
    size_t done = 0, pieces = 0;
    int rc = OPENIB_OK;
    do {
        size_t n = size - done < OIB_RDMA_PIECE ? size - done : OIB_RDMA_PIECE;
        unsigned char *at = (unsigned char *) local_address + done;
        /* Counted before the post: its completion may be polled before the call returns. */
        __atomic_add_fetch(&op->pending, 1, __ATOMIC_RELAXED);
        rc = write ? openib_put_addr_token(m->t, ep->rank, at, mem, remote_address + done,
                                           remote, n, token)
                   : openib_get_addr_token(m->t, ep->rank, at, mem, remote_address + done,
                                           remote, n, token);
        if (OPENIB_OK != rc) {
            __atomic_sub_fetch(&op->pending, 1, __ATOMIC_RELAXED);
            opal_output_verbose(10, OIB_OUT, "btl: oib: %s of %zu bytes to rank %u: %s", what,
                                n, ep->rank, openib_last_error());
            mca_btl_oib_endpoint_failed(m, ep->rank, rc, openib_last_error());
            break;
        }
        pieces++;
        done += n;
    } while (done < size);
    if (0 == pieces) {
        return op_unposted(m, op, rc);
    }
    if (OPENIB_OK == rc) {
        if (write) {
            __atomic_add_fetch(&m->n_put, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&m->put_bytes, size, __ATOMIC_RELAXED);
        } else {
            __atomic_add_fetch(&m->n_get, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&m->get_bytes, size, __ATOMIC_RELAXED);
        }
    } else {
        op_failed(op, rc); /* posted in part: its callback reports the failure */
    }
    op_release(m, op);
    return OPAL_SUCCESS;
}

int mca_btl_oib_put(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                    void *local_address, uint64_t remote_address,
                    struct mca_btl_base_registration_handle_t *local_handle,
                    struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
                    int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                    void *cbcontext, void *cbdata)
{
    return rdma("put", 1, btl, ep, local_address, remote_address, local_handle, remote_handle,
                size, cbfunc, cbcontext, cbdata);
}

int mca_btl_oib_get(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                    void *local_address, uint64_t remote_address,
                    struct mca_btl_base_registration_handle_t *local_handle,
                    struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
                    int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                    void *cbcontext, void *cbdata)
{
    return rdma("get", 0, btl, ep, local_address, remote_address, local_handle, remote_handle,
                size, cbfunc, cbcontext, cbdata);
}

/* A 64-bit atomic: fetch-and-add (cswap 0) or compare-and-swap (cswap 1); the old value lands
 * at `local_address` inside `mem`. */
static int atomic(mca_btl_oib_module_t *m, struct mca_btl_base_endpoint_t *ep, int cswap,
                  void *local_address, openib_mem_t *mem,
                  struct mca_btl_base_registration_handle_t *local_handle,
                  uint64_t remote_address,
                  struct mca_btl_base_registration_handle_t *remote_handle, uint64_t a,
                  uint64_t b, int flags, mca_btl_base_rdma_completion_fn_t cbfunc,
                  void *cbcontext, void *cbdata, void *reported_address)
{
    if (NULL == ep || NULL == mem || NULL == remote_handle) {
        return OPAL_ERR_BAD_PARAM;
    }
    /* Verbs atomics are 64-bit integer operations on 8-byte aligned words only. A refusal is
     * OPAL_ERR_NOT_SUPPORTED (OIB_ATOMIC_REFUSED): the code Open MPI 4.1's osc rdma falls
     * back on (get-op-put under its accumulate lock); any other error makes it retry the same
     * atomic for ever, holding that lock. */
    if (flags & (MCA_BTL_ATOMIC_FLAG_32BIT | MCA_BTL_ATOMIC_FLAG_FLOAT)) {
        return OIB_ATOMIC_REFUSED;
    }
    if (0 != (remote_address & 7)) {
        return OIB_ATOMIC_REFUSED;
    }
    mca_btl_oib_rdma_t *op = op_new(m, ep, reported_address, local_handle, cbfunc, cbcontext,
                                    cbdata);
    if (NULL == op) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    __atomic_add_fetch(&op->pending, 1, __ATOMIC_RELAXED); /* the piece's, before the post */
    uint64_t token = op_token(op);
    int rc = cswap ? openib_compare_swap_addr_token(m->t, ep->rank, local_address, mem,
                                                    remote_address, &remote_handle->remote, a,
                                                    b, token)
                   : openib_fetch_add_addr_token(m->t, ep->rank, local_address, mem,
                                                 remote_address, &remote_handle->remote, a,
                                                 token);
    if (OPENIB_OK != rc) {
        opal_output_verbose(10, OIB_OUT, "btl: oib: atomic to rank %u: %s", ep->rank,
                            openib_last_error());
        mca_btl_oib_endpoint_failed(m, ep->rank, rc, openib_last_error());
        return op_unposted(m, op, rc);
    }
    __atomic_add_fetch(&m->n_atomic, 1, __ATOMIC_RELAXED);
    op_release(m, op);
    return OPAL_SUCCESS;
}

static int oib_atomic_fop(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                          void *local_address, uint64_t remote_address,
                          struct mca_btl_base_registration_handle_t *local_handle,
                          struct mca_btl_base_registration_handle_t *remote_handle,
                          mca_btl_base_atomic_op_t op, uint64_t operand, int flags, int order,
                          mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                          void *cbdata)
{
    if (MCA_BTL_ATOMIC_ADD != op) {
        return OIB_ATOMIC_REFUSED;
    }
    if (NULL == local_handle) {
        return OPAL_ERR_BAD_PARAM;
    }
    return atomic(module_of(btl), ep, 0, local_address, reg_of(local_handle)->mem, local_handle,
                  remote_address, remote_handle, operand, 0, flags, cbfunc, cbcontext, cbdata,
                  local_address);
}

static int oib_atomic_op(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                         uint64_t remote_address,
                         struct mca_btl_base_registration_handle_t *remote_handle,
                         mca_btl_base_atomic_op_t op, uint64_t operand, int flags, int order,
                         mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata)
{
    mca_btl_oib_module_t *m = module_of(btl);
    if (MCA_BTL_ATOMIC_ADD != op) {
        return OIB_ATOMIC_REFUSED;
    }
    /* A fetch-and-add whose old value lands in the module's scratch word. */
    return atomic(m, ep, 0, openib_mem_ptr(m->scratch), m->scratch, NULL, remote_address,
                  remote_handle, operand, 0, flags, cbfunc, cbcontext, cbdata, NULL);
}

static int oib_atomic_cswap(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                            void *local_address, uint64_t remote_address,
                            struct mca_btl_base_registration_handle_t *local_handle,
                            struct mca_btl_base_registration_handle_t *remote_handle,
                            uint64_t compare, uint64_t value, int flags, int order,
                            mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                            void *cbdata)
{
    if (NULL == local_handle) {
        return OPAL_ERR_BAD_PARAM;
    }
    return atomic(module_of(btl), ep, 1, local_address, reg_of(local_handle)->mem, local_handle,
                  remote_address, remote_handle, compare, value, flags, cbfunc, cbcontext,
                  cbdata, local_address);
}

/* Waits until every put, get and atomic started before has completed and its callback has
 * started (all endpoints: btl.h allows ignoring `ep`). Progresses meanwhile; an endpoint that fails
 * completes its operations with an error, so this ends. */
static int oib_flush(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep)
{
    mca_btl_oib_module_t *m = module_of(btl);
    while (__atomic_load_n(&m->rdma_inflight, __ATOMIC_ACQUIRE) > 0) {
        (void) mca_btl_oib_module_progress(m);
    }
    return OPAL_SUCCESS;
}

/* True when Open MPI's memory hooks tell the registration caches about freed and unmapped
 * memory: the memory manager supports both, and the rcache base registered its callback
 * (mca_rcache_base_module_create does on its first call with leave_pinned not 0). */
static bool memory_hooks_active(void)
{
    const int need = OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT;
    return mca_rcache_base_used_mem_hooks && need == (need & opal_mem_hooks_support_level());
}

/* The registration cache: Open MPI's grdma, as its openib BTL's, used only while it keeps
 * registrations (mpi_leave_pinned, or mpi_leave_pinned_pipeline) and Open MPI's memory hooks
 * invalidate them when their memory is freed or unmapped. mca_rcache_base_module_create
 * resolves mpi_leave_pinned's "auto" (-1) to 1 when the memory hooks work, before ob1 reads
 * it (ob1's init runs after the BTLs'). Otherwise there is no cache: each registration is
 * made for its request and released with it, as before. */
static void rcache_create(mca_btl_oib_module_t *m)
{
    m->rcache = NULL;
    if (0 == opal_leave_pinned && !opal_leave_pinned_pipeline) {
        opal_output_verbose(10, OIB_OUT, "btl: oib: registration cache: none (mpi_leave_pinned "
                            "0): every registration is released with its request");
        return;
    }
    (void) snprintf(m->rcache_name, sizeof m->rcache_name, "oib.%u.%p", m->rank, (void *) m);
    mca_rcache_base_resources_t res = {
        .cache_name = m->rcache_name,
        .reg_data = m,
        .sizeof_reg = sizeof(mca_btl_oib_reg_t),
        .register_mem = oib_rcache_reg,
        .deregister_mem = oib_rcache_dereg,
    };
    mca_rcache_base_module_t *rc = mca_rcache_base_module_create("grdma", m, &res);
    if (NULL == rc) {
        opal_output_verbose(1, OIB_OUT, "btl: oib: registration cache: none (the rcache grdma "
                            "could not be created): every registration is released with its "
                            "request");
        return;
    }
    if (!(1 == opal_leave_pinned || opal_leave_pinned_pipeline) || !memory_hooks_active()) {
        /* grdma would not keep registrations (leave_pinned auto without memory hooks), or
         * would keep them without being told of freed memory: no cache. */
        opal_output_verbose(10, OIB_OUT, "btl: oib: registration cache: none (mpi_leave_pinned "
                            "%d, memory hooks %s): every registration is released with its "
                            "request", opal_leave_pinned,
                            memory_hooks_active() ? "active" : "not active");
        (void) mca_rcache_base_module_destroy(rc);
        return;
    }
    m->rcache = rc;
    opal_output_verbose(10, OIB_OUT, "btl: oib: registration cache: grdma (mpi_leave_pinned %d, "
                        "mpi_leave_pinned_pipeline %d)", opal_leave_pinned,
                        (int) opal_leave_pinned_pipeline);
}

void mca_btl_oib_rdma_release(mca_btl_oib_module_t *m)
{
    const char *name = NULL == m->rcache ? "none" : "grdma";
    if (NULL != m->rcache) {
        /* grdma's finalize deregisters every region it keeps (and prints its statistics with
         * rcache_grdma_print_stats). */
        (void) mca_rcache_base_module_destroy(m->rcache);
        m->rcache = NULL;
    }
    opal_output_verbose(5, OIB_OUT, "btl: oib: rank %u: registration cache %s: %llu regions "
                        "registered, %llu released", m->rank, name,
                        (unsigned long long) __atomic_load_n(&m->n_mr, __ATOMIC_RELAXED),
                        (unsigned long long) __atomic_load_n(&m->n_mr_freed, __ATOMIC_RELAXED));
}

int mca_btl_oib_rdma_init(mca_btl_oib_module_t *m)
{
    pthread_mutex_init(&m->rdma_lock, NULL);
    m->early = NULL;
    OBJ_CONSTRUCT(&m->rdma_ops, opal_free_list_t);
    int rc = opal_free_list_init(&m->rdma_ops, sizeof(mca_btl_oib_rdma_t), opal_cache_line_size,
                                 OBJ_CLASS(opal_free_list_item_t), 0, opal_cache_line_size, 64,
                                 -1, 64, NULL, 0, NULL, NULL, NULL);
    if (OPAL_SUCCESS != rc) {
        OBJ_DESTRUCT(&m->rdma_ops);
        opal_output_verbose(1, OIB_OUT, "btl: oib: no module: no free list of RDMA operations "
                            "(%d)", rc);
        return rc;
    }
    m->rdma_ops_made = true;
    m->done_head = m->done_tail = NULL;
    m->rdma_inflight = 0;
    m->n_reg = m->n_put = m->put_bytes = m->n_get = m->get_bytes = m->n_atomic = 0;
    if (OPENIB_OK != openib_mem_alloc(m->t, 64, &m->scratch)) {
        opal_output_verbose(1, OIB_OUT, "btl: oib: no module: %s", openib_last_error());
        return OPAL_ERROR;
    }
    rcache_create(m);
    m->super.btl_register_mem = oib_register_mem;
    m->super.btl_deregister_mem = oib_deregister_mem;
    m->super.btl_registration_handle_size = sizeof(struct mca_btl_base_registration_handle_t);
    m->super.btl_put = mca_btl_oib_put;
    m->super.btl_get = mca_btl_oib_get;
    m->super.btl_atomic_op = oib_atomic_op;
    m->super.btl_atomic_fop = oib_atomic_fop;
    m->super.btl_atomic_cswap = oib_atomic_cswap;
    m->super.btl_flush = oib_flush;
    /* Any size (cut into pieces here), any alignment; the local side is always registered. */
    if (0 == m->super.btl_put_limit) {
        m->super.btl_put_limit = SIZE_MAX;
    }
    if (0 == m->super.btl_get_limit) {
        m->super.btl_get_limit = SIZE_MAX;
    }
    m->super.btl_put_alignment = 0;
    m->super.btl_get_alignment = 0;
    m->super.btl_put_local_registration_threshold = 0;
    m->super.btl_get_local_registration_threshold = 0;
    /* 64-bit add (fetching or not) and compare-and-swap: what verbs atomics do. */
    m->super.btl_atomic_flags = MCA_BTL_ATOMIC_SUPPORTS_ADD | MCA_BTL_ATOMIC_SUPPORTS_CSWAP;
    return OPAL_SUCCESS;
}

void mca_btl_oib_rdma_fini(mca_btl_oib_module_t *m)
{
    opal_output_verbose(5, OIB_OUT, "btl: oib: rank %u: rdma: %llu registrations, %llu puts "
                        "(%llu bytes), %llu gets (%llu bytes), %llu atomics", m->rank,
                        (unsigned long long) m->n_reg, (unsigned long long) m->n_put,
                        (unsigned long long) m->put_bytes, (unsigned long long) m->n_get,
                        (unsigned long long) m->get_bytes, (unsigned long long) m->n_atomic);
    /* Early send completions never claimed (the transport is closed) go; operations never
     * completed go with the free list (their callbacks never run, as the send path leaves its
     * descriptors). */
    for (mca_btl_oib_token_t *p = m->early, *n; NULL != p; p = n) {
        n = p->next;
        free(p);
    }
    m->early = NULL;
    /* Not made when the module failed before its RDMA part was set up. */
    if (m->rdma_ops_made) {
        OBJ_DESTRUCT(&m->rdma_ops);
        m->rdma_ops_made = false;
    }
    (void) openib_mem_free(m->scratch);
    m->scratch = NULL;
    pthread_mutex_destroy(&m->rdma_lock);
}
