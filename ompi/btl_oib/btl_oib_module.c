/*
 * btl_oib_module.c: the module, i.e. what ob1 calls: add_procs/del_procs, alloc/free,
 * prepare_src, send, sendi, dump, finalize, register_error; and the module's progress.
 *
 * Sends: openib_send copies the bytes before it returns, so a descriptor could be reused at
 * once; still, as vader does (ob1 is known to mishandle the inline-completion return 1), send
 * returns OPAL_SUCCESS and the descriptor's callback runs from progress when the transport
 * reports the send's completion (its token), with the transport's status.
 *
 * Completions: openib_progress_poll's are an RDMA piece's, whose token is its operation's
 * address (btl_oib_rdma.c), or a send's, matched to its descriptor by the transport's token;
 * no lock is held across a transport call, so a send's polled before its poster listed the
 * descriptor is kept as early and claimed by the poster (oib_send).
 *
 * Receives: the transport's receive callback hands the message to ob1's callback for its tag
 * (mca_btl_base_active_message_trigger) at once, on the transport's receive buffer, without a
 * copy. It runs inside openib_progress with the transport's lock held; ob1 sends, and later
 * puts and gets, from inside it, which the transport allows on the same thread (openib.h,
 * "Threads"). Messages of one peer reach ob1 in the order they were sent: progress inside a
 * callback returns at once, so none overtakes a callback still running.
 */
#include "opal_config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "opal/class/opal_bitmap.h"
#include "opal/constants.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/util/output.h"

#include "btl_oib.h"

#define OIB_OUT (opal_btl_base_framework.framework_output)

static void frag_construct(mca_btl_oib_frag_t *frag)
{
    frag->segment.seg_addr.pval = NULL;
    frag->segment.seg_len = 0;
    frag->base.des_segments = &frag->segment;
    frag->base.des_segment_count = 1;
    frag->endpoint = NULL;
    frag->token = 0;
    frag->next = NULL;
}

OBJ_CLASS_INSTANCE(mca_btl_oib_frag_t, mca_btl_base_descriptor_t, frag_construct, NULL);

static inline mca_btl_oib_module_t *module_of(struct mca_btl_base_module_t *btl)
{
    return (mca_btl_oib_module_t *) btl;
}

/* The transport's error as an OPAL code ob1 understands (declared in btl_oib.h; the send and
 * the RDMA paths share it). */
int mca_btl_oib_opal_code(int rc)
{
    switch (rc) {
    case OPENIB_OK:
        return OPAL_SUCCESS;
    case OPENIB_ERR_BUSY:
        return OPAL_ERR_OUT_OF_RESOURCE;
    case OPENIB_ERR_NO_PATH:
    case OPENIB_ERR_BAD_PEER:
    case OPENIB_ERR_ENDPOINT_FAILED:
        return OPAL_ERR_UNREACH;
    case OPENIB_ERR_TOO_LARGE:
    case OPENIB_ERR_RANGE:
    case OPENIB_ERR_INVALID:
        return OPAL_ERR_BAD_PARAM;
    default:
        return OPAL_ERROR;
    }
}

void mca_btl_oib_endpoint_failed(mca_btl_oib_module_t *m, uint32_t rank, int status,
                                 const char *why)
{
    if (m->closing || rank >= m->size || OPENIB_ERR_ENDPOINT_FAILED != status) {
        return;
    }
    mca_btl_base_endpoint_t *ep = m->endpoints[rank];
    if (NULL == ep || __atomic_load_n(&ep->removed, __ATOMIC_ACQUIRE)
        || 0 != __atomic_exchange_n(&ep->failed, 1, __ATOMIC_ACQ_REL)) {
        return;
    }
    const char *host = NULL != ep->proc && NULL != ep->proc->proc_hostname
                           ? ep->proc->proc_hostname : "?";
    if (NULL == why || '\0' == why[0]) {
        why = openib_strerror(status);
    }
    opal_output(0, "btl: oib: endpoint to rank %u (%s) failed: %s", rank, host, why);
    /* For the error callback: ob1 prints it as ompi_rte_abort's format (no '%' in it), after
     * the line above. */
    snprintf(ep->failure, sizeof ep->failure, "the oib BTL lost its endpoint to rank %u (%s)",
             rank, host);
    for (char *c = ep->failure; '\0' != *c; c++) {
        if ('%' == *c) {
            *c = ' ';
        }
    }
    if (NULL != m->error_cb) {
        m->error_cb(&m->super, MCA_BTL_ERROR_FLAGS_FATAL, ep->proc, ep->failure);
    }
}

