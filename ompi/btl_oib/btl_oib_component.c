/*
 * btl_oib_component.c: the component's life (register, open, close, init, progress) and the
 * mapping of its MCA variables onto the transport's OPENIB_* settings.
 *
 * btl_init opens the transport on Open MPI's own modex (openib_open_runtime): the transport
 * publishes its modex through OPAL_MODEX_SEND under this component's key, runs no fence (Open
 * MPI runs one after every BTL's btl_init) and reads a peer's modex with OPAL_MODEX_RECV when
 * add_procs first asks about it (openib_reachable). No second PMIx client, no second fence; a
 * rank without a usable port publishes nothing and its peers find it unreachable. Where
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
#include "opal/mca/pmix/pmix.h"
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

/* The module defaults: eager limit 12 KiB (as Open MPI's openib BTL: an 8 KiB message with
 * ob1's header goes eagerly; the transport's own default, 8 KiB, made it a rendezvous with a
 * registration per message, 4x the latency of ob1+openib at 8 KiB), sends up to 64 KiB per
 * fragment, ranked like the other verbs BTLs (openib, uct). */
#define OIB_EAGER_DEFAULT 12288

mca_btl_base_module_t mca_btl_oib_module_defaults = {
    .btl_component = &mca_btl_oib_component.super,
    .btl_exclusivity = MCA_BTL_EXCLUSIVITY_DEFAULT,
    .btl_eager_limit = OIB_EAGER_DEFAULT,
    .btl_rndv_eager_limit = OIB_EAGER_DEFAULT,
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
    c->own_rank = OIB_OWN_RANK_DEFAULT;
    (void) mca_base_component_var_register(
        &c->super.btl_version, "own_rank",
        "Report this process's own rank reachable through oib (a loopback queue pair; ob1 "
        "still sends to itself through self). osc rdma takes a BTL for a window only if it "
        "reaches every rank, the caller included: with this set (the default) it "
        "selects oib (docs/OMPI.md, \"The own rank\")",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
        &c->own_rank);
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
    mca_btl_oib_component.num_modules = 0;
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

/* The settings apply_settings set from MCA variables, to name the variable when the transport
 * refuses the value. */
static struct {
    const char *var;
    const char *setting;
    char value[64];
} applied[8];
static size_t n_applied;

static int set_setting(const char *setting, const char *value);

static int set_from_var(const char *var, const char *setting, const char *value)
{
    if (n_applied < sizeof applied / sizeof applied[0]) {
        applied[n_applied].var = var;
        applied[n_applied].setting = setting;
        snprintf(applied[n_applied].value, sizeof applied[n_applied].value, "%s", value);
        n_applied++;
    }
    return set_setting(setting, value);
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
        const char *var;
        const char *setting;
        const char *value;
    } strings[] = {
        {"btl_oib_if_include", "OPENIB_IF_INCLUDE", c->if_include},
        {"btl_oib_if_exclude", "OPENIB_IF_EXCLUDE", c->if_exclude},
        {"btl_oib_cpc_include", "OPENIB_CPC_INCLUDE", c->cpc_include},
        {"btl_oib_cpc_exclude", "OPENIB_CPC_EXCLUDE", c->cpc_exclude},
    };
    char num[32];

    n_applied = 0;
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        if (NULL != strings[i].value && '\0' != strings[i].value[0]
            && OPAL_SUCCESS
                   != set_from_var(strings[i].var, strings[i].setting, strings[i].value)) {
            return OPAL_ERR_BAD_PARAM;
        }
    }
    if (c->gid_index >= 0) {
        snprintf(num, sizeof num, "%d", c->gid_index);
        if (OPAL_SUCCESS != set_from_var("btl_oib_gid_index", "OPENIB_GID_INDEX", num)) {
            return OPAL_ERR_BAD_PARAM;
        }
    }
    if (c->recv_depth > 0) {
        snprintf(num, sizeof num, "%d", c->recv_depth);
        if (OPAL_SUCCESS != set_from_var("btl_oib_recv_depth", "OPENIB_RECV_DEPTH", num)) {
            return OPAL_ERR_BAD_PARAM;
        }
    }
    /* Open MPI's eager limit counts the PML's header with the payload: the transport's
     * eager limit is the largest eager message, which is the same quantity here. */
    if (base_var_set("eager_limit")) {
        snprintf(num, sizeof num, "%zu", mca_btl_oib_module_defaults.btl_eager_limit);
        if (OPAL_SUCCESS != set_from_var("btl_oib_eager_limit", "OPENIB_EAGER_LIMIT", num)) {
            return OPAL_ERR_BAD_PARAM;
        }
    } else if (NULL == getenv("OPENIB_EAGER_LIMIT")) {
        /* The component's default, not the transport's (above, OIB_EAGER_DEFAULT). */
        snprintf(num, sizeof num, "%d", OIB_EAGER_DEFAULT);
        if (OPAL_SUCCESS != set_setting("OPENIB_EAGER_LIMIT", num)) {
            return OPAL_ERR_BAD_PARAM;
        }
    }
    return OPAL_SUCCESS;
}

