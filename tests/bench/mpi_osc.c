/*
 * mpi_osc: one-sided MPI latencies and put bandwidth, for the anchors (scripts/anchors --osc).
 *
 * Two ranks; rank 0 is the origin, rank 1 the target, which only waits in MPI_Barrier (passive
 * target). Rank 0 opens one access epoch with MPI_Win_lock_all and, per operation, runs WARMUP
 * untimed then ITERS timed iterations, each timed on its own:
 *   put     MPI_Put of 8 bytes + MPI_Win_flush (the value differs per iteration; the last one
 *           is read back with MPI_Get and checked);
 *   get     MPI_Get of 8 bytes + MPI_Win_flush (every value checked against the one rank 1
 *           wrote before the window was made);
 *   fop     MPI_Fetch_and_op of one MPI_LONG (8 bytes), MPI_SUM of 1, + MPI_Win_flush (every old value
 *           checked: the counter counts the iterations, warm-up included);
 *   put_bw  BW_ITERS batches of WINDOW puts of BW_SIZE bytes (default 1 MiB) to the same
 *           target range, each batch ended by MPI_Win_flush; MB/s = BW_SIZE * WINDOW *
 *           BW_ITERS / seconds / 1e6, after one untimed batch (the data is read back with
 *           MPI_Get and checked, byte by byte);
 *   cas     MPI_Compare_and_swap of one MPI_LONG (k -> k + 1) + MPI_Win_flush (every old value
 *           checked). Last: Open MPI's openib BTL is known to crash in compare-and-swap.
 * Latency per operation: the mean, the median and the mean without the two slowest (perftest's
 * t_avg rule, as mpi_pingpong's latency_trimmed_us), in microseconds.
 *
 * The window: MPI_Win_create on malloc'd memory (--flavor create, the default) or
 * MPI_Win_allocate (--flavor allocate). The difference matters within one node: Open MPI's osc
 * rdma then reaches an MPI_Win_allocate window of the other rank through shared memory (no
 * network at all), while the memory of MPI_Win_create is another process's and goes through the
 * BTL's put, get and atomics (its locks still use CPU atomics on shared memory).
 *
 * Which path the operations took: with --hw-counters DIR (an RDMA port's hw_counters
 * directory, e.g. /sys/class/infiniband/rxe0/ports/1/hw_counters; both ranks on that node),
 * rank 0 reads DIR/sent_pkts and DIR/rcvd_pkts before and after each operation's loops
 * (warm-up and timed, or every batch of put_bw; each read waits out the counters' cache,
 * DIR/lifespan, before) and reports the deltas and the packets per operation
 * ("rxe_sent_pkts", "rxe_rcvd_pkts", "pkts_per_op" = sent / operations): 0 means the
 * operation did not travel over that port (an RDMA write or read and its answer: 2 packets
 * on a loopback port, which counts both ends).
 *
 * Failures are reported, not hidden: every MPI call returns its error (MPI_ERRORS_RETURN on
 * the communicator and the window), a wrong value is an error too, and SIGSEGV, SIGBUS, SIGILL,
 * SIGFPE and SIGABRT print the operation under way before the process dies the way it would
 * have. Rank 0 prints, on stdout, as it goes:
 *   mpi_osc: window NAME                           (once the window is made)
 *   mpi_osc: begin OP
 *   mpi_osc: result {"op":"put","size":8,"latency_us":X,"latency_median_us":X,
 *                    "latency_trimmed_us":X,"iterations":N[,"rxe_sent_pkts":N,
 *                    "rxe_rcvd_pkts":N,"pkts_per_op":X]}
 *           ({"op":"put_bw","size":N,"bandwidth_mb_s":X,"window":W,"iterations":N,...} for
 *           put_bw)
 *   mpi_osc: failed {"op":"OP","error":"..."}      (then MPI_Abort, exit status 3)
 *   mpi_osc: rank R: signal N (NAME) during OP     (from any rank, before it dies)
 * and at the end, with --json, one line:
 *   {"window":"rdma window 3","flavor":"create","results":[...the result objects...],
 *    "init_us":X}
 * (window: MPI_Win_get_name, which names the osc component: "rdma window N", "ucx window N").
 *
 * usage: mpi_osc [--iters 200] [--warmup 20] [--bw-size 1048576] [--bw-iters 10] [--window 8]
 *                [--ops put,get,fop,put_bw,cas] [--flavor create|allocate]
 *                [--hw-counters DIR] [--json]
 *   --ops  the operations to run (always in the order above), default all
 * Build: mpicc -O2 -o target/anchors/mpi_osc tests/bench/mpi_osc.c (scripts/anchors does).
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Round trips left out of latency_trimmed_us: the slowest two, as ib_send_lat's t_avg does. */
#define TRIMMED 2
/* Window layout (bytes, disp_unit 1): one 8-byte slot per latency operation, then the data. */
#define OFF_PUT 0
#define OFF_GET 8
#define OFF_FOP 16
#define OFF_CAS 24
#define OFF_DATA 64
#define GET_MAGIC 0x0123456789abcdefLL

