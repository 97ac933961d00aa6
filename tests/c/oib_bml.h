/*
 * oib_bml.h: for the MPI test programs that call the oib module below ob1 (ompi_btl_rdma.c,
 * ompi_btl_del.c): the BML's view of a rank's endpoint. Needs Open MPI's internal headers
 * (ompi/communicator/communicator.h, ompi/mca/bml/bml.h, ompi/proc/proc.h).
 */
#ifndef OIB_BML_H
#define OIB_BML_H

#include <string.h>

/* Whether the BML entry `b` is the BTL component `name`'s. */
static inline int oib_bml_named(mca_bml_base_btl_t *b, const char *name)
{
    return 0 == strcmp(b->btl->btl_component->btl_version.mca_component_name, name);
}

/* The BML endpoint of `rank` in MPI_COMM_WORLD (NULL when there is none). */
static inline mca_bml_base_endpoint_t *oib_bml_endpoint(int rank)
{
    ompi_proc_t *proc = ompi_comm_peer_lookup(&ompi_mpi_comm_world.comm, rank);
    return proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_BML];
}

/* The oib module in the RDMA list of `bml` (the last one listed), or NULL. */
static inline mca_bml_base_btl_t *oib_bml_rdma(mca_bml_base_endpoint_t *bml)
{
    mca_bml_base_btl_t *found = NULL;
    for (size_t i = 0; NULL != bml && i < mca_bml_base_btl_array_get_size(&bml->btl_rdma); i++) {
        mca_bml_base_btl_t *b = mca_bml_base_btl_array_get_index(&bml->btl_rdma, i);
        if (oib_bml_named(b, "oib")) {
            found = b;
        }
    }
    return found;
}

#endif