/* Whether the user named oib in the `btl` MCA variable (`--mca btl self,oib`; an exclusion
 * list `^...` names nothing to use). */
static bool named_in_btl(void)
{
    const char *sel = opal_btl_base_framework.framework_selection;
    if (NULL == sel || '^' == sel[0]) {
        return false;
    }
    for (const char *p = sel; '\0' != *p;) {
        size_t n = strcspn(p, ",");
        if (3 == n && 0 == strncmp(p, "oib", 3)) {
            return true;
        }
        p += n;
        if (',' == *p) {
            p++;
        }
    }
    return false;
}

/* The one message when no module is made. It names the MCA variable whose value the transport
 * refused, or every port and CPC and why it is not used (openib_last_error: no libibverbs, no
 * device, each port's reason and each CPC's verdict). At the default verbosity when the user
 * asked for oib (named it in `btl`), when RDMA hardware exists but no port is usable, or for a
 * refused value; otherwise (no RDMA device, oib not named: Debian opens every installed
 * component in every job) one line at verbosity 1 of the BTL framework's stream. */
static void no_module(int rc, const char *why)
{
    for (size_t i = 0; i < n_applied; i++) {
        char needle[96];
        snprintf(needle, sizeof needle, "%s=\"", applied[i].setting);
        if (NULL != strstr(why, needle)) {
            opal_output(0, "btl: oib: no module (bad setting): MCA variable %s=%s is not "
                        "allowed: %s", applied[i].var, applied[i].value, why);
            return;
        }
    }
    bool no_hardware = OPENIB_ERR_NO_DEVICE == rc || OPENIB_ERR_NO_VERBS == rc;
    if (named_in_btl() || !no_hardware) {
        opal_output(0, "btl: oib: no module (%s): %s", openib_strerror(rc), why);
    } else {
        opal_output_verbose(1, OIB_OUT, "btl: oib: no module (%s): %s", openib_strerror(rc),
                            why);
    }
}

/* The transports' runtime over Open MPI's modex. Each transport puts one key (its whole
 * modex): the first module's "oibH" (slot 0) travels under this component's key
 * (btl.oib.<version>), as every BTL's; the others' "oibH<n>" (one per port) under
 * "btl.oib.oibH<n>". */
#define OIB_FIRST_KEY "oibH"

static void slot_key(char *buf, size_t len, const char *key)
{
    snprintf(buf, len, "btl.oib.%s", key);
}

static int modex_put(void *ctx, const char *key, const void *value, size_t len)
{
    int rc;
    (void) ctx;
    if (NULL == key || 0 == strcmp(key, OIB_FIRST_KEY)) {
        OPAL_MODEX_SEND(rc, OPAL_PMIX_GLOBAL, &mca_btl_oib_component.super.btl_version,
                        (void *) value, len);
    } else {
        char k[128];
        slot_key(k, sizeof k, key);
        OPAL_MODEX_SEND_STRING(rc, OPAL_PMIX_GLOBAL, k, (void *) value, len);
    }
    return OPAL_SUCCESS == rc ? 0 : -1;
}

