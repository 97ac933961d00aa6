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
#include "opal/util/proc.h"

#include "openib.h"

BEGIN_C_DECLS

/* The component: Open MPI's component structure first (the loader reads it by that type),
 * then the values of our MCA variables (registered in btl_oib_component.c). */
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
     * (openib_connect_all, up to connect_timeout ms). Interim: over rdmacm the transport
     * connects only from the lower rank of a pair (docs/OMPI.md). */
    bool connect_at_init;
    int connect_timeout;

    /* The module btl_init made (NULL: none; its finalize clears this). */
    struct mca_btl_oib_module_t *module;
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
};
typedef struct mca_btl_base_endpoint_t mca_btl_base_endpoint_t;

/* A message received by the transport's callback, waiting to be handed to the upper layer
 * (ob1) once the transport's progress has returned, so that ob1 may send from its callback. */
typedef struct mca_btl_oib_rx_t {
    struct mca_btl_oib_rx_t *next;
    uint32_t src;
    uint8_t tag;
    size_t len;
    unsigned char data[];
} mca_btl_oib_rx_t;

/* A send descriptor: one segment, its bytes in the free list's payload buffer (up to
 * btl_max_send_size). */
typedef struct mca_btl_oib_frag_t {
    mca_btl_base_descriptor_t base;
    mca_btl_base_segment_t segment;
    struct mca_btl_base_endpoint_t *endpoint;
    uint64_t token;                     /* the transport's token while a send is in flight */
    struct mca_btl_oib_frag_t *next;    /* in the module's list of sends in flight */
} mca_btl_oib_frag_t;
OBJ_CLASS_DECLARATION(mca_btl_oib_frag_t);

/* The module: one per process for now (the transport serves the first usable port). */
typedef struct mca_btl_oib_module_t {
    mca_btl_base_module_t super;
    openib_t *t;
    uint32_t rank, size;
    opal_free_list_t frags;
    /* Sends in flight, oldest first (completions come back in about that order). */
    pthread_mutex_t send_lock;
    mca_btl_oib_frag_t *sends_head, *sends_tail;
    /* Received messages not yet delivered, oldest first. */
    pthread_mutex_t rx_lock;
    mca_btl_oib_rx_t *rx_head, *rx_tail;
    /* One thread delivers at a time, so that messages reach ob1 in the order they came. */
    pthread_mutex_t deliver_lock;
    /* Endpoints by rank, made by add_procs. */
    mca_btl_base_endpoint_t **endpoints;
    mca_btl_base_module_error_cb_fn_t error_cb;
    /* btl_oib_connect_at_init ran (in the first add_procs). */
    bool connected_at_init;
} mca_btl_oib_module_t;

/* Makes the module on an open transport (taken over: the module's finalize closes it), or
 * NULL after a verbose line saying why. */
mca_btl_oib_module_t *mca_btl_oib_module_create(openib_t *t);

/* btl_oib_connect_at_init: connects to every reachable peer, once (from the first add_procs,
 * after Open MPI's fence). */
void mca_btl_oib_connect_at_init(mca_btl_oib_module_t *m);

/* Progress of one module: the transport's, its completions, then the received messages. */
int mca_btl_oib_module_progress(mca_btl_oib_module_t *m);

/* Copies the MCA variables the user set into the OPENIB_* environment variables that
 * openib_open reads. Returns OPAL_SUCCESS, or OPAL_ERR_BAD_PARAM (with a verbose line) when
 * a value cannot be passed on. */
int mca_btl_oib_apply_settings(void);

END_C_DECLS

#endif /* MCA_BTL_OIB_H */
