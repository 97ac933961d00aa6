/*
 * mpi_group_create: the anchor of issue 32 (scripts/anchors-group). What Open MPI 5's MPI-4
 * MPI_Comm_create_from_group (+ ULFM's MPIX_Comm_agree on the result) returns, and how long it
 * takes, when processes die before or during the call or pass different groups.
 *
 * Every process: MPI_Session_init (MPI_ERRORS_RETURN), the group of the "mpi://WORLD" process
 * set, then its own group for the case (below), MPI_Comm_create_from_group(group, tag) timed,
 * then, when the program was built with ULFM's mpiext (OMPI_HAVE_MPI_EXT_FTMPI) and --no-agree
 * was not given, MPIX_Comm_agree on the new communicator (timed) and MPIX_Comm_get_failed.
 * Each surviving process prints ONE line, `ANCHOR_GROUP {json}`:
 *   {"rank", "np", "case", "group": [world ranks it passed], "create": {"code", "class",
 *    "error" (MPI_Error_string of the code; "" on success), "us", "size", "members": [world
 *    ranks of the new communicator]}, "agree": null | {"code", "class", "error", "flag", "us"},
 *    "failed": [world ranks MPIX_Comm_get_failed names] | null, "repeat": null | {...} (below)}
 * "size" and "members" are -1 and [] when no communicator was created.
 *
 * A process to kill kills itself with SIGKILL (no outside killer): at "start" (right after its
 * group is built, long before the others call), "before" (just before its own call), from a
 * helper thread "during" the call (--delay-us after entering it), or "agree": right after its
 * MPI_Comm_create_from_group returned, before MPIX_Comm_agree (so it never takes part in the
 * agreement the others are in; a timed death inside an agreement of ~100 us mostly misses).
 *
 * The cases (np >= 4; B = world rank 1, C = 2, the "last" = np - 1; "world" = every rank):
 *   ok      everybody passes the world; nobody dies (the failure-free time)
 *   1       the last dies at start; the survivors wait --wait-ms, then pass the world (a process
 *           already dead in the group passed)
 *   2       ranks 0 and 1 pass {0,1}; the others pass the world (different groups)
 *   3       the world; the last dies --delay-us into the call (a death during the call)
 *   3agree  the world; the last dies between the call and MPIX_Comm_agree (during the
 *           agreement that ends the operation)
 *   4       the world; the last dies just before its call, the others call at once (a death
 *           before the call discovered during it)
 *   5a      B dies at start; after --wait-ms rank 0 passes the world (A's group has B, dead),
 *           the others the world without B
 *   5b      rank 0 passes the world (has B); B passes the world without 0; the others the world
 *   5c      rank 0 passes the world (has B and C); B passes the world without C; the others
 *           the world
 *   5d      the world (identical groups); B dies --delay-us into the call
 *
 * Every blocking step has a bound: alarm(--timeout) before it; a process still inside when it
 * fires prints `ANCHOR_GROUP_TIMEOUT {"rank", "case", "phase", "seconds"}` and exits 3 (after a
 * result line, the phase "finalize" says the result was printed and only the teardown hung),
 * 2 s later (a grace, so that the others stuck too can say so before mpirun ends the job).
 * Every process first prints `ANCHOR_GROUP_START {"rank", "pid"}` (so that a crash Open MPI
 * reports by pid can be put on a rank).
 *
 * --repeat N (case ok only) measures instead of only answering: after the first operation (which
 * makes the connections, untimed for this), N more over the world, tags TAG-1 to TAG-N, each
 * after an MPI_Barrier on the first new communicator (the synchronising step), each new
 * communicator freed; the line then has "repeat": {"n", "create_us": {"median", "min", "max"},
 * "total_us": {...} (create plus MPIX_Comm_agree when it runs)}, else "repeat": null. The same
 * measurement as `openib group-create --repeat N` (docs/CLI.md), for the same machine.
 *
 * usage: mpi_group_create --case CASE [--delay-us N] [--wait-ms N] [--timeout S] [--tag T]
 *                         [--no-agree] [--repeat N]
 * Exit: 0 done, 2 bad usage, 3 watchdog.
 */
#define _GNU_SOURCE
#include <mpi.h>
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && OMPI_HAVE_MPI_EXT_FTMPI
#define HAVE_ULFM 1
#else
#define HAVE_ULFM 0
#endif