/* A later slot's value (OPAL_MODEX_RECV_STRING with PMIx's "optional": from the local store
 * only). The transport reads slot 0 first, with an ordinary lookup, which brings the peer's
 * whole modex into the local store whether the fence collected it or not; a later slot the
 * peer did not publish is then "not found" at once. An ordinary lookup of a missing key may
 * ask the server to fetch it and wait: MPI_Init took 1.7 s longer that way with one port. */
static int modex_recv_optional(const char *key, const opal_process_name_t *peer, uint8_t **data,
                               size_t *size)
{
    opal_list_t info;
    opal_value_t *optional, *kv = NULL;
    int rc;
    OBJ_CONSTRUCT(&info, opal_list_t);
    optional = OBJ_NEW(opal_value_t);
    optional->key = strdup(OPAL_PMIX_OPTIONAL);
    optional->type = OPAL_BOOL;
    optional->data.flag = true;
    opal_list_append(&info, &optional->super);
    rc = opal_pmix.get(peer, key, &info, &kv);
    OPAL_LIST_DESTRUCT(&info);
    if (OPAL_SUCCESS != rc || NULL == kv) {
        return OPAL_ERR_NOT_FOUND;
    }
    if (OPAL_BYTE_OBJECT != kv->type) {
        OBJ_RELEASE(kv);
        return OPAL_ERR_TYPE_MISMATCH;
    }
    *data = kv->data.bo.bytes;
    *size = kv->data.bo.size;
    kv->data.bo.bytes = NULL; /* ours now */
    OBJ_RELEASE(kv);
    return OPAL_SUCCESS;
}

/* A peer's modex (after Open MPI's fence: add_procs or later). A peer that published none (no
 * usable port, oib not selected there) is "not found": the transport marks it unreachable. */
static int modex_get(void *ctx, uint32_t rank, const char *key, void **value_out,
                     size_t *len_out)
{
    opal_process_name_t peer = OPAL_PROC_MY_NAME;
    uint8_t *data = NULL;
    size_t size = 0;
    int rc;
    (void) ctx;
    peer.vpid = rank;
    if (NULL == key || 0 == strcmp(key, OIB_FIRST_KEY)) {
        OPAL_MODEX_RECV(rc, &mca_btl_oib_component.super.btl_version, &peer, &data, &size);
    } else {
        char k[128];
        slot_key(k, sizeof k, key);
        rc = modex_recv_optional(k, &peer, &data, &size);
    }
    if (OPAL_SUCCESS != rc || NULL == data || 0 == size) {
        /* OPAL_MODEX_RECV reports every failed lookup as "not found"; empty: withdrawn
         * (withdraw_slot). */
        free(data);
        return OPENIB_RUNTIME_NOT_FOUND;
    }
    *value_out = data;
    *len_out = size;
    return 0;
}

static void modex_release(void *ctx, void *value)
{
    (void) ctx;
    free(value);
}

/* The number of processes in this job, from the runtime (0 when it does not say). */
static uint32_t job_size(void)
{
    opal_process_name_t wildcard = OPAL_PROC_MY_NAME;
    uint32_t size = 0, *ptr = &size;
    int rc;
    wildcard.vpid = OPAL_VPID_WILDCARD;
    OPAL_MODEX_RECV_VALUE(rc, OPAL_PMIX_JOB_SIZE, &wildcard, &ptr, OPAL_UINT32);
    return OPAL_SUCCESS == rc ? size : 0;
}

/* Takes back what the transport of modex slot `slot` published: an empty value, which
 * modex_get reports as none. A peer then finds no module there (unreachable, or the slots
 * end), rather than one nobody serves. */
