/*
 * ompi_osc.c: one-sided MPI on a window of MPI_Win_allocate (osc rdma over oib, issue 31).
 * Every rank, under a passive-target lock_all epoch:
 *   - MPI_Put of N bytes into its own window and into its right neighbour's, MPI_Get of both
 *     back after a flush, every byte checked;
 *   - MPI_Fetch_and_op (MPI_SUM, 64-bit) ITERS times on a counter in rank 0's window and on
 *     its own: after a barrier every old value and the final counters are checked. These two
 *     counters sit at offset 2N + 8 (and + 16), deliberately NOT 8-byte aligned: an atomic
 *     verbs cannot do, so osc rdma must take its other way (before the fix, oib refused it
 *     with OPAL_ERR_NOT_AVAILABLE and osc rdma retried for ever holding rank 0's accumulate
 *     lock: docs/OMPI.md, "One-sided MPI");
 *   - contention (8-byte aligned words at rank 0): CONT MPI_Fetch_and_op SUM +1 per rank on
 *     one counter, every old value fetched exactly once over all ranks (gathered at rank 0)
 *     and the exact sum; a lock built on MPI_Compare_and_swap (0 -> rank + 1, released by
 *     CAS back to 0 with the holder checked) guarding a critical section LOCKS times per rank:
 *     inside, a holder count by MPI_Fetch_and_op must go 0 -> 1 -> 0 (never two holders) and
 *     a counter is read by MPI_Get and written back + 1 by MPI_Put (a lost update shows in
 *     its final value); MPI_Fetch_and_op MPI_MAX and MPI_Accumulate SUM and MAX (operations
 *     oib refuses or does with its non-fetching add), final values checked.
 * Then a window of MPI_Win_create (created_window: fence, MPI_Rput/MPI_Rget,
 * MPI_Get_accumulate, post/start/complete/wait).
 * argv[1] "own": only the fetch-and-ops on the own counter; "peer": rank 0 leaves counter 0
 * to the others (try aids); both skip the contention stage and the created window;
 * "allocated" skips only the created window. Each stage is named on stderr as
 * it starts. Prints "ompi_osc: rank R of S ok (window '<name>')" (osc rdma names its windows
 * "rdma window N") and exits 0, or names what failed and calls MPI_Abort.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 100003
#define ITERS 16
#define WIN (2 * N + 130) /* a multiple of 8: osc sm packs the ranks' windows together */
#define CNT (2 * N + 8) /* two counters, NOT 8-byte aligned (2N + 8 = 6 mod 8) */
#define AL (2 * N + 32)  /* 8-byte aligned words of the contention stage (W_*) */
#define CONT 100         /* fetch-and-ops per rank on one counter */
#define LOCKS 12         /* critical sections per rank */
enum { W_SUM, W_LOCK, W_INSIDE, W_CS, W_FMAX, W_ASUM, W_AMAX, W_COUNT };

static int rank, size;

