/*
 * ompi_matrix.c: the MPI test matrix of the oib BTL (tests/softroce_ompi_oib.rs,
 * tests/softroce_slurm_hosts.rs; docs/OMPI.md). Subtests are chosen by argv and run in the
 * order given, in one MPI job:
 *
 *   eager=N     the BTL's eager limit the sizes straddle (default 8192; an option, not a test)
 *   p2p[=MAX]   point-to-point, every size from 0 B to MAX (default 64 MiB) around the eager
 *               limit (its -1/+0/+1 and ob1's match header's), trains and rendezvous; in a ring,
 *               blocking Send/Recv, Sendrecv, Isend/Irecv posted first, and Isend received
 *               after a barrier (unexpected); Sendrecv and unexpected only up to 1 MiB
 *   many        256 Isend and 256 Irecv in flight with every peer at once, mixed sizes, tags
 *               reused (matching order checked), half the receives posted after the sends
 *   probe       rank 0 receives from every other rank with MPI_ANY_SOURCE/MPI_ANY_TAG, then
 *               with MPI_Probe and MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG) and a receive of
 *               the probed size; each source's messages in its order
 *   coll        bcast (rotating roots), allreduce (sum) and alltoall of several sizes
 *   threads     asks for MPI_THREAD_MULTIPLE (fails if not granted); 4 threads per rank, each
 *               exchanging with its counterpart on every other rank (two on their own
 *               communicators, also reducing on them, two on MPI_COMM_WORLD with their own
 *               tags; sizes from 0 B to 1 MiB)
 *   abort       the last rank calls MPI_Abort(MPI_COMM_WORLD, 7) while the others wait in a
 *               receive that never matches
 *   kill        the last rank kills itself (SIGKILL) in the middle of a rendezvous send to
 *               rank 0 while the others wait for it
 *   killsend    the same, but rank 0 (on the same node: it watches the victim's pid in
 *               /proc) waits until the victim is gone, then sends small messages to it until
 *               the job ends (run with orte_abort_on_non_zero_status 0, so that the BTL's
 *               error callback for that endpoint, not mpirun, ends it). Waiting matters: a
 *               peer that dies while nothing is in flight to it is only noticed when
 *               something is (no keepalive).
 *   killstall   the last rank stops itself (SIGSTOP: its device still acknowledges what
 *               arrives) and rank 0 sends it more small messages than it has credits for,
 *               then kills it (SIGKILL) and waits for those sends: they wait for credits with
 *               nothing of rank 0's in flight, so only the transport's probe of a peer it
 *               waits on finds it dead (run with orte_abort_on_non_zero_status 0: the error
 *               callback ends the job; before the probe this hung).
 *
 * Every received byte is checked (mpi_check.h). Prints "ompi_matrix: SUBTEST rank R of N ok"
 * per subtest passed; a failure prints "ompi_matrix: FAIL ..." and aborts with code 3.
 */
#define _POSIX_C_SOURCE 200809L /* kill, nanosleep */
#include "mpi_check.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

static int rank, size;
static size_t eager = 8192;

