/*
 * ompi_large.c: large messages for the oib BTL's RDMA path (tests/softroce_ompi_oib.rs). In
 * a ring, every rank sends a message of each size to the next rank while it receives one from
 * the previous rank, and checks every byte (the pattern names the sender, the size and the
 * offset). Sizes 1 MiB, 1 MiB + 5, 16 MiB and 64 MiB (above the eager limit: ob1's rendezvous,
 * which takes the BTL's get or put when it has them); the odd one lands at an odd address.
 * Then both neighbours at once (two receives, two sends outstanding) at 16 MiB. Prints
 * "ompi_large: rank R of N ok (B bytes checked)" and exits 0, or names the first wrong byte
 * and calls MPI_Abort.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t) 1 << 20)

static unsigned char pattern(int sender, size_t size, size_t i)
{
    uint64_t x = (uint64_t) i * 0x9e3779b97f4a7c15ull + (uint64_t) size * 31u
                 + (uint64_t) sender * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 31;
    return (unsigned char) (x ^ (x >> 13));
}

static void fill(unsigned char *p, int sender, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = pattern(sender, n, i);
    }
}

static size_t check(const unsigned char *p, int rank, int sender, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != pattern(sender, n, i)) {
            fprintf(stderr, "ompi_large: rank %d: %s of %zu bytes from rank %d: byte %zu is %u, "
                    "want %u\n", rank, what, n, sender, i, p[i], pattern(sender, n, i));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {MIB, MIB + 5, 16 * MIB, 64 * MIB};
    int rank, size;
    size_t checked = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    unsigned char *sbuf = malloc(64 * MIB + 16), *rbuf = malloc(64 * MIB + 16);
    if (NULL == sbuf || NULL == rbuf) {
        fprintf(stderr, "ompi_large: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        size_t off = n % 2; /* the odd size goes from and to odd addresses */
        fill(sbuf + off, rank, n);
        memset(rbuf, 0, n + off);
        MPI_Request rq;
        MPI_Irecv(rbuf + off, (int) n, MPI_BYTE, prev, (int) k, MPI_COMM_WORLD, &rq);
        MPI_Send(sbuf + off, (int) n, MPI_BYTE, next, (int) k, MPI_COMM_WORLD);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        checked += check(rbuf + off, rank, prev, n, "ring message");
    }

    /* Both neighbours at once: 16 MiB each way to each. */
    if (size > 2) {
        size_t n = 16 * MIB;
        unsigned char *r2 = malloc(n), *s2 = malloc(n);
        if (NULL == r2 || NULL == s2) {
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        fill(sbuf, rank, n);
        fill(s2, rank, n);
        MPI_Request rq[4];
        MPI_Irecv(rbuf, (int) n, MPI_BYTE, prev, 100, MPI_COMM_WORLD, &rq[0]);
        MPI_Irecv(r2, (int) n, MPI_BYTE, next, 101, MPI_COMM_WORLD, &rq[1]);
        MPI_Isend(sbuf, (int) n, MPI_BYTE, next, 100, MPI_COMM_WORLD, &rq[2]);
        MPI_Isend(s2, (int) n, MPI_BYTE, prev, 101, MPI_COMM_WORLD, &rq[3]);
        MPI_Waitall(4, rq, MPI_STATUSES_IGNORE);
        checked += check(rbuf, rank, prev, n, "message from the previous rank");
        checked += check(r2, rank, next, n, "message from the next rank");
        free(r2);
        free(s2);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    printf("ompi_large: rank %d of %d ok (%zu bytes checked)\n", rank, size, checked);
    fflush(stdout);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
