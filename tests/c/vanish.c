/* A peer that vanishes without the runtime noticing: under `openib run -n 2`, both ranks
 * connect; rank 1 then removes rank 0 with openib_del_procs (its queue pair to rank 0 is
 * destroyed) and stays alive, progressing, for LIMIT + 5 seconds. Rank 0 waits a second, sends
 * rank 1 a small message and progresses until that send completes. Nothing answers the
 * message's packets any more, so its queue pair must give up after its transport retries and
 * fail the send with OPENIB_ERR_ENDPOINT_FAILED: on an HCA after about 7 local ACK timeouts
 * (7.6 s measured at the default OPENIB_ACK_TIMEOUT 18), and on rxe only if the retry count is not 7 (rxe retries 7 forever). Rank 0 prints
 * "vanish: rank 0 ok: the send failed after N ms" and exits 0 only if it failed within
 * LIMIT seconds (the argument, default 10; every CPC's queue pairs, rdmacm's too, take
 * OPENIB_ACK_TIMEOUT: with the CM's own, about 2.3 s on rxe, rdmacm's retries took 16 s);
 * rank 1 prints "vanish: rank 1 ok" after its wait.
 */
#define _POSIX_C_SOURCE 200809L
#include "openib.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char *what, int rc) {
    fprintf(stderr, "vanish: %s: %d (%s): %s\n", what, rc, openib_strerror(rc),
            openib_last_error());
    return 1;
}

static void on_message(void *ctx, uint32_t src, uint8_t tag, const void *data, size_t len) {
    (void)ctx, (void)src, (void)tag, (void)data, (void)len;
}

int main(int argc, char **argv) {
    double limit = argc > 1 ? strtod(argv[1], NULL) : 10.0;
    openib_t *t;
    openib_completion_t c;
    uint64_t token = 0;
    uint32_t peer;
    double t0;
    int rc, rank;

    if ((rc = openib_open(&t)) != OPENIB_OK)
        return fail("openib_open", rc);
    rank = openib_rank(t);
    if (openib_size(t) != 2) {
        fprintf(stderr, "vanish: needs 2 ranks: openib run -n 2 -- ./vanish\n");
        return 1;
    }
    peer = (uint32_t)(1 - rank);
    if ((rc = openib_set_handler(t, 1, on_message, NULL)) != OPENIB_OK)
        return fail("openib_set_handler", rc);
    if ((rc = openib_connect_all(t, 60000)) != OPENIB_OK)
        return fail("openib_connect_all", rc);
    if (rank == 1) {
        if ((rc = openib_del_procs(t, &peer, 1)) != OPENIB_OK)
            return fail("openib_del_procs", rc);
        for (t0 = now(); now() - t0 < limit + 5.0;)
            if ((rc = openib_progress(t)) < 0)
                return fail("openib_progress", rc);
        printf("vanish: rank 1 ok\n");
        rc = openib_close(t);
        return rc == OPENIB_OK ? 0 : fail("openib_close", rc);
    }
    for (t0 = now(); now() - t0 < 1.0;)
        if ((rc = openib_progress(t)) < 0)
            return fail("openib_progress", rc);
    if ((rc = openib_send(t, peer, 1, "vanished", 8, &token)) != OPENIB_OK)
        return fail("openib_send", rc);
    for (t0 = now(); now() - t0 < limit;) {
        if ((rc = openib_progress(t)) < 0)
            return fail("openib_progress", rc);
        while ((rc = openib_poll_completion(t, &c)) == 1) {
            if (c.token != token)
                continue;
            if (c.status != OPENIB_ERR_ENDPOINT_FAILED) {
                fprintf(stderr, "vanish: the send to a vanished peer completed with %d (%s)\n",
                        c.status, openib_strerror(c.status));
                return 1;
            }
            printf("vanish: rank 0 ok: the send failed after %.0f ms: %s\n",
                   (now() - t0) * 1e3, openib_last_error());
            openib_close(t);
            return 0;
        }
        if (rc < 0)
            return fail("openib_poll_completion", rc);
    }
    fprintf(stderr, "vanish: the send to a vanished peer neither completed nor failed in %.0f s\n",
            limit);
    return 1;
}
