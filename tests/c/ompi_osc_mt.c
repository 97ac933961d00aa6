/*
 * ompi_osc_mt.c: one-sided MPI under contention, from ranks and from threads (osc rdma over
 * oib, issue 31; tests/softroce_ompi_oib.rs, tests/softroce_slurm_hosts.rs; docs/OMPI.md).
 *
 * Every "worker" (the rank itself, or each of its threads) works on words of one window at
 * rank 0 (MPI_Win_allocate's, or with window=create MPI_Win_create's on memory the program
 * allocates), in one MPI_Win_lock_all epoch opened by the main thread:
 *   - FOPS MPI_Fetch_and_op (MPI_SUM, MPI_INT64_T, + INC) on one counter, each completed by
 *     MPI_Win_flush: a worker's old values grow and are multiples of INC; rank 0 gathers every
 *     old value of every worker and checks that they are exactly 0, INC, ..., (N - 1) * INC
 *     (N = all fetch-and-ops of the job: none lost, none fetched twice), and that the counter
 *     ends at N * INC;
 *   - a lock built on MPI_Compare_and_swap (0 -> worker + 1, released by a compare-and-swap
 *     back to 0 that must find the worker's value) guarding a critical section LOCKS times per
 *     worker; inside, a holder count by MPI_Fetch_and_op must go 0 -> 1 and back (never two
 *     holders), and a second counter is read by MPI_Get and written back + 1 by MPI_Put (a
 *     lost update, i.e. two holders at once, shows in its final value, LOCKS * workers).
 * A worker spreads its critical sections evenly among its fetch-and-ops, so the workers of a
 * rank (and the ranks) do both at the same time on the same window.
 *
 * Arguments (name=value, any order):
 *   threads=T  0 (default): MPI_Init, the main thread is the rank's one worker; T >= 1:
 *              MPI_Init_thread asking MPI_THREAD_MULTIPLE (a failure if not provided) and T
 *              threads per rank, every one a worker, all in the main thread's lock_all epoch
 *   fops=F     fetch-and-ops per worker (default 25000)
 *   locks=L    critical sections per worker (default 100)
 *   window=W   allocate (default): MPI_Win_allocate (on one node osc rdma serves it in shared
 *              memory, no BTL involved); create: MPI_Win_create on malloc'd memory (another
 *              process's memory even on one node: its puts, gets and atomics go through the BTL)
 *
 * Each stage is named on stderr with the seconds it took (printed, never checked). Prints
 * "ompi_osc_mt: rank 0: contention ok (...)" and "ompi_osc_mt: rank R of S ok (T threads,
 * window '<name>')" (osc rdma names its windows "rdma window N") and exits 0; any wrong value
 * prints "ompi_osc_mt: FAIL rank R ..." and ends the job with MPI_Abort(MPI_COMM_WORLD, 3).
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c99 */

#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INC 3 /* the fetch-and-op's addend: old values are multiples of it */
enum { W_SUM, W_LOCK, W_INSIDE, W_CS, W_COUNT };

static int rank, size, nthreads, workers_per_rank;
static long fops = 25000, locks = 100;
static int create_window; /* window=create: MPI_Win_create, else MPI_Win_allocate */
static MPI_Win win;
static int64_t *olds; /* this rank's old values: worker w's at [w * fops, (w + 1) * fops) */

static void die(int worker, const char *what, long v)
{
    fprintf(stderr, "ompi_osc_mt: FAIL rank %d worker %d: %s (%ld)\n", rank, worker, what, v);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);
}

static void stage(const char *what, double since)
{
    fprintf(stderr, "ompi_osc_mt: rank %d: %s (%.1f s)\n", rank, what, MPI_Wtime() - since);
    fflush(stderr);
}

static MPI_Aint word(int w)
{
    return 8 * (MPI_Aint) w;
}

/* MPI_Fetch_and_op of `v` on word `w` at rank 0, completed; returns the old value. */
static int64_t fop(int worker, int64_t v, int w, const char *what)
{
    int64_t old = -1;
    int rc = MPI_Fetch_and_op(&v, &old, MPI_INT64_T, 0, word(w), MPI_SUM, win);
    if (MPI_SUCCESS != rc) {
        die(worker, what, rc);
    }
    if (MPI_SUCCESS != (rc = MPI_Win_flush(0, win))) {
        die(worker, "MPI_Win_flush after MPI_Fetch_and_op", rc);
    }
    return old;
}

static int64_t cas(int worker, int64_t value, int64_t compare, const char *what)
{
    int64_t old = -1;
    int rc = MPI_Compare_and_swap(&value, &compare, &old, MPI_INT64_T, 0, word(W_LOCK), win);
    if (MPI_SUCCESS != rc) {
        die(worker, what, rc);
    }
    if (MPI_SUCCESS != (rc = MPI_Win_flush(0, win))) {
        die(worker, "MPI_Win_flush after MPI_Compare_and_swap", rc);
    }
    return old;
}