static void die(const char *what, long v)
{
    fprintf(stderr, "ompi_osc: rank %d: %s (%ld)\n", rank, what, v);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Where the program is (stderr, at once): a hang shows its last stage. */
static void stage(const char *what)
{
    fprintf(stderr, "ompi_osc: rank %d: %s\n", rank, what);
    fflush(stderr);
}

static unsigned char pat(int from, int to, size_t i)
{
    return (unsigned char) (i * 7u + (size_t) from * 31u + (size_t) to * 57u + (i >> 8));
}

/* Displacement of word w of the contention stage (8-byte aligned when the window is). */
static MPI_Aint word(int w)
{
    return AL + 8 * (MPI_Aint) w;
}

static void fop(int64_t v, int64_t *old, MPI_Aint at, MPI_Op op, MPI_Win win, const char *what)
{
    int rc = MPI_Fetch_and_op(&v, old, MPI_INT64_T, 0, at, op, win);
    if (MPI_SUCCESS != rc) {
        die(what, rc);
    }
    MPI_Win_flush(0, win);
}

/* The contention stage (in a lock_all epoch; every word lives at rank 0). */
static void contention(MPI_Win win)
{
    int rc;
    stage("contention: fetch_and_op sum");
    int64_t *olds = malloc(sizeof(int64_t) * CONT);
    for (int i = 0; i < CONT; i++) {
        fop(1, &olds[i], word(W_SUM), MPI_SUM, win, "MPI_Fetch_and_op SUM (contention)");
        if (i > 0 && olds[i] <= olds[i - 1]) {
            die("contention: old values of the shared counter not increasing", i);
        }
    }
    int64_t *all = 0 == rank ? malloc(sizeof(int64_t) * CONT * size) : NULL;
    MPI_Gather(olds, CONT, MPI_INT64_T, all, CONT, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (0 == rank) {
        /* Every value 0 .. CONT * size - 1 fetched exactly once. */
        char *seen = calloc((size_t) CONT * size, 1);
        for (long i = 0; i < (long) CONT * size; i++) {
            if (all[i] < 0 || all[i] >= (int64_t) CONT * size || seen[all[i]]++) {
                die("contention: an old value out of range or fetched twice", (long) all[i]);
            }
        }
        free(seen);
        free(all);
    }
    free(olds);

    stage("contention: compare_and_swap lock");
    const int64_t zero = 0, me = rank + 1;
    long busy = 0;
    for (int i = 0; i < LOCKS; i++) {
        int64_t old = -1;
        for (;;) {
            if (MPI_SUCCESS
                != (rc = MPI_Compare_and_swap(&me, &zero, &old, MPI_INT64_T, 0, word(W_LOCK),
                                              win))) {
                die("MPI_Compare_and_swap (take)", rc);
            }
            MPI_Win_flush(0, win);
            if (0 == old) {
                break;
            }
            if (old < 1 || old > size || old == me) {
                die("the lock word holds no rank (or ours while we wait)", (long) old);
            }
            busy++;
        }
        int64_t in = -1, cs = -1;
        fop(1, &in, word(W_INSIDE), MPI_SUM, win, "MPI_Fetch_and_op (enter)");
        if (0 != in) {
            die("two holders in the critical section", (long) in);
        }
        if (MPI_SUCCESS != (rc = MPI_Get(&cs, 1, MPI_INT64_T, 0, word(W_CS), 1, MPI_INT64_T, win))) {
            die("MPI_Get (critical section)", rc);
        }
        MPI_Win_flush(0, win);
        cs++;
        if (MPI_SUCCESS != (rc = MPI_Put(&cs, 1, MPI_INT64_T, 0, word(W_CS), 1, MPI_INT64_T, win))) {
            die("MPI_Put (critical section)", rc);
        }
        MPI_Win_flush(0, win);
        fop(-1, &in, word(W_INSIDE), MPI_SUM, win, "MPI_Fetch_and_op (leave)");
        if (1 != in) {
            die("the holder count on leaving", (long) in);
        }
        if (MPI_SUCCESS
            != (rc = MPI_Compare_and_swap(&zero, &me, &old, MPI_INT64_T, 0, word(W_LOCK), win))) {
            die("MPI_Compare_and_swap (release)", rc);
        }
        MPI_Win_flush(0, win);
        if (old != me) {
            die("the lock was not ours at release", (long) old);
        }
    }
    fprintf(stderr, "ompi_osc: rank %d: lock: %d sections, %ld busy tries\n", rank, LOCKS, busy);

    stage("contention: max and accumulate");
    for (int i = 0; i < 4; i++) {
        int64_t old, v = 1000 * rank + i, one = 1;
        fop(v, &old, word(W_FMAX), MPI_MAX, win, "MPI_Fetch_and_op MAX");
        if (MPI_SUCCESS != (rc = MPI_Accumulate(&one, 1, MPI_INT64_T, 0, word(W_ASUM), 1,
                                                MPI_INT64_T, MPI_SUM, win))
            || MPI_SUCCESS != (rc = MPI_Accumulate(&v, 1, MPI_INT64_T, 0, word(W_AMAX), 1,
                                                   MPI_INT64_T, MPI_MAX, win))) {
            die("MPI_Accumulate", rc);
        }
        MPI_Win_flush(0, win);
    }
}

/* Rank 0 checks the contention stage's words in its window (after every rank finished). */
static void contention_check(const unsigned char *base)
{
    int64_t w[W_COUNT];
    memcpy(w, base + AL, sizeof w);
    const int64_t top = 1000 * (size - 1) + 3;
    if (w[W_SUM] != (int64_t) CONT * size) {
        die("contention: the shared counter's sum", (long) w[W_SUM]);
    }
    if (0 != w[W_LOCK] || 0 != w[W_INSIDE]) {
        die("the lock or the holder count not free at the end", (long) (w[W_LOCK] + w[W_INSIDE]));
    }
    if (w[W_CS] != (int64_t) LOCKS * size) {
        die("the critical section's counter (a lost update?)", (long) w[W_CS]);
    }
    if (w[W_FMAX] != top || w[W_AMAX] != top || w[W_ASUM] != 4 * (int64_t) size) {
        die("MPI_MAX or MPI_Accumulate results", (long) w[W_FMAX]);
    }
    fprintf(stderr, "ompi_osc: rank 0: contention ok (%d ranks)\n", size);
}

/* A window of MPI_Win_create on the caller's memory (osc rdma registers it through the BTL):
 * fence epochs (a put to the right neighbour, got back), MPI_Rput/MPI_Rget completed by
 * MPI_Wait, MPI_Get_accumulate (SUM, 64-bit) on a counter at rank 0 under lock_all, and a
 * post/start/complete/wait epoch with both neighbours; every byte and value checked. */
static void created_window(void)
{
    enum { M = 4096, ACC = 2 * M, PSCW = 2 * M + 8, ROUNDS = 8 };
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    size_t bytes = 2 * M + 64;
    unsigned char *buf = calloc(1, bytes), src[M], back[M];
    MPI_Win w;
    int rc;
    stage("MPI_Win_create");
    if (NULL == buf) {
        die("calloc", 0);
    }
    if (MPI_SUCCESS != (rc = MPI_Win_create(buf, (MPI_Aint) bytes, 1, MPI_INFO_NULL,
                                            MPI_COMM_WORLD, &w))) {
        die("MPI_Win_create", rc);
    }
    MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN);
    for (size_t i = 0; i < M; i++) {
        src[i] = (unsigned char) (pat(rank, right, i) ^ 0x5a);
    }
    stage("created window: fence put");
    MPI_Win_fence(0, w);
    if (MPI_SUCCESS != (rc = MPI_Put(src, M, MPI_BYTE, right, 0, M, MPI_BYTE, w))) {
        die("MPI_Put in a fence epoch", rc);
    }
    MPI_Win_fence(0, w);
    for (size_t i = 0; i < M; i++) {
        if (buf[i] != (unsigned char) (pat(left, rank, i) ^ 0x5a)) {
            die("a byte the left neighbour put in a fence epoch differs", (long) i);
        }
    }
    stage("created window: fence get");
    if (MPI_SUCCESS != (rc = MPI_Get(back, M, MPI_BYTE, right, 0, M, MPI_BYTE, w))) {
        die("MPI_Get in a fence epoch", rc);
    }
    MPI_Win_fence(0, w);
    if (0 != memcmp(back, src, M)) {
        die("the bytes got back in a fence epoch differ", 0);
    }
    stage("created window: rput and rget");
    MPI_Win_lock_all(0, w);
    MPI_Request r;
    for (size_t i = 0; i < M; i++) {
        src[i] ^= 0xff;
    }
    if (MPI_SUCCESS != (rc = MPI_Rput(src, M, MPI_BYTE, right, M, M, MPI_BYTE, w, &r))) {
        die("MPI_Rput", rc);
    }
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Win_flush(right, w);
    memset(back, 0, M);
    if (MPI_SUCCESS != (rc = MPI_Rget(back, M, MPI_BYTE, right, M, M, MPI_BYTE, w, &r))) {
        die("MPI_Rget", rc);
    }
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    if (0 != memcmp(back, src, M)) {
        die("the bytes of MPI_Rget differ from those of MPI_Rput", 0);
    }
    stage("created window: get_accumulate");
    int64_t add = rank + 1, old = -1, last = -1;
    for (int k = 0; k < ROUNDS; k++) {
        if (MPI_SUCCESS != (rc = MPI_Get_accumulate(&add, 1, MPI_INT64_T, &old, 1, MPI_INT64_T,
                                                    0, ACC, 1, MPI_INT64_T, MPI_SUM, w))) {
            die("MPI_Get_accumulate", rc);
        }
        MPI_Win_flush(0, w);
        if (old <= last || old < 0) {
            die("an old value of MPI_Get_accumulate did not grow", (long) old);
        }
        last = old;
    }
    MPI_Win_unlock_all(w);
    MPI_Barrier(MPI_COMM_WORLD);
    if (0 == rank) {
        int64_t sum;
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w);
        memcpy(&sum, buf + ACC, 8);
        MPI_Win_unlock(0, w);
        if (sum != (int64_t) ROUNDS * size * (size + 1) / 2) {
            die("the sum of MPI_Get_accumulate", (long) sum);
        }
    }
    stage("created window: post/start/complete/wait");
    MPI_Group world, nb;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int peers[2] = {left, right};
    MPI_Group_incl(world, left == right ? 1 : 2, peers, &nb);
    int64_t me = rank;
    MPI_Win_post(nb, 0, w);
    MPI_Win_start(nb, 0, w);
    if (MPI_SUCCESS != (rc = MPI_Put(&me, 1, MPI_INT64_T, right, PSCW, 1, MPI_INT64_T, w))) {
        die("MPI_Put in a post/start epoch", rc);
    }
    MPI_Win_complete(w);
    MPI_Win_wait(w);
    int64_t got;
    memcpy(&got, buf + PSCW, 8);
    if (got != left) {
        die("the value the left neighbour put in a post/start epoch", (long) got);
    }
    MPI_Group_free(&nb);
    MPI_Group_free(&world);
    MPI_Win_free(&w);
    free(buf);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    unsigned char *base = NULL;
    MPI_Win win;
    stage("MPI_Win_allocate");
    int rc = MPI_Win_allocate(WIN, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    if (MPI_SUCCESS != rc) {
        die("MPI_Win_allocate", rc);
    }
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    if (0 == rank && 0 != ((uintptr_t) base & 7)) {
        /* The contention stage's words (at rank 0) must be 8-byte aligned. */
        die("rank 0's window base is not 8-byte aligned", (long) ((uintptr_t) base & 7));
    }
    memset(base, 0, WIN);
    MPI_Barrier(MPI_COMM_WORLD);

    unsigned char *src = malloc(2 * N), *back = malloc(2 * N);
    for (size_t i = 0; i < N; i++) {
        src[i] = pat(rank, rank, i);
        src[N + i] = pat(rank, right, i);
    }
    stage("lock_all");
    MPI_Win_lock_all(0, win);
    stage("put");
    /* [0, N) of each window: its owner's own put; [N, 2N): its left neighbour's. */
    if (MPI_SUCCESS != (rc = MPI_Put(src, N, MPI_BYTE, rank, 0, N, MPI_BYTE, win))) {
        die("MPI_Put to self", rc);
    }
    if (MPI_SUCCESS != (rc = MPI_Put(src + N, N, MPI_BYTE, right, N, N, MPI_BYTE, win))) {
        die("MPI_Put to the right neighbour", rc);
    }
    stage("flush after put");
    MPI_Win_flush_all(win);
    stage("get");
    if (MPI_SUCCESS != (rc = MPI_Get(back, N, MPI_BYTE, rank, 0, N, MPI_BYTE, win))
        || MPI_SUCCESS != (rc = MPI_Get(back + N, N, MPI_BYTE, right, N, N, MPI_BYTE, win))) {
        die("MPI_Get", rc);
    }
    MPI_Win_flush_all(win);
    for (size_t i = 0; i < N; i++) {
        if (back[i] != pat(rank, rank, i)) {
            die("a byte got back from the own window differs", (long) i);
        }
        if (back[N + i] != pat(rank, right, i)) {
            die("a byte got back from the right neighbour's window differs", (long) i);
        }
    }

    stage("fetch_and_op");
    /* Fetch-and-op: counter 0 at rank 0 (everybody), counter 1 in the own window. */
    int64_t one = 1, old0[ITERS], old1[ITERS];
    /* argv[1]: "own" runs only the fetch-and-ops on the own counter (a try aid). */
    int own_only = argc > 1 && 0 == strcmp(argv[1], "own");
    /* "peer": rank 0 leaves its counter 0 to the others (no own access to it). */
    int peer_only = argc > 1 && 0 == strcmp(argv[1], "peer");
    /* "allocated": every stage but the created window (osc components other than rdma
     * cannot make one: MPI_Win_create fails with "invalid window" without osc rdma). */
    int full = argc <= 1 || 0 == strcmp(argv[1], "allocated");
    if (peer_only && 0 == rank) {
        own_only = 1;
    }
    for (int i = 0; i < ITERS; i++) {
        old0[i] = i;
        if ((!own_only
             && MPI_SUCCESS
                    != (rc = MPI_Fetch_and_op(&one, &old0[i], MPI_INT64_T, 0, CNT, MPI_SUM,
                                              win)))
            || MPI_SUCCESS
                   != (rc = MPI_Fetch_and_op(&one, &old1[i], MPI_INT64_T, rank, CNT + 8, MPI_SUM,
                                             win))) {
            die("MPI_Fetch_and_op", rc);
        }
        MPI_Win_flush_all(win);
        if (0 == i) {
            stage("first fetch_and_op done");
        }
        if (!own_only && i > 0 && old0[i] <= old0[i - 1]) {
            die("old values of rank 0's counter not increasing", i);
        }
        if (old1[i] != i) {
            die("an old value of the own counter", (long) old1[i]);
        }
    }
    if (full) {
        contention(win);
    }
    stage("unlock_all");
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win);
    for (size_t i = 0; i < N; i++) {
        if (base[i] != pat(rank, rank, i)) {
            die("a byte of the own put differs in the window", (long) i);
        }
        if (base[N + i] != pat(left, rank, i)) {
            die("a byte of the left neighbour's put differs in the window", (long) i);
        }
    }
    int64_t c0, c1;
    memcpy(&c0, base + CNT, 8);
    memcpy(&c1, base + CNT + 8, 8);
    if (0 == rank && full) {
        contention_check(base);
    }
    MPI_Win_unlock(rank, win);
    if (c1 != ITERS || (0 == rank && c0 != (own_only ? (peer_only ? (int64_t) ITERS * (size - 1) : 0) : (int64_t) ITERS * size))) {
        die("final counters", (long) c0);
    }
    char name[64] = "?";
    /* Which osc component took the window (Open MPI names windows "rdma window N", ...). */
    int len = 0;
    MPI_Win_get_name(win, name, &len);
    MPI_Win_free(&win);
    if (argc <= 1) {
        created_window();
    }
    printf("ompi_osc: rank %d of %d ok (window '%s')\n", rank, size, name);
    fflush(stdout);
    free(src);
    free(back);
    MPI_Finalize();
    return 0;
}
