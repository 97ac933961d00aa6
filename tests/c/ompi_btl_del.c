/*
 * ompi_btl_del.c: the oib module's del_procs and add_procs called directly, below ob1
 * (tests/softroce_ompi_oib.rs; 2 ranks, `--mca btl self,oib`). Each rank finds the oib
 * module on its peer's BML endpoint, registers a buffer and swaps handles with the peer, then
 *   - rank 0 puts 64 KiB into rank 1's buffer WITHOUT a flush and removes rank 1 at once
 *     (btl_del_procs): the put's callback has run before del_procs returns (OPAL_SUCCESS:
 *     del_procs lets work in flight finish first, as MPI_Finalize needs); rank 1 removes
 *     rank 0 after a fence (removing a peer releases the connection under the peer, so its
 *     own operations to this process must be done first: MPI_Finalize's fence sees to that)
 *     and checks every byte of the put;
 *   - a put on the removed endpoint is refused at once (OPAL_ERR_UNREACH), without a callback
 *     and without the error callback;
 *   - after a runtime fence (both ranks removed each other; not over a BTL), btl_add_procs of
 *     the same proc gives the same endpoint back, reachable; a put of 64 KiB with a new
 *     pattern through it completes (flush) and the peer checks every byte after a fence;
 *   - ob1 itself goes over the revived endpoint: MPI_Sendrecv of 1 MiB (rendezvous, RDMA),
 *     every byte checked;
 *   - the own rank (oib's loopback endpoint, btl_oib_own_rank's default): a put to its own
 *     buffer in flight when del_procs removes the own proc completes before del_procs
 *     returns, a put then is refused (OPAL_ERR_UNREACH), add_procs gives the same endpoint
 *     back at once (no peer to wait for) and a put through it lands, every byte checked;
 *     then MPI_Finalize (which removes every proc for real).
 * Prints "ompi_btl_del: rank R ok" and exits 0, or names what failed and calls MPI_Abort.
 */
#include "ompi_config.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ompi/communicator/communicator.h"
#include "ompi/mca/bml/bml.h"
#include "ompi/proc/proc.h"
#include "opal/class/opal_bitmap.h"
#include "opal/mca/btl/btl.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/runtime/opal_progress.h"

#include "oib_bml.h"

#define AREA ((size_t) 64 * 1024)
#define BIG ((size_t) 1 << 20)

static int rank;
static int calls, failed, errors;