static int oib_add_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                         struct opal_proc_t **procs, struct mca_btl_base_endpoint_t **peers,
                         opal_bitmap_t *reachable)
{
    mca_btl_oib_module_t *m = module_of(btl);
    opal_process_name_t me = OPAL_PROC_MY_NAME;

    for (size_t i = 0; i < nprocs; i++) {
        opal_proc_t *p = procs[i];
        uint32_t rank = p->proc_name.vpid;
        /* Another job or beyond our job: not reachable here. Our own rank is reachable (the
         * transport's loopback endpoint, made on first use): osc rdma takes a BTL only if it
         * reaches every rank of a window's communicator, the caller included. ob1 keeps
         * sending to itself through the self BTL (higher exclusivity: the BML puts oib only
         * in the endpoint's RDMA list, which ob1 does not use for a BTL outside the eager
         * list). */
        if (p->proc_name.jobid != me.jobid || rank >= m->size
            || (rank == m->rank && !mca_btl_oib_component.own_rank)) {
            continue;
        }
        /* A rank del_procs removed is a peer of the transport again first. */
        if (NULL != m->endpoints[rank] && __atomic_load_n(&m->endpoints[rank]->removed,
                                                          __ATOMIC_ACQUIRE)
            && OPENIB_OK != openib_add_procs(m->t, &rank, 1)) {
            opal_output_verbose(10, OIB_OUT, "btl: oib: rank %u not added again: %s", rank,
                                openib_last_error());
            continue;
        }
        /* Reads the peer's modex the first time: a peer that published none (no usable port)
         * or that no port pair and CPC reach is unreachable here, not an error. */
        if (1 != openib_reachable(m->t, rank)) {
            opal_output_verbose(10, OIB_OUT, "btl: oib: rank %u unreachable: %s", rank,
                                openib_last_error());
            continue;
        }
        mca_btl_base_endpoint_t *ep = m->endpoints[rank];
        if (NULL == ep) {
            ep = calloc(1, sizeof *ep);
            if (NULL == ep) {
                return OPAL_ERR_OUT_OF_RESOURCE;
            }
            ep->proc = p;
            ep->rank = rank;
            m->endpoints[rank] = ep;
        } else if (__atomic_load_n(&ep->removed, __ATOMIC_ACQUIRE)) {
            /* Removed by del_procs: the same structure again (the upper layer may still hold
             * it), on a fresh transport endpoint. */
            ep->proc = p;
            ep->failure[0] = '\0';
            __atomic_store_n(&ep->failed, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&ep->removed, 0, __ATOMIC_RELEASE);
            opal_output_verbose(10, OIB_OUT, "btl: oib: rank %u added again", rank);
        }
        peers[i] = ep;
        if (NULL != reachable) {
            (void) opal_bitmap_set_bit(reachable, (int) i);
        }
    }
    mca_btl_oib_connect_at_init(m);
    return OPAL_SUCCESS;
}