/* One worker (global number `worker`, local number `local`): its fetch-and-ops with its
 * critical sections spread among them. Returns the compare-and-swaps that found the lock taken. */
static long work(int worker, int local)
{
    int64_t *mine = olds + (size_t) local * fops;
    const int64_t me = worker + 1, total = (int64_t) size * workers_per_rank;
    /* A critical section after every `every` fetch-and-ops, the rest after the last. */
    const long every = locks > 0 && fops >= locks ? fops / locks : fops + 1;
    long busy = 0, done = 0;
    for (long i = 0; i < fops || done < locks; i++) {
        if (i < fops) {
            mine[i] = fop(worker, INC, W_SUM, "MPI_Fetch_and_op SUM on the shared counter");
            if (mine[i] < 0 || 0 != mine[i] % INC || (i > 0 && mine[i] <= mine[i - 1])) {
                die(worker, "an old value of the shared counter not a growing multiple of INC",
                    (long) mine[i]);
            }
            if (0 != (i + 1) % every || done >= locks) {
                continue;
            }
        }
        done++;
        /* A taken lock: try again after 1 us, doubling up to 1 ms (spinning waiters would
         * starve the holder of the guest's CPUs and of rank 0's NIC). */
        long pause_ns = 1000;
        for (;;) {
            int64_t old = cas(worker, me, 0, "MPI_Compare_and_swap (take the lock)");
            if (0 == old) {
                break;
            }
            if (old < 1 || old > total || old == me) {
                die(worker, "the lock word holds no other worker while we wait", (long) old);
            }
            busy++;
            struct timespec ts = {0, pause_ns};
            nanosleep(&ts, NULL);
            pause_ns = pause_ns < 1000000 ? 2 * pause_ns : 1000000;
        }
        int64_t in = fop(worker, 1, W_INSIDE, "MPI_Fetch_and_op (enter)");
        if (0 != in) {
            die(worker, "two holders in the critical section (holder count on entry)",
                (long) in);
        }
        int64_t cs = -1;
        int rc = MPI_Get(&cs, 1, MPI_INT64_T, 0, word(W_CS), 1, MPI_INT64_T, win);
        if (MPI_SUCCESS != rc || MPI_SUCCESS != (rc = MPI_Win_flush(0, win))) {
            die(worker, "MPI_Get of the critical section's counter", rc);
        }
        if (cs < 0 || cs >= (int64_t) locks * total) {
            die(worker, "the critical section's counter out of range", (long) cs);
        }
        cs++;
        rc = MPI_Put(&cs, 1, MPI_INT64_T, 0, word(W_CS), 1, MPI_INT64_T, win);
        if (MPI_SUCCESS != rc || MPI_SUCCESS != (rc = MPI_Win_flush(0, win))) {
            die(worker, "MPI_Put of the critical section's counter", rc);
        }
        in = fop(worker, -1, W_INSIDE, "MPI_Fetch_and_op (leave)");
        if (1 != in) {
            die(worker, "two holders in the critical section (holder count on leaving)",
                (long) in);
        }
        int64_t old = cas(worker, 0, me, "MPI_Compare_and_swap (release the lock)");
        if (old != me) {
            die(worker, "the lock was not ours at its release", (long) old);
        }
    }
    return busy;
}

static long busy_of[64];

static void *thread_main(void *arg)
{
    int local = (int) (intptr_t) arg;
    busy_of[local] = work(rank * workers_per_rank + local, local);
    return NULL;
}

