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

#include "opal/mca/btl/btl.h"
#include "opal/mca/btl/base/base.h"

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

    /* The transport, when btl_init opened it (NULL otherwise). */
    openib_t *transport;
} mca_btl_oib_component_t;

OPAL_MODULE_DECLSPEC extern mca_btl_oib_component_t mca_btl_oib_component;

/* The defaults every module starts from (eager limit, max send size, flags, ...); registered
 * as btl_oib_eager_limit, btl_oib_max_send_size, ... by mca_btl_base_param_register. */
extern mca_btl_base_module_t mca_btl_oib_module_defaults;

/* Copies the MCA variables the user set into the OPENIB_* environment variables that
 * openib_open reads. Returns OPAL_SUCCESS, or OPAL_ERR_BAD_PARAM (with a verbose line) when
 * a value cannot be passed on. */
int mca_btl_oib_apply_settings(void);

END_C_DECLS

#endif /* MCA_BTL_OIB_H */