/* Removes the endpoints of `peers` (ob1 calls it at MPI_Finalize, after its fence, for every
 * proc; the BML when it cannot use an endpoint add_procs gave). ob1 removes every proc at
 * MPI_Finalize while the last messages and the transport's acknowledgements may still be in
 * flight, and its send callbacks abort on a failed status: so the transport is flushed first
 * (up to OIB_DEL_FLUSH_MS; receive callbacks may run) and the completions it produced are
 * delivered. Then the transport's endpoint goes (openib_del_procs): what was still in flight
 * to that peer completes with OPAL_ERR_UNREACH (each descriptor's callback runs, descriptors
 * the BTL owns go back to the free list, RDMA callbacks run), without an error callback. The
 * structure stays (ob1 and late completions may name it) and add_procs of the same proc
 * revives it; finalize frees it. */
#define OIB_DEL_FLUSH_MS 2000
static int oib_del_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                         struct opal_proc_t **procs, struct mca_btl_base_endpoint_t **peers)
{
    mca_btl_oib_module_t *m = module_of(btl);
    uint32_t *ranks = calloc(nprocs > 0 ? nprocs : 1, sizeof *ranks);
    if (NULL == ranks) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    size_t n = 0;
    for (size_t i = 0; i < nprocs; i++) {
        mca_btl_base_endpoint_t *ep = NULL != peers ? peers[i] : NULL;
        /* Only endpoints of this module, each once. */
        if (NULL == ep || ep->rank >= m->size || m->endpoints[ep->rank] != ep
            || __atomic_load_n(&ep->removed, __ATOMIC_ACQUIRE)) {
            continue;
        }
        ranks[n++] = ep->rank;
    }
    if (0 == n) {
        free(ranks);
        return OPAL_SUCCESS;
    }
    /* Every descriptor's operation completes; the last immediate sends are not waited for
     * (openib_quiesce): the removed peers are leaving too (MPI_Finalize) and may have closed
     * their connections already, so a request they must acknowledge would only be retried. */
    int rc = openib_quiesce(m->t, OIB_DEL_FLUSH_MS);
    if (OPENIB_OK != rc) {
        /* In a receive callback (REENTRANT), or a peer that does not answer (TIMEOUT): what
         * is still in flight to the removed ranks fails below. */
        opal_output_verbose(10, OIB_OUT, "btl: oib: del_procs: quiesce: %s", openib_last_error());
    }
    (void) mca_btl_oib_module_progress(m);
    for (size_t i = 0; i < n; i++) {
        __atomic_store_n(&m->endpoints[ranks[i]]->removed, 1, __ATOMIC_RELEASE);
    }
    rc = openib_del_procs(m->t, ranks, n);
    if (OPENIB_OK != rc) {
        opal_output_verbose(1, OIB_OUT, "btl: oib: del_procs: %s", openib_last_error());
    }
    /* The removed ranks' failed operations: their callbacks now. */
    (void) mca_btl_oib_module_progress(m);
    for (size_t i = 0; i < n; i++) {
        opal_output_verbose(10, OIB_OUT, "btl: oib: rank %u removed", ranks[i]);
    }
    free(ranks);
    return mca_btl_oib_opal_code(rc);
}

static mca_btl_oib_frag_t *frag_get(mca_btl_oib_module_t *m, struct mca_btl_base_endpoint_t *ep,
                                    size_t size, uint32_t flags)
{
    if (size > m->super.btl_max_send_size) {
        return NULL;
    }
    mca_btl_oib_frag_t *frag = (mca_btl_oib_frag_t *) opal_free_list_get(&m->frags);
    if (NULL == frag) {
        return NULL;
    }
    frag->segment.seg_addr.pval = frag->base.super.ptr;
    frag->segment.seg_len = size;
    frag->base.des_segments = &frag->segment;
    frag->base.des_segment_count = 1;
    frag->base.des_flags = flags;
    frag->base.des_cbfunc = NULL;
    frag->base.des_cbdata = NULL;
    frag->base.order = MCA_BTL_NO_ORDER;
    frag->endpoint = ep;
    frag->token = 0;
    frag->next = NULL;
    return frag;
}