static void die(const char *what, int rc)
{
    fprintf(stderr, "ompi_btl_del: rank %d: %s (%d)\n", rank, what, rc);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static unsigned char pat(int who, int round, size_t i)
{
    return (unsigned char) (i * 131u + (i >> 9) + (size_t) who * 17u + (size_t) round * 71u);
}

static void done_cb(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                    void *local_address, struct mca_btl_base_registration_handle_t *local_handle,
                    void *context, void *cbdata, int status)
{
    (void) btl, (void) ep, (void) local_address, (void) local_handle, (void) context;
    __atomic_add_fetch((int *) cbdata, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
    if (OPAL_SUCCESS != status) {
        __atomic_add_fetch(&failed, 1, __ATOMIC_SEQ_CST);
    }
}

/* Counts error callbacks (ob1's would abort the job). */
static void error_cb(struct mca_btl_base_module_t *btl, int32_t flags, opal_proc_t *errproc,
                     char *btlinfo)
{
    (void) btl, (void) flags, (void) errproc;
    fprintf(stderr, "ompi_btl_del: rank %d: error callback: %s\n", rank,
            NULL != btlinfo ? btlinfo : "(null)");
    __atomic_add_fetch(&errors, 1, __ATOMIC_SEQ_CST);
}

static void wait_for(volatile int *flag, int want, const char *what)
{
    for (long spins = 0; __atomic_load_n(flag, __ATOMIC_SEQ_CST) < want; spins++) {
        opal_progress();
        if (spins > 200000000L) {
            die(what, -1);
        }
    }
}

static void fence(const char *what)
{
    int rc = opal_pmix.fence(NULL, 0);
    if (OPAL_SUCCESS != rc) {
        die(what, rc);
    }
}

static void check_area(const unsigned char *land, int round)
{
    for (size_t i = 0; i < AREA; i++) {
        if (land[i] != pat(1 - rank, round, i)) {
            fprintf(stderr, "ompi_btl_del: rank %d: round %d byte %zu is %u, want %u\n", rank,
                    round, i, land[i], pat(1 - rank, round, i));
            die("the peer's put", round);
        }
    }
}

/* The own rank's endpoint removed with a put in flight, then added again (the last round:
 * ob1 keeps its own traffic on the self BTL, the own endpoint is oib's RDMA one). */
static void own_rank_removed_and_added_again(mca_btl_base_module_t *btl, unsigned char *buf,
                                             struct mca_btl_base_registration_handle_t *mine)
{
    mca_bml_base_btl_t *sb = oib_bml_rdma(oib_bml_endpoint(rank));
    if (NULL == sb || sb->btl != btl) {
        die("oib is not an RDMA BTL of the own rank's endpoint", 0);
    }
    struct mca_btl_base_endpoint_t *sep = sb->btl_endpoint;
    struct mca_btl_base_endpoint_t *seps[1] = {sep};
    opal_proc_t *sproc = &ompi_comm_peer_lookup(&ompi_mpi_comm_world.comm, rank)->super;
    uint64_t base = (uint64_t) (uintptr_t) buf;
    int before = calls;
    memset(buf + 2 * AREA, 0, 2 * AREA);
    int own1 = 0;
    int rc = btl->btl_put(btl, sep, buf, base + 2 * AREA, mine, mine, AREA, 0, MCA_BTL_NO_ORDER,
                          done_cb, NULL, &own1);
    if (OPAL_SUCCESS != rc) {
        die("btl_put to the own rank", rc);
    }
    rc = btl->btl_del_procs(btl, 1, &sproc, seps);
    if (OPAL_SUCCESS != rc || 1 != own1 || 0 != failed) {
        die("the put to the own rank in flight at del_procs did not complete before it returned",
            rc);
    }
    int gone = 0;
    rc = btl->btl_put(btl, sep, buf, base + 2 * AREA, mine, mine, AREA, 0, MCA_BTL_NO_ORDER,
                      done_cb, NULL, &gone);
    if (OPAL_ERR_UNREACH != rc) {
        die("a put to the removed own rank was not refused with OPAL_ERR_UNREACH", rc);
    }
    struct mca_btl_base_endpoint_t *again[1] = {NULL};
    opal_bitmap_t reach;
    OBJ_CONSTRUCT(&reach, opal_bitmap_t);
    opal_bitmap_init(&reach, 8);
    rc = btl->btl_add_procs(btl, 1, &sproc, again, &reach);
    if (OPAL_SUCCESS != rc || sep != again[0] || !opal_bitmap_is_set_bit(&reach, 0)) {
        die("btl_add_procs of the own rank after its del_procs", rc);
    }
    OBJ_DESTRUCT(&reach);
    int own2 = 0;
    rc = btl->btl_put(btl, sep, buf + AREA, base + 3 * AREA, mine, mine, AREA, 0,
                      MCA_BTL_NO_ORDER, done_cb, NULL, &own2);
    if (OPAL_SUCCESS != rc) {
        die("btl_put to the own rank added again", rc);
    }
    btl->btl_flush(btl, sep);
    wait_for(&own2, 1, "the put to the own rank added again");
    for (size_t i = 0; i < AREA; i++) {
        if (buf[2 * AREA + i] != pat(rank, 1, i) || buf[3 * AREA + i] != pat(rank, 2, i)) {
            die("a byte of a put to the own rank", (int) i);
        }
    }
    if (0 != gone || 0 != failed || 0 != errors || before + 2 != calls) {
        die("callbacks of the own rank's puts", calls - before + 100 * errors);
    }
    printf("ompi_btl_del: rank %d: the own rank was removed and added again\n", rank);
}

int main(int argc, char **argv)
{
    int size, rc;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (2 != size) {
        die("needs 2 ranks", size);
    }
    int peer = 1 - rank;

    mca_bml_base_btl_t *bb = oib_bml_rdma(oib_bml_endpoint(peer));
    if (NULL == bb) {
        die("oib is not an RDMA BTL of the peer's endpoint", 0);
    }
    mca_btl_base_module_t *btl = bb->btl;
    struct mca_btl_base_endpoint_t *ep = bb->btl_endpoint;
    /* Our own error callback: an endpoint failure during the test is counted, not fatal. */
    btl->btl_register_error(btl, error_cb);

    /* [src: round 1][src: round 2][landing: round 1][landing: round 2] */
    unsigned char *buf = NULL;
    if (0 != posix_memalign((void **) &buf, 64, 4 * AREA)) {
        die("out of memory", 0);
    }
    memset(buf, 0, 4 * AREA);
    for (size_t i = 0; i < AREA; i++) {
        buf[i] = pat(rank, 1, i);
        buf[AREA + i] = pat(rank, 2, i);
    }
    struct mca_btl_base_registration_handle_t *mine =
        btl->btl_register_mem(btl, ep, buf, 4 * AREA, MCA_BTL_REG_FLAG_ACCESS_ANY);
    if (NULL == mine) {
        die("btl_register_mem", 0);
    }
    unsigned char theirs[64];
    uint64_t base = (uint64_t) (uintptr_t) buf, pbase = 0;
    MPI_Sendrecv(mine, (int) btl->btl_registration_handle_size, MPI_BYTE, peer, 1, theirs,
                 (int) btl->btl_registration_handle_size, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    MPI_Sendrecv(&base, 1, MPI_UINT64_T, peer, 2, &pbase, 1, MPI_UINT64_T, peer, 2,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    struct mca_btl_base_registration_handle_t *rh = (void *) theirs;
    /* No ob1 traffic from here until the endpoint is back. */
    MPI_Barrier(MPI_COMM_WORLD);

    /* Round 1: rank 0's put in flight when its del_procs removes rank 1. */
    opal_proc_t *oproc = &ompi_comm_peer_lookup(&ompi_mpi_comm_world.comm, peer)->super;
    struct mca_btl_base_endpoint_t *eps[1] = {ep};
    if (0 == rank) {
        int put1 = 0;
        rc = btl->btl_put(btl, ep, buf, pbase + 2 * AREA, mine, rh, AREA, 0, MCA_BTL_NO_ORDER,
                          done_cb, NULL, &put1);
        if (OPAL_SUCCESS != rc) {
            die("btl_put (round 1)", rc);
        }
        rc = btl->btl_del_procs(btl, 1, &oproc, eps);
        if (OPAL_SUCCESS != rc) {
            die("btl_del_procs", rc);
        }
        if (1 != put1 || 0 != failed) {
            die("the put in flight at del_procs did not complete successfully before it "
                "returned", put1);
        }
        printf("ompi_btl_del: rank %d: del_procs finished the put in flight\n", rank);
    }
    fence("fence after rank 0's del_procs");
    if (1 == rank) {
        rc = btl->btl_del_procs(btl, 1, &oproc, eps);
        if (OPAL_SUCCESS != rc) {
            die("btl_del_procs", rc);
        }
        check_area(buf + 2 * AREA, 1);
        printf("ompi_btl_del: rank %d: rank 0's put landed before del_procs\n", rank);
    }
    /* Gone: refused at once, no callback. */
    int put_gone = 0;
    rc = btl->btl_put(btl, ep, buf, pbase + 2 * AREA, mine, rh, AREA, 0, MCA_BTL_NO_ORDER,
                      done_cb, NULL, &put_gone);
    if (OPAL_ERR_UNREACH != rc) {
        die("a put on the removed endpoint was not refused with OPAL_ERR_UNREACH", rc);
    }
    for (int i = 0; i < 1000; i++) {
        opal_progress();
    }
    if (0 != put_gone || 0 != errors) {
        die("a callback or error callback for the refused put", put_gone + 100 * errors);
    }
    printf("ompi_btl_del: rank %d: the removed endpoint refuses a put\n", rank);
    fence("fence after del_procs");

    /* Added again: the same endpoint, working. */
    struct mca_btl_base_endpoint_t *again[1] = {NULL};
    opal_bitmap_t reach;
    OBJ_CONSTRUCT(&reach, opal_bitmap_t);
    opal_bitmap_init(&reach, 8);
    rc = btl->btl_add_procs(btl, 1, &oproc, again, &reach);
    if (OPAL_SUCCESS != rc || NULL == again[0] || !opal_bitmap_is_set_bit(&reach, 0)) {
        die("btl_add_procs after del_procs", rc);
    }
    OBJ_DESTRUCT(&reach);
    if (again[0] != ep) {
        die("add_procs gave another endpoint than the one ob1 holds", 0);
    }
    int put2 = 0;
    rc = btl->btl_put(btl, again[0], buf + AREA, pbase + 3 * AREA, mine, rh, AREA, 0,
                      MCA_BTL_NO_ORDER, done_cb, NULL, &put2);
    if (OPAL_SUCCESS != rc) {
        die("btl_put on the endpoint added again", rc);
    }
    btl->btl_flush(btl, again[0]);
    wait_for(&put2, 1, "the put on the endpoint added again");
    if (0 != failed || 0 != errors) {
        die("a failed callback or an error callback after add_procs", failed + 100 * errors);
    }
    fence("fence after the second put");
    check_area(buf + 3 * AREA, 2);
    printf("ompi_btl_del: rank %d: add_procs gave the endpoint back\n", rank);

    /* ob1 over the revived endpoint: rendezvous with RDMA, every byte checked. */
    unsigned char *out = malloc(BIG), *in = malloc(BIG);
    if (NULL == out || NULL == in) {
        die("out of memory", 1);
    }
    for (size_t i = 0; i < BIG; i++) {
        out[i] = pat(rank, 3, i);
    }
    MPI_Sendrecv(out, (int) BIG, MPI_BYTE, peer, 3, in, (int) BIG, MPI_BYTE, peer, 3,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (size_t i = 0; i < BIG; i++) {
        if (in[i] != pat(peer, 3, i)) {
            die("a byte of the 1 MiB message after add_procs", (int) i);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (0 != errors || 0 != failed || (0 == rank ? 2 : 1) != calls) {
        die("callbacks after the ob1 exchange", calls + 100 * errors);
    }
    own_rank_removed_and_added_again(btl, buf, mine);
    if (OPAL_SUCCESS != btl->btl_deregister_mem(btl, mine)) {
        die("btl_deregister_mem", 0);
    }
    printf("ompi_btl_del: rank %d ok\n", rank);
    fflush(stdout);
    free(out);
    free(in);
    free(buf);
    MPI_Finalize();
    return 0;
}
