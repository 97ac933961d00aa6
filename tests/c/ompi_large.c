/*
 * ompi_large.c: large messages for the oib BTL's RDMA path (tests/softroce_ompi_oib.rs). In
 * a ring, every rank sends a message of each size to the next rank while it receives one from
 * the previous rank, and checks every byte (the pattern names the sender, the size and the
 * offset). Sizes 1 MiB, 1 MiB + 5, 16 MiB and 64 MiB (above the eager limit: ob1's rendezvous,
 * which takes the BTL's get or put when it has them); the odd one lands at an odd address.
 * Then both neighbours at once (two receives, two sends outstanding) at 16 MiB. Prints
 * "ompi_large: rank R of N ok (B bytes checked)" and exits 0, or names the first wrong byte
 * and calls MPI_Abort.
 *
 * `ompi_large reuse`: the registration cache's cases instead, the same ring at 16 KiB (the
 * first rendezvous size), 64 KiB and 1 MiB, new contents every round: (1) the same two buffers
 * for 32 rounds (the cache may serve them); (2) 8 rounds where both buffers are unmapped after
 * each message and mapped again (mmap with the old address as hint: mostly the same address,
 * other pages); (3) 8 rounds of free and malloc again. A registration served for memory that
 * was unmapped would move the old pages' bytes (or land in them): every byte is checked.
 * Prints, before the "ok" line, "ompi_large: rank R reuse: X remapped buffers (Y at the same
 * address), Z from malloc again (W at the same address)" (buffers sent or received).
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS under -std=c99 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MIB ((size_t) 1 << 20)

/* Varied per message in `reuse` mode, so that stale memory never holds the expected bytes. */
static uint64_t salt;

static unsigned char pattern(int sender, size_t size, size_t i)
{
    uint64_t x = (uint64_t) i * 0x9e3779b97f4a7c15ull + (uint64_t) size * 31u
                 + (uint64_t) sender * 0xbf58476d1ce4e5b9ull + salt * 0x94d049bb133111ebull;
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

/* One ring message of n bytes from sbuf to the next rank, into rbuf from the previous one
 * (cleared first), checked; the salt names the round. */
static size_t ring(unsigned char *sbuf, unsigned char *rbuf, size_t n, int rank, int size,
                   uint64_t round, const char *what)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    salt = round;
    fill(sbuf, rank, n);
    memset(rbuf, 0, n);
    MPI_Request rq;
    MPI_Irecv(rbuf, (int) n, MPI_BYTE, prev, (int) (round % 30000), MPI_COMM_WORLD, &rq);
    MPI_Send(sbuf, (int) n, MPI_BYTE, next, (int) (round % 30000), MPI_COMM_WORLD);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    return check(rbuf, rank, prev, n, what);
}

static void *map(void *hint, size_t n, int rank)
{
    void *p = mmap(hint, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == p) {
        fprintf(stderr, "ompi_large: rank %d: mmap of %zu bytes failed\n", rank, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

static void *alloc(size_t n, int rank)
{
    void *p = malloc(n);
    if (NULL == p) {
        fprintf(stderr, "ompi_large: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

/* `reuse` mode (the file's comment): returns the bytes checked. */
static size_t reuse(int rank, int size)
{
    static const size_t sizes[] = {16 * 1024, 64 * 1024, MIB};
    enum { NSIZES = sizeof sizes / sizeof sizes[0], SAME = 32, REMAP = 8 };
    size_t checked = 0;
    uint64_t round = 1;
    unsigned long remapped = 0, remapped_same = 0, malloced = 0, malloced_same = 0;

    unsigned char *sbuf = alloc(MIB, rank), *rbuf = alloc(MIB, rank);
    for (int r = 0; r < SAME; r++) {
        for (int k = 0; k < NSIZES; k++) {
            checked += ring(sbuf, rbuf, sizes[k], rank, size, round++, "same buffer");
        }
    }
    free(sbuf);
    free(rbuf);

    void *shint[NSIZES] = {NULL}, *rhint[NSIZES] = {NULL};
    for (int r = 0; r < REMAP; r++) {
        for (int k = 0; k < NSIZES; k++) {
            size_t n = sizes[k];
            unsigned char *s = map(shint[k], n, rank), *d = map(rhint[k], n, rank);
            remapped_same += (s == shint[k]) + (d == rhint[k]);
            remapped += 2;
            checked += ring(s, d, n, rank, size, round++, "remapped buffer");
            shint[k] = s;
            rhint[k] = d;
            munmap(s, n);
            munmap(d, n);
        }
    }

    void *sprev[NSIZES] = {NULL}, *rprev[NSIZES] = {NULL};
    for (int r = 0; r < REMAP; r++) {
        for (int k = 0; k < NSIZES; k++) {
            size_t n = sizes[k];
            unsigned char *s = alloc(n, rank), *d = alloc(n, rank);
            malloced_same += ((void *) s == sprev[k]) + ((void *) d == rprev[k]);
            malloced += 2;
            checked += ring(s, d, n, rank, size, round++, "buffer from malloc again");
            sprev[k] = s;
            rprev[k] = d;
            free(s);
            free(d);
        }
    }
    printf("ompi_large: rank %d reuse: %lu remapped buffers (%lu at the same address), %lu "
           "from malloc again (%lu at the same address)\n", rank, remapped, remapped_same,
           malloced, malloced_same);
    return checked;
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {MIB, MIB + 5, 16 * MIB, 64 * MIB};
    int rank, size;
    size_t checked = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1 && 0 == strcmp(argv[1], "reuse")) {
        checked = reuse(rank, size);
        MPI_Barrier(MPI_COMM_WORLD);
        printf("ompi_large: rank %d of %d ok (%zu bytes checked)\n", rank, size, checked);
        fflush(stdout);
        MPI_Finalize();
        return 0;
    }
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