_Static_assert(sizeof(long) == 8, "MPI_LONG is measured as an 8-byte atomic");

enum op { OP_PUT, OP_GET, OP_FOP, OP_PUT_BW, OP_CAS, N_OPS };
static const char *const OP_NAMES[N_OPS] = {"put", "get", "fop", "put_bw", "cas"};

/* What the signal handler names: set before each phase, read in the handler. */
static volatile sig_atomic_t current_phase = -1;
static const char *const PHASES[] = {"put", "get", "fop", "put_bw", "cas", "win_create",
                                     "win_allocate", "lock_all", "unlock_all", "win_free"};
#define PHASE_WIN_CREATE 5
#define PHASE_WIN_ALLOCATE 6
#define PHASE_LOCK_ALL 7
#define PHASE_UNLOCK_ALL 8
#define PHASE_WIN_FREE 9
static int my_rank = -1;
static struct sigaction old_actions[32];

static void put_str(char *buf, size_t *len, size_t cap, const char *s)
{
    while (*s && *len + 1 < cap) {
        buf[(*len)++] = *s++;
    }
}

static void on_signal(int sig)
{
    /* async-signal-safe only: write(2), no stdio */
    char buf[200];
    size_t len = 0;
    char num[12];
    int n = 0, v = my_rank < 0 ? 0 : my_rank;
    do {
        num[n++] = (char) ('0' + v % 10);
        v /= 10;
    } while (v && n < 11);
    put_str(buf, &len, sizeof buf, "mpi_osc: rank ");
    while (n) {
        char c[2] = {num[--n], 0};
        put_str(buf, &len, sizeof buf, c);
    }
    const char *name = sig == SIGSEGV   ? "11 (SIGSEGV)"
                       : sig == SIGBUS  ? "7 (SIGBUS)"
                       : sig == SIGILL  ? "4 (SIGILL)"
                       : sig == SIGFPE  ? "8 (SIGFPE)"
                       : sig == SIGABRT ? "6 (SIGABRT)"
                                        : "? (other)";
    put_str(buf, &len, sizeof buf, ": signal ");
    put_str(buf, &len, sizeof buf, name);
    put_str(buf, &len, sizeof buf, " during ");
    int ph = current_phase;
    put_str(buf, &len, sizeof buf,
            ph >= 0 && ph < (int) (sizeof PHASES / sizeof PHASES[0]) ? PHASES[ph] : "setup");
    put_str(buf, &len, sizeof buf, "\n");
    ssize_t w = write(STDOUT_FILENO, buf, len);
    (void) w;
    /* then as it would have died: the previous handler (Open MPI's backtrace) or the default */
    if (sig > 0 && sig < 32) {
        sigaction(sig, &old_actions[sig], NULL);
    }
    raise(sig);
}

