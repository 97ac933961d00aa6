/*
 * ompi_osc_dyn.c: more one-sided MPI over oib (issue 31; the first program is ompi_osc.c).
 * Three stages, every result checked exactly:
 *   - dynamic: MPI_Win_create_dynamic, two regions of malloc'd memory attached with
 *     MPI_Win_attach, their addresses exchanged with MPI_Get_address + MPI_Allgather; under
 *     lock_all each rank puts into its right neighbour's regions and gets the bytes back in
 *     the same epoch after a flush, runs MPI_Fetch_and_op SUM (every old value checked) on a
 *     word of the neighbour and on a word of rank 0 every rank adds to, MPI_Compare_and_swap
 *     (a swap that succeeds, one that must fail, one that succeeds on the new value),
 *     MPI_Fetch_and_op MPI_NO_OP to read, MPI_Accumulate SUM on a 64-bit word; then every rank
 *     checks its own regions, detaches them, attaches a third and gets a put into it;
 *   - passive: a window of MPI_Win_allocate; MPI_Win_lock exclusive at rank 0 guarding a
 *     get-increment-put counter and a holder word (a lost update or a second holder shows);
 *     MPI_Win_lock shared on the right neighbour (put, flush, get back in the same epoch);
 *     lock_all with MPI_Win_flush, MPI_Win_flush_all; MPI_Win_flush_local (then
 *     MPI_Win_flush_local_all) after a put, the origin buffer overwritten at once: the target
 *     must hold the bytes from before;
 *   - accumulate: a window of MPI_Win_create; every rank accumulates into rank 0: MPI_SUM,
 *     MPI_REPLACE and MPI_MAX on int, long and double, MPI_BAND on int and long (MPI defines
 *     no BAND on double), scalars and a vector, exact expected values (REPLACE from all ranks
 *     on one element: the value is exactly one rank's, never torn).
 * The arguments name the stages to run ("dynamic", "passive", "accumulate"); none runs all.
 * Each stage is named on stderr as it starts; a stage that passes prints
 * "ompi_osc_dyn: rank R: <stage> ok: P puts, G gets, A atomics" (its MPI calls of each kind
 * that target another rank, fetch-and-op with MPI_NO_OP not counted: the tests compare them
 * with oib's counters), then "ompi_osc_dyn: rank R of S ok
 * (window '<name of the dynamic window>')" and exit 0; a failure names what and calls
 * MPI_Abort.
 */
#define _POSIX_C_SOURCE 200112L /* posix_memalign under -std=c99 */
#include <float.h>
#include <limits.h>
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ITERS 8
static int rank, size, left, right;