static mca_btl_base_descriptor_t *oib_alloc(struct mca_btl_base_module_t *btl,
                                            struct mca_btl_base_endpoint_t *ep, uint8_t order,
                                            size_t size, uint32_t flags)
{
    mca_btl_oib_frag_t *frag = frag_get(module_of(btl), ep, size, flags);
    return NULL == frag ? NULL : &frag->base;
}

static int oib_free(struct mca_btl_base_module_t *btl, mca_btl_base_descriptor_t *des)
{
    opal_free_list_return(&module_of(btl)->frags, &des->super);
    return OPAL_SUCCESS;
}

/* Packs up to *size bytes of the convertor after `reserve` bytes of header space. */
static mca_btl_base_descriptor_t *oib_prepare_src(struct mca_btl_base_module_t *btl,
                                                  struct mca_btl_base_endpoint_t *ep,
                                                  struct opal_convertor_t *convertor,
                                                  uint8_t order, size_t reserve, size_t *size,
                                                  uint32_t flags)
{
    mca_btl_oib_module_t *m = module_of(btl);
    if (reserve > m->super.btl_max_send_size) {
        return NULL;
    }
    size_t room = m->super.btl_max_send_size - reserve;
    size_t want = *size < room ? *size : room;
    mca_btl_oib_frag_t *frag = frag_get(m, ep, reserve + want, flags);
    if (NULL == frag) {
        return NULL;
    }
    struct iovec iov = {.iov_base = (unsigned char *) frag->segment.seg_addr.pval + reserve,
                        .iov_len = want};
    uint32_t count = 1;
    size_t packed = want;
    if (want > 0 && opal_convertor_pack(convertor, &iov, &count, &packed) < 0) {
        opal_free_list_return(&m->frags, &frag->base.super);
        return NULL;
    }
    if (want == 0) {
        packed = 0;
    }
    frag->segment.seg_len = reserve + packed;
    *size = packed;
    return &frag->base;
}

static void sends_push(mca_btl_oib_module_t *m, mca_btl_oib_frag_t *frag)
{
    frag->next = NULL;
    if (NULL == m->sends_tail) {
        m->sends_head = frag;
    } else {
        m->sends_tail->next = frag;
    }
    m->sends_tail = frag;
}

/* The send in flight with `token`, unlinked; NULL when there is none. send_lock held. */
static mca_btl_oib_frag_t *sends_take(mca_btl_oib_module_t *m, uint64_t token)
{
    mca_btl_oib_frag_t *prev = NULL;
    mca_btl_oib_frag_t *f = m->sends_head;
    while (NULL != f && f->token != token) {
        prev = f;
        f = f->next;
    }
    if (NULL != f) {
        if (NULL == prev) {
            m->sends_head = f->next;
        } else {
            prev->next = f->next;
        }
        if (m->sends_tail == f) {
            m->sends_tail = prev;
        }
        f->next = NULL;
    }
    return f;
}

/* Counts a send for the finalize line: a relaxed load and store, no locked instruction on
 * the send path (concurrent senders may lose a count: it only shows that a module was used). */
static inline void count_send(mca_btl_oib_module_t *m)
{
    __atomic_store_n(&m->n_send, __atomic_load_n(&m->n_send, __ATOMIC_RELAXED) + 1,
                     __ATOMIC_RELAXED);
}