static void install_handlers(void)
{
    const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND;
        sigaction(sigs[i], &sa, &old_actions[sigs[i]]);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static unsigned char pattern(long i)
{
    return (unsigned char) (i * 31 + 7);
}

/* JSON-safe copy of an error text (no quotes or backslashes). */
static void json_text(char *dst, size_t cap, const char *src)
{
    size_t k = 0;
    for (; *src && k + 1 < cap; src++) {
        dst[k++] = (*src == '"' || *src == '\\' || (unsigned char) *src < 0x20) ? ' ' : *src;
    }
    dst[k] = 0;
}

/* Rank 0: report the failure of OP and end the job (the target may wait in a barrier). */
static void fail(const char *op, const char *fmt_detail, long a, long b)
{
    char detail[300], safe[300];
    snprintf(detail, sizeof detail, fmt_detail, a, b);
    json_text(safe, sizeof safe, detail);
    printf("mpi_osc: failed {\"op\":\"%s\",\"error\":\"%s\"}\n", op, safe);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

static void check_mpi(int rc, const char *op, const char *call)
{
    if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING + 1] = "";
        char detail[400];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        snprintf(detail, sizeof detail, "%s returned %d: %s", call, rc, text);
        char safe[400];
        json_text(safe, sizeof safe, detail);
        printf("mpi_osc: failed {\"op\":\"%s\",\"error\":\"%s\"}\n", op, safe);
        fflush(stdout);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

/* DIR/name as a number, or -1. */
static long long read_counter(const char *dir, const char *name)
{
    if (!dir) {
        return -1;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) {
        return -1;
    }
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1) {
        v = -1;
    }
    fclose(f);
    return v;
}

struct counters {
    long long sent, rcvd;
};

/* The kernel caches an RDMA port's hw_counters for DIR/lifespan milliseconds (rxe: 10 or so)
 * and reads within that time return the old values: wait it out first (outside the timed
 * loops). */
static struct counters read_counters(const char *dir)
{
    long long lifespan_ms = read_counter(dir, "lifespan");
    if (dir && lifespan_ms >= 0) {
        struct timespec d = {(time_t) ((lifespan_ms + 2) / 1000), (long) ((lifespan_ms + 2) % 1000) * 1000000L};
        nanosleep(&d, NULL);
    }
    struct counters c = {read_counter(dir, "sent_pkts"), read_counter(dir, "rcvd_pkts")};
    return c;
}

/* The counters part of a result: empty without --hw-counters (or when unreadable). */
static void counters_json(char *out, size_t cap, struct counters a, struct counters b, long ops)
{
    out[0] = 0;
    if (a.sent < 0 || b.sent < 0 || a.rcvd < 0 || b.rcvd < 0) {
        return;
    }
    snprintf(out, cap, ",\"rxe_sent_pkts\":%lld,\"rxe_rcvd_pkts\":%lld,\"pkts_per_op\":%.3f",
             b.sent - a.sent, b.rcvd - a.rcvd, (double) (b.sent - a.sent) / (double) ops);
}

int main(int argc, char **argv)
{
    long iters = 200, warmup = 20, bw_size = 1048576, bw_iters = 10, window = 8;
    int json = 0, usage_error = 0, allocate = 0;
    int want[N_OPS] = {1, 1, 1, 1, 1};
    const char *hw_dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long *num = !strcmp(a, "--iters")      ? &iters
                    : !strcmp(a, "--warmup")   ? &warmup
                    : !strcmp(a, "--bw-size")  ? &bw_size
                    : !strcmp(a, "--bw-iters") ? &bw_iters
                    : !strcmp(a, "--window")   ? &window
                                               : NULL;
        if (num && v) {
            char *end;
            *num = strtol(v, &end, 10);
            if (*end || end == v || *num < 0 || (*num == 0 && num != &warmup) ||
                (num == &bw_size && *num > (1L << 30))) {
                usage_error = 1;
            }
            i++;
        } else if (!strcmp(a, "--ops") && v) {
            memset(want, 0, sizeof want);
            char list[256];
            snprintf(list, sizeof list, "%s", v);
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int found = 0;
                for (int k = 0; k < N_OPS; k++) {
                    if (!strcmp(t, OP_NAMES[k])) {
                        want[k] = found = 1;
                    }
                }
                if (!found) {
                    usage_error = 1;
                }
            }
            i++;
        } else if (!strcmp(a, "--flavor") && v) {
            if (!strcmp(v, "allocate")) {
                allocate = 1;
            } else if (strcmp(v, "create")) {
                usage_error = 1;
            }
            i++;
        } else if (!strcmp(a, "--hw-counters") && v) {
            hw_dir = v;
            i++;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else {
            usage_error = 1;
        }
    }

    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    MPI_Init(&argc, &argv);
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    double init_us = (double) (ts1.tv_sec - ts0.tv_sec) * 1e6 + (double) (ts1.tv_nsec - ts0.tv_nsec) / 1e3;
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (usage_error || size != 2) {
        if (my_rank == 0) {
            fprintf(stderr, usage_error
                                ? "usage: mpi_osc [--iters N] [--warmup N] [--bw-size BYTES] [--bw-iters N] "
                                  "[--window N] [--ops put,get,fop,put_bw,cas] [--flavor create|allocate] "
                                  "[--hw-counters DIR] [--json]\n"
                                : "mpi_osc: needs exactly 2 ranks (mpirun -np 2)\n");
        }
        MPI_Finalize();
        return 2;
    }
    install_handlers();
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* The window: the latency slots and the put_bw data. */
    MPI_Aint win_bytes = OFF_DATA + (MPI_Aint) bw_size;
    unsigned char *base = NULL;
    MPI_Win win;
    if (allocate) {
        current_phase = PHASE_WIN_ALLOCATE;
        int rc = MPI_Win_allocate(win_bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
        if (my_rank == 0) {
            check_mpi(rc, "win_allocate", "MPI_Win_allocate");
        } else if (rc != MPI_SUCCESS) {
            MPI_Barrier(MPI_COMM_WORLD); /* rank 0 reports and aborts */
        }
        MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
        if (my_rank == 1) {
            /* local stores into the window inside an exclusive epoch on itself */
            check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win), "win_allocate", "MPI_Win_lock (target init)");
            memset(base, 0, (size_t) win_bytes);
            int64_t magic = GET_MAGIC;
            memcpy(base + OFF_GET, &magic, 8);
            check_mpi(MPI_Win_unlock(1, win), "win_allocate", "MPI_Win_unlock (target init)");
        }
    } else {
        current_phase = PHASE_WIN_CREATE;
        base = calloc(1, (size_t) win_bytes);
        if (!base) {
            fprintf(stderr, "mpi_osc: out of memory for %ld bytes\n", (long) win_bytes);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        int64_t magic = GET_MAGIC;
        memcpy(base + OFF_GET, &magic, 8);
        int rc = MPI_Win_create(base, win_bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
        if (my_rank == 0) {
            check_mpi(rc, "win_create", "MPI_Win_create");
        } else if (rc != MPI_SUCCESS) {
            MPI_Barrier(MPI_COMM_WORLD);
        }
        MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    }
    char win_name[MPI_MAX_OBJECT_NAME + 1] = "";
    int name_len = 0;
    MPI_Win_get_name(win, win_name, &name_len);
    if (my_rank == 0) {
        printf("mpi_osc: window %s\n", win_name);
        fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    unsigned char *src = malloc((size_t) bw_size);
    unsigned char *back = malloc((size_t) bw_size);
    long max_iters = iters > 1 ? iters : 1;
    double *times = malloc(sizeof(double) * (size_t) max_iters);
    if (!src || !back || !times) {
        fprintf(stderr, "mpi_osc: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long i = 0; i < bw_size; i++) {
        src[i] = pattern(i);
    }
    char results[N_OPS][600];
    int nresults = 0;
    const int peer = 1;

    if (my_rank == 0) {
        current_phase = PHASE_LOCK_ALL;
        check_mpi(MPI_Win_lock_all(0, win), "lock_all", "MPI_Win_lock_all");
    }
    for (int op = 0; op < N_OPS; op++) {
        if (!want[op]) {
            continue;
        }
        const char *name = OP_NAMES[op];
        current_phase = op;
        MPI_Barrier(MPI_COMM_WORLD);
        if (my_rank != 0) {
            continue; /* the target only waits: passive target */
        }
        printf("mpi_osc: begin %s\n", name);
        fflush(stdout);
        char counters[200];
        if (op == OP_PUT_BW) {
            /* one untimed batch, then the timed ones */
            struct counters c0 = read_counters(hw_dir), c1;
            double start = 0;
            for (long b = 0; b <= bw_iters; b++) {
                if (b == 1) {
                    start = MPI_Wtime();
                }
                for (long w = 0; w < window; w++) {
                    check_mpi(MPI_Put(src, (int) bw_size, MPI_BYTE, peer, OFF_DATA, (int) bw_size, MPI_BYTE, win),
                              name, "MPI_Put");
                }
                check_mpi(MPI_Win_flush(peer, win), name, "MPI_Win_flush");
            }
            double secs = MPI_Wtime() - start;
            c1 = read_counters(hw_dir);
            counters_json(counters, sizeof counters, c0, c1, (bw_iters + 1) * window);
            /* the data, read back */
            memset(back, 0, (size_t) bw_size);
            check_mpi(MPI_Get(back, (int) bw_size, MPI_BYTE, peer, OFF_DATA, (int) bw_size, MPI_BYTE, win), name,
                      "MPI_Get (check)");
            check_mpi(MPI_Win_flush(peer, win), name, "MPI_Win_flush (check)");
            for (long i = 0; i < bw_size; i++) {
                if (back[i] != src[i]) {
                    fail(name, "byte %ld of the target is %ld after the puts", i, back[i]);
                }
            }
            snprintf(results[nresults], sizeof results[0],
                     "{\"op\":\"put_bw\",\"size\":%ld,\"bandwidth_mb_s\":%.6g,\"window\":%ld,\"iterations\":%ld%s}",
                     bw_size, (double) bw_size * (double) window * (double) bw_iters / secs / 1e6, window,
                     bw_iters, counters);
        } else {
            /* MPI_LONG: 8 bytes on the 64-bit hosts measured (osc rdma's atomics need 8 or 4) */
            long one = 1, old = 0, value = 0, cmp = 0;
            struct counters c0 = read_counters(hw_dir), c1;
            long total = warmup + iters;
            for (long i = 0; i < total; i++) {
                double ti = MPI_Wtime();
                int rc = MPI_SUCCESS;
                const char *call = "";
                switch (op) {
                case OP_PUT:
                    value = i * 0x10001 + 5;
                    rc = MPI_Put(&value, 8, MPI_BYTE, peer, OFF_PUT, 8, MPI_BYTE, win);
                    call = "MPI_Put";
                    break;
                case OP_GET:
                    old = 0;
                    rc = MPI_Get(&old, 8, MPI_BYTE, peer, OFF_GET, 8, MPI_BYTE, win);
                    call = "MPI_Get";
                    break;
                case OP_FOP:
                    rc = MPI_Fetch_and_op(&one, &old, MPI_LONG, peer, OFF_FOP, MPI_SUM, win);
                    call = "MPI_Fetch_and_op";
                    break;
                case OP_CAS:
                    cmp = i;
                    value = i + 1;
                    rc = MPI_Compare_and_swap(&value, &cmp, &old, MPI_LONG, peer, OFF_CAS, win);
                    call = "MPI_Compare_and_swap";
                    break;
                }
                check_mpi(rc, name, call);
                check_mpi(MPI_Win_flush(peer, win), name, "MPI_Win_flush");
                if (i >= warmup) {
                    times[i - warmup] = (MPI_Wtime() - ti) * 1e6;
                }
                if (op == OP_GET && old != GET_MAGIC) {
                    fail(name, "iteration %ld read %ld, not the target's value", i, old);
                }
                if ((op == OP_FOP || op == OP_CAS) && old != i) {
                    fail(name, "iteration %ld fetched the old value %ld", i, old);
                }
            }
            c1 = read_counters(hw_dir);
            counters_json(counters, sizeof counters, c0, c1, total);
            if (op == OP_PUT) {
                long last = 0;
                check_mpi(MPI_Get(&last, 8, MPI_BYTE, peer, OFF_PUT, 8, MPI_BYTE, win), name, "MPI_Get (check)");
                check_mpi(MPI_Win_flush(peer, win), name, "MPI_Win_flush (check)");
                if (last != value) {
                    fail(name, "the target holds %ld, not the last value put (%ld)", last, value);
                }
            }
            double sum = 0;
            for (long k = 0; k < iters; k++) {
                sum += times[k];
            }
            double mean = sum / (double) iters;
            qsort(times, (size_t) iters, sizeof(double), cmp_double);
            long kept = iters > TRIMMED ? iters - TRIMMED : iters;
            double ksum = 0;
            for (long k = 0; k < kept; k++) {
                ksum += times[k];
            }
            snprintf(results[nresults], sizeof results[0],
                     "{\"op\":\"%s\",\"size\":8,\"latency_us\":%.3f,\"latency_median_us\":%.3f,"
                     "\"latency_trimmed_us\":%.3f,\"iterations\":%ld%s}",
                     name, mean, times[iters / 2], ksum / (double) kept, iters, counters);
        }
        printf("mpi_osc: result %s\n", results[nresults]);
        fflush(stdout);
        nresults++;
    }
    if (my_rank == 0) {
        current_phase = PHASE_UNLOCK_ALL;
        check_mpi(MPI_Win_unlock_all(win), "unlock_all", "MPI_Win_unlock_all");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    current_phase = PHASE_WIN_FREE;
    int rc = MPI_Win_free(&win);
    if (my_rank == 0) {
        check_mpi(rc, "win_free", "MPI_Win_free");
        if (json) {
            printf("{\"window\":\"%s\",\"flavor\":\"%s\",\"results\":[", win_name, allocate ? "allocate" : "create");
            for (int k = 0; k < nresults; k++) {
                printf("%s%s", k ? "," : "", results[k]);
            }
            printf("],\"init_us\":%.1f}\n", init_us);
        } else {
            printf("mpi_osc: window '%s' (%s)\n", win_name, allocate ? "MPI_Win_allocate" : "MPI_Win_create");
            for (int k = 0; k < nresults; k++) {
                printf("  %s\n", results[k]);
            }
        }
        fflush(stdout);
    }
    if (!allocate) {
        free(base);
    }
    free(src);
    free(back);
    free(times);
    MPI_Finalize();
    return 0;
}
