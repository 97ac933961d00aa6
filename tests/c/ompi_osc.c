/*
 * ompi_osc.c: one-sided MPI on a window of MPI_Win_allocate (issue 30's try for the next
 * issue: does osc rdma run over oib?). Every rank, under a passive-target lock_all epoch:
 *   - MPI_Put of N bytes into its own window and into its right neighbour's, MPI_Get of both
 *     back after a flush, every byte checked;
 *   - MPI_Fetch_and_op (MPI_SUM, 64-bit) ITERS times on a counter in rank 0's window and on
 *     its own: after a barrier every old value and the final counters are checked.
 * argv[1] "own": only the fetch-and-ops on the own counter; "peer": rank 0 leaves counter 0
 * to the others (try aids: docs/OMPI.md, "What does not work yet"). Each stage is named on
 * stderr as it starts. Prints "ompi_osc: rank R of S ok (window '<name>')" (osc rdma names
 * its windows "rdma window N") and exits 0, or names what failed and calls MPI_Abort.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 100003
#define ITERS 16
#define WIN (2 * N + 64)
#define CNT (2 * N + 8) /* 8-byte aligned: two counters */

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
    MPI_Win_unlock(rank, win);
    if (c1 != ITERS || (0 == rank && c0 != (own_only ? (peer_only ? (int64_t) ITERS * (size - 1) : 0) : (int64_t) ITERS * size))) {
        die("final counters", (long) c0);
    }
    char name[64] = "?";
    /* Which osc component took the window (Open MPI names windows "rdma window N", ...). */
    int len = 0;
    MPI_Win_get_name(win, name, &len);
    MPI_Win_free(&win);
    printf("ompi_osc: rank %d of %d ok (window '%s')\n", rank, size, name);
    fflush(stdout);
    free(src);
    free(back);
    MPI_Finalize();
    return 0;
}