static void die(const char *what, long v)
{
    fprintf(stderr, "ompi_osc_dyn: rank %d: %s (%ld)\n", rank, what, v);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void stage(const char *what)
{
    fprintf(stderr, "ompi_osc_dyn: rank %d: %s\n", rank, what);
    fflush(stderr);
}

static void ok(int rc, const char *what)
{
    if (MPI_SUCCESS != rc) {
        die(what, rc);
    }
}

static unsigned char pat(int from, int to, size_t i, int salt)
{
    return (unsigned char) (i * 13u + (size_t) from * 29u + (size_t) to * 71u + (i >> 9)
                            + (size_t) salt * 101u);
}

static void *alloc(size_t bytes)
{
    void *p = NULL;
    if (0 != posix_memalign(&p, 64, bytes)) {
        die("posix_memalign", (long) bytes);
    }
    memset(p, 0, bytes);
    return p;
}

/* ---- dynamic window ---- */

enum { DA = 8192, DB = 512, DC = 256 };                     /* region sizes, bytes */
enum { D_FOP = DA, D_SHARED = DA + 8, D_CAS = DA + 16, D_ACC = DA + 24, DA_ALL = DA + 32 };

static void fop64(int64_t v, int64_t *old, int to, MPI_Aint at, MPI_Op op, MPI_Win w,
                  const char *what)
{
    ok(MPI_Fetch_and_op(&v, old, MPI_INT64_T, to, at, op, w), what);
    ok(MPI_Win_flush(to, w), "MPI_Win_flush");
}

static void cas64(int64_t v, int64_t cmp, int64_t want_old, int to, MPI_Aint at, MPI_Win w)
{
    int64_t old = -7;
    ok(MPI_Compare_and_swap(&v, &cmp, &old, MPI_INT64_T, to, at, w), "MPI_Compare_and_swap");
    ok(MPI_Win_flush(to, w), "MPI_Win_flush");
    if (old != want_old) {
        die("the old value of MPI_Compare_and_swap on the dynamic window", (long) old);
    }
}

static char dyn_name[MPI_MAX_OBJECT_NAME] = "?";

static void dynamic(void)
{
    long nput = 0, nget = 0, natom = 0;
    MPI_Win w;
    stage("dynamic: MPI_Win_create_dynamic");
    ok(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &w), "MPI_Win_create_dynamic");
    MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN);
    int len = 0;
    MPI_Win_get_name(w, dyn_name, &len);
    unsigned char *a = alloc(DA_ALL), *b = alloc(DB);
    stage("dynamic: MPI_Win_attach");
    ok(MPI_Win_attach(w, a, DA_ALL), "MPI_Win_attach (region a)");
    ok(MPI_Win_attach(w, b, DB), "MPI_Win_attach (region b)");
    MPI_Aint mine[2], *addr = malloc(sizeof(MPI_Aint) * 2 * (size_t) size);
    MPI_Get_address(a, &mine[0]);
    MPI_Get_address(b, &mine[1]);
    MPI_Allgather(mine, 2, MPI_AINT, addr, 2, MPI_AINT, MPI_COMM_WORLD);
    const MPI_Aint ra = addr[2 * right], rb = addr[2 * right + 1], za = addr[0];

    unsigned char *src = malloc(DA), *back = malloc(DA);
    for (size_t i = 0; i < DA; i++) {
        src[i] = pat(rank, right, i, 1);
    }
    stage("dynamic: lock_all");
    ok(MPI_Win_lock_all(0, w), "MPI_Win_lock_all (dynamic)");
    stage("dynamic: put, flush, get");
    ok(MPI_Put(src, DA, MPI_BYTE, right, ra, DA, MPI_BYTE, w), "MPI_Put (dynamic a)");
    ok(MPI_Win_flush(right, w), "MPI_Win_flush");
    ok(MPI_Get(back, DA, MPI_BYTE, right, ra, DA, MPI_BYTE, w), "MPI_Get (dynamic a)");
    ok(MPI_Win_flush(right, w), "MPI_Win_flush");
    nput++, nget++;
    if (0 != memcmp(src, back, DA)) {
        die("the bytes got back from the neighbour's attached region differ", 0);
    }
    ok(MPI_Put(src + 100, DB, MPI_BYTE, right, rb, DB, MPI_BYTE, w), "MPI_Put (dynamic b)");
    ok(MPI_Win_flush(right, w), "MPI_Win_flush");
    memset(back, 0, DB);
    ok(MPI_Get(back, DB, MPI_BYTE, right, rb, DB, MPI_BYTE, w), "MPI_Get (dynamic b)");
    ok(MPI_Win_flush(right, w), "MPI_Win_flush");
    nput++, nget++;
    if (0 != memcmp(src + 100, back, DB)) {
        die("the bytes got back from the neighbour's second region differ", 0);
    }

    stage("dynamic: fetch_and_op");
    int64_t last0 = -1;
    for (int k = 0; k < ITERS; k++) {
        int64_t old = -1, old0 = -1;
        fop64(rank + 1, &old, right, ra + D_FOP, MPI_SUM, w, "MPI_Fetch_and_op (neighbour)");
        if (old != (int64_t) k * (rank + 1)) {
            die("an old value of MPI_Fetch_and_op on the neighbour's attached word", (long) old);
        }
        fop64(1, &old0, 0, za + D_SHARED, MPI_SUM, w, "MPI_Fetch_and_op (rank 0)");
        if (old0 < 0 || old0 >= (int64_t) ITERS * size || old0 <= last0) {
            die("an old value of MPI_Fetch_and_op on rank 0's attached word", (long) old0);
        }
        last0 = old0;
        natom += 0 == rank ? 1 : 2;
    }
    stage("dynamic: compare_and_swap");
    const int64_t me = rank + 1;
    cas64(me, 0, 0, right, ra + D_CAS, w);              /* 0 -> me: swaps */
    cas64(99, 0, me, right, ra + D_CAS, w);             /* 0 expected, me there: no swap */
    cas64(1000 * me, me, me, right, ra + D_CAS, w);     /* me -> 1000 me: swaps */
    int64_t seen = -1;
    fop64(0, &seen, right, ra + D_CAS, MPI_NO_OP, w, "MPI_Fetch_and_op NO_OP");
    if (seen != 1000 * me) {
        die("MPI_NO_OP read of the compare-and-swap word", (long) seen);
    }
    natom += 3; /* osc rdma reads with MPI_NO_OP by a get: not counted */
    stage("dynamic: accumulate");
    const int64_t big = (int64_t) me << 33;
    for (int k = 0; k < 2; k++) {
        ok(MPI_Accumulate(&big, 1, MPI_INT64_T, right, ra + D_ACC, 1, MPI_INT64_T, MPI_SUM, w),
           "MPI_Accumulate (dynamic)");
        ok(MPI_Win_flush(right, w), "MPI_Win_flush");
        natom++;
    }
    ok(MPI_Win_unlock_all(w), "MPI_Win_unlock_all (dynamic)");
    MPI_Barrier(MPI_COMM_WORLD);

    stage("dynamic: check");
    const int64_t lme = left + 1;
    ok(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, w), "MPI_Win_lock (own)");
    for (size_t i = 0; i < DA; i++) {
        if (a[i] != pat(left, rank, i, 1)) {
            die("a byte the left neighbour put into the attached region differs", (long) i);
        }
    }
    for (size_t i = 0; i < DB; i++) {
        if (b[i] != pat(left, rank, i + 100, 1)) {
            die("a byte the left neighbour put into the second region differs", (long) i);
        }
    }
    int64_t fo, sh, cs, ac;
    memcpy(&fo, a + D_FOP, 8);
    memcpy(&sh, a + D_SHARED, 8);
    memcpy(&cs, a + D_CAS, 8);
    memcpy(&ac, a + D_ACC, 8);
    ok(MPI_Win_unlock(rank, w), "MPI_Win_unlock (own)");
    if (fo != (int64_t) ITERS * lme) {
        die("the neighbour's fetch-and-op sum", (long) fo);
    }
    if (sh != (0 == rank ? (int64_t) ITERS * size : 0)) {
        die("the shared fetch-and-op sum at rank 0", (long) sh);
    }
    if (cs != 1000 * lme) {
        die("the compare-and-swap word", (long) cs);
    }
    if (ac != 2 * (lme << 33)) {
        die("the accumulated 64-bit word", (long) ac);
    }

    stage("dynamic: detach, attach another region");
    MPI_Barrier(MPI_COMM_WORLD); /* nobody reads a or b any more */
    ok(MPI_Win_detach(w, a), "MPI_Win_detach (region a)");
    ok(MPI_Win_detach(w, b), "MPI_Win_detach (region b)");
    unsigned char *c = alloc(DC);
    ok(MPI_Win_attach(w, c, DC), "MPI_Win_attach (region c)");
    MPI_Get_address(c, &mine[0]);
    MPI_Allgather(mine, 1, MPI_AINT, addr, 1, MPI_AINT, MPI_COMM_WORLD);
    ok(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, w), "MPI_Win_lock (region c)");
    ok(MPI_Put(src + 7, DC, MPI_BYTE, right, addr[right], DC, MPI_BYTE, w), "MPI_Put (c)");
    ok(MPI_Win_unlock(right, w), "MPI_Win_unlock (region c)");
    nput++;
    MPI_Barrier(MPI_COMM_WORLD);
    ok(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, w), "MPI_Win_lock (own)");
    for (size_t i = 0; i < DC; i++) {
        if (c[i] != pat(left, rank, i + 7, 1)) {
            die("a byte put into the region attached after a detach differs", (long) i);
        }
    }
    ok(MPI_Win_unlock(rank, w), "MPI_Win_unlock (own)");
    MPI_Barrier(MPI_COMM_WORLD);
    ok(MPI_Win_detach(w, c), "MPI_Win_detach (region c)");
    ok(MPI_Win_free(&w), "MPI_Win_free (dynamic)");
    free(a);
    free(b);
    free(c);
    free(src);
    free(back);
    free(addr);
    fprintf(stderr, "ompi_osc_dyn: rank %d: dynamic ok: %ld puts, %ld gets, %ld atomics\n", rank,
            nput, nget, natom);
}

