/*
 * own_rank: the C ABI to this process's own rank (run: `openib run -n N -- ./own_rank`, any N).
 *
 * Each rank, on its own:
 *   1. openib_reachable(own rank) is 1;
 *   2. sends itself messages of every size class (empty, eager, the limit and around it, a
 *      train, rendezvous up to 1 MiB + 3) with openib_send, one from a registered region with
 *      openib_send_mem and one from malloc'd memory with openib_send_nocopy, and SENDI_N
 *      with openib_sendi (retried on BUSY); one message's callback sends an answer to the
 *      own rank from inside. Every message arrives from the own rank, in order, every byte
 *      checked, and never inside the send call that sent it;
 *   3. puts and gets its own memory (by offset, and by address into and out of malloc'd memory
 *      registered with openib_mem_register at an odd address), every byte and the guard
 *      bytes around checked; a put past the region's end is OPENIB_ERR_RANGE;
 *   4. runs fetch-and-adds and compare-and-swaps on its own memory (by offset and by address),
 *      every old value and the final values checked;
 *   5. every token completes once, OPENIB_OK, naming the own rank;
 *   6. openib_del_procs of the own rank: then sends to it give OPENIB_ERR_BAD_PEER and
 *      openib_reachable gives 0.
 * It prints one summary line and exits 0 only if everything matched.
 */
#define _POSIX_C_SOURCE 200809L
#include "openib.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_DATA 1
#define TAG_PING 2 /* answered with TAG_ECHO from inside the callback */
#define TAG_ECHO 3
#define TIMEOUT_S 120
#define MIB (1024 * 1024)
#define N_SIZES 12
#define SENDI_N 200
#define RLEN (MIB + 13) /* RDMA regions: odd on purpose */
#define PUT_OFF 3
#define PUT_ROFF 5
#define PUT_LEN (RLEN - 21)
#define GET_OFF 7
#define UREG (64 * 1024 + 1) /* malloc'd and registered, at an odd address */
#define FA_N 40
#define FA_UNIT 0x10000000001ull
#define CNT_OFF 64 /* the counters: in region `cnt` */
#define MAX_TOK 512

static openib_t *t;
static uint32_t me;
static size_t limit;
static int failures;
static char first[512];
static volatile int in_send; /* set around each send call */
static int nested;           /* callbacks that ran inside a send call */
static uint32_t rx;          /* TAG_DATA messages received */
static uint32_t n_expected;  /* TAG_DATA messages sent */
static size_t want_len[N_SIZES + 2 + SENDI_N];
static uint32_t want_seed[N_SIZES + 2 + SENDI_N];
static int echo_rc = 1, echo_seen;
static uint64_t echo_token;
static uint64_t toks[MAX_TOK];
static int tok_done[MAX_TOK], ntok;

static void fail(const char *fmt, ...) {
    if (failures++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(first, sizeof first, fmt, ap);
        va_end(ap);
    }
}

static uint8_t pat(uint32_t seed, size_t j) {
    uint32_t x = (uint32_t)j * 2654435761u ^ (seed * 40503u + 0x9e3779b9u);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return (uint8_t)x;
}

static void fill(uint8_t *b, size_t len, uint32_t seed) {
    for (size_t j = 0; j < len; j++)
        b[j] = pat(seed, j);
}

/* The first byte of b[0, len) that is not pat(seed, j + shift), or -1. */
static long mismatch(const uint8_t *b, size_t len, uint32_t seed, size_t shift) {
    for (size_t j = 0; j < len; j++)
        if (b[j] != pat(seed, j + shift))
            return (long)j;
    return -1;
}

static int zeros(const uint8_t *b, size_t from, size_t to) {
    for (size_t j = from; j < to; j++)
        if (b[j] != 0)
            return 0;
    return 1;
}

static void track(uint64_t token) {
    if (ntok >= MAX_TOK) {
        fail("too many tokens");
        return;
    }
    toks[ntok++] = token;
}