/* The first wrong thing ends the job; nothing to clean up after. */
static void p2p(size_t max)
{
    /* ob1's match header is 16 bytes: its payload limit is eager - 16 */
    const size_t sizes[] = {0,
                            1,
                            7,
                            8,
                            eager - 17,
                            eager - 16,
                            eager - 15,
                            eager - 1,
                            eager,
                            eager + 1,
                            12 * 1024,
                            64 * 1024,
                            1u << 20,
                            16u << 20,
                            64u << 20};
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        if (n > max)
            continue;
        unsigned char *out = mc_alloc(n), *in = mc_alloc(n);
        for (int mode = 0; mode < 4; mode++) {
            if ((mode == 1 || mode == 3) && n > (1u << 20))
                continue;
            unsigned msg = (unsigned) k * 4 + (unsigned) mode;
            int tag = (int) msg;
            mc_fill(out, n, rank, msg);
            memset(in, 0, n);
            MPI_Status st;
            MPI_Request rq[2];
            const char *what = "?";
            switch (mode) {
            case 0:
                what = "blocking Send/Recv";
                if (size % 2 == 0 && rank % 2 == 0) {
                    MPI_Send(out, (int) n, MPI_BYTE, next, tag, MPI_COMM_WORLD);
                    MPI_Recv(in, (int) n, MPI_BYTE, prev, tag, MPI_COMM_WORLD, &st);
                } else if (size % 2 == 0) {
                    MPI_Recv(in, (int) n, MPI_BYTE, prev, tag, MPI_COMM_WORLD, &st);
                    MPI_Send(out, (int) n, MPI_BYTE, next, tag, MPI_COMM_WORLD);
                } else {
                    MPI_Sendrecv(out, (int) n, MPI_BYTE, next, tag, in, (int) n, MPI_BYTE, prev,
                                 tag, MPI_COMM_WORLD, &st);
                }
                break;
            case 1:
                what = "Sendrecv";
                MPI_Sendrecv(out, (int) n, MPI_BYTE, next, tag, in, (int) n, MPI_BYTE, prev, tag,
                             MPI_COMM_WORLD, &st);
                break;
            case 2:
                what = "Irecv/Isend";
                MPI_Irecv(in, (int) n, MPI_BYTE, prev, tag, MPI_COMM_WORLD, &rq[0]);
                MPI_Isend(out, (int) n, MPI_BYTE, next, tag, MPI_COMM_WORLD, &rq[1]);
                MPI_Wait(&rq[0], &st);
                MPI_Wait(&rq[1], MPI_STATUS_IGNORE);
                break;
            default:
                what = "Isend, then Recv after a barrier (unexpected)";
                MPI_Isend(out, (int) n, MPI_BYTE, next, tag, MPI_COMM_WORLD, &rq[1]);
                MPI_Barrier(MPI_COMM_WORLD);
                MPI_Recv(in, (int) n, MPI_BYTE, prev, tag, MPI_COMM_WORLD, &st);
                MPI_Wait(&rq[1], MPI_STATUS_IGNORE);
                break;
            }
            mc_check(in, n, mc_count(&st), prev, msg, what);
        }
        free(out);
        free(in);
    }
}

/* 256 messages each way with every peer in flight at once. */
static void many(void)
{
    enum { MANY = 256 };
    int peers = size - 1;
    unsigned char **outs = mc_alloc(sizeof(void *) * (size_t) peers * MANY);
    unsigned char **ins = mc_alloc(sizeof(void *) * (size_t) peers * MANY);
    MPI_Request *rq = mc_alloc(sizeof(MPI_Request) * 2 * (size_t) peers * MANY);
    MPI_Status *st = mc_alloc(sizeof(MPI_Status) * 2 * (size_t) peers * MANY);
#define MANY_SIZE(k) ((k) % 16 == 15 ? 65536 + ((size_t) (k) * 7919u) % 70000u : ((size_t) (k) * 9973u) % 9000u)
#define IDX(p, k) ((size_t) (p) * MANY + (size_t) (k))
    for (int half = 0; half < 2; half++) {
        /* even k: receives posted before the sends; odd k: after */
        if (half == 1) {
            for (int i = 0; i < peers; i++) {
                int p = (rank + 1 + i) % size;
                for (int k = 0; k < MANY; k++) {
                    size_t n = MANY_SIZE(k);
                    outs[IDX(i, k)] = mc_alloc(n);
                    mc_fill(outs[IDX(i, k)], n, rank, (unsigned) k);
                    MPI_Isend(outs[IDX(i, k)], (int) n, MPI_BYTE, p, k % 32, MPI_COMM_WORLD,
                              &rq[(size_t) peers * MANY + IDX(i, k)]);
                }
            }
        }
        for (int i = 0; i < peers; i++) {
            int p = (rank + 1 + i) % size;
            for (int k = half; k < MANY; k += 2) {
                size_t n = MANY_SIZE(k);
                ins[IDX(i, k)] = mc_alloc(n);
                memset(ins[IDX(i, k)], 0, n);
                MPI_Irecv(ins[IDX(i, k)], (int) n, MPI_BYTE, p, k % 32, MPI_COMM_WORLD,
                          &rq[IDX(i, k)]);
            }
        }
    }
    MPI_Waitall(2 * peers * MANY, rq, st);
    for (int i = 0; i < peers; i++) {
        int p = (rank + 1 + i) % size;
        for (int k = 0; k < MANY; k++) {
            mc_check(ins[IDX(i, k)], MANY_SIZE(k), mc_count(&st[IDX(i, k)]), p, (unsigned) k,
                     "256 in flight");
            free(ins[IDX(i, k)]);
            free(outs[IDX(i, k)]);
        }
    }
    free(outs);
    free(ins);
    free(rq);
    free(st);
#undef IDX
#undef MANY_SIZE
}

