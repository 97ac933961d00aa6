/*
 * group_create: openib_group_create through the C ABI (run: `openib run -n N -- ./group_create`,
 * N >= 2). Every rank passes the whole job, except rank 0, whose group lacks rank N-1:
 *   1. a group without the caller itself is OPENIB_ERR_INVALID (a local check);
 *   2. ranks 0 to N-2 get OPENIB_OK, the group 0..N-2, no failed rank, who = UINT32_MAX;
 *      rank N-1 gets OPENIB_ERR_EXCLUDED, the same group, who = 0, and a last error naming
 *      rank 0;
 *   3. tag 0x3f is then the protocol's: openib_set_handler of it is OPENIB_ERR_INVALID;
 *   4. before closing, every rank tells every other it decided (tag 1) and waits for all,
 *      progressing (so the protocol's late messages are answered).
 * It prints one summary line and exits 0 only if everything matched.
 */
#define _POSIX_C_SOURCE 200809L
#include "openib.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_DONE 1
#define MAXN 64

static int dones;

static void on_done(void *ctx, uint32_t src, uint8_t tag, const void *data, size_t len) {
    (void)ctx;
    (void)src;
    (void)tag;
    (void)data;
    (void)len;
    dones++;
}

static void on_other(void *ctx, uint32_t src, uint8_t tag, const void *data, size_t len) {
    (void)ctx;
    (void)src;
    (void)tag;
    (void)data;
    (void)len;
}

#define FAIL(...)                                                                              \
    do {                                                                                       \
        fprintf(stderr, "group_create: rank %d: ", rank);                                      \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fprintf(stderr, " (last error: %s)\n", openib_last_error());                          \
        return 1;                                                                              \
    } while (0)

int main(void) {
    openib_t *t;
    int rank = -1;
    if (openib_open(&t) != OPENIB_OK) FAIL("open failed");
    rank = openib_rank(t);
    int n = openib_size(t);
    if (n < 2 || n > MAXN) FAIL("needs 2 to %d ranks, has %d", MAXN, n);
    if (openib_set_handler(t, TAG_DONE, on_done, NULL) != OPENIB_OK) FAIL("set_handler");

    uint32_t ranks[MAXN], group[MAXN], failed[MAXN], who = 7;
    size_t glen = MAXN, flen = MAXN, nr = 0;
    /* 1. Not in its own group. */
    for (int r = 0; r < n; r++)
        if (r != rank) ranks[nr++] = (uint32_t)r;
    int rc = openib_group_create(t, ranks, nr, "c-test", 30000, group, &glen, failed, &flen, &who);
    if (rc != OPENIB_ERR_INVALID) FAIL("without itself: %d, not OPENIB_ERR_INVALID", rc);

    /* 2. Rank 0's group lacks rank n-1. */
    nr = 0;
    for (int r = 0; r < n; r++)
        if (!(rank == 0 && r == n - 1)) ranks[nr++] = (uint32_t)r;
    glen = MAXN;
    flen = MAXN;
    rc = openib_group_create(t, ranks, nr, "c-test", 60000, group, &glen, failed, &flen, &who);
    int last = rank == n - 1;
    if (rc != (last ? OPENIB_ERR_EXCLUDED : OPENIB_OK)) FAIL("group_create returned %d", rc);
    if (glen != (size_t)(n - 1) || flen != 0) FAIL("group of %zu, %zu failed", glen, flen);
    for (size_t i = 0; i < glen; i++)
        if (group[i] != i) FAIL("group[%zu] = %u", i, group[i]);
    if (who != (last ? 0u : UINT32_MAX)) FAIL("who = %u", who);
    if (last && !strstr(openib_last_error(), "rank 0's group does not include it"))
        FAIL("the error does not name rank 0");

    /* 3. The protocol's tag. */
    if (openib_set_handler(t, 0x3f, on_other, NULL) != OPENIB_ERR_INVALID)
        FAIL("set_handler(0x3f) was not refused");

    /* 4. Everyone decided before anyone closes. */
    for (int r = 0; r < n; r++)
        if (r != rank && openib_send(t, (uint32_t)r, TAG_DONE, "d", 1, NULL) != OPENIB_OK)
            FAIL("send done to %d", r);
    time_t until = time(NULL) + 60;
    while (dones < n - 1) {
        if (openib_progress(t) < 0) FAIL("progress");
        if (time(NULL) > until) FAIL("only %d of %d dones", dones, n - 1);
    }
    if (openib_close(t) != OPENIB_OK) FAIL("close");
    printf("group_create: rank %d ok: %s, group of %zu\n", rank, last ? "excluded by 0" : "member",
           glen);
    return 0;
}
