/*
 * btl_oib_component.c: the component's life (register, open, close, init, progress) and the
 * mapping of its MCA variables onto the transport's OPENIB_* settings.
 *
 * btl_init opens the transport (openib_open: our own PMIx client, which under mpirun joins the
 * job's PMIx session a second time in the same process; PMIx counts the references). Where
 * the transport cannot open (no libibverbs, no RDMA device, no usable port, no CPC), the
 * component returns no module and says why in ONE line at verbosity 1 of the BTL framework's
 * stream (`--mca btl_base_verbose 1` shows it): it never aborts the job, because Debian's
 * Open MPI opens every installed component in every job.
 */
#include "opal_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/util/output.h"

#include "btl_oib.h"

static int oib_register(void);
static int oib_open(void);
static int oib_close(void);
static mca_btl_base_module_t **oib_init(int *num_btls, bool enable_progress_threads,
                                        bool enable_mpi_threads);
static int oib_progress(void);

mca_btl_oib_component_t mca_btl_oib_component = {
    .super = {
        .btl_version = {
            MCA_BTL_DEFAULT_VERSION("oib"),
            .mca_open_component = oib_open,
            .mca_close_component = oib_close,
            .mca_register_component_params = oib_register,
        },
        .btl_data = {
            .param_field = MCA_BASE_METADATA_PARAM_NONE,
        },
        .btl_init = oib_init,
        .btl_progress = oib_progress,
    },
    .gid_index = -1,
};

/* The module defaults (the transport's own defaults, docs/CLI.md): eager limit 8 KiB, sends up
 * to 64 KiB per fragment, ranked like the other verbs BTLs (openib, uct). */
mca_btl_base_module_t mca_btl_oib_module_defaults = {
    .btl_component = &mca_btl_oib_component.super,
    .btl_exclusivity = MCA_BTL_EXCLUSIVITY_DEFAULT,
    .btl_eager_limit = 8192,
    .btl_rndv_eager_limit = 8192,
    .btl_max_send_size = 64 * 1024,
    .btl_rdma_pipeline_send_length = 1024 * 1024,
    .btl_rdma_pipeline_frag_size = 1024 * 1024,
    .btl_min_rdma_pipeline_size = 256 * 1024,
    .btl_latency = 4,
    .btl_bandwidth = 10000,
    /* Put, get and 64-bit atomics (btl_oib_rdma.c); `--mca btl_oib_flags send` turns them off. */
    .btl_flags = MCA_BTL_FLAGS_SEND | MCA_BTL_FLAGS_PUT | MCA_BTL_FLAGS_GET
                 | MCA_BTL_FLAGS_ATOMIC_OPS | MCA_BTL_FLAGS_ATOMIC_FOPS,
    .btl_atomic_flags = MCA_BTL_ATOMIC_SUPPORTS_ADD | MCA_BTL_ATOMIC_SUPPORTS_CSWAP,
    /* Set so that btl_oib_put_limit and btl_oib_get_limit are registered (0: no limit). */
    .btl_put = mca_btl_oib_put,
    .btl_get = mca_btl_oib_get,
};

/* The BTL framework's output stream: `--mca btl_base_verbose N` sets its verbosity. */
#define OIB_OUT (opal_btl_base_framework.framework_output)

static void reg_string(const char *name, const char *setting, const char *what, char **storage)
{
    char desc[512];
    snprintf(desc, sizeof desc, "%s (sets %s for the transport; unset: the environment's %s, "
             "else the transport's default)", what, setting, setting);
    *storage = NULL;
    (void) mca_base_component_var_register(&mca_btl_oib_component.super.btl_version, name, desc,
                                           MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0,
                                           OPAL_INFO_LVL_3, MCA_BASE_VAR_SCOPE_READONLY,
                                           storage);
}