enum die_at { DIE_NEVER, DIE_START, DIE_BEFORE, DIE_DURING, DIE_AGREE };

static volatile sig_atomic_t watchdog_phase; /* index into phase_names */
static const char *phase_names[] = {"init", "create", "agree", "finalize", "repeat"};
static char watchdog_rank[16] = "-1";
static const char *watchdog_case = "?";
static unsigned timeout_s = 30;
static long delay_us = 100;

static void on_alarm(int sig) {
    (void)sig;
    char buf[256];
    int n = snprintf(buf, sizeof buf,
                     "ANCHOR_GROUP_TIMEOUT {\"rank\": %s, \"case\": \"%s\", \"phase\": \"%s\", "
                     "\"seconds\": %u}\n",
                     watchdog_rank, watchdog_case, phase_names[watchdog_phase], timeout_s);
    if (n > 0)
        (void)!write(STDOUT_FILENO, buf, (size_t)n);
    /* A grace before exiting: the first exit makes mpirun end the job, and the other stuck
     * processes' watchdogs (armed within moments of this one) should get to say so first. */
    struct timespec grace = {2, 0};
    nanosleep(&grace, NULL);
    _exit(3);
}

static void arm(int phase) {
    watchdog_phase = phase;
    alarm(timeout_s);
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void die_now(void) {
    fflush(stdout);
    kill(getpid(), SIGKILL);
    pause();
}

static void *killer(void *arg) {
    (void)arg;
    struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    die_now();
    return NULL;
}

static void start_killer(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, killer, NULL) != 0)
        die_now(); /* no thread: die at once rather than not at all */
}

static void usage(const char *why) {
    fprintf(stderr,
            "mpi_group_create: %s\nusage: mpi_group_create --case "
            "ok|1|2|3|3agree|4|5a|5b|5c|5d [--delay-us N] [--wait-ms N] [--timeout S] "
            "[--tag T] [--no-agree] [--repeat N]\n",
            why);
    exit(2);
}

static long parse_num(const char *flag, const char *v) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : -1;
    if (!v || errno || *end || x < 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s needs a non-negative integer, got '%s'", flag,
                 v ? v : "(nothing)");
        usage(msg);
    }
    return x;
}

/* JSON string body: the error strings are ASCII; escape what JSON needs. */
static void put_json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void put_err(int code) {
    int cls = code, len = 0;
    char str[MPI_MAX_ERROR_STRING + 1] = "";
    MPI_Error_class(code, &cls);
    if (code != MPI_SUCCESS)
        MPI_Error_string(code, str, &len);
    printf("\"code\": %d, \"class\": %d, \"error\": ", code, cls);
    put_json_str(str);
}