/* Message j of sender r in the probe subtest: its size and tag. */
static size_t probe_size(int r, int j)
{
    return j % 10 == 9 ? 30000 + (size_t) r * 1000 : ((size_t) j * 37u + (size_t) r) % 9000u;
}

static void probe(void)
{
    enum { M = 40 };
    for (int part = 0; part < 2; part++) {
        unsigned base = part == 0 ? 0 : 1000;
        if (rank != 0) {
            unsigned char *out[M];
            MPI_Request rq[M];
            for (int j = 0; j < M; j++) {
                size_t n = probe_size(rank, j);
                out[j] = mc_alloc(n);
                mc_fill(out[j], n, rank, base + (unsigned) j);
                MPI_Isend(out[j], (int) n, MPI_BYTE, 0, 100 + j % 5, MPI_COMM_WORLD, &rq[j]);
            }
            MPI_Waitall(M, rq, MPI_STATUSES_IGNORE);
            for (int j = 0; j < M; j++)
                free(out[j]);
        } else {
            int *next = mc_alloc(sizeof(int) * (size_t) size);
            memset(next, 0, sizeof(int) * (size_t) size);
            unsigned char *in = mc_alloc(40000 + (size_t) size * 1000);
            for (int got = 0; got < (size - 1) * M; got++) {
                MPI_Status st;
                int src, tag, count;
                unsigned char *buf = in;
                const char *what;
                if (part == 0) {
                    what = "MPI_Recv(MPI_ANY_SOURCE, MPI_ANY_TAG)";
                    MPI_Recv(in, 40000 + size * 1000, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG,
                             MPI_COMM_WORLD, &st);
                    src = st.MPI_SOURCE;
                    tag = st.MPI_TAG;
                    count = mc_count(&st);
                } else {
                    if (got % 2 == 0) {
                        what = "MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG)";
                        MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
                    } else {
                        what = "MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG)";
                        int flag = 0;
                        while (!flag)
                            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
                    }
                    src = st.MPI_SOURCE;
                    tag = st.MPI_TAG;
                    count = mc_count(&st);
                    if (src <= 0 || src >= size || count < 0)
                        mc_fail("%s: source %d, %d bytes", what, src, count);
                    buf = mc_alloc((size_t) count);
                    MPI_Status st2;
                    MPI_Recv(buf, count, MPI_BYTE, src, tag, MPI_COMM_WORLD, &st2);
                    if (mc_count(&st2) != count || st2.MPI_TAG != tag || st2.MPI_SOURCE != src)
                        mc_fail("%s: probed %d bytes tag %d from %d, received %d tag %d from %d",
                                what, count, tag, src, mc_count(&st2), st2.MPI_TAG,
                                st2.MPI_SOURCE);
                }
                if (src <= 0 || src >= size || next[src] >= M)
                    mc_fail("%s: a message from rank %d (tag %d), unexpected", what, src, tag);
                int j = next[src]++;
                if (tag != 100 + j % 5)
                    mc_fail("%s: message %d from rank %d has tag %d, expected %d (order)", what,
                            j, src, tag, 100 + j % 5);
                mc_check(buf, probe_size(src, j), count, src, base + (unsigned) j, what);
                if (buf != in)
                    free(buf);
            }
            int flag = 1;
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            if (flag)
                mc_fail("a message is left after every expected one was received");
            free(in);
            free(next);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

static void coll(void)
{
    const size_t bsizes[] = {1, 100, 8191, 65536, 1u << 20};
    for (size_t k = 0; k < sizeof bsizes / sizeof bsizes[0]; k++) {
        size_t n = bsizes[k];
        int root = (int) k % size;
        unsigned char *b = mc_alloc(n);
        if (rank == root)
            mc_fill(b, n, root, 5000 + (unsigned) k);
        else
            memset(b, 0, n);
        MPI_Bcast(b, (int) n, MPI_BYTE, root, MPI_COMM_WORLD);
        mc_check(b, n, (int) n, root, 5000 + (unsigned) k, "MPI_Bcast");
        free(b);
    }
    const int counts[] = {1, 1000, 100000};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        int c = counts[k];
        int64_t *in = mc_alloc(sizeof(int64_t) * (size_t) c);
        int64_t *out = mc_alloc(sizeof(int64_t) * (size_t) c);
        for (int i = 0; i < c; i++) {
            in[i] = (int64_t) (rank + 1) * (i + 1) + (int64_t) k;
            out[i] = -1;
        }
        MPI_Allreduce(in, out, c, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < c; i++) {
            int64_t want = (int64_t) (i + 1) * size * (size + 1) / 2 + (int64_t) k * size;
            if (out[i] != want)
                mc_fail("MPI_Allreduce of %d: element %d is %lld, expected %lld", c, i,
                        (long long) out[i], (long long) want);
        }
        free(in);
        free(out);
    }
    const size_t asizes[] = {1, 1000, 12000, 100000};
    for (size_t k = 0; k < sizeof asizes / sizeof asizes[0]; k++) {
        size_t n = asizes[k];
        unsigned char *out = mc_alloc(n * (size_t) size), *in = mc_alloc(n * (size_t) size);
        for (int p = 0; p < size; p++)
            mc_fill(out + n * (size_t) p, n, rank, 6000 + (unsigned) k * 64 + (unsigned) p);
        memset(in, 0, n * (size_t) size);
        MPI_Alltoall(out, (int) n, MPI_BYTE, in, (int) n, MPI_BYTE, MPI_COMM_WORLD);
        for (int p = 0; p < size; p++)
            mc_check(in + n * (size_t) p, n, (int) n, p,
                     6000 + (unsigned) k * 64 + (unsigned) rank, "MPI_Alltoall");
        free(out);
        free(in);
    }
}

enum { THREADS = 4, ROUNDS = 12 };
static MPI_Comm thread_comm[THREADS];

static size_t thread_size(int t, int round)
{
    if (round == t)
        return (1u << 20) + (size_t) t; /* one rendezvous of 1 MiB per thread, in turn */
    return (round * 3 + t) % 4 == 3 ? 70000 + (size_t) t * 1000
                                    : ((size_t) round * 997u + (size_t) t * 131u) % 9000u;
}

/* Threads on their own communicators also reduce on them, at once with the others' traffic. */
static void thread_allreduce(int t, int round, MPI_Comm comm)
{
    enum { C = 1000 };
    int64_t in[C], out[C];
    for (int i = 0; i < C; i++) {
        in[i] = (int64_t) (rank + 1) * (i + 1) + t * 100 + round;
        out[i] = -1;
    }
    MPI_Allreduce(in, out, C, MPI_INT64_T, MPI_SUM, comm);
    for (int i = 0; i < C; i++) {
        int64_t want = (int64_t) (i + 1) * size * (size + 1) / 2 + (int64_t) (t * 100 + round) * size;
        if (out[i] != want)
            mc_fail("thread %d: MPI_Allreduce on its communicator, round %d: element %d is %lld, "
                    "expected %lld",
                    t, round, i, (long long) out[i], (long long) want);
    }
}

static void *thread_main(void *arg)
{
    int t = (int) (intptr_t) arg;
    /* threads 0 and 1 on their own communicators, 2 and 3 on MPI_COMM_WORLD, own tags */
    MPI_Comm comm = t < 2 ? thread_comm[t] : MPI_COMM_WORLD;
    int tag = t < 2 ? 0 : 10 + t;
    int peers = size - 1;
    unsigned char **out = mc_alloc(sizeof(void *) * (size_t) peers);
    unsigned char **in = mc_alloc(sizeof(void *) * (size_t) peers);
    MPI_Request *rq = mc_alloc(sizeof(MPI_Request) * 2 * (size_t) peers);
    MPI_Status *st = mc_alloc(sizeof(MPI_Status) * 2 * (size_t) peers);
    for (int round = 0; round < ROUNDS; round++) {
        size_t n = thread_size(t, round);
        unsigned msg = 7000 + (unsigned) t * 100 + (unsigned) round;
        for (int i = 0; i < peers; i++) {
            int p = (rank + 1 + i) % size;
            in[i] = mc_alloc(n);
            out[i] = mc_alloc(n);
            memset(in[i], 0, n);
            mc_fill(out[i], n, rank, msg);
            MPI_Irecv(in[i], (int) n, MPI_BYTE, p, tag, comm, &rq[i]);
        }
        for (int i = 0; i < peers; i++) {
            int p = (rank + 1 + i) % size;
            MPI_Isend(out[i], (int) n, MPI_BYTE, p, tag, comm, &rq[peers + i]);
        }
        MPI_Waitall(2 * peers, rq, st);
        for (int i = 0; i < peers; i++) {
            int p = (rank + 1 + i) % size;
            if (st[i].MPI_SOURCE != p || st[i].MPI_TAG != tag)
                mc_fail("thread %d: a message from rank %d tag %d, expected rank %d tag %d", t,
                        st[i].MPI_SOURCE, st[i].MPI_TAG, p, tag);
            mc_check(in[i], n, mc_count(&st[i]), p, msg,
                     t < 2 ? "thread on its own communicator" : "thread on MPI_COMM_WORLD");
            free(in[i]);
            free(out[i]);
        }
        if (t < 2)
            thread_allreduce(t, round, comm);
    }
    free(out);
    free(in);
    free(rq);
    free(st);
    return NULL;
}

static void threads(void)
{
    pthread_t th[THREADS];
    for (int t = 0; t < 2; t++)
        MPI_Comm_dup(MPI_COMM_WORLD, &thread_comm[t]);
    for (int t = 0; t < THREADS; t++)
        if (pthread_create(&th[t], NULL, thread_main, (void *) (intptr_t) t) != 0)
            mc_fail("pthread_create failed");
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++)
        MPI_Comm_free(&thread_comm[t]);
}

static void do_abort(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    unsigned char out[64], in[64];
    MPI_Status st;
    mc_fill(out, sizeof out, rank, 8000);
    MPI_Sendrecv(out, 64, MPI_BYTE, next, 1, in, 64, MPI_BYTE, prev, 1, MPI_COMM_WORLD, &st);
    mc_check(in, 64, mc_count(&st), prev, 8000, "before MPI_Abort");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == size - 1) {
        printf("ompi_matrix: abort: rank %d calls MPI_Abort(MPI_COMM_WORLD, 7)\n", rank);
        fflush(stdout);
        MPI_Abort(MPI_COMM_WORLD, 7);
    }
    MPI_Recv(in, 64, MPI_BYTE, size - 1, 999, MPI_COMM_WORLD, &st);
    mc_fail("a receive that nothing sends completed");
}

