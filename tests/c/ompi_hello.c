/*
 * ompi_hello.c: an MPI program for the oib BTL tests (tests/ompi_oib.rs). Every rank sends a
 * message of each size to the next rank and receives one from the previous rank, checking
 * every byte (the pattern names the sender, the size and the offset); then 64 non-blocking
 * messages of mixed sizes outstanding at once each way, checked the same way; then a barrier
 * and an allreduce of the ranks. Prints "ompi_hello: rank R of N ok" and exits 0, or names the first
 * wrong byte and exits 1 (MPI_Abort).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned char pattern(int sender, size_t size, size_t i)
{
    return (unsigned char) ((size_t) sender * 131u + size * 7u + i * 13u + (i >> 8));
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {0, 1, 8, 100, 4096, 8192, 12000, 65536, 300000, 4u << 20};
    int rank, size;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        unsigned char *out = malloc(n + 1), *in = malloc(n + 1);
        if (!out || !in) {
            fprintf(stderr, "ompi_hello: rank %d: out of memory for %zu bytes\n", rank, n);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (size_t i = 0; i < n; i++) {
            out[i] = pattern(rank, n, i);
            in[i] = 0;
        }
        MPI_Status st;
        MPI_Sendrecv(out, (int) n, MPI_BYTE, next, (int) k, in, (int) n, MPI_BYTE, prev, (int) k,
                     MPI_COMM_WORLD, &st);
        int got;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if ((size_t) got != n) {
            fprintf(stderr, "ompi_hello: rank %d: %d bytes from rank %d, expected %zu\n", rank,
                    got, prev, n);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (size_t i = 0; i < n; i++) {
            if (in[i] != pattern(prev, n, i)) {
                fprintf(stderr,
                        "ompi_hello: rank %d: byte %zu of %zu from rank %d is %u, expected %u\n",
                        rank, i, n, prev, in[i], pattern(prev, n, i));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        free(out);
        free(in);
    }
    enum { MANY = 64 };
    unsigned char *outs[MANY], *ins[MANY];
    MPI_Request reqs[2 * MANY];
    for (int k = 0; k < MANY; k++) {
        size_t n = ((size_t) k * 9973u) % 40000u;
        outs[k] = malloc(n + 1);
        ins[k] = malloc(n + 1);
        if (!outs[k] || !ins[k]) {
            fprintf(stderr, "ompi_hello: rank %d: out of memory\n", rank);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (size_t i = 0; i < n; i++) {
            outs[k][i] = pattern(rank, n, i);
            ins[k][i] = 0;
        }
        MPI_Irecv(ins[k], (int) n, MPI_BYTE, prev, 1000 + k, MPI_COMM_WORLD, &reqs[k]);
    }
    for (int k = 0; k < MANY; k++) {
        size_t n = ((size_t) k * 9973u) % 40000u;
        MPI_Isend(outs[k], (int) n, MPI_BYTE, next, 1000 + k, MPI_COMM_WORLD, &reqs[MANY + k]);
    }
    MPI_Waitall(2 * MANY, reqs, MPI_STATUSES_IGNORE);
    for (int k = 0; k < MANY; k++) {
        size_t n = ((size_t) k * 9973u) % 40000u;
        for (size_t i = 0; i < n; i++) {
            if (ins[k][i] != pattern(prev, n, i)) {
                fprintf(stderr,
                        "ompi_hello: rank %d: non-blocking message %d: byte %zu of %zu from "
                        "rank %d is %u, expected %u\n",
                        rank, k, i, n, prev, ins[k][i], pattern(prev, n, i));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        free(outs[k]);
        free(ins[k]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    long sum = 0, mine = rank;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum != (long) size * (size - 1) / 2) {
        fprintf(stderr, "ompi_hello: rank %d: allreduce gave %ld, expected %ld\n", rank, sum,
                (long) size * (size - 1) / 2);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    printf("ompi_hello: rank %d of %d ok\n", rank, size);
    MPI_Finalize();
    return 0;
}