static void withdraw_slot(int slot)
{
    char key[32];
    if (0 == slot) {
        snprintf(key, sizeof key, "%s", OIB_FIRST_KEY);
    } else {
        snprintf(key, sizeof key, "%s%d", OIB_FIRST_KEY, slot);
    }
    static const char none = 0;
    if (0 != modex_put(NULL, key, &none, 0)) {
        opal_output_verbose(1, OIB_OUT, "btl: oib: the modex of slot %d not withdrawn", slot);
    }
}

/* Opens the transport on the usable port `port` (OPENIB_PORT_INDEX) under modex slot `slot`
 * (OPENIB_HOST_SLOT) and makes its module; NULL with *rc when not, the reason in `why`
 * (empty: openib_last_error's). A module that cannot be made after its transport published
 * its modex closes the transport and withdraws the modex. */
static mca_btl_oib_module_t *open_port(const openib_runtime_ops_t *ops, uint32_t port,
                                       int slot, int *rc, char *why, size_t why_len)
{
    char num[16];
    openib_t *t = NULL;

    snprintf(num, sizeof num, "%u", port);
    if (OPAL_SUCCESS != set_setting("OPENIB_PORT_INDEX", num)) {
        *rc = OPENIB_ERR_SETUP;
        return NULL;
    }
    snprintf(num, sizeof num, "%d", slot);
    if (OPAL_SUCCESS != set_setting("OPENIB_HOST_SLOT", num)) {
        *rc = OPENIB_ERR_SETUP;
        return NULL;
    }
    *rc = openib_open_runtime(ops, &t);
    if (OPENIB_OK != *rc) {
        return NULL;
    }
    mca_btl_oib_module_t *m = mca_btl_oib_module_create(t, why, why_len);
    if (NULL == m) {
        withdraw_slot(slot);
        *rc = OPENIB_ERR_OTHER;
        return NULL;
    }
    m->index = slot;
    if (OPENIB_OK != openib_port_name(m->t, m->port, sizeof m->port)) {
        snprintf(m->port, sizeof m->port, "usable port %u", port);
    }
    return m;
}

