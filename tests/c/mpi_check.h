/*
 * mpi_check.h: the checking helpers of the MPI test programs of the oib BTL tests
 * (tests/c/ompi_matrix.c, run by tests/softroce_ompi_oib.rs). Every message's content is a
 * pattern of its sender, a message number and the offset, so a byte delivered to the wrong
 * receive, from the wrong message, at the wrong place or not at all is found. A failure names
 * the program's subtest, the rank, the peer, the message and the first wrong byte on stderr,
 * then ends the job with MPI_Abort(MPI_COMM_WORLD, MC_FAIL) (the tests tell it apart from the
 * abort subtest's own code).
 */
#ifndef MPI_CHECK_H
#define MPI_CHECK_H

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The exit code of a failed check (MPI_Abort's errorcode). */
#define MC_FAIL 3

/* The subtest running, for messages. */
static const char *mc_subtest = "init";

static void mc_fail(const char *fmt, ...)
{
    int rank = -1;
    va_list ap;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "ompi_matrix: FAIL %s: rank %d: ", mc_subtest, rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, MC_FAIL);
    exit(MC_FAIL);
}

static void *mc_alloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        mc_fail("out of memory for %zu bytes", n);
    return p;
}

/* The 8 bytes at word `w` of message `msg` from `sender`. */
static inline uint64_t mc_word(int sender, unsigned msg, size_t w)
{
    uint64_t x = ((uint64_t) (unsigned) sender << 40) ^ ((uint64_t) msg << 8) ^ 0x5bd1e995u;
    x += (uint64_t) w * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 32);
}

/* The byte at `offset` of message `msg` from `sender`. */
static inline unsigned char mc_byte(int sender, unsigned msg, size_t offset)
{
    uint64_t x = mc_word(sender, msg, offset / 8);
    return (unsigned char) (x >> (8 * (offset % 8)));
}

/* Fills `buf` with message `msg` of `sender` (little-endian words; x86 and arm alike here). */
static void mc_fill(void *buf, size_t n, int sender, unsigned msg)
{
    unsigned char *b = buf;
    size_t words = n / 8;
    for (size_t w = 0; w < words; w++) {
        uint64_t x = mc_word(sender, msg, w);
        memcpy(b + 8 * w, &x, 8);
    }
    for (size_t i = 8 * words; i < n; i++)
        b[i] = mc_byte(sender, msg, i);
}

/* Checks every byte of a received message: `n` bytes expected and `got` received. */
static void mc_check(const void *buf, size_t n, int got, int sender, unsigned msg, const char *what)
{
    const unsigned char *b = buf;
    if (got < 0 || (size_t) got != n)
        mc_fail("%s: message %u from rank %d has %d bytes, expected %zu", what, msg, sender, got,
                n);
    size_t words = n / 8;
    for (size_t w = 0; w < words; w++) {
        uint64_t x = mc_word(sender, msg, w), y;
        memcpy(&y, b + 8 * w, 8);
        if (x != y) {
            for (size_t i = 8 * w; i < 8 * w + 8; i++)
                if (b[i] != mc_byte(sender, msg, i))
                    mc_fail("%s: message %u from rank %d: byte %zu of %zu is %u, expected %u",
                            what, msg, sender, i, n, b[i], mc_byte(sender, msg, i));
        }
    }
    for (size_t i = 8 * words; i < n; i++)
        if (b[i] != mc_byte(sender, msg, i))
            mc_fail("%s: message %u from rank %d: byte %zu of %zu is %u, expected %u", what, msg,
                    sender, i, n, b[i], mc_byte(sender, msg, i));
}

/* The byte count of a status. */
static int mc_count(const MPI_Status *st)
{
    int got = -1;
    MPI_Get_count(st, MPI_BYTE, &got);
    return got;
}

/* A subtest passed on this rank: the line the tests look for. */
static void mc_ok(int rank, int size)
{
    printf("ompi_matrix: %s rank %d of %d ok\n", mc_subtest, rank, size);
    fflush(stdout);
}

#endif