static long arg_num(const char *a, const char *name, long lo, long hi)
{
    size_t n = strlen(name);
    if (0 != strncmp(a, name, n) || '=' != a[n]) {
        return -1;
    }
    char *end = NULL;
    long v = strtol(a + n + 1, &end, 10);
    if (end == a + n + 1 || '\0' != *end || v < lo || v > hi) {
        fprintf(stderr, "ompi_osc_mt: bad argument '%s' (%s from %ld to %ld)\n", a, name, lo,
                hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    long t = 0;
    for (int i = 1; i < argc; i++) {
        long v;
        if ((v = arg_num(argv[i], "threads", 0, 64)) >= 0) {
            t = v;
        } else if ((v = arg_num(argv[i], "fops", 0, 10000000)) >= 0) {
            fops = v;
        } else if ((v = arg_num(argv[i], "locks", 0, 10000000)) >= 0) {
            locks = v;
        } else if (0 == strcmp(argv[i], "window=create")) {
            create_window = 1;
        } else if (0 == strcmp(argv[i], "window=allocate")) {
            create_window = 0;
        } else {
            fprintf(stderr, "ompi_osc_mt: unknown argument '%s' (threads=T fops=F locks=L "
                    "window=allocate|create)\n", argv[i]);
            return 2;
        }
    }
    nthreads = (int) t;
    workers_per_rank = nthreads > 0 ? nthreads : 1;
    if (nthreads > 0) {
        int provided = -1;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (MPI_THREAD_MULTIPLE != provided) {
            die(-1, "MPI_THREAD_MULTIPLE not provided (provided is)", provided);
        }
    } else {
        MPI_Init(&argc, &argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int64_t *base = NULL;
    int rc;
    if (create_window) {
        base = calloc(W_COUNT, 8);
        if (NULL == base) {
            die(-1, "calloc of the window's memory", W_COUNT);
        }
        rc = MPI_Win_create(base, 8 * W_COUNT, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    } else {
        rc = MPI_Win_allocate(8 * W_COUNT, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    }
    if (MPI_SUCCESS != rc) {
        die(-1, create_window ? "MPI_Win_create" : "MPI_Win_allocate", rc);
    }
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
    memset(base, 0, 8 * W_COUNT);
    MPI_Win_unlock(rank, win);
    olds = malloc(sizeof(int64_t) * (size_t) (fops > 0 ? fops : 1) * workers_per_rank);
    if (NULL == olds) {
        die(-1, "malloc of the old values", fops);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    double t0 = MPI_Wtime();
    if (MPI_SUCCESS != (rc = MPI_Win_lock_all(0, win))) {
        die(-1, "MPI_Win_lock_all", rc);
    }
    long busy = 0;
    if (0 == nthreads) {
        busy = work(rank, 0);
    } else {
        pthread_t th[64];
        for (int i = 0; i < nthreads; i++) {
            if (0 != pthread_create(&th[i], NULL, thread_main, (void *) (intptr_t) i)) {
                die(i, "pthread_create", i);
            }
        }
        for (int i = 0; i < nthreads; i++) {
            pthread_join(th[i], NULL);
            busy += busy_of[i];
        }
    }
    if (MPI_SUCCESS != (rc = MPI_Win_unlock_all(win))) {
        die(-1, "MPI_Win_unlock_all", rc);
    }
    fprintf(stderr, "ompi_osc_mt: rank %d: %d worker(s) did %ld fetch-and-ops and %ld sections "
            "each, %ld busy tries of the lock\n", rank, workers_per_rank, fops, locks, busy);
    stage("fetch-and-ops and critical sections done", t0);

    /* Every old value of the job, exactly once each. */
    const long n = fops * workers_per_rank * size;
    int64_t *all = 0 == rank ? malloc(sizeof(int64_t) * (size_t) (n > 0 ? n : 1)) : NULL;
    if (0 == rank && NULL == all) {
        die(-1, "malloc of the gathered old values", n);
    }
    MPI_Gather(olds, (int) (fops * workers_per_rank), MPI_INT64_T, all,
               (int) (fops * workers_per_rank), MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (0 == rank) {
        char *seen = calloc((size_t) (n > 0 ? n : 1), 1);
        if (NULL == seen) {
            die(-1, "calloc", n);
        }
        for (long i = 0; i < n; i++) {
            int64_t k = all[i] / INC;
            if (all[i] < 0 || 0 != all[i] % INC || k >= n || seen[k]++) {
                die((int) (i / fops), "an old value out of range or fetched twice",
                    (long) all[i]);
            }
        }
        free(seen);
        free(all);
        int64_t w[W_COUNT];
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        memcpy(w, base, sizeof w);
        MPI_Win_unlock(0, win);
        const long total = (long) workers_per_rank * size;
        if (w[W_SUM] != (int64_t) n * INC) {
            die(-1, "the shared counter's final value (expected N * INC)", (long) w[W_SUM]);
        }
        if (0 != w[W_LOCK] || 0 != w[W_INSIDE]) {
            die(-1, "the lock word or the holder count not 0 at the end",
                (long) (w[W_LOCK] ? w[W_LOCK] : w[W_INSIDE]));
        }
        if (w[W_CS] != (int64_t) locks * total) {
            die(-1, "the critical section's counter (a lost update: two holders)",
                (long) w[W_CS]);
        }
        fprintf(stderr, "ompi_osc_mt: rank 0: contention ok (%d ranks x %d workers: %ld "
                "fetch-and-ops, %ld critical sections)\n", size, workers_per_rank, n,
                locks * total);
        fflush(stderr);
    }
    char name[MPI_MAX_OBJECT_NAME] = "?";
    int len = 0;
    MPI_Win_get_name(win, name, &len);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    if (create_window) {
        free(base);
    }
    free(olds);
    printf("ompi_osc_mt: rank %d of %d ok (%d threads, window '%s', %s)\n", rank, size,
           nthreads, name, create_window ? "MPI_Win_create" : "MPI_Win_allocate");
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
