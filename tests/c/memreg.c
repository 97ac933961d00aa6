/*
 * memreg: caller memory registered with openib_mem_register, and put/get/atomics by address
 * (run: `openib run -n 2 -- ./memreg`).
 *
 * Each rank
 *   1. registers part of a malloc'ed buffer at an odd address (DATA bytes: a source area, a
 *      put landing area and a get landing area) and a posix_memalign'ed counter block, checks
 *      openib_mem_ptr/len/remote on them, and sends the peer both remote handles;
 *   2. puts its source area into the peer's landing area (openib_put_addr, then the second
 *      piece with openib_put_addr_token and a token of its own), gets the peer's source area
 *      into its get area (openib_get_addr_token, its own token) and checks it byte by
 *      byte when the get completes; after its puts completed it tells the peer, which checks
 *      its landing area byte by byte (and the guard bytes around the region);
 *   3. sends the source area with openib_send_mem from the registered region (zero copy above
 *      the eager limit) and checks the peer's message byte by byte;
 *   4. runs FA_N fetch-and-adds and two compare-and-swaps on the peer's counters
 *      (openib_fetch_add_addr, openib_compare_swap_addr; every other one the *_token form
 *      with a token of its own, which its completion must carry; old values into its own
 *      registered block), checks every old value, tells the peer, which checks the final
 *      counters;
 *   5. checks the refusals: a local address below or past its registration and a remote
 *      address outside the handle (OPENIB_ERR_RANGE, naming the side), a misaligned atomic
 *      (OPENIB_ERR_INVALID), a NULL local address (OPENIB_ERR_INVALID), a token of the
 *      *_token forms without OPENIB_CALLER_TOKEN (OPENIB_ERR_INVALID, naming the bit);
 *   6. exchanges verdicts; then rank 0 puts with a handle whose key the peer never gave (a
 *      foreign handle): the put's completion must carry an error, not OPENIB_OK.
 * It prints one summary line per rank and exits 0 only if everything matched on both ranks.
 */
#define _POSIX_C_SOURCE 200809L
#include "openib.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_HANDLES 1 /* two openib_remote_t: data region, counters */
#define TAG_PUT_DONE 2
#define TAG_SEND 3     /* the openib_send_mem message */
#define TAG_ATOMICS 4  /* my atomics on your counters completed */
#define TAG_VERDICT 5  /* one byte: 1 = all matched */

#define AREA (1024 * 1024 + 7) /* odd on purpose */
#define DATA (3 * AREA)
#define SRC_OFF 0
#define PUT_OFF AREA
#define GET_OFF (2 * AREA)
#define LEAD 5  /* the registration starts LEAD bytes into the malloc'ed buffer */
#define GUARD 64
#define FA_N 100
#define CNT_WORDS (FA_N + 4) /* counters 0 and 1 (the peer's targets), then old values */
#define TIMEOUT_S 240

static int rank, failures;
static uint32_t peer;
static openib_t *t;
static openib_remote_t peer_data, peer_cnt;
static volatile int got_handles, put_done, atomics_done, got_send, got_verdict, verdict;
static unsigned char *recv_copy;
static size_t recv_len;

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "memreg: rank %d: ", rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    failures++;
}

static uint8_t pat(uint32_t seed, size_t j) {
    uint64_t x = (uint64_t)j * 0x9e3779b97f4a7c15ull + seed * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return (uint8_t)(x ^ (x >> 8));
}

static void on_msg(void *ctx, uint32_t src, uint8_t tag, const void *data, size_t len) {
    (void)ctx;
    (void)src;
    switch (tag) {
    case TAG_HANDLES:
        if (len == 2 * sizeof(openib_remote_t)) {
            memcpy(&peer_data, data, sizeof peer_data);
            memcpy(&peer_cnt, (const char *)data + sizeof peer_data, sizeof peer_cnt);
            got_handles = 1;
        }
        break;
    case TAG_PUT_DONE:
        put_done = 1;
        break;
    case TAG_SEND:
        recv_copy = malloc(len ? len : 1);
        if (recv_copy != NULL && len > 0) {
            memcpy(recv_copy, data, len);
        }
        recv_len = len;
        got_send = 1;
        break;
    case TAG_ATOMICS:
        atomics_done = 1;
        break;
    case TAG_VERDICT:
        verdict = len == 1 && *(const uint8_t *)data == 1;
        got_verdict = 1;
        break;
    }
}

/* Completions seen: the status of each token we wait for. */
#define MAX_TOK 256
static uint64_t toks[MAX_TOK];
static int tok_status[MAX_TOK], tok_done[MAX_TOK], ntok;