static void reg_int(const char *name, const char *setting, const char *what, int unset,
                    int *storage)
{
    char desc[512];
    snprintf(desc, sizeof desc, "%s (sets %s for the transport; %d: the environment's %s, "
             "else the transport's default)", what, setting, unset, setting);
    *storage = unset;
    (void) mca_base_component_var_register(&mca_btl_oib_component.super.btl_version, name, desc,
                                           MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_5,
                                           MCA_BASE_VAR_SCOPE_READONLY, storage);
}

static int oib_register(void)
{
    mca_btl_oib_component_t *c = &mca_btl_oib_component;

    reg_string("if_include", "OPENIB_IF_INCLUDE",
               "Comma-separated list of devices or device:port to use (exclusive with "
               "btl_oib_if_exclude)", &c->if_include);
    reg_string("if_exclude", "OPENIB_IF_EXCLUDE",
               "Comma-separated list of devices or device:port not to use (exclusive with "
               "btl_oib_if_include)", &c->if_exclude);
    reg_string("cpc_include", "OPENIB_CPC_INCLUDE",
               "Comma-separated list of connection managers (CPCs) to offer: oob, xoob, ibcm, "
               "rdmacm, udcm (exclusive with btl_oib_cpc_exclude)", &c->cpc_include);
    reg_string("cpc_exclude", "OPENIB_CPC_EXCLUDE",
               "Comma-separated list of connection managers (CPCs) never to offer (exclusive "
               "with btl_oib_cpc_include)", &c->cpc_exclude);
    reg_int("gid_index", "OPENIB_GID_INDEX",
            "GID index whose prefix is the subnet id (RoCE: the GID of the IP address)", -1,
            &c->gid_index);
    reg_int("recv_depth", "OPENIB_RECV_DEPTH", "Receive buffers posted per endpoint", 0,
            &c->recv_depth);

    c->connect_at_init = false;
    (void) mca_base_component_var_register(
        &c->super.btl_version, "connect_at_init",
        "Connect to every peer of the job when the BTL starts, instead of on first use (costs "
        "MPI_Init time and a queue pair per peer; for benchmarks of the first message)",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
        &c->connect_at_init);
    c->connect_timeout = 60000;
    (void) mca_base_component_var_register(
        &c->super.btl_version, "connect_timeout",
        "Milliseconds btl_oib_connect_at_init waits for every connection",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
        &c->connect_timeout);

    /* btl_oib_eager_limit, btl_oib_max_send_size, btl_oib_exclusivity, btl_oib_flags, ... */
    return mca_btl_base_param_register(&c->super.btl_version, &mca_btl_oib_module_defaults);
}

static int oib_open(void)
{
    mca_btl_oib_component.module = NULL;
    return OPAL_SUCCESS;
}

/* The module (and with it the transport) is released by its finalize, which Open MPI calls
 * before closing the component. */
static int oib_close(void)
{
    return OPAL_SUCCESS;
}

/* Whether the user set the BTL base variable `name` of this component (not its default). */
static bool base_var_set(const char *name)
{
    int idx = mca_base_var_find("opal", "btl", "oib", name);
    mca_base_var_source_t source = MCA_BASE_VAR_SOURCE_DEFAULT;
    if (idx < 0 || OPAL_SUCCESS != mca_base_var_get_value(idx, NULL, &source, NULL)) {
        return false;
    }
    return MCA_BASE_VAR_SOURCE_DEFAULT != source;
}

static int set_setting(const char *setting, const char *value)
{
    if (0 != setenv(setting, value, 1)) {
        opal_output_verbose(1, OIB_OUT, "btl: oib: cannot set %s=%s in the environment", setting,
                            value);
        return OPAL_ERR_BAD_PARAM;
    }
    return OPAL_SUCCESS;
}