/* World ranks of the members of `g`, as a JSON array. */
static void put_world_ranks(MPI_Group g, MPI_Group world) {
    int n = 0;
    printf("[");
    if (g != MPI_GROUP_NULL && MPI_Group_size(g, &n) == MPI_SUCCESS && n > 0) {
        int *in = malloc(sizeof(int) * (size_t)n), *out = malloc(sizeof(int) * (size_t)n);
        for (int i = 0; i < n; i++)
            in[i] = i;
        if (MPI_Group_translate_ranks(g, n, in, world, out) == MPI_SUCCESS)
            for (int i = 0; i < n; i++)
                printf("%s%d", i ? ", " : "", out[i]);
        free(in);
        free(out);
    }
    printf("]");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* {"median", "min", "max"} of n times (sorts them). */
static void put_stats(double *t, long n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double med = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
    printf("{\"median\": %.1f, \"min\": %.1f, \"max\": %.1f}", med, t[0], t[n - 1]);
}

int main(int argc, char **argv) {
    const char *cs = NULL, *tag = NULL;
    long wait_ms = 1000, repeat = 0;
    int agree = HAVE_ULFM;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--case")) {
            if (!v)
                usage("--case needs a value");
            cs = v;
            i++;
        } else if (!strcmp(a, "--delay-us")) {
            delay_us = parse_num(a, v);
            i++;
        } else if (!strcmp(a, "--wait-ms")) {
            wait_ms = parse_num(a, v);
            i++;
        } else if (!strcmp(a, "--timeout")) {
            timeout_s = (unsigned)parse_num(a, v);
            if (timeout_s == 0)
                usage("--timeout must be at least 1");
            i++;
        } else if (!strcmp(a, "--tag")) {
            if (!v)
                usage("--tag needs a value");
            tag = v;
            i++;
        } else if (!strcmp(a, "--no-agree")) {
            agree = 0;
        } else if (!strcmp(a, "--repeat")) {
            repeat = parse_num(a, v);
            i++;
        } else {
            char msg[256];
            snprintf(msg, sizeof msg, "unknown argument '%s'", a);
            usage(msg);
        }
    }
    if (!cs)
        usage("--case is required");
    static const char *known[] = {"ok", "1", "2", "3", "3agree", "4", "5a", "5b", "5c", "5d"};
    int ok_case = 0;
    for (size_t k = 0; k < sizeof known / sizeof *known; k++)
        ok_case |= !strcmp(cs, known[k]);
    if (!ok_case) {
        char msg[128];
        snprintf(msg, sizeof msg, "unknown case '%s'", cs);
        usage(msg);
    }
    if (repeat > 0 && strcmp(cs, "ok") != 0)
        usage("--repeat measures the failure-free case only: give --case ok");
    watchdog_case = cs;
    char tagbuf[128];
    if (!tag) {
        snprintf(tagbuf, sizeof tagbuf, "openib-anchor-group-%s", cs);
        tag = tagbuf;
    }
    signal(SIGALRM, on_alarm);
    setvbuf(stdout, NULL, _IOLBF, 0);

    arm(0);
    MPI_Session session;
    MPI_Group world, group;
    int rc = MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session);
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "mpi_group_create: MPI_Session_init failed (%d)\n", rc);
        return 1;
    }
    rc = MPI_Group_from_session_pset(session, "mpi://WORLD", &world);
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "mpi_group_create: MPI_Group_from_session_pset failed (%d)\n", rc);
        return 1;
    }
    int rank, np;
    MPI_Group_rank(world, &rank);
    MPI_Group_size(world, &np);
    snprintf(watchdog_rank, sizeof watchdog_rank, "%d", rank);
    printf("ANCHOR_GROUP_START {\"rank\": %d, \"pid\": %ld}\n", rank, (long)getpid());
    fflush(stdout);
    if (np < 4) {
        fprintf(stderr, "mpi_group_create: needs at least 4 processes, has %d\n", np);
        return 2;
    }
    const int last = np - 1, B = 1, C = 2;

    /* Who dies where, and whom this process leaves out of its group (-1: nobody). */
    int victim = -1, excl[2] = {-1, -1};
    enum die_at at = DIE_NEVER;
    int pre_wait = 0;
    if (!strcmp(cs, "1")) {
        victim = last, at = DIE_START, pre_wait = 1;
    } else if (!strcmp(cs, "2")) {
        if (rank <= 1)
            excl[0] = -2; /* {0,1}: built below */
    } else if (!strcmp(cs, "3")) {
        victim = last, at = DIE_DURING;
    } else if (!strcmp(cs, "3agree")) {
        victim = last, at = DIE_AGREE;
    } else if (!strcmp(cs, "4")) {
        victim = last, at = DIE_BEFORE;
    } else if (!strcmp(cs, "5a")) {
        victim = B, at = DIE_START, pre_wait = 1;
        if (rank != 0)
            excl[0] = B;
    } else if (!strcmp(cs, "5b")) {
        if (rank == B)
            excl[0] = 0;
    } else if (!strcmp(cs, "5c")) {
        if (rank == B)
            excl[0] = C;
    } else if (!strcmp(cs, "5d")) {
        victim = B, at = DIE_DURING;
    }
    if (excl[0] == -2) {
        int pair[2] = {0, 1};
        MPI_Group_incl(world, 2, pair, &group);
    } else if (excl[0] >= 0) {
        MPI_Group_excl(world, 1, excl, &group);
    } else {
        MPI_Group_excl(world, 0, excl, &group); /* a copy of the world */
    }
    const int me_dies = rank == victim;
    if (me_dies && at == DIE_START)
        die_now();
    if (pre_wait && wait_ms > 0)
        usleep((useconds_t)wait_ms * 1000);
    if (me_dies && at == DIE_BEFORE)
        die_now();

    arm(1);
    MPI_Comm comm = MPI_COMM_NULL;
    if (me_dies && at == DIE_DURING)
        start_killer();
    double t0 = now_us();
    int crc = MPI_Comm_create_from_group(group, tag, MPI_INFO_NULL, MPI_ERRORS_RETURN, &comm);
    double create_us = now_us() - t0;
    if (crc != MPI_SUCCESS)
        comm = MPI_COMM_NULL;

    int arc = MPI_SUCCESS, flag = 0, did_agree = 0;
    double agree_us = 0;
    MPI_Group failed = MPI_GROUP_NULL;
    int have_failed = 0;
    if (me_dies && at == DIE_AGREE)
        die_now();