static void on_msg(void *ctx, uint32_t src, uint8_t tag, const void *data, size_t len) {
    const uint8_t *b = data;
    (void)ctx;
    if (in_send)
        nested++;
    if (src != me) {
        fail("message from rank %u, expected the own rank %u", src, me);
        return;
    }
    if (tag == TAG_DATA) {
        uint32_t i = rx++;
        long bad;
        if (i >= n_expected) {
            fail("message %u is one too many", i);
        } else if (len != want_len[i]) {
            fail("message %u: %zu bytes, expected %zu", i, len, want_len[i]);
        } else if ((bad = mismatch(b, len, want_seed[i], 0)) >= 0) {
            fail("message %u (%zu bytes): byte %ld differs", i, len, bad);
        }
    } else if (tag == TAG_PING) {
        /* From inside the callback: a send to the own rank, answered by a later progress. */
        uint8_t *r = malloc(len ? len : 1);
        for (size_t j = 0; j < len; j++)
            r[j] = b[len - 1 - j];
        echo_rc = openib_send(t, me, TAG_ECHO, r, len, &echo_token);
        free(r);
    } else if (tag == TAG_ECHO) {
        for (size_t j = 0; j < len; j++)
            if (b[j] != pat(77, len - 1 - j)) {
                fail("echo: byte %zu differs", j);
                break;
            }
        echo_seen++;
    } else {
        fail("unexpected tag %u", tag);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Progress and completions: each must be OK, name the own rank and a token we issued. */
static void pump(void) {
    openib_completion_t c;
    int rc;
    if (openib_progress(t) < 0)
        fail("openib_progress: %s", openib_last_error());
    while ((rc = openib_poll_completion(t, &c)) == 1) {
        int k;
        if (c.status != OPENIB_OK)
            fail("operation %llu failed: %d: %s", (unsigned long long)c.token, c.status,
                 openib_last_error());
        if (c.peer != me)
            fail("a completion names rank %u, not the own rank %u", c.peer, me);
        for (k = 0; k < ntok; k++)
            if (toks[k] == c.token)
                break;
        if (k == ntok)
            fail("completion of a token never issued: %llu", (unsigned long long)c.token);
        else if (tok_done[k]++)
            fail("token %llu completed twice", (unsigned long long)c.token);
    }
    if (rc < 0)
        fail("openib_poll_completion: %d", rc);
}

static int all_done(void) {
    for (int k = 0; k < ntok; k++)
        if (!tok_done[k])
            return 0;
    return 1;
}

static int wait_all(const char *what) {
    double end = now() + TIMEOUT_S;
    while (!all_done() && !failures) {
        pump();
        if (now() > end) {
            fail("timed out waiting for %s", what);
            return 0;
        }
    }
    return !failures;
}

static int ok(int rc, const char *what) {
    if (rc != OPENIB_OK) {
        fail("%s: %d (%s): %s", what, rc, openib_strerror(rc), openib_last_error());
        return 0;
    }
    return 1;
}

/* openib_send to the own rank; the callback must not run inside it. */
static void send_data(const uint8_t *buf, size_t len, uint32_t seed) {
    uint64_t tok;
    uint32_t before = rx;
    want_len[n_expected] = len;
    want_seed[n_expected] = seed;
    n_expected++;
    in_send = 1;
    int rc = openib_send(t, me, TAG_DATA, buf, len, &tok);
    in_send = 0;
    if (ok(rc, "openib_send to the own rank"))
        track(tok);
    if (rx != before)
        fail("a message to the own rank was delivered inside openib_send");
}

static uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

int main(void) {
    openib_mem_t *src = NULL, *dst = NULL, *back = NULL, *cnt = NULL, *res = NULL, *ureg = NULL,
                 *smem = NULL;
    openib_remote_t rdst, rcnt, rureg;
    uint8_t *umem = NULL, *u, *nocopy = NULL;
    uint64_t tok;
    int rc, busy = 0, del_ok = 0;
    double end;
    size_t sizes[N_SIZES];

    rc = openib_open(&t);
    if (rc != OPENIB_OK) {
        fprintf(stderr, "own_rank: openib_open: %d (%s): %s\n", rc, openib_strerror(rc),
                openib_last_error());
        return 1;
    }
    me = (uint32_t)openib_rank(t);
    limit = (size_t)openib_eager_limit(t);
    if (openib_reachable(t, me) != 1)
        fail("openib_reachable(own rank %u) is not 1: %s", me, openib_last_error());
    ok(openib_set_handler(t, TAG_DATA, on_msg, NULL), "openib_set_handler");
    ok(openib_set_handler(t, TAG_PING, on_msg, NULL), "openib_set_handler");
    ok(openib_set_handler(t, TAG_ECHO, on_msg, NULL), "openib_set_handler");

    /* 2. Messages. */
    {
        size_t v[N_SIZES] = {0, 1, 63, 64, limit - 1, limit, limit + 1, 2 * limit + 7,
                             3 * limit + 5, 200000, MIB, MIB + 3};
        memcpy(sizes, v, sizeof v);
    }
    for (int i = 0; i < N_SIZES; i++) {
        uint8_t *b = malloc(sizes[i] ? sizes[i] : 1);
        fill(b, sizes[i], 1000 + (uint32_t)i);
        send_data(b, sizes[i], 1000 + (uint32_t)i);
        free(b); /* copied: free at once */
    }
    ok(openib_mem_alloc(t, 300000, &smem), "openib_mem_alloc");
    if (smem) {
        uint64_t t2;
        fill(openib_mem_ptr(smem), 300000, 2000);
        want_len[n_expected] = 300000;
        want_seed[n_expected] = 2000;
        n_expected++;
        if (ok(openib_send_mem(t, me, TAG_DATA, smem, 0, 300000, &t2), "openib_send_mem"))
            track(t2);
    }
    nocopy = malloc(500001);
    fill(nocopy, 500001, 2001);
    want_len[n_expected] = 500001;
    want_seed[n_expected] = 2001;
    n_expected++;
    if (ok(openib_send_nocopy(t, me, TAG_DATA, nocopy, 500001, &tok), "openib_send_nocopy"))
        track(tok);
    end = now() + TIMEOUT_S;
    for (uint32_t i = 0; i < SENDI_N && !failures; i++) {
        uint8_t b[48];
        size_t len = i % 49;
        fill(b, len, 3000 + i);
        for (;;) {
            uint32_t before = rx;
            in_send = 1;
            rc = openib_sendi(t, me, TAG_DATA, b, len);
            in_send = 0;
            if (rx != before)
                fail("a message to the own rank was delivered inside openib_sendi");
            if (rc == OPENIB_OK)
                break;
            if (rc != OPENIB_ERR_BUSY) {
                ok(rc, "openib_sendi to the own rank");
                break;
            }
            busy++;
            pump();
            if (now() > end) {
                fail("openib_sendi stayed busy");
                break;
            }
        }
        if (rc == OPENIB_OK) {
            want_len[n_expected] = len;
            want_seed[n_expected] = 3000 + i;
            n_expected++;
        }
    }
    {
        uint8_t b[5000];
        fill(b, sizeof b, 77);
        in_send = 1;
        rc = openib_send(t, me, TAG_PING, b, sizeof b, &tok);
        in_send = 0;
        if (ok(rc, "openib_send (ping)"))
            track(tok);
    }
    end = now() + TIMEOUT_S;
    while (!failures && (rx < n_expected || !echo_seen)) {
        pump();
        if (echo_rc == OPENIB_OK && echo_token) {
            track(echo_token);
            echo_token = 0;
        }
        if (now() > end)
            fail("timed out: %u of %u messages, echo %d", rx, n_expected, echo_seen);
    }
    if (echo_rc != OPENIB_OK)
        fail("openib_send to the own rank from inside a callback: %d", echo_rc);
    wait_all("the sends");
    if (nested)
        fail("%d callbacks ran inside a send call", nested);

    /* 3. Put and get on the own memory. */
    ok(openib_mem_alloc(t, RLEN, &src), "openib_mem_alloc");
    ok(openib_mem_alloc(t, RLEN, &dst), "openib_mem_alloc");
    ok(openib_mem_alloc(t, RLEN, &back), "openib_mem_alloc");
    umem = calloc(UREG + 16, 1);
    u = umem + 3; /* odd address */
    ok(openib_mem_register(t, u, UREG, &ureg), "openib_mem_register");
    if (failures)
        goto out;
    fill(openib_mem_ptr(src), RLEN, 4000);
    ok(openib_mem_remote(dst, &rdst), "openib_mem_remote");
    ok(openib_mem_remote(ureg, &rureg), "openib_mem_remote");
    if (ok(openib_put(t, me, src, PUT_OFF, &rdst, PUT_ROFF, PUT_LEN, &tok), "openib_put"))
        track(tok);
    if (!wait_all("the put"))
        goto out;
    {
        const uint8_t *d = openib_mem_ptr(dst);
        long bad = mismatch(d + PUT_ROFF, PUT_LEN, 4000, PUT_OFF);
        if (bad >= 0)
            fail("put to the own memory: byte %ld differs", bad);
        if (!zeros(d, 0, PUT_ROFF) || !zeros(d, PUT_ROFF + PUT_LEN, RLEN))
            fail("put to the own memory: bytes around it changed");
    }
    if (ok(openib_get(t, me, back, GET_OFF, &rdst, PUT_ROFF, PUT_LEN, &tok), "openib_get"))
        track(tok);
    if (!wait_all("the get"))
        goto out;
    {
        const uint8_t *g = openib_mem_ptr(back);
        long bad = mismatch(g + GET_OFF, PUT_LEN, 4000, PUT_OFF);
        if (bad >= 0)
            fail("get of the own memory: byte %ld differs", bad);
        if (!zeros(g, 0, GET_OFF) || !zeros(g, GET_OFF + PUT_LEN, RLEN))
            fail("get of the own memory: bytes around it changed");
    }
    /* By address: src -> the registered malloc'd memory, then back into `back`. */
    if (ok(openib_put_addr(t, me, (uint8_t *)openib_mem_ptr(src) + 11, src, rureg.addr + 1,
                           &rureg, UREG - 2, &tok),
           "openib_put_addr"))
        track(tok);
    if (!wait_all("the put by address"))
        goto out;
    {
        long bad = mismatch(u + 1, UREG - 2, 4000, 11);
        if (bad >= 0)
            fail("put by address to the own memory: byte %ld differs", bad);
        if (umem[0] || umem[1] || umem[2] || u[0] || !zeros(u, UREG - 1, UREG + 13))
            fail("put by address: the guard bytes changed");
    }
    memset(openib_mem_ptr(back), 0, RLEN);
    if (ok(openib_get_addr(t, me, (uint8_t *)openib_mem_ptr(back) + 1, back, rureg.addr + 1,
                           &rureg, UREG - 2, &tok),
           "openib_get_addr"))
        track(tok);
    if (!wait_all("the get by address"))
        goto out;
    {
        const uint8_t *g = openib_mem_ptr(back);
        long bad = mismatch(g + 1, UREG - 2, 4000, 11);
        if (bad >= 0)
            fail("get by address of the own memory: byte %ld differs", bad);
    }
    rc = openib_put(t, me, src, 0, &rdst, RLEN - 8, 16, NULL);
    if (rc != OPENIB_ERR_RANGE)
        fail("a put past the end of the own region gave %d, not OPENIB_ERR_RANGE", rc);

    /* 4. Atomics on the own memory. */
    ok(openib_mem_alloc(t, CNT_OFF + 16, &cnt), "openib_mem_alloc");
    ok(openib_mem_alloc(t, 8 * (FA_N + 8), &res), "openib_mem_alloc");
    if (failures)
        goto out;
    ok(openib_mem_remote(cnt, &rcnt), "openib_mem_remote");
    for (int i = 0; i < FA_N; i++)
        if (ok(openib_fetch_add(t, me, res, 8 * (size_t)i, &rcnt, CNT_OFF,
                                (uint64_t)(i + 1) * FA_UNIT, &tok),
               "openib_fetch_add"))
            track(tok);
    if (!wait_all("the fetch-and-adds"))
        goto out;
    {
        const uint8_t *r = openib_mem_ptr(res);
        for (int i = 0; i < FA_N; i++) {
            uint64_t want = (uint64_t)i * (i + 1) / 2 * FA_UNIT;
            if (load64(r + 8 * i) != want)
                fail("fetch_add %d on the own memory: old %#llx, want %#llx", i,
                     (unsigned long long)load64(r + 8 * i), (unsigned long long)want);
        }
    }
    {
        uint64_t sum = (uint64_t)FA_N * (FA_N + 1) / 2 * FA_UNIT;
        const uint8_t *r = openib_mem_ptr(res);
        uint8_t *w;
        if (ok(openib_compare_swap(t, me, res, 8 * FA_N, &rcnt, CNT_OFF, sum, 0xabcdef, &tok),
               "openib_compare_swap"))
            track(tok);
        if (ok(openib_compare_swap(t, me, res, 8 * (FA_N + 1), &rcnt, CNT_OFF, sum, 1, &tok),
               "openib_compare_swap"))
            track(tok);
        /* By address on the registered malloc'd memory: an 8-byte aligned word inside it. */
        w = (uint8_t *)(((uintptr_t)u + 64) & ~(uintptr_t)7);
        memset(w, 0, 8);
        if (ok(openib_fetch_add_addr(t, me, (uint8_t *)openib_mem_ptr(res) + 8 * (FA_N + 2), res,
                                     (uint64_t)(uintptr_t)w, &rureg, 5, &tok),
               "openib_fetch_add_addr"))
            track(tok);
        if (ok(openib_compare_swap_addr(t, me, (uint8_t *)openib_mem_ptr(res) + 8 * (FA_N + 3),
                                        res, (uint64_t)(uintptr_t)w, &rureg, 5, 42, &tok),
               "openib_compare_swap_addr"))
            track(tok);
        if (!wait_all("the compare-and-swaps"))
            goto out;
        if (load64(r + 8 * FA_N) != sum || load64(r + 8 * (FA_N + 1)) != 0xabcdef ||
            load64((const uint8_t *)openib_mem_ptr(cnt) + CNT_OFF) != 0xabcdef)
            fail("compare_swap on the own memory: old %#llx and %#llx, value %#llx",
                 (unsigned long long)load64(r + 8 * FA_N),
                 (unsigned long long)load64(r + 8 * (FA_N + 1)),
                 (unsigned long long)load64((const uint8_t *)openib_mem_ptr(cnt) + CNT_OFF));
        if (load64(r + 8 * (FA_N + 2)) != 0 || load64(r + 8 * (FA_N + 3)) != 5 || load64(w) != 42)
            fail("atomics by address on the own memory: old %llu and %llu, value %llu",
                 (unsigned long long)load64(r + 8 * (FA_N + 2)),
                 (unsigned long long)load64(r + 8 * (FA_N + 3)),
                 (unsigned long long)load64(w));
    }

    /* 5, 6. Flush, then remove the own rank. */
    ok(openib_flush(t, 30000), "openib_flush");
    pump();
    if (!all_done())
        fail("not every token completed");
    if (ok(openib_del_procs(t, &me, 1), "openib_del_procs(own rank)")) {
        rc = openib_send(t, me, TAG_DATA, "x", 1, NULL);
        int r2 = openib_sendi(t, me, TAG_DATA, "x", 1);
        int r3 = openib_reachable(t, me);
        del_ok = rc == OPENIB_ERR_BAD_PEER && r2 == OPENIB_ERR_BAD_PEER && r3 == 0;
        if (!del_ok)
            fail("after del_procs of the own rank: send %d, sendi %d, reachable %d", rc, r2, r3);
    }

out:
    ok(openib_close(t), "openib_close");
    openib_mem_free(src);
    openib_mem_free(dst);
    openib_mem_free(back);
    openib_mem_free(cnt);
    openib_mem_free(res);
    openib_mem_free(ureg);
    openib_mem_free(smem);
    free(umem);
    free(nocopy);
    printf("own_rank: rank %u %s: %u messages to itself (%d sendi busy), echo %d, put/get %d B "
           "and %d B by address, %d atomics, del_procs %s, %d completions%s%s\n",
           me, failures ? "FAILED" : "ok", rx, busy, echo_seen, PUT_LEN, UREG - 2, FA_N + 4,
           del_ok ? "ok" : "not checked", ntok, failures ? "; first error: " : "",
           failures ? first : "");
    return failures ? 1 : 0;
}