/* ---- passive target synchronization ---- */

enum { PM = 4096 };
/* Window of MPI_Win_allocate: [0, PM) put by flush_local from the left neighbour, [PM, 2PM)
 * by flush_local_all, then words: the exclusive counter and holder (rank 0), one slot per
 * origin for shared locks, one per origin for lock_all's puts to the right neighbour and one
 * for those to rank 0. */
#define P_EXCL (2 * PM)
#define P_HOLD (2 * PM + 8)
#define P_SLOT(o) (2 * PM + 16 + 8 * (MPI_Aint) (o))
#define P_ALL(o) (2 * PM + 16 + 8 * (MPI_Aint) size + 8 * (MPI_Aint) (o))
#define P_ZERO(o) (2 * PM + 16 + 16 * (MPI_Aint) size + 8 * (MPI_Aint) (o))
#define XLOCKS 6

static void passive(void)
{
    long nput = 0, nget = 0;
    MPI_Win w;
    unsigned char *base = NULL;
    stage("passive: MPI_Win_allocate");
    MPI_Aint bytes = P_ZERO(size);
    ok(MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &w), "MPI_Win_allocate");
    MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN);
    ok(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, w), "MPI_Win_lock (own, init)");
    memset(base, 0, (size_t) bytes);
    ok(MPI_Win_unlock(rank, w), "MPI_Win_unlock (own, init)");
    MPI_Barrier(MPI_COMM_WORLD);

    stage("passive: exclusive lock");
    const int64_t me = rank + 1;
    for (int k = 0; k < XLOCKS; k++) {
        int64_t v = -1, h = -1;
        ok(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w), "MPI_Win_lock exclusive");
        ok(MPI_Put(&me, 1, MPI_INT64_T, 0, P_HOLD, 1, MPI_INT64_T, w), "MPI_Put (holder)");
        ok(MPI_Get(&v, 1, MPI_INT64_T, 0, P_EXCL, 1, MPI_INT64_T, w), "MPI_Get (counter)");
        ok(MPI_Win_flush(0, w), "MPI_Win_flush");
        v++;
        ok(MPI_Put(&v, 1, MPI_INT64_T, 0, P_EXCL, 1, MPI_INT64_T, w), "MPI_Put (counter)");
        ok(MPI_Win_flush(0, w), "MPI_Win_flush");
        ok(MPI_Get(&h, 1, MPI_INT64_T, 0, P_HOLD, 1, MPI_INT64_T, w), "MPI_Get (holder)");
        ok(MPI_Win_unlock(0, w), "MPI_Win_unlock exclusive");
        if (0 != rank) {
            nput += 2, nget += 2;
        }
        if (h != me) {
            die("another rank wrote the holder word inside an exclusive lock", (long) h);
        }
    }

    stage("passive: shared lock");
    for (int k = 0; k < ITERS; k++) {
        int64_t v = 1000 * me + k, back = -1;
        ok(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, w), "MPI_Win_lock shared");
        ok(MPI_Put(&v, 1, MPI_INT64_T, right, P_SLOT(rank), 1, MPI_INT64_T, w), "MPI_Put");
        ok(MPI_Win_flush(right, w), "MPI_Win_flush (shared)");
        ok(MPI_Get(&back, 1, MPI_INT64_T, right, P_SLOT(rank), 1, MPI_INT64_T, w), "MPI_Get");
        ok(MPI_Win_unlock(right, w), "MPI_Win_unlock shared");
        nput++, nget++;
        if (back != v) {
            die("the value got back after a flush under a shared lock", (long) back);
        }
    }

    stage("passive: lock_all, flush, flush_all");
    ok(MPI_Win_lock_all(0, w), "MPI_Win_lock_all");
    for (int k = 0; k < ITERS; k++) {
        int64_t v = 7000 * me + k, v0 = 9000 * me + k, back = -1, back0 = -1;
        ok(MPI_Put(&v, 1, MPI_INT64_T, right, P_ALL(rank), 1, MPI_INT64_T, w), "MPI_Put");
        ok(MPI_Put(&v0, 1, MPI_INT64_T, 0, P_ZERO(rank), 1, MPI_INT64_T, w), "MPI_Put (0)");
        if (k % 2) {
            ok(MPI_Win_flush_all(w), "MPI_Win_flush_all");
        } else {
            ok(MPI_Win_flush(right, w), "MPI_Win_flush");
            ok(MPI_Win_flush(0, w), "MPI_Win_flush");
        }
        ok(MPI_Get(&back, 1, MPI_INT64_T, right, P_ALL(rank), 1, MPI_INT64_T, w), "MPI_Get");
        ok(MPI_Get(&back0, 1, MPI_INT64_T, 0, P_ZERO(rank), 1, MPI_INT64_T, w), "MPI_Get (0)");
        ok(MPI_Win_flush_all(w), "MPI_Win_flush_all");
        nput += 0 == rank ? 1 : 2, nget += 0 == rank ? 1 : 2;
        if (back != v || back0 != v0) {
            die("a value got back after a flush in a lock_all epoch", (long) back);
        }
    }

    stage("passive: flush_local");
    unsigned char *src = malloc(PM);
    for (size_t i = 0; i < PM; i++) {
        src[i] = pat(rank, right, i, 2);
    }
    ok(MPI_Put(src, PM, MPI_BYTE, right, 0, PM, MPI_BYTE, w), "MPI_Put (flush_local)");
    ok(MPI_Win_flush_local(right, w), "MPI_Win_flush_local");
    memset(src, 0xee, PM); /* the origin buffer may be reused now: the target keeps the old */
    for (size_t i = 0; i < PM; i++) {
        src[i] = pat(rank, right, i, 3);
    }
    ok(MPI_Put(src, PM, MPI_BYTE, right, PM, PM, MPI_BYTE, w), "MPI_Put (flush_local_all)");
    ok(MPI_Win_flush_local_all(w), "MPI_Win_flush_local_all");
    memset(src, 0xdd, PM);
    nput += 2;
    ok(MPI_Win_unlock_all(w), "MPI_Win_unlock_all");
    MPI_Barrier(MPI_COMM_WORLD);

    stage("passive: check");
    ok(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, w), "MPI_Win_lock (own)");
    for (size_t i = 0; i < PM; i++) {
        if (base[i] != pat(left, rank, i, 2)) {
            die("a byte put before MPI_Win_flush_local differs at the target", (long) i);
        }
        if (base[PM + i] != pat(left, rank, i, 3)) {
            die("a byte put before MPI_Win_flush_local_all differs at the target", (long) i);
        }
    }
    int64_t ex, slot;
    memcpy(&ex, base + P_EXCL, 8);
    memcpy(&slot, base + P_SLOT(left), 8);
    ok(MPI_Win_unlock(rank, w), "MPI_Win_unlock (own)");
    if (slot != 1000 * (left + 1) + ITERS - 1) {
        die("the last value the left neighbour put under a shared lock", (long) slot);
    }
    if (0 == rank && ex != (int64_t) XLOCKS * size) {
        die("the counter under the exclusive lock (a lost update?)", (long) ex);
    }
    ok(MPI_Win_free(&w), "MPI_Win_free (passive)");
    free(src);
    fprintf(stderr, "ompi_osc_dyn: rank %d: passive ok: %ld puts, %ld gets, 0 atomics\n", rank,
            nput, nget);
}

