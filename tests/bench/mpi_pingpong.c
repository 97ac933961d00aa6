/*
 * mpi_pingpong: the MPI counterpart of `openib bench`, for the anchors (scripts/anchors).
 *
 * Between ranks 0 and 1, for each message size:
 *   latency    ping-pong, one warm-up round trip then ITERS round trips; half a round trip,
 *              mean, in microseconds (and the median half round trip, as `openib bench` and
 *              perftest's t_typical give it: each round trip timed on rank 0; and the mean
 *              without the two slowest, the rule of perftest's t_avg);
 *   bandwidth  rank 0 sends ITERS messages back to back (MPI_Isend, a window of up to 64 in
 *              flight, rank 1 pre-posting as many MPI_Irecv), rank 1 answers the last one with
 *              a 1-byte ack; MB/s = size * ITERS / seconds / 1e6 (timed on rank 0).
 * ITERS is divided by 4 (at least 10) above 64 KiB: the rule of `openib bench`.
 *
 * Wire-up: each rank takes the time just before MPI_Init, then rank 0 sends 4 bytes to rank 1
 * and rank 1 answers (the first message each way: with lazy connections, as ob1/openib and
 * UCX make them, this is where the connection is made). "wireup_us" is the largest, over the
 * two ranks, of MPI_Init plus the time until the rank received its first message; the parts
 * are "init_us" and "first_exchange_us". If MPI_PINGPONG_START_NS holds a CLOCK_REALTIME time
 * in nanoseconds taken before the launch (date +%s%N), "since_start_us" is the same end point
 * measured from there (launcher included).
 *
 * Start-up, the anchors' MPI measures (docs/PERFORMANCE.md):
 *   "init_median_us"     MPI_Init to ready: each rank's time in MPI_Init, the median over the
 *                        ranks (each rank's value in "init_ranks_us");
 *   "first_message_us"   the first ping-pong round trip to a peer not yet talked to (4 bytes,
 *                        rank 0 -> 1 -> 0): from the moment BOTH ranks were out of MPI_Init
 *                        (the later one: a peer still in MPI_Init cannot answer, and that wait
 *                        is MPI_Init's, not the message's) to rank 0 holding the answer. With
 *                        lazy connections this is where the connection is made; a system that
 *                        connects every pair in MPI_Init pays that in init_median_us instead.
 *                        Rank 1's moment is compared with rank 0's on CLOCK_MONOTONIC: the two
 *                        ranks must share a node (as in the anchors' one guest);
 *   "second_message_us"  the round trip right after it, the same way (connected now).
 *
 * usage: mpi_pingpong [--sizes 8,64,...] [--iters 200] [--json] [--latency-only] [--trace FILE]
 *   --latency-only  skips the bandwidth loops ("bandwidth_mb_s" is then null): for profiling
 *                   the ping-pong alone
 *   --trace FILE    rank 0 writes every timed half round trip to FILE, in the order they ran
 *                   ("size iteration microseconds" per line): where the slow ones fall
 * Prints, like `openib bench --json`:
 *   {"results":[{"size":N,"latency_us":X,"latency_median_us":X,"latency_trimmed_us":X,
 *                "latency_p10_us":X,"latency_p90_us":X,"latency_p99_us":X,"bandwidth_mb_s":X,
 *                "iterations":N}],"wireup_us":X,"init_us":X,
 *    "first_exchange_us":X,"init_median_us":X,"init_ranks_us":[X,X],"first_message_us":X,
 *    "second_message_us":X[,"since_start_us":X]}
 *
 * Build: mpicc -O2 -o target/mpi_pingpong tests/bench/mpi_pingpong.c (scripts/anchors does).
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 64
#define WINDOW 64
#define TAG_PING 1
#define TAG_DATA 2
#define TAG_ACK 3
#define TAG_WIRE 4
/* Round trips left out of latency_trimmed_us: the slowest two, as ib_send_lat's t_avg does. */
#define TRIMMED 2