/* The state letter of process `pid` ('X' when it is gone), from /proc/PID/stat. */
static char proc_state(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    char state = 'X';
    if (NULL != f) {
        if (1 != fscanf(f, "%*d (%*[^)]) %c", &state)) {
            state = '?';
        }
        fclose(f);
    }
    return state;
}

/* Waits (up to 60 s) until process `pid` is in one of `states` (a zombie's queue pairs are
   released: it has exited). */
static void wait_for_state(int pid, const char *states, const char *what)
{
    for (int tries = 0;; tries++) {
        char state = proc_state(pid);
        if (NULL != strchr(states, state)) {
            return;
        }
        if (tries > 600) {
            mc_fail("the victim (pid %d) is not %s after 60 s (state %c)", pid, what, state);
        }
        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
    }
}

static void do_kill(int send_after)
{
    enum { EAGER = 3 };
    size_t big = 4u << 20;
    int victim = size - 1;
    MPI_Barrier(MPI_COMM_WORLD);
    if (send_after && rank == victim) {
        int pid = (int) getpid();
        MPI_Send(&pid, 1, MPI_INT, 0, 5, MPI_COMM_WORLD);
    }
    int victim_pid = 0;
    if (send_after && rank == 0) {
        MPI_Recv(&victim_pid, 1, MPI_INT, victim, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    if (rank == victim) {
        unsigned char small[100];
        for (int j = 0; j < EAGER; j++) {
            mc_fill(small, sizeof small, rank, 9000 + (unsigned) j);
            MPI_Send(small, (int) sizeof small, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
        unsigned char *b = mc_alloc(big);
        mc_fill(b, big, rank, 9100);
        MPI_Request rq;
        MPI_Isend(b, (int) big, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &rq);
        for (int i = 0; i < 100; i++) {
            int done = 0;
            MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
        }
        printf("ompi_matrix: kill: rank %d kills itself (SIGKILL) in a 4 MiB send\n", rank);
        fflush(stdout);
        raise(SIGKILL);
    }
    if (rank == 0) {
        unsigned char small[100];
        MPI_Status st;
        for (int j = 0; j < EAGER; j++) {
            MPI_Recv(small, (int) sizeof small, MPI_BYTE, victim, 1, MPI_COMM_WORLD, &st);
            mc_check(small, sizeof small, mc_count(&st), victim, 9000 + (unsigned) j, "kill");
        }
        printf("ompi_matrix: kill: rank 0 received the victim's first messages\n");
        fflush(stdout);
        if (send_after) {
            wait_for_state(victim_pid, "ZX", "gone");
            printf("ompi_matrix: kill: rank 0 sends to the dead rank %d\n", victim);
            fflush(stdout);
            /* to the dead rank until a send fails and the error callback ends the job */
            for (long i = 0; i < 100000000L; i++) {
                MPI_Send(small, (int) sizeof small, MPI_BYTE, victim, 4, MPI_COMM_WORLD);
            }
            mc_fail("100000000 sends to the killed rank went through");
        }
        unsigned char *b = mc_alloc(big);
        MPI_Recv(b, (int) big, MPI_BYTE, victim, 2, MPI_COMM_WORLD, &st);
        /* a whole message from a rank that killed itself before its send completed locally
           may still have arrived; wait for the job to end either way */
        mc_check(b, big, mc_count(&st), victim, 9100, "kill");
    }
    unsigned char x;
    MPI_Recv(&x, 1, MPI_BYTE, victim, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    mc_fail("a receive from the killed rank completed");
}

/* See "killstall" above. */
static void do_killstall(void)
{
    enum { SENDS = 4096 };
    int victim = size - 1;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == victim) {
        int pid = (int) getpid();
        MPI_Send(&pid, 1, MPI_INT, 0, 5, MPI_COMM_WORLD);
        printf("ompi_matrix: kill: rank %d stops itself (SIGSTOP)\n", rank);
        fflush(stdout);
        raise(SIGSTOP);
        mc_fail("the stopped rank went on");
    }
    if (rank == 0) {
        int victim_pid = 0;
        MPI_Recv(&victim_pid, 1, MPI_INT, victim, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        wait_for_state(victim_pid, "Tt", "stopped");
        static unsigned char small[100];
        static MPI_Request rq[SENDS];
        for (int i = 0; i < SENDS; i++) {
            MPI_Isend(small, (int) sizeof small, MPI_BYTE, victim, 6, MPI_COMM_WORLD, &rq[i]);
        }
        /* the credits go to the stopped rank's device; the rest wait for credits */
        int done = 0;
        for (int i = 0; i < 200; i++) {
            MPI_Testall(SENDS, rq, &done, MPI_STATUSES_IGNORE);
            nanosleep(&(struct timespec){.tv_nsec = 1000 * 1000}, NULL);
        }
        if (done) {
            mc_fail("%d sends to a stopped rank completed", (int) SENDS);
        }
        printf("ompi_matrix: kill: rank 0 kills the stopped rank %d\n", victim);
        fflush(stdout);
        kill(victim_pid, SIGKILL);
        wait_for_state(victim_pid, "ZX", "gone");
        printf("ompi_matrix: kill: rank 0 waits for its sends to the dead rank %d\n", victim);
        fflush(stdout);
        MPI_Waitall(SENDS, rq, MPI_STATUSES_IGNORE);
        mc_fail("sends waiting for a killed rank's credits completed");
    }
    unsigned char x;
    MPI_Recv(&x, 1, MPI_BYTE, victim, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    mc_fail("a receive from the killed rank completed");
}

int main(int argc, char **argv)
{
    int want_threads = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "threads") == 0)
            want_threads = 1;
    if (want_threads) {
        int provided = -1;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        mc_subtest = "threads";
        if (provided != MPI_THREAD_MULTIPLE)
            mc_fail("MPI_THREAD_MULTIPLE (%d) asked, %d granted", MPI_THREAD_MULTIPLE,
                    provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        mc_subtest = "init";
        mc_fail("needs at least 2 ranks, has %d", size);
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t) (eq - a) : strlen(a);
        unsigned long long v = eq ? strtoull(eq + 1, NULL, 0) : 0;
        if (len == 5 && strncmp(a, "eager", 5) == 0) {
            if (v < 64)
                mc_fail("eager=%llu: too small", v);
            eager = (size_t) v;
            continue;
        }
        if (len == 3 && strncmp(a, "p2p", 3) == 0) {
            mc_subtest = "p2p";
            p2p(eq ? (size_t) v : (size_t) 64 << 20);
        } else if (strcmp(a, "many") == 0) {
            mc_subtest = "many";
            many();
        } else if (strcmp(a, "probe") == 0) {
            mc_subtest = "probe";
            probe();
        } else if (strcmp(a, "coll") == 0) {
            mc_subtest = "coll";
            coll();
        } else if (strcmp(a, "threads") == 0) {
            mc_subtest = "threads";
            threads();
        } else if (strcmp(a, "abort") == 0) {
            mc_subtest = "abort";
            do_abort();
        } else if (strcmp(a, "kill") == 0) {
            mc_subtest = "kill";
            do_kill(0);
        } else if (strcmp(a, "killsend") == 0) {
            mc_subtest = "kill";
            do_kill(1);
        } else if (strcmp(a, "killstall") == 0) {
            mc_subtest = "kill";
            do_killstall();
        } else {
            mc_subtest = "args";
            mc_fail("unknown subtest '%s'", a);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        mc_ok(rank, size);
    }
    MPI_Finalize();
    return 0;
}