static int oib_send(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                    struct mca_btl_base_descriptor_t *des, mca_btl_base_tag_t tag)
{
    mca_btl_oib_module_t *m = module_of(btl);
    mca_btl_oib_frag_t *frag = (mca_btl_oib_frag_t *) des;
    uint64_t token = 0;

    if (0 == tag) {
        return OPAL_ERR_BAD_PARAM; /* the transport's own tag */
    }
    frag->endpoint = ep;
    des->des_flags |= MCA_BTL_DES_SEND_ALWAYS_CALLBACK;
    /* Not under send_lock (see the module's struct): a completion polled before the
     * descriptor is listed below is kept as early, and claimed here. */
    int rc = openib_send(m->t, ep->rank, tag, frag->segment.seg_addr.pval, frag->segment.seg_len,
                         &token);
    if (OPENIB_OK != rc) {
        opal_output_verbose(10, OIB_OUT, "btl: oib: send of %zu bytes to rank %u: %s",
                            frag->segment.seg_len, ep->rank, openib_last_error());
        mca_btl_oib_endpoint_failed(m, ep->rank, rc, openib_last_error());
        return mca_btl_oib_opal_code(rc);
    }
    count_send(m);
    pthread_mutex_lock(&m->send_lock);
    frag->token = token;
    if (mca_btl_oib_rdma_claim_early(m, token, &frag->early_status)) {
        /* progress polled its completion already: finished by the next progress call */
        frag->next = NULL;
        if (NULL == m->ready_tail) {
            __atomic_store_n(&m->ready_head, frag, __ATOMIC_RELEASE); /* progress peeks */
        } else {
            m->ready_tail->next = frag;
        }
        m->ready_tail = frag;
    } else {
        sends_push(m, frag);
    }
    pthread_mutex_unlock(&m->send_lock);
    return OPAL_SUCCESS;
}

/* Immediate sends up to this size (header + payload) are packed on the stack. */
#define OIB_SENDI_STACK 1024

/* An immediate send of header + packed payload when the transport can post it now. Otherwise
 * OPAL_ERR_OUT_OF_RESOURCE with, when ob1 asks for one, a descriptor of that size: ob1 packs
 * into it and sends it with btl_send (which queues until the connection is up). Without that
 * descriptor ob1 would only retry sendi, and a peer whose connection only sendi starts would
 * never be reached. */
static int oib_sendi(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                     struct opal_convertor_t *convertor, void *header, size_t header_size,
                     size_t payload_size, uint8_t order, uint32_t flags, mca_btl_base_tag_t tag,
                     mca_btl_base_descriptor_t **descriptor)
{
    mca_btl_oib_module_t *m = module_of(btl);
    size_t total = header_size + payload_size;
    int rc = OPENIB_ERR_BUSY;

    if (NULL != descriptor) {
        *descriptor = NULL;
    }
    if (0 != tag && total <= m->super.btl_eager_limit) {
        /* Small ones are packed on the stack (the transport copies them out before it
         * returns); larger ones into a descriptor of the free list. */
        unsigned char small[OIB_SENDI_STACK];
        mca_btl_oib_frag_t *scratch = NULL;
        unsigned char *buf = small;
        if (total > sizeof small) {
            scratch = frag_get(m, ep, total, 0);
            if (NULL == scratch) {
                return OPAL_ERR_OUT_OF_RESOURCE;
            }
            buf = scratch->segment.seg_addr.pval;
        }
        memcpy(buf, header, header_size);
        if (payload_size > 0) {
            struct iovec iov = {.iov_base = buf + header_size, .iov_len = payload_size};
            uint32_t count = 1;
            size_t packed = payload_size;
            if (opal_convertor_pack(convertor, &iov, &count, &packed) < 0
                || packed != payload_size) {
                if (NULL != scratch) {
                    opal_free_list_return(&m->frags, &scratch->base.super);
                }
                return OPAL_ERROR;
            }
        }
        rc = openib_sendi(m->t, ep->rank, tag, buf, total);
        if (NULL != scratch) {
            opal_free_list_return(&m->frags, &scratch->base.super);
        }
        if (OPENIB_OK == rc) {
            count_send(m);
            return OPAL_SUCCESS;
        }
        if (OPENIB_ERR_BUSY != rc && OPENIB_ERR_TOO_LARGE != rc) {
            mca_btl_oib_endpoint_failed(m, ep->rank, rc, openib_last_error());
            return mca_btl_oib_opal_code(rc);
        }
    }
    /* ob1 resets the convertor before it packs again into this descriptor. */
    if (NULL != descriptor) {
        *descriptor = oib_alloc(btl, ep, order, total, flags);
    }
    return OPAL_ERR_OUT_OF_RESOURCE;
}