#if HAVE_ULFM
    if (agree && comm != MPI_COMM_NULL) {
        arm(2);
        flag = 1;
        t0 = now_us();
        arc = MPIX_Comm_agree(comm, &flag);
        agree_us = now_us() - t0;
        did_agree = 1;
        have_failed = MPIX_Comm_get_failed(comm, &failed) == MPI_SUCCESS;
    }
#endif
    alarm(0);

    /* --repeat: N more operations, each after a barrier on the first new communicator. */
    double *rep_create = NULL, *rep_total = NULL;
    long reps = 0;
    if (repeat > 0 && comm != MPI_COMM_NULL) {
        rep_create = malloc(sizeof(double) * (size_t)repeat);
        rep_total = malloc(sizeof(double) * (size_t)repeat);
        for (long i = 0; i < repeat && rep_create && rep_total; i++) {
            char rtag[160];
            snprintf(rtag, sizeof rtag, "%s-%ld", tag, i + 1);
            arm(4);
            if (MPI_Barrier(comm) != MPI_SUCCESS)
                break;
            MPI_Comm c2 = MPI_COMM_NULL;
            double r0 = now_us();
            if (MPI_Comm_create_from_group(group, rtag, MPI_INFO_NULL, MPI_ERRORS_RETURN, &c2) !=
                MPI_SUCCESS)
                break;
            double r1 = now_us();
#if HAVE_ULFM
            if (agree) {
                int f = 1;
                if (MPIX_Comm_agree(c2, &f) != MPI_SUCCESS)
                    break;
            }
#endif
            double r2 = now_us();
            MPI_Comm_free(&c2);
            rep_create[reps] = r1 - r0;
            rep_total[reps] = r2 - r0;
            reps++;
        }
        alarm(0);
    }

    int size = -1;
    MPI_Group cg = MPI_GROUP_NULL;
    if (comm != MPI_COMM_NULL) {
        MPI_Comm_size(comm, &size);
        MPI_Comm_group(comm, &cg);
    }
    printf("ANCHOR_GROUP {\"rank\": %d, \"np\": %d, \"case\": \"%s\", \"ulfm_built\": %d, "
           "\"group\": ",
           rank, np, cs, HAVE_ULFM);
    put_world_ranks(group, world);
    printf(", \"create\": {");
    put_err(crc);
    printf(", \"us\": %.1f, \"size\": %d, \"members\": ", create_us, size);
    if (cg != MPI_GROUP_NULL)
        put_world_ranks(cg, world);
    else
        printf("[]");
    printf("}, \"agree\": ");
    if (did_agree) {
        printf("{");
        put_err(arc);
        printf(", \"flag\": %d, \"us\": %.1f}", flag, agree_us);
    } else {
        printf("null");
    }
    printf(", \"failed\": ");
    if (have_failed)
        put_world_ranks(failed, world);
    else
        printf("null");
    printf(", \"repeat\": ");
    if (reps > 0) {
        printf("{\"n\": %ld, \"create_us\": ", reps);
        put_stats(rep_create, reps);
        printf(", \"total_us\": ");
        put_stats(rep_total, reps);
        printf("}");
    } else {
        printf("null");
    }
    printf("}\n");
    fflush(stdout);
    free(rep_create);
    free(rep_total);

    /* Teardown, bounded too; with failures it may hang or fail: the result is out already. */
    arm(3);
    if (cg != MPI_GROUP_NULL)
        MPI_Group_free(&cg);
    if (failed != MPI_GROUP_NULL)
        MPI_Group_free(&failed);
    if (comm != MPI_COMM_NULL)
        MPI_Comm_free(&comm);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    MPI_Session_finalize(&session);
    alarm(0);
    return 0;
}
