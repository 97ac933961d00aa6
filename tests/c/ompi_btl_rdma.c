/*
 * ompi_btl_rdma.c: the oib module's one-sided entry points called directly, below ob1, as
 * Open MPI's one-sided layer will call them (tests/softroce_ompi_oib.rs; 2 ranks,
 * `--mca btl self,oib`). Each rank finds the oib module on its peer's BML endpoint, registers
 * a buffer (btl_register_mem), swaps handles with the peer (MPI_Sendrecv), then
 *   - btl_put of 512 KiB + 3 into the peer's buffer, btl_flush, barrier: the peer checks
 *     every byte; btl_get of the peer's source area, checked when its callback ran;
 *   - on the peer's counters: 10 btl_atomic_fop (add i + 1, every old value checked), 2
 *     btl_atomic_cswap (the first swaps, the second sees the first's value), 1 btl_atomic_op
 *     (add 1000), then btl_flush of that endpoint; after a barrier each rank checks its own
 *     counters (55 + 1000 and the swapped value);
 *   - refusals: a 32-bit fop, a float fop, an AND (fop and op), a misaligned target (cswap
 *     and op): OPAL_ERR_NOT_SUPPORTED, the code osc rdma falls back on (with
 *     OPAL_ERR_NOT_AVAILABLE it retried for ever: docs/OMPI.md, "One-sided MPI");
 *   - every callback ran once with OPAL_SUCCESS;
 *   - its own rank through oib (Open MPI's osc rdma takes a BTL only if it reaches every rank
 *     of a window, the caller included): oib is an RDMA BTL of its own BML endpoint (the same
 *     module) but not a send or eager one (ob1 sends to itself through self); btl_put of its
 *     source area into its own buffer, btl_flush of its own endpoint, every byte and the
 *     bytes around checked; btl_get of it back, checked; 10 fetching adds on its own counter
 *     while the peer runs 10 on the same counter (and it 10 on the peer's): the old values
 *     seen by both ranks are 0..19 once each and the counter ends at 20; 2 compare-and-swaps
 *     and a non-fetching add on its own memory, old and final values checked;
 *   - btl_deregister_mem.
 * Prints "ompi_btl_rdma: rank R ok" and exits 0, or names what failed and calls MPI_Abort.
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
#include "opal/mca/btl/btl.h"
#include "opal/runtime/opal_progress.h"

#include "oib_bml.h"

#define AREA ((size_t) 512 * 1024 + 3)
#define SRC 0                      /* what this rank puts and the peer gets */
#define LAND (AREA + 5)            /* where the peer's put lands */
#define GETA (2 * AREA + 16)       /* where this rank's get lands */
#define CNT ((3 * AREA + 64) / 8 * 8) /* counters: [0] adds, [1] swap; then old values */
#define FOPS 10
#define SLAND (CNT + 8 * (2 + FOPS + 2) + 8)  /* where this rank's put to itself lands */
#define SGETA (SLAND + AREA + 8)              /* where its get from itself lands */
#define SCNT ((SGETA + AREA + 64) / 8 * 8)    /* [0] adds by both, [1] swap; then old values */
#define LEN (SCNT + 8 * (2 + 2 * FOPS + 2))

static int rank;
static unsigned char peer_handle[24]; /* the peer's registration handle */
static int calls, failed;