static void oib_dump(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                     int verbose)
{
    mca_btl_base_dump(btl, ep, verbose);
}

static int oib_register_error(struct mca_btl_base_module_t *btl,
                              mca_btl_base_module_error_cb_fn_t cbfunc)
{
    module_of(btl)->error_cb = cbfunc;
    return OPAL_SUCCESS;
}

static int oib_finalize(struct mca_btl_base_module_t *btl)
{
    mca_btl_oib_module_t *m = module_of(btl);
    mca_btl_oib_component_forget(m);
    /* How a test sees that ob1 striped over every module (one per port). */
    opal_output_verbose(5, OIB_OUT, "btl: oib: rank %u: module %d (%s): %" PRIu64 " sends",
                        m->rank, m->index, m->port, m->n_send);
    m->closing = true;
    mca_btl_oib_rdma_release(m); /* the cached registrations go before the transport */
    int rc = openib_close(m->t); /* flushes first (up to 10 s) */
    if (OPENIB_OK != rc) {
        opal_output_verbose(1, OIB_OUT, "btl: oib: close: %s", openib_last_error());
    }
    m->t = NULL;
    mca_btl_oib_rdma_fini(m);
    /* Sends never completed: their descriptors go back with the free list. */
    m->sends_head = m->sends_tail = NULL;
    m->ready_head = m->ready_tail = NULL;
    for (uint32_t r = 0; r < m->size; r++) {
        free(m->endpoints[r]);
    }
    free(m->endpoints);
    OBJ_DESTRUCT(&m->frags);
    pthread_mutex_destroy(&m->send_lock);
    free(m);
    return OPAL_SUCCESS;
}

/* The transport's receive callback: the message goes to ob1's callback of its tag at once,
 * on the transport's buffer (valid during the call). ob1 may send from inside. */
static void on_message(void *ctx, uint32_t src, uint8_t tag, const void *data, size_t len)
{
    mca_btl_oib_module_t *m = ctx;
    const mca_btl_active_message_callback_t *reg = mca_btl_base_active_message_trigger + tag;
    if (m->closing) {
        /* The close's flush: ob1 is finalized (its component may be unloaded already). */
        opal_output_verbose(20, OIB_OUT, "btl: oib: message with tag %u from rank %u during "
                            "finalize; dropped", tag, src);
        return;
    }
    if (NULL == reg->cbfunc) {
        opal_output_verbose(1, OIB_OUT, "btl: oib: message with tag %u from rank %u has no "
                            "receiver; dropped", tag, src);
        return;
    }
    /* ob1 only reads a received segment; the cast drops the const its type lacks. */
    mca_btl_base_segment_t seg = {.seg_addr.pval = (void *) data, .seg_len = len};
    mca_btl_base_descriptor_t des;
    memset(&des, 0, sizeof des);
    des.des_segments = &seg;
    des.des_segment_count = 1;
    reg->cbfunc(&m->super, tag, &des, reg->cbdata);
}

/* Finishes the send of a completion: its descriptor's callback, then back to the free list
 * when the BTL owns it. */
static void send_done(mca_btl_oib_module_t *m, mca_btl_oib_frag_t *frag, uint32_t peer,
                      int transport_status)
{
    int status = mca_btl_oib_opal_code(transport_status);
    if (OPAL_SUCCESS != status) {
        opal_output_verbose(1, OIB_OUT, "btl: oib: send to rank %u failed: %s", peer,
                            openib_strerror(transport_status));
    }
    uint32_t flags = frag->base.des_flags;
    if (NULL != frag->base.des_cbfunc) {
        frag->base.des_cbfunc(&m->super, frag->endpoint, &frag->base, status);
    }
    if (flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) {
        opal_free_list_return(&m->frags, &frag->base.super);
    }
}