static int track(uint64_t token) {
    if (ntok >= MAX_TOK) {
        fail("too many tokens");
        return 0;
    }
    toks[ntok] = token;
    tok_done[ntok] = 0;
    return ntok++;
}

static void poll_all(void) {
    if (openib_progress(t) < 0) {
        fail("progress: %s", openib_last_error());
    }
    openib_completion_t c;
    while (openib_poll_completion(t, &c) == 1) {
        for (int i = 0; i < ntok; i++) {
            if (toks[i] == c.token && !tok_done[i]) {
                tok_done[i] = 1;
                tok_status[i] = c.status;
                break;
            }
        }
    }
}

static int wait_for(volatile int *flag, const char *what) {
    time_t end = time(NULL) + TIMEOUT_S;
    while (!*flag) {
        poll_all();
        if (time(NULL) > end) {
            fail("timed out waiting for %s", what);
            return 0;
        }
    }
    return 1;
}

static int wait_tok(int i, const char *what) {
    int st = wait_for(&tok_done[i], what);
    if (st && tok_status[i] != OPENIB_OK) {
        fail("%s completed with %d (%s)", what, tok_status[i], openib_strerror(tok_status[i]));
        return 0;
    }
    return st;
}

static int expect(int rc, int want, const char *side, const char *what) {
    if (rc != want) {
        fail("%s: got %d, want %d (%s)", what, rc, want, openib_last_error());
        return 0;
    }
    if (side != NULL && strstr(openib_last_error(), side) == NULL) {
        fail("%s: the error does not name '%s': %s", what, side, openib_last_error());
        return 0;
    }
    return 1;
}

static int send_msg(uint8_t tag, const void *buf, size_t len) {
    uint64_t tok;
    int rc = openib_send(t, peer, tag, buf, len, &tok);
    if (rc != OPENIB_OK) {
        fail("send tag %u: %s", tag, openib_last_error());
        return 0;
    }
    return wait_tok(track(tok), "a send");
}