static void die(const char *what, int rc)
{
    fprintf(stderr, "ompi_btl_rdma: rank %d: %s (%d)\n", rank, what, rc);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static unsigned char pat(int who, size_t i)
{
    return (unsigned char) (i * 131u + (i >> 9) + (size_t) who * 17u);
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

static void wait_for(volatile int *flag, int want, const char *what)
{
    for (long spins = 0; __atomic_load_n(flag, __ATOMIC_SEQ_CST) < want; spins++) {
        opal_progress();
        if (spins > 200000000L) {
            die(what, -1);
        }
    }
}

/* The own rank through oib: see the head comment. */
static void to_self(mca_btl_base_module_t *btl, unsigned char *buf,
                    struct mca_btl_base_registration_handle_t *mine,
                    struct mca_btl_base_endpoint_t *pep, int peer, uint64_t pbase)
{
    mca_bml_base_endpoint_t *bml = oib_bml_endpoint(rank);
    if (NULL == bml) {
        die("no BML endpoint for the own rank", 0);
    }
    mca_bml_base_btl_t *sb = oib_bml_rdma(bml);
    if (NULL == sb || sb->btl != btl) {
        die("oib (the same module) is not an RDMA BTL of the own rank's endpoint", 0);
    }
    /* ob1 sends to itself through self: oib is neither a send nor an eager BTL there. */
    size_t ns = mca_bml_base_btl_array_get_size(&bml->btl_send);
    size_t ne = mca_bml_base_btl_array_get_size(&bml->btl_eager);
    for (size_t i = 0; i < ns; i++) {
        if (!oib_bml_named(mca_bml_base_btl_array_get_index(&bml->btl_send, i), "self")) {
            die("a send BTL of the own rank other than self", (int) i);
        }
    }
    for (size_t i = 0; i < ne; i++) {
        if (!oib_bml_named(mca_bml_base_btl_array_get_index(&bml->btl_eager, i), "self")) {
            die("an eager BTL of the own rank other than self", (int) i);
        }
    }
    if (0 == ns) {
        die("no send BTL for the own rank", 0);
    }
    struct mca_btl_base_endpoint_t *sep = sb->btl_endpoint;
    uint64_t base = (uint64_t) (uintptr_t) buf;
    int before = calls, put_done = 0, get_done = 0, at_done = 0, rc;

    /* Put our source area into our own buffer. */
    do {
        rc = btl->btl_put(btl, sep, buf + SRC, base + SLAND, mine, mine, AREA, 0,
                          MCA_BTL_NO_ORDER, done_cb, NULL, &put_done);
        if (OPAL_ERR_OUT_OF_RESOURCE == rc) {
            opal_progress();
        }
    } while (OPAL_ERR_OUT_OF_RESOURCE == rc);
    if (OPAL_SUCCESS != rc) {
        die("btl_put to the own rank", rc);
    }
    btl->btl_flush(btl, sep);
    if (put_done != 1) {
        die("btl_flush of the own endpoint returned before the put's callback", put_done);
    }
    for (size_t i = 0; i < AREA; i++) {
        if (buf[SLAND + i] != pat(rank, i)) {
            die("a byte put to the own rank differs", (int) i);
        }
    }
    if (buf[SLAND - 1] != 0 || buf[SLAND + AREA] != 0) {
        die("the put to the own rank wrote outside its range", 0);
    }
    /* And get it back. */
    rc = btl->btl_get(btl, sep, buf + SGETA, base + SLAND, mine, mine, AREA, 0, MCA_BTL_NO_ORDER,
                      done_cb, NULL, &get_done);
    if (OPAL_SUCCESS != rc) {
        die("btl_get from the own rank", rc);
    }
    wait_for(&get_done, 1, "the own get's callback");
    for (size_t i = 0; i < AREA; i++) {
        if (buf[SGETA + i] != pat(rank, i)) {
            die("a byte got from the own rank differs", (int) i);
        }
    }
    if (buf[SGETA - 1] != 0 || buf[SGETA + AREA] != 0) {
        die("the get from the own rank wrote outside its range", 0);
    }

    /* Both ranks add to both counters at once: ours through the loopback endpoint. */
    uint64_t *sc = (uint64_t *) (buf + SCNT), *old = sc + 2;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < FOPS; i++) {
        rc = btl->btl_atomic_fop(btl, sep, &old[i], base + SCNT, mine, mine, MCA_BTL_ATOMIC_ADD,
                                 1, 0, MCA_BTL_NO_ORDER, done_cb, NULL, &at_done);
        if (OPAL_SUCCESS != rc) {
            die("btl_atomic_fop on the own rank", rc);
        }
        rc = btl->btl_atomic_fop(btl, pep, &old[FOPS + i], pbase + SCNT, mine,
                                 (struct mca_btl_base_registration_handle_t *) peer_handle,
                                 MCA_BTL_ATOMIC_ADD, 1, 0, MCA_BTL_NO_ORDER, done_cb, NULL,
                                 &at_done);
        if (OPAL_SUCCESS != rc) {
            die("btl_atomic_fop on the peer's counter", rc);
        }
    }
    btl->btl_flush(btl, NULL);
    if (at_done != 2 * FOPS) {
        die("btl_flush returned before every fetching add's callback", at_done);
    }
    /* The old values the peer saw on our counter, for ours seen by the peer. */
    uint64_t theirs[FOPS];
    MPI_Sendrecv(&old[FOPS], FOPS, MPI_UINT64_T, peer, 3, theirs, FOPS, MPI_UINT64_T, peer, 3,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    int seen[2 * FOPS] = {0};
    for (int i = 0; i < FOPS; i++) {
        if (i > 0 && old[i] <= old[i - 1]) {
            die("own fetching adds: old values not increasing", i);
        }
        if (old[i] >= 2 * FOPS || theirs[i] >= 2 * FOPS || seen[old[i]]++ || seen[theirs[i]]++) {
            die("the old values on the own counter are not 0..19 once each", i);
        }
    }
    if (((volatile uint64_t *) sc)[0] != 2 * FOPS) {
        die("the own counter after both ranks' adds", (int) sc[0]);
    }
    /* Compare-and-swap (a hit, then a miss) and a non-fetching add on our own memory. */
    rc = btl->btl_atomic_cswap(btl, sep, &old[2 * FOPS], base + SCNT + 8, mine, mine, 0, 99, 0,
                               MCA_BTL_NO_ORDER, done_cb, NULL, &at_done);
    if (OPAL_SUCCESS == rc) {
        rc = btl->btl_atomic_cswap(btl, sep, &old[2 * FOPS + 1], base + SCNT + 8, mine, mine, 0,
                                   5, 0, MCA_BTL_NO_ORDER, done_cb, NULL, &at_done);
    }
    if (OPAL_SUCCESS == rc) {
        rc = btl->btl_atomic_op(btl, sep, base + SCNT, mine, MCA_BTL_ATOMIC_ADD, 1000, 0,
                                MCA_BTL_NO_ORDER, done_cb, NULL, &at_done);
    }
    if (OPAL_SUCCESS != rc) {
        die("an atomic on the own rank", rc);
    }
    btl->btl_flush(btl, sep);
    if (at_done != 2 * FOPS + 3) {
        die("btl_flush of the own endpoint returned before every atomic's callback", at_done);
    }
    volatile uint64_t *vc = sc;
    if (old[2 * FOPS] != 0 || old[2 * FOPS + 1] != 99 || vc[1] != 99 || vc[0] != 2 * FOPS + 1000) {
        die("compare-and-swap or add on the own memory", (int) vc[0]);
    }
    if (calls - before != 2 * FOPS + 5 || failed != 0) {
        die("callbacks to the own rank: wrong count or a failure", calls - before);
    }
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

    /* The oib module on the peer's endpoint. */
    mca_bml_base_btl_t *bb = oib_bml_rdma(oib_bml_endpoint(peer));
    if (NULL == bb) {
        die("oib is not an RDMA BTL of the peer's endpoint", 0);
    }
    mca_btl_base_module_t *btl = bb->btl;
    struct mca_btl_base_endpoint_t *ep = bb->btl_endpoint;
    uint32_t want_flags = MCA_BTL_FLAGS_PUT | MCA_BTL_FLAGS_GET | MCA_BTL_FLAGS_ATOMIC_FOPS
                          | MCA_BTL_FLAGS_ATOMIC_OPS;
    if ((btl->btl_flags & want_flags) != want_flags || 24 != btl->btl_registration_handle_size
        || !(btl->btl_atomic_flags & MCA_BTL_ATOMIC_SUPPORTS_ADD)
        || !(btl->btl_atomic_flags & MCA_BTL_ATOMIC_SUPPORTS_CSWAP)) {
        die("flags, atomic flags or handle size", (int) btl->btl_flags);
    }

    unsigned char *buf = NULL;
    if (0 != posix_memalign((void **) &buf, 64, LEN)) {
        die("out of memory", 0);
    }
    memset(buf, 0, LEN);
    for (size_t i = 0; i < AREA; i++) {
        buf[SRC + i] = pat(rank, i);
    }
    struct mca_btl_base_registration_handle_t *mine =
        btl->btl_register_mem(btl, ep, buf, LEN, MCA_BTL_REG_FLAG_ACCESS_ANY);
    if (NULL == mine) {
        die("btl_register_mem", 0);
    }
    unsigned char theirs[64];
    uint64_t base = (uint64_t) (uintptr_t) buf, pbase = 0;
    MPI_Sendrecv(mine, 24, MPI_BYTE, peer, 1, theirs, 24, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    MPI_Sendrecv(&base, 1, MPI_UINT64_T, peer, 2, &pbase, 1, MPI_UINT64_T, peer, 2,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    struct mca_btl_base_registration_handle_t *rh = (void *) theirs;
    memcpy(peer_handle, theirs, sizeof peer_handle);

    /* Put, flush, barrier: the peer's bytes are in place. */
    int put_done = 0, get_done = 0, at_done = 0;
    do {
        rc = btl->btl_put(btl, ep, buf + SRC, pbase + LAND, mine, rh, AREA, 0, MCA_BTL_NO_ORDER,
                          done_cb, NULL, &put_done);
        if (OPAL_ERR_OUT_OF_RESOURCE == rc) {
            opal_progress();
        }
    } while (OPAL_ERR_OUT_OF_RESOURCE == rc);
    if (OPAL_SUCCESS != rc) {
        die("btl_put", rc);
    }
    btl->btl_flush(btl, NULL);
    if (put_done != 1) {
        die("btl_flush returned before the put's callback", put_done);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (size_t i = 0; i < AREA; i++) {
        if (buf[LAND + i] != pat(peer, i)) {
            die("a put byte differs", (int) i);
        }
    }
    if (buf[LAND - 1] != 0 || buf[LAND + AREA] != 0) {
        die("the put wrote outside its range", 0);
    }

    /* Get the peer's source area. */
    rc = btl->btl_get(btl, ep, buf + GETA, pbase + SRC, mine, rh, AREA, 0, MCA_BTL_NO_ORDER,
                      done_cb, NULL, &get_done);
    if (OPAL_SUCCESS != rc) {
        die("btl_get", rc);
    }
    wait_for(&get_done, 1, "the get's callback");
    for (size_t i = 0; i < AREA; i++) {
        if (buf[GETA + i] != pat(peer, i)) {
            die("a got byte differs", (int) i);
        }
    }

    /* Atomics on the peer's counters; old values into our own slots after the counters. */
    uint64_t *cnt = (uint64_t *) (buf + CNT), *old = cnt + 2;
    uint64_t pc = pbase + CNT;
    for (int i = 0; i < FOPS; i++) {
        rc = btl->btl_atomic_fop(btl, ep, &old[i], pc, mine, rh, MCA_BTL_ATOMIC_ADD,
                                 (uint64_t) i + 1, 0, MCA_BTL_NO_ORDER, done_cb, NULL, &at_done);
        if (OPAL_SUCCESS != rc) {
            die("btl_atomic_fop", rc);
        }
    }
    rc = btl->btl_atomic_cswap(btl, ep, &old[FOPS], pc + 8, mine, rh, 0, 77, 0,
                               MCA_BTL_NO_ORDER, done_cb, NULL, &at_done);
    if (OPAL_SUCCESS != rc) {
        die("btl_atomic_cswap", rc);
    }
    rc = btl->btl_atomic_cswap(btl, ep, &old[FOPS + 1], pc + 8, mine, rh, 0, 88, 0,
                               MCA_BTL_NO_ORDER, done_cb, NULL, &at_done);
    if (OPAL_SUCCESS != rc) {
        die("btl_atomic_cswap 2", rc);
    }
    rc = btl->btl_atomic_op(btl, ep, pc, rh, MCA_BTL_ATOMIC_ADD, 1000, 0, MCA_BTL_NO_ORDER,
                            done_cb, NULL, &at_done);
    if (OPAL_SUCCESS != rc) {
        die("btl_atomic_op", rc);
    }
    /* Refused: 32-bit, float, another operation, a misaligned target. */
    if (OPAL_ERR_NOT_SUPPORTED
            != btl->btl_atomic_fop(btl, ep, &old[0], pc, mine, rh, MCA_BTL_ATOMIC_ADD, 1,
                                   MCA_BTL_ATOMIC_FLAG_32BIT, MCA_BTL_NO_ORDER, done_cb, NULL,
                                   &at_done)
        || OPAL_ERR_NOT_SUPPORTED
               != btl->btl_atomic_fop(btl, ep, &old[0], pc, mine, rh, MCA_BTL_ATOMIC_ADD, 1,
                                      MCA_BTL_ATOMIC_FLAG_FLOAT, MCA_BTL_NO_ORDER, done_cb,
                                      NULL, &at_done)
        || OPAL_ERR_NOT_SUPPORTED
               != btl->btl_atomic_fop(btl, ep, &old[0], pc, mine, rh, MCA_BTL_ATOMIC_AND, 1, 0,
                                      MCA_BTL_NO_ORDER, done_cb, NULL, &at_done)
        || OPAL_ERR_NOT_SUPPORTED
               != btl->btl_atomic_op(btl, ep, pc, rh, MCA_BTL_ATOMIC_AND, 1, 0,
                                     MCA_BTL_NO_ORDER, done_cb, NULL, &at_done)
        || OPAL_ERR_NOT_SUPPORTED
               != btl->btl_atomic_op(btl, ep, pc + 4, rh, MCA_BTL_ATOMIC_ADD, 1, 0,
                                     MCA_BTL_NO_ORDER, done_cb, NULL, &at_done)
        || OPAL_ERR_NOT_SUPPORTED
               != btl->btl_atomic_cswap(btl, ep, &old[0], pc + 4, mine, rh, 0, 1, 0,
                                        MCA_BTL_NO_ORDER, done_cb, NULL, &at_done)) {
        die("an atomic that verbs cannot do was not refused", 0);
    }
    btl->btl_flush(btl, ep);
    if (at_done != FOPS + 3) {
        die("btl_flush returned before every atomic's callback", at_done);
    }
    uint64_t sum = 0;
    for (int i = 0; i < FOPS; i++) {
        if (old[i] != sum) {
            die("a fetch-and-add's old value", i);
        }
        sum += (uint64_t) i + 1;
    }
    if (old[FOPS] != 0 || old[FOPS + 1] != 77) {
        die("a compare-and-swap's old value", (int) old[FOPS + 1]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    volatile uint64_t *vc = cnt;
    if (vc[0] != sum + 1000 || vc[1] != 77) {
        die("the counters after the peer's atomics", (int) vc[0]);
    }
    if (calls != FOPS + 5 || failed != 0) {
        die("callbacks: wrong count or a failure", calls);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    to_self(btl, buf, mine, ep, peer, pbase);
    MPI_Barrier(MPI_COMM_WORLD);
    if (OPAL_SUCCESS != btl->btl_deregister_mem(btl, mine)) {
        die("btl_deregister_mem", 0);
    }
    printf("ompi_btl_rdma: rank %d ok\n", rank);
    fflush(stdout);
    free(buf);
    MPI_Finalize();
    return 0;
}