/* Finishes the sends whose completion was polled before oib_send listed them (claimed from
 * the early completions by oib_send). */
static int ready_deliver(mca_btl_oib_module_t *m)
{
    int count = 0;
    for (;;) {
        pthread_mutex_lock(&m->send_lock);
        mca_btl_oib_frag_t *frag = m->ready_head;
        if (NULL != frag) {
            __atomic_store_n(&m->ready_head, frag->next, __ATOMIC_RELEASE);
            if (NULL == m->ready_head) {
                m->ready_tail = NULL;
            }
            frag->next = NULL;
        }
        pthread_mutex_unlock(&m->send_lock);
        if (NULL == frag) {
            return count;
        }
        send_done(m, frag, frag->endpoint->rank, frag->early_status);
        count++;
    }
}

/* How many completions one progress call takes at most (the rest wait for the next). */
#define OIB_POLL_BATCH 16

int mca_btl_oib_module_progress(mca_btl_oib_module_t *m)
{
    /* One transport call (one lock) for progress and completions: opal_progress calls this in
     * every round of every wait, so the idle round stays short. */
    openib_completion_t cs[OIB_POLL_BATCH];
    size_t taken = 0;
    int count = 0;
    int rc = openib_progress_poll(m->t, cs, OIB_POLL_BATCH, &taken);
    if (rc > 0) {
        count += rc;
    }
    for (size_t i = 0; i < taken; i++) {
        const openib_completion_t *c = &cs[i];
        if (OPENIB_OK != c->status) {
            /* The endpoint's failure first (reported once): ob1's send callbacks abort on a
             * failed status, so after them the report would never come. Its reason is in
             * openib_last_error() (a failed completion ends the batch: it is the last). */
            char why[200];
            snprintf(why, sizeof why, "%s", openib_last_error());
            mca_btl_oib_endpoint_failed(m, c->peer, c->status, why);
        }
        /* A put, get or atomic's piece names its operation (btl_oib_rdma.c): no lock. */
        if (0 != (c->token & OPENIB_CALLER_TOKEN)) {
            count += mca_btl_oib_rdma_completion(m, c);
            continue;
        }
        /* A send's; one not listed yet by its poster is kept as an early completion, which
         * the poster claims. Under send_lock, so that oib_send cannot list its descriptor
         * between the lookup and the keeping. */
        pthread_mutex_lock(&m->send_lock);
        mca_btl_oib_frag_t *frag = sends_take(m, c->token);
        if (NULL == frag) {
            mca_btl_oib_early_keep(m, c);
            pthread_mutex_unlock(&m->send_lock);
        } else {
            pthread_mutex_unlock(&m->send_lock);
            send_done(m, frag, c->peer, c->status);
            count++;
        }
    }
    /* Unlocked peeks: a descriptor listed meanwhile is finished by the next call. */
    if (NULL != __atomic_load_n(&m->ready_head, __ATOMIC_ACQUIRE)) {
        count += ready_deliver(m);
    }
    if (NULL != __atomic_load_n(&m->done_head, __ATOMIC_ACQUIRE)) {
        count += mca_btl_oib_rdma_deliver(m);
    }
    return count;
}