int main(void) {
    int rc = openib_open(&t);
    if (rc != OPENIB_OK) {
        fprintf(stderr, "memreg: open: %s\n", openib_last_error());
        return 1;
    }
    rank = openib_rank(t);
    if (openib_size(t) != 2) {
        fprintf(stderr, "memreg: needs 2 ranks\n");
        return 1;
    }
    peer = (uint32_t)(1 - rank);
    for (uint8_t tag = 1; tag <= TAG_VERDICT; tag++) {
        openib_set_handler(t, tag, on_msg, NULL);
    }

    /* 1. caller memory: a malloc'ed buffer with guards, registered at an odd address. */
    unsigned char *buf = malloc(DATA + LEAD + GUARD);
    uint64_t *cnt = NULL;
    if (buf == NULL || posix_memalign((void **)&cnt, 64, CNT_WORDS * 8) != 0) {
        fprintf(stderr, "memreg: out of memory\n");
        return 1;
    }
    unsigned char *data = buf + LEAD;
    memset(buf, 0xa5, DATA + LEAD + GUARD);
    for (size_t j = 0; j < AREA; j++) {
        data[SRC_OFF + j] = pat((uint32_t)rank, j);
    }
    memset(cnt, 0, CNT_WORDS * 8);
    openib_mem_t *dm = NULL, *cm = NULL;
    if (openib_mem_register(t, data, DATA, &dm) != OPENIB_OK
        || openib_mem_register(t, cnt, CNT_WORDS * 8, &cm) != OPENIB_OK) {
        fprintf(stderr, "memreg: register: %s\n", openib_last_error());
        return 1;
    }
    openib_remote_t mine[2];
    openib_mem_remote(dm, &mine[0]);
    openib_mem_remote(cm, &mine[1]);
    if (openib_mem_ptr(dm) != data || openib_mem_len(dm) != DATA
        || mine[0].addr != (uint64_t)(uintptr_t)data || mine[0].len != DATA
        || mine[0].reserved != 0 || openib_mem_ptr(cm) != cnt || mine[1].len != CNT_WORDS * 8) {
        fail("mem_ptr/len/remote do not describe the registered memory");
    }
    send_msg(TAG_HANDLES, mine, sizeof mine);
    wait_for(&got_handles, "the peer's handles");

    /* 2. put in two pieces, get in one, by address. */
    size_t half = AREA / 2;
    uint64_t t1, t2 = OPENIB_CALLER_TOKEN | 0x9172, t3 = OPENIB_CALLER_TOKEN | 0x9173;
    uint64_t paddr = peer_data.addr + PUT_OFF, saddr = peer_data.addr + SRC_OFF;
    if (openib_put_addr(t, peer, data + SRC_OFF, dm, paddr, &peer_data, half, &t1) != OPENIB_OK
        || openib_put_addr_token(t, peer, data + SRC_OFF + half, dm, paddr + half, &peer_data,
                                 AREA - half, t2) != OPENIB_OK
        || openib_get_addr_token(t, peer, data + GET_OFF, dm, saddr, &peer_data, AREA, t3)
               != OPENIB_OK) {
        fail("put/get: %s", openib_last_error());
    } else {
        int i1 = track(t1), i2 = track(t2), i3 = track(t3);
        wait_tok(i1, "put 1");
        wait_tok(i2, "put 2");
        send_msg(TAG_PUT_DONE, NULL, 0);
        if (wait_tok(i3, "the get")) {
            for (size_t j = 0; j < AREA; j++) {
                if (data[GET_OFF + j] != pat(peer, j)) {
                    fail("get: byte %zu is %u, want %u", j, data[GET_OFF + j], pat(peer, j));
                    break;
                }
            }
        }
    }
    wait_for(&put_done, "the peer's put");
    for (size_t j = 0; j < AREA; j++) {
        if (data[PUT_OFF + j] != pat(peer, j)) {
            fail("put: byte %zu is %u, want %u", j, data[PUT_OFF + j], pat(peer, j));
            break;
        }
    }
    for (size_t j = 0; j < LEAD; j++) {
        if (buf[j] != 0xa5) {
            fail("guard byte %zu before the region changed", j);
        }
    }
    for (size_t j = 0; j < GUARD; j++) {
        if (data[DATA + j] != 0xa5) {
            fail("guard byte %zu after the region changed", j);
        }
    }

    /* 3. openib_send_mem from the registered caller memory (above the eager limit). */
    uint64_t ts;
    if (openib_send_mem(t, peer, TAG_SEND, dm, SRC_OFF, AREA, &ts) != OPENIB_OK) {
        fail("send_mem: %s", openib_last_error());
    } else {
        wait_tok(track(ts), "send_mem");
    }
    if (wait_for(&got_send, "the peer's send_mem")) {
        if (recv_len != AREA || recv_copy == NULL) {
            fail("send_mem: %zu bytes, want %d", recv_len, AREA);
        } else {
            for (size_t j = 0; j < AREA; j++) {
                if (recv_copy[j] != pat(peer, j)) {
                    fail("send_mem: byte %zu differs", j);
                    break;
                }
            }
        }
    }

    /* 4. atomics on the peer's counters 0 (adds) and 1 (swaps); old values into cnt[2..]. */
    uint64_t c0 = peer_cnt.addr, c1 = peer_cnt.addr + 8, sum = 0;
    int first = ntok;
    for (int i = 0; i < FA_N; i++) {
        uint64_t tok = OPENIB_CALLER_TOKEN | (0xfa00u + (uint64_t)i);
        int rc = i % 2 == 0
                     ? openib_fetch_add_addr(t, peer, &cnt[2 + i], cm, c0, &peer_cnt,
                                             (uint64_t)i + 1, &tok)
                     : openib_fetch_add_addr_token(t, peer, &cnt[2 + i], cm, c0, &peer_cnt,
                                                   (uint64_t)i + 1, tok);
        if (rc != OPENIB_OK) {
            fail("fetch_add %d: %s", i, openib_last_error());
            break;
        }
        track(tok);
    }
    uint64_t tc1, tc2 = OPENIB_CALLER_TOKEN | 0xc52;
    if (openib_compare_swap_addr(t, peer, &cnt[2 + FA_N], cm, c1, &peer_cnt, 0, 0xabcULL, &tc1)
            != OPENIB_OK
        || openib_compare_swap_addr_token(t, peer, &cnt[3 + FA_N], cm, c1, &peer_cnt, 0, 1, tc2)
               != OPENIB_OK) {
        fail("compare_swap: %s", openib_last_error());
    } else {
        track(tc1);
        track(tc2);
    }
    for (int i = first; i < ntok; i++) {
        wait_tok(i, "an atomic");
    }
    for (int i = 0; i < FA_N; i++) {
        if (cnt[2 + i] != sum) {
            fail("fetch_add %d: old value %llu, want %llu", i, (unsigned long long)cnt[2 + i],
                 (unsigned long long)sum);
            break;
        }
        sum += (uint64_t)i + 1;
    }
    if (cnt[2 + FA_N] != 0 || cnt[3 + FA_N] != 0xabc) {
        fail("compare_swap: old values %llx, %llx; want 0, abc",
             (unsigned long long)cnt[2 + FA_N], (unsigned long long)cnt[3 + FA_N]);
    }
    send_msg(TAG_ATOMICS, NULL, 0);
    wait_for(&atomics_done, "the peer's atomics");
    volatile uint64_t *vc = cnt;
    if (vc[0] != sum || vc[1] != 0xabc) {
        fail("counters: %llu, %llx; want %llu, abc", (unsigned long long)vc[0],
             (unsigned long long)vc[1], (unsigned long long)sum);
    }

    /* 5. refusals, checked before anything is posted. */
    expect(openib_put_addr(t, peer, data - 1, dm, paddr, &peer_data, 8, NULL), OPENIB_ERR_RANGE,
           "local", "put below the local registration");
    expect(openib_get_addr(t, peer, data + DATA - 4, dm, paddr, &peer_data, 8, NULL),
           OPENIB_ERR_RANGE, "local", "get past the local registration");
    expect(openib_put_addr(t, peer, data, dm, peer_data.addr + DATA - 4, &peer_data, 8, NULL),
           OPENIB_ERR_RANGE, "remote", "put past the remote handle");
    expect(openib_get_addr(t, peer, data, dm, peer_data.addr - 1, &peer_data, 8, NULL),
           OPENIB_ERR_RANGE, "remote", "get below the remote handle");
    expect(openib_fetch_add_addr(t, peer, &cnt[2], cm, c0 + 4, &peer_cnt, 1, NULL),
           OPENIB_ERR_INVALID, NULL, "misaligned fetch_add");
    expect(openib_compare_swap_addr(t, peer, &cnt[2], cm, peer_cnt.addr + CNT_WORDS * 8, &peer_cnt,
                                    0, 1, NULL),
           OPENIB_ERR_RANGE, "remote", "compare_swap past the remote handle");
    expect(openib_fetch_add_addr(t, peer, &cnt[CNT_WORDS - 1] + 1, cm, c0, &peer_cnt, 1, NULL),
           OPENIB_ERR_RANGE, "local", "fetch_add result past the local registration");
    expect(openib_put_addr(t, peer, NULL, dm, paddr, &peer_data, 8, NULL), OPENIB_ERR_INVALID,
           NULL, "put from NULL");
    expect(openib_put_addr_token(t, peer, data, dm, paddr, &peer_data, 8, 0x9174),
           OPENIB_ERR_INVALID, "caller-token bit", "put with a token lacking the caller bit");
    expect(openib_compare_swap_addr_token(t, peer, &cnt[2], cm, c1, &peer_cnt, 0, 1, 1),
           OPENIB_ERR_INVALID, "caller-token bit", "compare_swap with the token 1");

    /* 6. verdicts, then a foreign handle (rank 0 only; it fails the connection). */
    uint8_t ok = failures == 0;
    send_msg(TAG_VERDICT, &ok, 1);
    wait_for(&got_verdict, "the peer's verdict");
    int foreign = -1;
    if (rank == 0) {
        openib_remote_t bogus = peer_data;
        bogus.rkey ^= 0x5a5a00u;
        uint64_t tb;
        if (openib_put_addr(t, peer, data, dm, bogus.addr + PUT_OFF, &bogus, 64, &tb)
            != OPENIB_OK) {
            fail("foreign put was refused at the call: %s", openib_last_error());
        } else {
            int i = track(tb);
            wait_for(&tok_done[i], "the foreign put's completion");
            foreign = tok_status[i];
            if (foreign == OPENIB_OK) {
                fail("a put with a key the peer never gave completed OK");
            }
        }
    }
    if (rank == 1) {
        /* Stay up (progressing) while rank 0 tries its foreign handle, so that its failure
         * is the key's, not a closed peer's. Not a pass/fail timing. */
        time_t until = time(NULL) + 3;
        while (time(NULL) < until) {
            poll_all();
        }
    }
    printf("memreg: rank %d %s: put/get %d bytes, send_mem, %d atomics, refusals, foreign "
           "handle %s, peer %s\n",
           rank, failures == 0 ? "ok" : "FAILED", AREA, FA_N + 2,
           rank == 0 ? openib_strerror(foreign) : "n/a", verdict ? "ok" : "FAILED");
    fflush(stdout);
    openib_mem_free(dm);
    openib_mem_free(cm);
    (void)openib_close(t); /* rank 0's connection failed on purpose: its flush may report it */
    free(buf);
    free(cnt);
    free(recv_copy);
    return failures == 0 && verdict ? 0 : 1;
}