/* ---- accumulate into rank 0 ---- */

enum { V = 5, REPS = 3, NREP = 65 }; /* vector length, rounds, REPLACE slots (ranks + 1) */
struct acc {
    int isum, ivec[V], irep[NREP], imax, iband;
    long lsum, lvec[V], lrep[NREP], lmax, lband;
    double dsum, dvec[V], drep[NREP], dmax;
};
#define AT(f) ((MPI_Aint) offsetof(struct acc, f))

static int m_int(int r)
{
    return -100000 + ((r * 37) % 11) * 1000 - r;
}
static long m_long(int r)
{
    return -(1L << 40) + ((r * 37) % 11) * (1L << 35) - r;
}
static double m_dbl(int r)
{
    return -1.5e10 + ((r * 37) % 11) * 0.125 - r * 0.5;
}
static long r_long(int r)
{
    return 0x0101010101010101L * (r + 1);
}
static double r_dbl(int r)
{
    return 1.0e300 / (r + 3);
}

static void accumulate(void)
{
    long natom = 0;
    struct acc *t = alloc(sizeof *t);
    if (size + 1 > NREP) {
        die("too many ranks for the REPLACE slots", size);
    }
    t->imax = INT_MIN;
    t->lmax = LONG_MIN;
    t->dmax = -DBL_MAX;
    t->iband = -1;
    t->lband = -1L;
    for (int i = 0; i < NREP; i++) {
        t->irep[i] = -1;
        t->lrep[i] = -1;
        t->drep[i] = -1.0;
    }
    MPI_Win w;
    stage("accumulate: MPI_Win_create");
    ok(MPI_Win_create(t, 0 == rank ? (MPI_Aint) sizeof *t : 0, 1, MPI_INFO_NULL, MPI_COMM_WORLD,
                      &w),
       "MPI_Win_create (accumulate)");
    MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN);
    const int r = rank;
    int iv[V];
    long lv[V];
    double dv[V];
    for (int j = 0; j < V; j++) {
        iv[j] = (r + 1) * (j + 1);
        lv[j] = ((long) (r + 1) << 33) + j;
        dv[j] = (r + 1) * 0.25 + j * 0.5;
    }
    const int i1 = r + 1, im = m_int(r), ib = ~(1 << r);
    const long l1 = (long) (r + 1) << 34, lm = m_long(r), lb = ~((1L << r) | (1L << (40 + r)));
    const long lr = r_long(r);
    const double d1 = (r + 1) * 0.125, dm = m_dbl(r), dr = r_dbl(r);
    const int ir = 1000 + r;
    stage("accumulate: lock_all");
    ok(MPI_Win_lock_all(0, w), "MPI_Win_lock_all (accumulate)");
    for (int k = 0; k < REPS; k++) {
        ok(MPI_Accumulate(&i1, 1, MPI_INT, 0, AT(isum), 1, MPI_INT, MPI_SUM, w), "SUM int");
        ok(MPI_Accumulate(&l1, 1, MPI_LONG, 0, AT(lsum), 1, MPI_LONG, MPI_SUM, w), "SUM long");
        ok(MPI_Accumulate(&d1, 1, MPI_DOUBLE, 0, AT(dsum), 1, MPI_DOUBLE, MPI_SUM, w),
           "SUM double");
        ok(MPI_Accumulate(iv, V, MPI_INT, 0, AT(ivec), V, MPI_INT, MPI_SUM, w), "SUM int[]");
        ok(MPI_Accumulate(lv, V, MPI_LONG, 0, AT(lvec), V, MPI_LONG, MPI_SUM, w), "SUM long[]");
        ok(MPI_Accumulate(dv, V, MPI_DOUBLE, 0, AT(dvec), V, MPI_DOUBLE, MPI_SUM, w),
           "SUM double[]");
        ok(MPI_Win_flush(0, w), "MPI_Win_flush");
        natom += 0 == rank ? 0 : 6;
    }
    ok(MPI_Accumulate(&im, 1, MPI_INT, 0, AT(imax), 1, MPI_INT, MPI_MAX, w), "MAX int");
    ok(MPI_Accumulate(&lm, 1, MPI_LONG, 0, AT(lmax), 1, MPI_LONG, MPI_MAX, w), "MAX long");
    ok(MPI_Accumulate(&dm, 1, MPI_DOUBLE, 0, AT(dmax), 1, MPI_DOUBLE, MPI_MAX, w), "MAX double");
    ok(MPI_Accumulate(&ib, 1, MPI_INT, 0, AT(iband), 1, MPI_INT, MPI_BAND, w), "BAND int");
    ok(MPI_Accumulate(&lb, 1, MPI_LONG, 0, AT(lband), 1, MPI_LONG, MPI_BAND, w), "BAND long");
    /* REPLACE: slot r + 1 is this rank's alone; slot 0 every rank's. */
    ok(MPI_Accumulate(&ir, 1, MPI_INT, 0, AT(irep) + 4 * (r + 1), 1, MPI_INT, MPI_REPLACE, w),
       "REPLACE int");
    ok(MPI_Accumulate(&lr, 1, MPI_LONG, 0, AT(lrep) + 8 * (r + 1), 1, MPI_LONG, MPI_REPLACE, w),
       "REPLACE long");
    ok(MPI_Accumulate(&dr, 1, MPI_DOUBLE, 0, AT(drep) + 8 * (r + 1), 1, MPI_DOUBLE, MPI_REPLACE,
                      w),
       "REPLACE double");
    ok(MPI_Accumulate(&ir, 1, MPI_INT, 0, AT(irep), 1, MPI_INT, MPI_REPLACE, w), "REPLACE int");
    ok(MPI_Accumulate(&lr, 1, MPI_LONG, 0, AT(lrep), 1, MPI_LONG, MPI_REPLACE, w), "REPLACE long");
    ok(MPI_Accumulate(&dr, 1, MPI_DOUBLE, 0, AT(drep), 1, MPI_DOUBLE, MPI_REPLACE, w),
       "REPLACE double");
    ok(MPI_Win_flush(0, w), "MPI_Win_flush");
    natom += 0 == rank ? 0 : 11;
    ok(MPI_Win_unlock_all(w), "MPI_Win_unlock_all (accumulate)");
    MPI_Barrier(MPI_COMM_WORLD);

    if (0 == rank) {
        stage("accumulate: check at rank 0");
        struct acc g;
        ok(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w), "MPI_Win_lock (own)");
        memcpy(&g, t, sizeof g);
        ok(MPI_Win_unlock(0, w), "MPI_Win_unlock (own)");
        const long tri = (long) size * (size + 1) / 2; /* sum of r + 1 over the ranks */
        int emax = INT_MIN, eband = -1;
        long lmax = LONG_MIN, lband = -1L;
        double dmax = -DBL_MAX;
        for (int q = 0; q < size; q++) {
            emax = m_int(q) > emax ? m_int(q) : emax;
            lmax = m_long(q) > lmax ? m_long(q) : lmax;
            dmax = m_dbl(q) > dmax ? m_dbl(q) : dmax;
            eband &= ~(1 << q);
            lband &= ~((1L << q) | (1L << (40 + q)));
        }
        if (g.isum != REPS * (int) tri || g.lsum != REPS * (tri << 34)
            || g.dsum != REPS * 0.125 * (double) tri) {
            die("MPI_SUM of scalars (int, long, double)", (long) g.isum);
        }
        for (int j = 0; j < V; j++) {
            if (g.ivec[j] != REPS * (int) tri * (j + 1)
                || g.lvec[j] != REPS * ((tri << 33) + (long) size * j)
                || g.dvec[j] != REPS * (0.25 * (double) tri + 0.5 * j * size)) {
                die("MPI_SUM of vectors (int, long, double), element", j);
            }
        }
        if (g.imax != emax || g.lmax != lmax || g.dmax != dmax) {
            die("MPI_MAX (int, long, double)", (long) g.imax);
        }
        if (g.iband != eband || g.lband != lband) {
            die("MPI_BAND (int, long)", (long) g.iband);
        }
        int any_i = 0, any_l = 0, any_d = 0;
        for (int q = 0; q < size; q++) {
            if (g.irep[q + 1] != 1000 + q || g.lrep[q + 1] != r_long(q)
                || g.drep[q + 1] != r_dbl(q)) {
                die("MPI_REPLACE of a rank's own slot", q);
            }
            any_i |= g.irep[0] == 1000 + q;
            any_l |= g.lrep[0] == r_long(q);
            any_d |= g.drep[0] == r_dbl(q);
        }
        if (!any_i || !any_l || !any_d) {
            die("MPI_REPLACE by every rank on one element: not one rank's value", g.irep[0]);
        }
        for (int q = size + 1; q < NREP; q++) {
            if (g.irep[q] != -1 || g.lrep[q] != -1 || g.drep[q] != -1.0) {
                die("a REPLACE slot of no rank was written", q);
            }
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ok(MPI_Win_free(&w), "MPI_Win_free (accumulate)");
    free(t);
    fprintf(stderr, "ompi_osc_dyn: rank %d: accumulate ok: 0 puts, 0 gets, %ld atomics\n", rank,
            natom);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;
    /* The stages named in argv (all without one), run in this order. */
    int run[3] = {argc <= 1, argc <= 1, argc <= 1};
    const char *names[3] = {"dynamic", "passive", "accumulate"};
    for (int i = 1; i < argc; i++) {
        int k = 0;
        while (k < 3 && 0 != strcmp(argv[i], names[k])) {
            k++;
        }
        if (3 == k) {
            die("unknown stage (dynamic, passive, accumulate): argument", i);
        }
        run[k] = 1;
    }
    if (run[0]) {
        dynamic();
    }
    if (run[1]) {
        passive();
    }
    if (run[2]) {
        accumulate();
    }
    printf("ompi_osc_dyn: rank %d of %d ok (window '%s')\n", rank, size, dyn_name);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