mca_btl_oib_module_t *mca_btl_oib_module_create(openib_t *t, char *why, size_t why_len)
{
    int rank = openib_rank(t), size = openib_size(t), eager = openib_eager_limit(t);
    opal_process_name_t me = OPAL_PROC_MY_NAME;

    if (rank < 0 || size <= 0 || eager <= 0 || (uint32_t) rank != me.vpid) {
        snprintf(why, why_len, "the transport's rank %d of %d is not this process's rank %u "
                 "in the job", rank, size, me.vpid);
        opal_output_verbose(1, OIB_OUT, "btl: oib: no module: %s", why);
        (void) openib_close(t);
        return NULL;
    }
    mca_btl_oib_module_t *m = calloc(1, sizeof *m);
    mca_btl_base_endpoint_t **eps = calloc((size_t) size, sizeof *eps);
    if (NULL == m || NULL == eps) {
        free(m);
        free(eps);
        snprintf(why, why_len, "out of memory for the module");
        opal_output_verbose(1, OIB_OUT, "btl: oib: no module: %s", why);
        (void) openib_close(t);
        return NULL;
    }
    m->super = mca_btl_oib_module_defaults;
    m->super.btl_component = &mca_btl_oib_component.super;
    /* openib_sendi takes up to the transport's eager limit; eager sends stay within it. */
    if (m->super.btl_eager_limit > (size_t) eager) {
        m->super.btl_eager_limit = (size_t) eager;
    }
    if (m->super.btl_rndv_eager_limit > m->super.btl_eager_limit) {
        m->super.btl_rndv_eager_limit = m->super.btl_eager_limit;
    }
    if (m->super.btl_max_send_size < m->super.btl_eager_limit) {
        m->super.btl_max_send_size = m->super.btl_eager_limit;
    }
    /* Sends always; put, get and atomics unless btl_oib_flags leaves them out (btl_oib_rdma.c
     * sets their table entries and limits). */
    m->super.btl_flags &= MCA_BTL_FLAGS_SEND | MCA_BTL_FLAGS_PUT | MCA_BTL_FLAGS_GET
                          | MCA_BTL_FLAGS_ATOMIC_OPS | MCA_BTL_FLAGS_ATOMIC_FOPS;
    m->super.btl_flags |= MCA_BTL_FLAGS_SEND;
    m->super.btl_add_procs = oib_add_procs;
    m->super.btl_del_procs = oib_del_procs;
    m->super.btl_finalize = oib_finalize;
    m->super.btl_alloc = oib_alloc;
    m->super.btl_free = oib_free;
    m->super.btl_prepare_src = oib_prepare_src;
    m->super.btl_send = oib_send;
    m->super.btl_sendi = oib_sendi;
    m->super.btl_dump = oib_dump;
    m->super.btl_register_error = oib_register_error;
    m->t = t;
    m->rank = (uint32_t) rank;
    m->size = (uint32_t) size;
    m->endpoints = eps;
    pthread_mutex_init(&m->send_lock, NULL);
    OBJ_CONSTRUCT(&m->frags, opal_free_list_t);
    int rc = opal_free_list_init(&m->frags, sizeof(mca_btl_oib_frag_t), opal_cache_line_size,
                                 OBJ_CLASS(mca_btl_oib_frag_t), m->super.btl_max_send_size,
                                 opal_cache_line_size, 16, -1, 32, NULL, 0, NULL, NULL, NULL);
    if (OPAL_SUCCESS != rc) {
        snprintf(why, why_len, "no descriptor free list (%d: %zu-byte descriptors, "
                 "btl_oib_max_send_size)", rc, m->super.btl_max_send_size);
        opal_output_verbose(1, OIB_OUT, "btl: oib: no module: %s", why);
        (void) oib_finalize(&m->super);
        return NULL;
    }
    rc = mca_btl_oib_rdma_init(m);
    if (OPAL_SUCCESS != rc) {
        snprintf(why, why_len, "RDMA setup: %s", openib_last_error());
        (void) oib_finalize(&m->super);
        return NULL;
    }
    for (int tag = 1; tag <= 255; tag++) {
        rc = openib_set_handler(t, (uint8_t) tag, on_message, m);
        if (OPENIB_OK != rc) {
            snprintf(why, why_len, "%s", openib_last_error());
            opal_output_verbose(1, OIB_OUT, "btl: oib: no module: %s", why);
            (void) oib_finalize(&m->super);
            return NULL;
        }
    }
    return m;
}