static double now_us(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

static int parse_sizes(const char *s, long *sizes)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v <= 0 || n == MAX_SIZES || (*end != ',' && *end != '\0')) {
            return -1;
        }
        sizes[n++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static unsigned char pattern(long i, int salt)
{
    return (unsigned char) (i * 31 + salt);
}

int main(int argc, char **argv)
{
    /* Before anything else: the start of the wire-up. */
    double t_before_init = now_us(CLOCK_MONOTONIC);
    double rt_before_init = now_us(CLOCK_REALTIME);

    long sizes[MAX_SIZES] = {8, 64, 512, 4096, 8192, 65536, 262144, 1048576};
    int nsizes = 8;
    long iters_arg = 200;
    int json = 0;
    int latency_only = 0;
    const char *trace_path = NULL;
    int usage_error = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            nsizes = parse_sizes(argv[++i], sizes);
            if (nsizes <= 0) {
                usage_error = 1;
            }
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            iters_arg = strtol(argv[++i], NULL, 10);
            if (iters_arg <= 0) {
                usage_error = 1;
            }
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--trace") && i + 1 < argc) {
            trace_path = argv[++i];
        } else if (!strcmp(argv[i], "--latency-only")) {
            latency_only = 1;
        } else {
            usage_error = 1;
        }
    }

    MPI_Init(&argc, &argv);
    double t_after_init = now_us(CLOCK_MONOTONIC);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (usage_error || size != 2) {
        if (rank == 0) {
            fprintf(stderr, usage_error
                                ? "usage: mpi_pingpong [--sizes 8,64,...] [--iters N] [--json] [--latency-only] [--trace FILE]\n"
                                : "mpi_pingpong: needs exactly 2 ranks (mpirun -np 2)\n");
        }
        MPI_Finalize();
        return 2;
    }
    int peer = 1 - rank;

    /* Wire-up: the first message each way, no barrier before it. */
    int32_t token = 0x5eed;
    double t_first, t_second_start = 0, t_second = 0;
    if (rank == 0) {
        MPI_Send(&token, 1, MPI_INT32_T, peer, TAG_WIRE, MPI_COMM_WORLD);
        MPI_Recv(&token, 1, MPI_INT32_T, peer, TAG_WIRE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        t_first = now_us(CLOCK_MONOTONIC);
        /* The second round trip, connected now. */
        t_second_start = now_us(CLOCK_MONOTONIC);
        MPI_Send(&token, 1, MPI_INT32_T, peer, TAG_WIRE, MPI_COMM_WORLD);
        MPI_Recv(&token, 1, MPI_INT32_T, peer, TAG_WIRE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        t_second = now_us(CLOCK_MONOTONIC);
    } else {
        MPI_Recv(&token, 1, MPI_INT32_T, peer, TAG_WIRE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        t_first = now_us(CLOCK_MONOTONIC);
        MPI_Send(&token, 1, MPI_INT32_T, peer, TAG_WIRE, MPI_COMM_WORLD);
        MPI_Recv(&token, 1, MPI_INT32_T, peer, TAG_WIRE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&token, 1, MPI_INT32_T, peer, TAG_WIRE, MPI_COMM_WORLD);
    }
    /* Each rank's MPI_Init time and the moment it left MPI_Init, for rank 0. */
    double start_mine[2] = {t_after_init - t_before_init, t_after_init};
    double start_all[2 * 2];
    MPI_Gather(start_mine, 2, MPI_DOUBLE, start_all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    double init_median = 0, first_message = 0, second_message = 0;
    if (rank == 0) {
        /* The median of two is their mean. */
        init_median = (start_all[0] + start_all[2]) / 2.0;
        double both_ready = start_all[1] > start_all[3] ? start_all[1] : start_all[3];
        first_message = t_first - both_ready;
        second_message = t_second - t_second_start;
    }
    double rt_first = rt_before_init + (t_first - t_before_init);
    double mine[4] = {t_after_init - t_before_init, t_first - t_after_init, t_first - t_before_init,
                      -1.0};
    const char *start_env = getenv("MPI_PINGPONG_START_NS");
    if (start_env && *start_env) {
        mine[3] = rt_first - strtod(start_env, NULL) / 1e3;
    }
    double wire[4];
    MPI_Reduce(mine, wire, 4, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    long max = 8;
    for (int i = 0; i < nsizes; i++) {
        if (sizes[i] > max) {
            max = sizes[i];
        }
    }
    unsigned char *sbuf = malloc((size_t) max);
    unsigned char *rbuf = malloc((size_t) max);
    if (!sbuf || !rbuf) {
        fprintf(stderr, "mpi_pingpong: out of memory for %ld bytes\n", max);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long i = 0; i < max; i++) {
        sbuf[i] = pattern(i, rank);
    }
    MPI_Request reqs[WINDOW];
    double lat[MAX_SIZES], lat_med[MAX_SIZES], lat_p10[MAX_SIZES], lat_trim[MAX_SIZES], bw[MAX_SIZES];
    double lat_p90[MAX_SIZES], lat_p99[MAX_SIZES];
    FILE *trace = NULL;
    if (trace_path && rank == 0 && !(trace = fopen(trace_path, "w"))) {
        fprintf(stderr, "mpi_pingpong: --trace %s: cannot write it\n", trace_path);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long its[MAX_SIZES];
    long max_iters = iters_arg < 10 ? 10 : iters_arg;
    double *halves = malloc(sizeof(double) * (size_t) max_iters);
    if (!halves) {
        fprintf(stderr, "mpi_pingpong: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    for (int s = 0; s < nsizes; s++) {
        long n = sizes[s];
        long iters = iters_arg;
        if (n > 65536) {
            iters = (iters_arg + 3) / 4;
            if (iters < 10) {
                iters = 10;
            }
        }
        its[s] = iters;
        MPI_Barrier(MPI_COMM_WORLD);

        /* Latency: iteration 0 warms up (and checks the payload). */
        double t0 = 0, ti = 0;
        for (long i = 0; i <= iters; i++) {
            if (i == 1) {
                t0 = MPI_Wtime();
            }
            ti = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(sbuf, (int) n, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD);
                MPI_Recv(rbuf, (int) n, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (i > 0) {
                    halves[i - 1] = (MPI_Wtime() - ti) * 1e6 / 2.0;
                }
            } else {
                MPI_Recv(rbuf, (int) n, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(sbuf, (int) n, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD);
            }
            if (i == 0) {
                for (long k = 0; k < n; k++) {
                    if (rbuf[k] != pattern(k, peer)) {
                        fprintf(stderr, "mpi_pingpong: size %ld: byte %ld arrived corrupted\n", n, k);
                        MPI_Abort(MPI_COMM_WORLD, 1);
                    }
                }
            }
        }
        lat[s] = (MPI_Wtime() - t0) * 1e6 / (double) iters / 2.0;
        if (rank == 0) {
            for (long k = 0; trace && k < iters; k++) {
                fprintf(trace, "%ld %ld %.3f\n", n, k + 1, halves[k]);
            }
            qsort(halves, (size_t) iters, sizeof(double), cmp_double);
            lat_med[s] = halves[iters / 2];
            lat_p10[s] = halves[iters / 10];
            lat_p90[s] = halves[iters * 9 / 10];
            lat_p99[s] = halves[iters * 99 / 100];
            /* perftest's t_avg rule: the mean without the TRIMMED slowest round trips. */
            long kept = iters > TRIMMED ? iters - TRIMMED : iters;
            double sum = 0;
            for (long k = 0; k < kept; k++) {
                sum += halves[k];
            }
            lat_trim[s] = sum / (double) kept;
        }

        /* Bandwidth: rank 0 streams, rank 1 acknowledges the last message. */
        if (latency_only) {
            bw[s] = -1;
            continue;
        }
        MPI_Barrier(MPI_COMM_WORLD);
        char ack = 0;
        t0 = MPI_Wtime();
        for (long done = 0; done < iters;) {
            int w = (int) (iters - done < WINDOW ? iters - done : WINDOW);
            for (int k = 0; k < w; k++) {
                if (rank == 0) {
                    MPI_Isend(sbuf, (int) n, MPI_BYTE, peer, TAG_DATA, MPI_COMM_WORLD, &reqs[k]);
                } else {
                    MPI_Irecv(rbuf, (int) n, MPI_BYTE, peer, TAG_DATA, MPI_COMM_WORLD, &reqs[k]);
                }
            }
            MPI_Waitall(w, reqs, MPI_STATUSES_IGNORE);
            done += w;
        }
        if (rank == 0) {
            MPI_Recv(&ack, 1, MPI_CHAR, peer, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Send(&ack, 1, MPI_CHAR, peer, TAG_ACK, MPI_COMM_WORLD);
        }
        double secs = MPI_Wtime() - t0;
        bw[s] = (double) n * (double) iters / secs / 1e6;
    }

    if (rank == 0) {
        if (json) {
            printf("{\"results\":[");
            for (int s = 0; s < nsizes; s++) {
                char bwtext[32] = "null";
                if (bw[s] >= 0) {
                    snprintf(bwtext, sizeof bwtext, "%.6g", bw[s]);
                }
                printf("%s{\"size\":%ld,\"latency_us\":%.3f,\"latency_median_us\":%.3f,"
                       "\"latency_trimmed_us\":%.3f,\"latency_p10_us\":%.3f,\"latency_p90_us\":%.3f,"
                       "\"latency_p99_us\":%.3f,\"bandwidth_mb_s\":%s,\"iterations\":%ld}",
                       s ? "," : "", sizes[s], lat[s], lat_med[s], lat_trim[s], lat_p10[s],
                       lat_p90[s], lat_p99[s], bwtext, its[s]);
            }
            printf("],\"wireup_us\":%.1f,\"init_us\":%.1f,\"first_exchange_us\":%.1f", wire[2],
                   wire[0], wire[1]);
            printf(",\"init_median_us\":%.1f,\"init_ranks_us\":[%.1f,%.1f],\"first_message_us\":%.1f,"
                   "\"second_message_us\":%.1f",
                   init_median, start_all[0], start_all[2], first_message, second_message);
            if (wire[3] >= 0) {
                printf(",\"since_start_us\":%.1f", wire[3]);
            }
            printf("}\n");
        } else {
            printf("mpi_pingpong: 2 ranks, wire-up %.0f us (MPI_Init %.0f + first exchange %.0f)\n",
                   wire[2], wire[0], wire[1]);
            printf("mpi_pingpong: MPI_Init %.0f us (median of the ranks), first round trip %.0f us "
                   "(from both ranks ready), second %.0f us\n",
                   init_median, first_message, second_message);
            printf("%9s %12s %12s %14s\n", "size", "latency us", "median us", "bandwidth MB/s");
            for (int s = 0; s < nsizes; s++) {
                if (bw[s] >= 0) {
                    printf("%9ld %12.2f %12.2f %14.1f\n", sizes[s], lat[s], lat_med[s], bw[s]);
                } else {
                    printf("%9ld %12.2f %12.2f %14s\n", sizes[s], lat[s], lat_med[s], "-");
                }
            }
        }
    }
    free(halves);
    free(sbuf);
    free(rbuf);
    if (trace) {
        fclose(trace);
    }
    MPI_Finalize();
    return 0;
}