static mca_btl_base_module_t **oib_init(int *num_btls, bool enable_progress_threads,
                                        bool enable_mpi_threads)
{
    mca_btl_oib_component_t *c = &mca_btl_oib_component;
    int rc = OPENIB_OK;
    uint32_t ports = 0;

    (void) enable_progress_threads;
    (void) enable_mpi_threads;
    *num_btls = 0;
    c->num_modules = 0;

    if (OPAL_SUCCESS != mca_btl_oib_apply_settings()) {
        return NULL;
    }
    uint32_t size = job_size();
    if (0 == size) {
        opal_output_verbose(1, OIB_OUT, "btl: oib: no module: the runtime does not say the "
                            "job's size (%s)", OPAL_PMIX_JOB_SIZE);
        return NULL;
    }
    openib_runtime_ops_t ops = {
        .version = OPENIB_RUNTIME_OPS_VERSION,
        .rank = OPAL_PROC_MY_NAME.vpid,
        .size = size,
        .node = opal_process_info.nodename,
        .ctx = NULL,
        .put = modex_put,
        .commit = NULL, /* ompi_mpi_init commits after every btl_init, then fences */
        .get = modex_get,
        .release = modex_release,
    };
    /* One transport, and module, per usable port: the i-th usable port under modex slot n
     * (n counts the modules made, so slots have no gaps: the transport reads a peer's slots
     * up to the first missing one). A port that cannot serve (no CPC) is skipped and said
     * why; the next port still gets its module. Without a usable port (or no device), port
     * 0 is tried anyway: its failure names every port and CPC and why. */
    if (OPENIB_OK != openib_usable_ports(&ports) || 0 == ports) {
        ports = 1;
    }
    if (ports > MCA_BTL_OIB_MAX_MODULES) {
        ports = MCA_BTL_OIB_MAX_MODULES;
    }
    char why[4096] = "";
    size_t used = 0;
    for (uint32_t i = 0; i < ports; i++) {
        int prc = OPENIB_OK;
        char port_why[512] = "";
        mca_btl_oib_module_t *m = open_port(&ops, i, c->num_modules, &prc, port_why,
                                            sizeof port_why);
        if (NULL != m) {
            c->modules[c->num_modules++] = m;
            continue;
        }
        rc = prc;
        const char *e = '\0' != port_why[0] ? port_why : openib_last_error();
        if (ports > 1) {
            opal_output_verbose(1, OIB_OUT, "btl: oib: no module on usable port %u: %s", i, e);
            int n = snprintf(why + used, sizeof why - used, "%susable port %u: %s",
                             0 == used ? "" : "; ", i, e);
            if (n > 0 && (size_t) n < sizeof why - used) {
                used += (size_t) n;
            }
        } else {
            snprintf(why, sizeof why, "%s", e);
        }
    }
    (void) unsetenv("OPENIB_PORT_INDEX");
    (void) unsetenv("OPENIB_HOST_SLOT");
    if (0 == c->num_modules) {
        if (OPENIB_OK != rc) {
            no_module(rc, why);
        }
        return NULL;
    }
    /* btl_oib_connect_at_init connects in the first add_procs (mca_btl_oib_connect_at_init):
     * peers' modex can be read only after Open MPI's fence, which runs after btl_init. */
    mca_btl_base_module_t **modules = malloc((size_t) c->num_modules * sizeof *modules);
    if (NULL == modules) {
        for (int i = c->num_modules - 1; i >= 0; i--) {
            (void) c->modules[i]->super.btl_finalize(&c->modules[i]->super);
        }
        return NULL;
    }
    for (int i = 0; i < c->num_modules; i++) {
        modules[i] = &c->modules[i]->super;
    }
    *num_btls = c->num_modules;
    mca_btl_oib_module_t *m = c->modules[0];
    if (1 == c->num_modules) {
        opal_output_verbose(10, OIB_OUT, "btl: oib: one module (rank %u of %u, eager limit %zu)",
                            m->rank, m->size, m->super.btl_eager_limit);
    } else {
        opal_output_verbose(10, OIB_OUT, "btl: oib: %d modules, one per usable port (rank %u "
                            "of %u, eager limit %zu)", c->num_modules, m->rank, m->size,
                            m->super.btl_eager_limit);
    }
    return modules;
}

void mca_btl_oib_component_forget(mca_btl_oib_module_t *m)
{
    mca_btl_oib_component_t *c = &mca_btl_oib_component;
    for (int i = 0; i < c->num_modules; i++) {
        if (c->modules[i] == m) {
            c->modules[i] = NULL;
        }
    }
}

void mca_btl_oib_connect_at_init(mca_btl_oib_module_t *m)
{
    if (!mca_btl_oib_component.connect_at_init || m->connected_at_init || m->size < 2) {
        return;
    }
    m->connected_at_init = true;
    /* Every rank with a module gets here in MPI_Init's add_procs (ranks without one published
     * nothing and are unreachable: not waited for). A failure leaves the module: connections
     * still start on first use. */
    int to = mca_btl_oib_component.connect_timeout > 0 ? mca_btl_oib_component.connect_timeout
                                                       : 60000;
    int rc = openib_connect_all(m->t, (uint32_t) to);
    if (OPENIB_OK != rc) {
        opal_output_verbose(1, OIB_OUT, "btl: oib: connecting to every peer: %s (%s)",
                            openib_strerror(rc), openib_last_error());
    }
}

static int oib_progress(void)
{
    mca_btl_oib_component_t *c = &mca_btl_oib_component;
    int n = 0;
    for (int i = 0; i < c->num_modules; i++) {
        mca_btl_oib_module_t *m = c->modules[i];
        if (NULL != m) {
            n += mca_btl_oib_module_progress(m);
        }
    }
    return n;
}