int mca_btl_oib_apply_settings(void)
{
    const mca_btl_oib_component_t *c = &mca_btl_oib_component;
    const struct {
        const char *setting;
        const char *value;
    } strings[] = {
        {"OPENIB_IF_INCLUDE", c->if_include},
        {"OPENIB_IF_EXCLUDE", c->if_exclude},
        {"OPENIB_CPC_INCLUDE", c->cpc_include},
        {"OPENIB_CPC_EXCLUDE", c->cpc_exclude},
    };
    char num[32];

    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        if (NULL != strings[i].value && '\0' != strings[i].value[0]
            && OPAL_SUCCESS != set_setting(strings[i].setting, strings[i].value)) {
            return OPAL_ERR_BAD_PARAM;
        }
    }
    if (c->gid_index >= 0) {
        snprintf(num, sizeof num, "%d", c->gid_index);
        if (OPAL_SUCCESS != set_setting("OPENIB_GID_INDEX", num)) {
            return OPAL_ERR_BAD_PARAM;
        }
    }
    if (c->recv_depth > 0) {
        snprintf(num, sizeof num, "%d", c->recv_depth);
        if (OPAL_SUCCESS != set_setting("OPENIB_RECV_DEPTH", num)) {
            return OPAL_ERR_BAD_PARAM;
        }
    }
    /* Open MPI's eager limit counts the PML's header with the payload: the transport's
     * eager limit is the largest eager message, which is the same quantity here. */
    if (base_var_set("eager_limit")) {
        snprintf(num, sizeof num, "%zu", mca_btl_oib_module_defaults.btl_eager_limit);
        if (OPAL_SUCCESS != set_setting("OPENIB_EAGER_LIMIT", num)) {
            return OPAL_ERR_BAD_PARAM;
        }
    }
    return OPAL_SUCCESS;
}

static mca_btl_base_module_t **oib_init(int *num_btls, bool enable_progress_threads,
                                        bool enable_mpi_threads)
{
    openib_t *t = NULL;
    int rc;

    (void) enable_progress_threads;
    (void) enable_mpi_threads;
    *num_btls = 0;

    if (OPAL_SUCCESS != mca_btl_oib_apply_settings()) {
        return NULL;
    }
    rc = openib_open(&t);
    if (OPENIB_OK != rc) {
        /* The one line: which ports and CPCs, and why none is used (openib_last_error names
         * them: no libibverbs, no device, each port's reason, each CPC's refusal). */
        opal_output_verbose(1, OIB_OUT, "btl: oib: no module (%s): %s", openib_strerror(rc),
                            openib_last_error());
        return NULL;
    }
    mca_btl_oib_module_t *m = mca_btl_oib_module_create(t);
    if (NULL == m) {
        return NULL;
    }
    if (mca_btl_oib_component.connect_at_init && m->size > 1) {
        /* Every rank with a module gets here (ranks without one stepped aside before the
         * transport's wire-up). A failure leaves the module: connections still start lazily
         * on first use, and stepping aside now would leave peers that chose us waiting. */
        int to = mca_btl_oib_component.connect_timeout > 0 ? mca_btl_oib_component.connect_timeout
                                                           : 60000;
        rc = openib_connect_all(t, (uint32_t) to);
        if (OPENIB_OK != rc) {
            opal_output_verbose(1, OIB_OUT, "btl: oib: connecting to every peer: %s (%s)",
                                openib_strerror(rc), openib_last_error());
        }
    }
    mca_btl_base_module_t **modules = malloc(sizeof *modules);
    if (NULL == modules) {
        (void) m->super.btl_finalize(&m->super);
        return NULL;
    }
    modules[0] = &m->super;
    mca_btl_oib_component.module = m;
    *num_btls = 1;
    opal_output_verbose(10, OIB_OUT, "btl: oib: one module (rank %u of %u, eager limit %zu)",
                        m->rank, m->size, m->super.btl_eager_limit);
    return modules;
}

static int oib_progress(void)
{
    mca_btl_oib_module_t *m = mca_btl_oib_component.module;
    return NULL == m ? 0 : mca_btl_oib_module_progress(m);
}
