/*
 * exchange: the C ABI end to end between two ranks (run: `openib run -n 2 -- ./exchange [N]`).
 *
 * Each rank
 *   1. sets receive callbacks and sends the peer the remote handle of a registered region;
 *   2. sends N messages (default 200) of varying sizes, 0 up to the eager limit, from two
 *      threads at once (tags 1 and 5, N/2 each), while the main thread sends a third stream
 *      (tag 6) that mixes sizes above the eager limit (rendezvous, up to 1 MiB) with small
 *      ones, two of them with openib_send_mem from a registered region (one zero copy, one
 *      eager) and one with openib_send_nocopy from malloc'd memory, and progresses; it checks every message it receives: its length and each byte,
 *      in order per tag;
 *   3. gets part of the peer's region and checks it byte by byte;
 *   4. puts into the peer's region, tells the peer when the put completed, and checks what
 *      the peer put into its own region byte by byte (and that the bytes around it are
 *      untouched);
 *   5. sends SENDI_N small messages with openib_sendi (tag 7), retrying with progress when it
 *      returns OPENIB_ERR_BUSY (more messages than any queue holds, so it must at least
 *      once), and checks them as in 2;
 *   6. atomics: rank 1 runs fetch-and-adds and compare-and-swaps on two counters in rank 0's
 *      region and checks every old value, then tells rank 0, which checks the counters'
 *      final values in its own memory; both ranks check that a misaligned atomic is refused
 *      (OPENIB_ERR_INVALID) and an out-of-range one too (OPENIB_ERR_RANGE);
 *   7. checks calls from inside a receive callback: the callback of the peer's message
 *      ECHO_I of stream 0 sends it back (tag 9, checked byte by byte by the peer), while
 *      openib_flush and openib_poll_completion there are refused (OPENIB_ERR_REENTRANT) and
 *      openib_progress returns 0 (openib_progress_poll too, taking nothing); then that every
 *      operation's token completed exactly once
 *      with status 0, exchanges verdicts and flushes;
 *   8. removes the peer with openib_del_procs while a get to it is in flight (the get then
 *      completes with OPENIB_ERR_ENDPOINT_FAILED, later sends give OPENIB_ERR_BAD_PEER), and
 *      closes.
 * It prints one summary line and exits 0 only if everything matched on both ranks.
 */
#define _POSIX_C_SOURCE 200809L
#include "openib.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_A 1      /* messages of sender thread 0 */
#define TAG_B 5      /* messages of sender thread 1 */
#define TAG_REGION 2 /* an openib_remote_t */
#define TAG_NOTE 3   /* "my put into your region completed" */
#define TAG_DONE 4   /* the sender's verdict: one byte, 1 = all matched */
#define TAG_L 6      /* the main thread's stream: rendezvous and eager mixed */
#define TAG_I 7      /* openib_sendi messages */
#define TAG_ATOMICS 8 /* rank 1 to rank 0: my atomics on your counters completed */
#define TAG_ECHO 9    /* the peer's message ECHO_I of stream 0, sent back from the callback */
#define ECHO_I 5      /* 63 bytes (msg_len) */

#define REGION (64 * 1024 + 13) /* odd on purpose */
#define GET_OFF 16              /* where the get lands in the local region */
#define GET_ROFF 7              /* where it reads in the peer's */
#define GET_LEN (REGION - GET_ROFF)
#define PUT_OFF 5         /* where the put reads locally */
#define PUT_ROFF (REGION + 3) /* where it lands in the peer's exposed region */
#define PUT_LEN (REGION - 8)
#define TIMEOUT_S 240

#define MIB (1024 * 1024)
#define LARGE_N 15          /* messages of the main thread's stream */
#define SEND_MEM_BIG 12     /* the one of them sent zero copy with openib_send_mem */
#define SEND_MEM_SMALL 13   /* and one at most the eager limit, also with openib_send_mem */
#define SEND_NOCOPY 9       /* one sent zero copy from malloc'd memory with openib_send_nocopy */
#define BIG_OFF 3           /* where SEND_MEM_BIG starts in the send_mem region */
#define SMALL_OFF (MIB + 64) /* and SEND_MEM_SMALL */
#define SENDI_N 300         /* > any send queue or credit count: BUSY must happen */

/* Atomics: two counters in the exposed region, after the get and put areas. */
#define FA_N 32                           /* fetch-and-adds on counter 1 */
#define CAS_N 32                          /* compare-and-swaps chained on counter 2 */
#define FA_UNIT 0x10000000001ull          /* add (i + 1) * FA_UNIT: both 32-bit halves move */
#define FA_SUM ((uint64_t)FA_N * (FA_N + 1) / 2 * FA_UNIT)
#define MAGIC 0x0123456789abcdefull       /* swapped into counter 1 after the adds */
#define CNT_OFF ((2 * REGION + 7) / 8 * 8) /* counter 1: 8-byte aligned */
#define CNT2_OFF (CNT_OFF + 8)            /* counter 2 */
#define EXPOSED (CNT_OFF + 16)            /* length of the exposed region */
#define ATOMIC_N (FA_N + CAS_N + 2)       /* + one successful and one failing swap on counter 1 */
#define RES_LEN (ATOMIC_N * 8)            /* old values, one 8-byte slot per atomic */

/* A byte that depends on everything it could be confused with: no period, no shared pattern. */
static uint8_t pat(uint32_t seed, size_t j) {
    uint32_t x = (uint32_t)j * 2654435761u ^ (seed * 40503u + 0x9e3779b9u);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return (uint8_t)x;
}

static uint32_t msg_seed(uint32_t rank, int stream, uint32_t i) {
    return rank * 1000003u + (uint32_t)stream * 7919u + i * 31u + 1u;
}

/* The length of message i of a stream: the edges first, then spread up to the limit. */
static size_t msg_len(uint32_t i, int stream, size_t limit) {
    const size_t edges[] = {0, 1, 2, 7, 8, 63, 64, 65, 255, 256, 1000, 4095, 4096, 4097,
                            (size_t)-1, (size_t)-2};
    const size_t n_edges = sizeof edges / sizeof edges[0];
    size_t len;
    if (i < 2 * n_edges) {
        size_t e = edges[(i + (uint32_t)stream * 5u) % n_edges];
        len = e == (size_t)-1 ? limit : e == (size_t)-2 ? limit - 1 : e;
    } else {
        len = (size_t)(((i * 2654435761u) ^ ((uint32_t)stream * 40503u)) % (uint32_t)(limit + 1));
    }
    return len > limit ? limit : len;
}

/* The length of message i of the main thread's stream: above the eager limit (rendezvous),
 * mixed with small ones (eager), so ordering across both protocols is checked too. */
static size_t large_len(uint32_t i, size_t limit) {
    size_t v[LARGE_N];
    v[0] = limit + 1;
    v[1] = 0;
    v[2] = 2 * limit;
    v[3] = limit;
    v[4] = limit + 2;
    v[5] = 1;
    v[6] = 64 * 1024 + 3;
    v[7] = 3 * limit + 5;
    v[8] = limit - 1;
    v[9] = 200000;
    v[10] = MIB - 1;
    v[11] = 7;
    v[SEND_MEM_BIG] = MIB - 5;
    v[SEND_MEM_SMALL] = limit / 2;
    v[14] = MIB;
    return i < LARGE_N ? v[i] : 0;
}

/* The length of openib_sendi message i: small, the limit itself once. */
static size_t sendi_len(uint32_t i, size_t limit) {
    size_t span = (limit < 512 ? limit : 512) + 1;
    return i == 1 ? limit : (size_t)(i * 37u) % span;
}

struct stream {
    uint32_t next;  /* messages received */
    uint64_t bytes; /* their bytes */
    size_t max;     /* the longest */
    uint32_t rndv;  /* how many were above the eager limit */
};

struct state {
    openib_t *t;
    uint32_t rank, peer;
    size_t limit;
    uint32_t per_stream;
    pthread_mutex_t mu; /* guards everything below (callbacks may run on any progress thread) */
    struct stream rx[2];
    struct stream rx_large; /* TAG_L */
    struct stream rx_sendi; /* TAG_I */
    int have_region;
    int atomics_done; /* rank 0: rank 1 said its atomics completed */
    openib_remote_t peer_region;
    int notes;
    int peer_done, peer_verdict;
    /* calls made from inside the callback of the peer's message ECHO_I of stream 0 */
    int echo_rc, flush_rc, poll_rc, progress_rc, progress_poll_rc, reentrant_tried;
    size_t progress_poll_taken;
    unsigned pumps; /* pump calls: every other one uses openib_progress_poll */
    int echo_seen; /* our own message ECHO_I came back */
    int senders_done;
    int errors;
    char first_error[512];
    /* tokens issued (by any thread) and completions seen */
    uint64_t *issued;
    size_t n_issued, cap_issued;
    uint64_t *completed;
    size_t n_completed, cap_completed;
};

static void fail_locked(struct state *st, const char *fmt, ...) {
    if (st->errors++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(st->first_error, sizeof st->first_error, fmt, ap);
        va_end(ap);
    }
}

#define FAIL(st, ...)                          \
    do {                                       \
        pthread_mutex_lock(&(st)->mu);         \
        fail_locked((st), __VA_ARGS__);        \
        pthread_mutex_unlock(&(st)->mu);       \
    } while (0)

static void push(uint64_t **a, size_t *n, size_t *cap, uint64_t v) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *a = realloc(*a, *cap * sizeof **a);
        if (!*a) {
            perror("realloc");
            exit(2);
        }
    }
    (*a)[(*n)++] = v;
}

static void issued(struct state *st, uint64_t token) {
    pthread_mutex_lock(&st->mu);
    push(&st->issued, &st->n_issued, &st->cap_issued, token);
    pthread_mutex_unlock(&st->mu);
}

/* Message i of a stream (st->mu held): its length and every byte. */
static void check_message(struct state *st, struct stream *rx, uint8_t tag, uint32_t i,
                          uint32_t count, size_t want, uint32_t seed, const uint8_t *b,
                          size_t len) {
    if (i >= count) {
        fail_locked(st, "tag %u: message %u is one too many", tag, i);
    } else if (len != want) {
        fail_locked(st, "tag %u message %u: %zu bytes, expected %zu", tag, i, len, want);
    } else {
        size_t j;
        for (j = 0; j < len; j++) {
            if (b[j] != pat(seed, j)) {
                fail_locked(st, "tag %u message %u (%zu bytes): byte %zu is %u, expected %u",
                            tag, i, len, j, b[j], pat(seed, j));
                break;
            }
        }
    }
    rx->bytes += len;
    if (len > rx->max)
        rx->max = len;
    if (len > st->limit)
        rx->rndv++;
}

/* The receive callback of every tag. Runs inside openib_progress with the handle's lock held;
 * calls on the same handle reach the transport the progress call lends it (step 7). */
static void on_message(void *ctx, uint32_t src, uint8_t tag, const void *data, size_t len) {
    struct state *st = ctx;
    const uint8_t *b = data;
    pthread_mutex_lock(&st->mu);
    if (src != st->peer) {
        fail_locked(st, "message from rank %u, expected %u", src, st->peer);
    } else if (tag == TAG_A || tag == TAG_B) {
        int s = tag == TAG_A ? 0 : 1;
        uint32_t i = st->rx[s].next++;
        size_t want = msg_len(i, s, st->limit);
        if (s == 0 && i == ECHO_I) {
            /* From inside the callback: a send works (its data is read before it returns),
             * calls that wait on progress or take completions are refused. */
            uint64_t tok;
            openib_completion_t c;
            st->reentrant_tried = 1;
            st->echo_rc = openib_send(st->t, st->peer, TAG_ECHO, b, len, &tok);
            if (st->echo_rc == OPENIB_OK)
                push(&st->issued, &st->n_issued, &st->cap_issued, tok);
            st->flush_rc = openib_flush(st->t, 0);
            st->poll_rc = openib_poll_completion(st->t, &c);
            st->progress_rc = openib_progress(st->t);
            st->progress_poll_taken = 99;
            st->progress_poll_rc = openib_progress_poll(st->t, &c, 1, &st->progress_poll_taken);
        }
        check_message(st, &st->rx[s], tag, i, st->per_stream, want, msg_seed(src, s, i), b, len);
    } else if (tag == TAG_L) {
        uint32_t i = st->rx_large.next++;
        check_message(st, &st->rx_large, tag, i, LARGE_N, large_len(i, st->limit),
                      msg_seed(src, 2, i), b, len);
    } else if (tag == TAG_I) {
        uint32_t i = st->rx_sendi.next++;
        check_message(st, &st->rx_sendi, tag, i, SENDI_N, sendi_len(i, st->limit),
                      msg_seed(src, 3, i), b, len);
    } else if (tag == TAG_ECHO) {
        struct stream echo = {0};
        check_message(st, &echo, tag, 0, 1, msg_len(ECHO_I, 0, st->limit),
                      msg_seed(st->rank, 0, ECHO_I), b, len);
        st->echo_seen++;
    } else if (tag == TAG_ATOMICS) {
        if (st->rank != 0 || len != 0)
            fail_locked(st, "unexpected atomics note (%zu bytes) at rank %u", len, st->rank);
        st->atomics_done = 1;
    } else if (tag == TAG_REGION) {
        if (len != sizeof(openib_remote_t)) {
            fail_locked(st, "region message of %zu bytes", len);
        } else {
            memcpy(&st->peer_region, data, sizeof st->peer_region);
            st->have_region = 1;
        }
    } else if (tag == TAG_NOTE) {
        st->notes++;
    } else if (tag == TAG_DONE) {
        st->peer_done = 1;
        st->peer_verdict = len == 1 && b[0] == 1;
    } else {
        fail_locked(st, "message with unexpected tag %u", tag);
    }
    pthread_mutex_unlock(&st->mu);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void record_completion(struct state *st, const openib_completion_t *c) {
    pthread_mutex_lock(&st->mu);
    if (c->status != OPENIB_OK)
        fail_locked(st, "operation %llu to rank %u failed: %d (%s): %s",
                    (unsigned long long)c->token, c->peer, c->status, openib_strerror(c->status),
                    openib_last_error());
    else if (c->peer != st->peer)
        fail_locked(st, "completion names rank %u", c->peer);
    push(&st->completed, &st->n_completed, &st->cap_completed, c->token);
    pthread_mutex_unlock(&st->mu);
}

/* One round of progress, then every completion into st->completed: with openib_progress and
 * openib_poll_completion, or (every other round, so both paths are checked by the "every token
 * exactly once" step) with openib_progress_poll, a batch of at most 3 per round. */
static int pump(struct state *st) {
    openib_completion_t c;
    int rc;
    if (__atomic_fetch_add(&st->pumps, 1, __ATOMIC_RELAXED) % 2 == 1) {
        openib_completion_t cs[3];
        size_t taken = 99;
        rc = openib_progress_poll(st->t, cs, 3, &taken);
        if (rc < 0) {
            FAIL(st, "openib_progress_poll: %d (%s): %s", rc, openib_strerror(rc),
                 openib_last_error());
            return -1;
        }
        if (taken > 3) {
            FAIL(st, "openib_progress_poll took %zu completions into 3 places", taken);
            return -1;
        }
        for (size_t i = 0; i < taken; i++)
            record_completion(st, &cs[i]);
        return 0;
    }
    rc = openib_progress(st->t);
    if (rc < 0) {
        FAIL(st, "openib_progress: %d (%s): %s", rc, openib_strerror(rc), openib_last_error());
        return -1;
    }
    while ((rc = openib_poll_completion(st->t, &c)) == 1)
        record_completion(st, &c);
    if (rc < 0) {
        FAIL(st, "openib_poll_completion: %d: %s", rc, openib_last_error());
        return -1;
    }
    return 0;
}

static int has_failed(struct state *st) {
    int e;
    pthread_mutex_lock(&st->mu);
    e = st->errors;
    pthread_mutex_unlock(&st->mu);
    return e;
}

/* Progresses until cond(st) holds (checked under st->mu), an error, or the deadline. */
static int wait_until(struct state *st, int (*cond)(struct state *), const char *what,
                      double deadline) {
    for (;;) {
        int ok;
        pthread_mutex_lock(&st->mu);
        ok = cond(st);
        pthread_mutex_unlock(&st->mu);
        if (ok)
            return 0;
        if (has_failed(st) || pump(st) < 0)
            return -1;
        if (now() > deadline) {
            FAIL(st, "timed out waiting for %s", what);
            return -1;
        }
    }
}

static int all_received(struct state *st) {
    return st->rx[0].next >= st->per_stream && st->rx[1].next >= st->per_stream &&
           st->rx_large.next >= LARGE_N && st->senders_done == 2 && st->have_region &&
           st->echo_seen >= 1;
}
static int got_note(struct state *st) { return st->notes >= 1; }
static int got_done(struct state *st) { return st->peer_done; }
static int got_sendi(struct state *st) { return st->rx_sendi.next >= SENDI_N; }
static int got_atomics(struct state *st) { return st->atomics_done; }

static int completed(struct state *st, uint64_t token) {
    size_t k;
    for (k = 0; k < st->n_completed; k++)
        if (st->completed[k] == token)
            return 1;
    return 0;
}

static uint64_t wait_token;
static int token_completed(struct state *st) { return completed(st, wait_token); }

static const uint64_t *wait_list;
static size_t wait_n;
static int tokens_completed(struct state *st) {
    size_t k;
    for (k = 0; k < wait_n; k++)
        if (!completed(st, wait_list[k]))
            return 0;
    return 1;
}

struct sender {
    struct state *st;
    int stream;
};

static void *send_stream(void *arg) {
    struct sender *s = arg;
    struct state *st = s->st;
    uint8_t *buf = malloc(st->limit + 1);
    uint32_t i;
    if (!buf) {
        perror("malloc");
        exit(2);
    }
    for (i = 0; i < st->per_stream && !has_failed(st); i++) {
        size_t len = msg_len(i, s->stream, st->limit), j;
        uint32_t seed = msg_seed(st->rank, s->stream, i);
        uint64_t token = 0;
        int rc;
        for (j = 0; j < len; j++)
            buf[j] = pat(seed, j);
        rc = openib_send(st->t, st->peer, s->stream ? TAG_B : TAG_A, buf, len, &token);
        if (rc != OPENIB_OK) {
            FAIL(st, "openib_send of message %u (%zu bytes): %d (%s): %s", i, len, rc,
                 openib_strerror(rc), openib_last_error());
            break;
        }
        issued(st, token);
        /* Progress from this thread too, concurrently with the other threads' calls. */
        if (i % 8 == 7 && openib_progress(st->t) < 0) {
            FAIL(st, "openib_progress (sender): %s", openib_last_error());
            break;
        }
    }
    free(buf);
    pthread_mutex_lock(&st->mu);
    st->senders_done++;
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int check(int rc, const char *what, struct state *st) {
    if (rc != OPENIB_OK)
        FAIL(st, "%s: %d (%s): %s", what, rc, openib_strerror(rc), openib_last_error());
    return rc == OPENIB_OK;
}

/* Checks region bytes [from, to) against pat(seed, j + shift), or zero when zero is set. */
static void check_bytes(struct state *st, const char *what, const uint8_t *b, size_t from,
                        size_t to, uint32_t seed, long shift, int zero) {
    size_t j;
    for (j = from; j < to; j++) {
        uint8_t want = zero ? 0 : pat(seed, (size_t)((long)j + shift));
        if (b[j] != want) {
            FAIL(st, "%s: byte %zu is %u, expected %u", what, j, b[j], want);
            return;
        }
    }
}

static uint64_t load64(const void *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The buffer of the openib_send_nocopy message: it must stay unchanged until the message's
 * completion, so it lives until the program exits. */
static uint8_t *nocopy_buf;

/* The main thread's stream (tag 6), sent while the two sender threads run. big is the
 * registered region openib_send_mem sends from. */
static void send_large(struct state *st, openib_mem_t *big) {
    uint8_t *buf = malloc(MIB), *b = openib_mem_ptr(big);
    uint32_t i;
    if (!buf) {
        perror("malloc");
        exit(2);
    }
    for (i = 0; i < LARGE_N && !has_failed(st); i++) {
        size_t len = large_len(i, st->limit), j;
        uint32_t seed = msg_seed(st->rank, 2, i);
        uint64_t token = 0;
        int rc;
        if (i == SEND_MEM_BIG || i == SEND_MEM_SMALL) {
            size_t off = i == SEND_MEM_BIG ? BIG_OFF : SMALL_OFF;
            for (j = 0; j < len; j++)
                b[off + j] = pat(seed, j);
            rc = openib_send_mem(st->t, st->peer, TAG_L, big, off, len, &token);
        } else if (i == SEND_NOCOPY) {
            nocopy_buf = malloc(len);
            if (!nocopy_buf) {
                perror("malloc");
                exit(2);
            }
            for (j = 0; j < len; j++)
                nocopy_buf[j] = pat(seed, j);
            rc = openib_send_nocopy(st->t, st->peer, TAG_L, nocopy_buf, len, &token);
        } else {
            for (j = 0; j < len; j++)
                buf[j] = pat(seed, j);
            rc = openib_send(st->t, st->peer, TAG_L, buf, len, &token);
            /* Copied: the buffer may change at once. */
            memset(buf, 0xa5, len);
        }
        if (rc != OPENIB_OK) {
            FAIL(st, "%s of stream message %u (%zu bytes): %d (%s): %s",
                 i == SEND_MEM_BIG || i == SEND_MEM_SMALL ? "openib_send_mem"
                 : i == SEND_NOCOPY                       ? "openib_send_nocopy"
                                                          : "openib_send",
                 i,
                 len, rc, openib_strerror(rc), openib_last_error());
            break;
        }
        issued(st, token);
        if (pump(st) < 0)
            break;
    }
    free(buf);
}

/* SENDI_N immediate sends, retrying with progress on OPENIB_ERR_BUSY. Returns the BUSY count. */
static uint32_t send_immediate(struct state *st, double deadline) {
    uint8_t *buf = malloc(st->limit + 1);
    uint32_t i = 0, busy = 0;
    int rc;
    if (!buf) {
        perror("malloc");
        exit(2);
    }
    /* Above the eager limit: refused, nothing sent. */
    rc = openib_sendi(st->t, st->peer, TAG_I, buf, st->limit + 1);
    if (rc != OPENIB_ERR_TOO_LARGE)
        FAIL(st, "openib_sendi of %zu bytes returned %d, not OPENIB_ERR_TOO_LARGE", st->limit + 1,
             rc);
    while (i < SENDI_N && !has_failed(st)) {
        size_t len = sendi_len(i, st->limit), j;
        uint32_t seed = msg_seed(st->rank, 3, i);
        for (j = 0; j < len; j++)
            buf[j] = pat(seed, j);
        rc = openib_sendi(st->t, st->peer, TAG_I, buf, len);
        if (rc == OPENIB_OK) {
            i++;
            continue;
        }
        if (rc != OPENIB_ERR_BUSY) {
            FAIL(st, "openib_sendi of message %u (%zu bytes): %d (%s): %s", i, len, rc,
                 openib_strerror(rc), openib_last_error());
            break;
        }
        busy++;
        if (pump(st) < 0)
            break;
        if (now() > deadline) {
            FAIL(st, "openib_sendi: still busy at message %u after %u retries", i, busy);
            break;
        }
    }
    if (!has_failed(st) && busy == 0)
        FAIL(st, "openib_sendi never returned OPENIB_ERR_BUSY in %u messages without progress",
             (unsigned)SENDI_N);
    free(buf);
    return busy;
}

/* Atomic calls that must be refused before anything is posted (both ranks). */
static void atomics_refused(struct state *st, openib_mem_t *res) {
    int rc;
    rc = openib_fetch_add(st->t, st->peer, res, 0, &st->peer_region, CNT_OFF + 4, 1, NULL);
    if (rc != OPENIB_ERR_INVALID)
        FAIL(st, "a misaligned fetch_add returned %d, not OPENIB_ERR_INVALID", rc);
    rc = openib_compare_swap(st->t, st->peer, res, 0, &st->peer_region, CNT_OFF + 1, 0, 1, NULL);
    if (rc != OPENIB_ERR_INVALID)
        FAIL(st, "a misaligned compare_swap returned %d, not OPENIB_ERR_INVALID", rc);
    rc = openib_fetch_add(st->t, st->peer, res, 0, &st->peer_region, EXPOSED, 1, NULL);
    if (rc != OPENIB_ERR_RANGE)
        FAIL(st, "a fetch_add past the remote region returned %d, not OPENIB_ERR_RANGE", rc);
    rc = openib_fetch_add(st->t, st->peer, res, RES_LEN - 4, &st->peer_region, CNT_OFF, 1, NULL);
    if (rc != OPENIB_ERR_RANGE)
        FAIL(st, "a fetch_add past the local region returned %d, not OPENIB_ERR_RANGE", rc);
}

/* Rank 1: the atomics on rank 0's counters, every old value checked, then the note. */
static int run_atomics(struct state *st, openib_mem_t *res, double deadline) {
    uint64_t tokens[ATOMIC_N], token;
    const uint8_t *r = openib_mem_ptr(res);
    uint32_t i, k = 0;
    int rc = OPENIB_OK;
    for (i = 0; i < FA_N && rc == OPENIB_OK; i++, k++)
        rc = openib_fetch_add(st->t, st->peer, res, 8 * k, &st->peer_region, CNT_OFF,
                              (uint64_t)(i + 1) * FA_UNIT, &tokens[k]);
    for (i = 0; i < CAS_N && rc == OPENIB_OK; i++, k++)
        rc = openib_compare_swap(st->t, st->peer, res, 8 * k, &st->peer_region, CNT2_OFF, i,
                                 i + 1, &tokens[k]);
    if (rc == OPENIB_OK)
        rc = openib_compare_swap(st->t, st->peer, res, 8 * k, &st->peer_region, CNT_OFF, FA_SUM,
                                 MAGIC, &tokens[k]);
    k++;
    if (rc == OPENIB_OK) /* the value is MAGIC now: no swap */
        rc = openib_compare_swap(st->t, st->peer, res, 8 * k, &st->peer_region, CNT_OFF, FA_SUM,
                                 1, &tokens[k]);
    k++;
    if (!check(rc, "atomic", st))
        return -1;
    for (k = 0; k < ATOMIC_N; k++)
        issued(st, tokens[k]);
    wait_list = tokens;
    wait_n = ATOMIC_N;
    if (wait_until(st, tokens_completed, "the atomics", deadline) < 0)
        return -1;
    /* Executed in call order: each old value is exact. */
    for (i = 0; i < FA_N; i++) {
        uint64_t want = (uint64_t)i * (i + 1) / 2 * FA_UNIT, got = load64(r + 8 * i);
        if (got != want)
            FAIL(st, "fetch_add %u: old value %#llx, expected %#llx", i, (unsigned long long)got,
                 (unsigned long long)want);
    }
    for (i = 0; i < CAS_N; i++) {
        uint64_t got = load64(r + 8 * (FA_N + i));
        if (got != i)
            FAIL(st, "compare_swap %u on counter 2: old value %#llx, expected %#x", i,
                 (unsigned long long)got, i);
    }
    if (load64(r + 8 * (FA_N + CAS_N)) != FA_SUM)
        FAIL(st, "the swap on counter 1 saw %#llx, expected the sum %#llx",
             (unsigned long long)load64(r + 8 * (FA_N + CAS_N)), (unsigned long long)FA_SUM);
    if (load64(r + 8 * (FA_N + CAS_N + 1)) != MAGIC)
        FAIL(st, "the failing swap on counter 1 saw %#llx, expected %#llx",
             (unsigned long long)load64(r + 8 * (FA_N + CAS_N + 1)), (unsigned long long)MAGIC);
    /* After the completions: rank 0 may read its counters when this arrives. */
    if (!check(openib_send(st->t, st->peer, TAG_ATOMICS, NULL, 0, &token), "send atomics note",
               st))
        return -1;
    issued(st, token);
    return has_failed(st) ? -1 : 0;
}

/* Removes the peer while a get to it is in flight; returns 1 if all went as documented. */
static int remove_peer(struct state *st, openib_mem_t *res) {
    openib_completion_t c;
    uint64_t token = 0;
    uint32_t bad = (uint32_t)openib_size(st->t); /* one past the last rank */
    int rc, got = 0, in_flight;
    if (openib_del_procs(st->t, &bad, 1) != OPENIB_ERR_BAD_PEER)
        FAIL(st, "openib_del_procs of rank 2 of 2 was not refused with OPENIB_ERR_BAD_PEER");
    if (!check(openib_del_procs(st->t, NULL, 0), "openib_del_procs(NULL, 0)", st))
        return 0;
    /* The peer may have closed already and this endpoint seen it fail: then nothing is in
     * flight to fail. */
    rc = openib_get(st->t, st->peer, res, 0, &st->peer_region, 0, 8, &token);
    in_flight = rc == OPENIB_OK;
    if (!in_flight && rc != OPENIB_ERR_ENDPOINT_FAILED)
        FAIL(st, "openib_get before del_procs: %d (%s): %s", rc, openib_strerror(rc),
             openib_last_error());
    if (!check(openib_del_procs(st->t, &st->peer, 1), "openib_del_procs", st))
        return 0;
    while ((rc = openib_poll_completion(st->t, &c)) == 1) {
        if (in_flight && c.token == token && c.status == OPENIB_ERR_ENDPOINT_FAILED &&
            strstr(openib_last_error(), "del_procs"))
            got++;
        else
            FAIL(st, "after del_procs: completion of %llu with status %d: %s",
                 (unsigned long long)c.token, c.status, openib_last_error());
    }
    if (rc < 0)
        FAIL(st, "openib_poll_completion after del_procs: %d", rc);
    if (in_flight && got != 1)
        FAIL(st, "the get in flight at del_procs completed %d times with OPENIB_ERR_ENDPOINT_FAILED",
             got);
    rc = openib_send(st->t, st->peer, TAG_NOTE, NULL, 0, NULL);
    if (rc != OPENIB_ERR_BAD_PEER)
        FAIL(st, "openib_send to a removed peer returned %d, not OPENIB_ERR_BAD_PEER", rc);
    rc = openib_sendi(st->t, st->peer, TAG_NOTE, NULL, 0);
    if (rc != OPENIB_ERR_BAD_PEER)
        FAIL(st, "openib_sendi to a removed peer returned %d, not OPENIB_ERR_BAD_PEER", rc);
    rc = openib_fetch_add(st->t, st->peer, res, 0, &st->peer_region, CNT_OFF, 1, NULL);
    if (rc != OPENIB_ERR_BAD_PEER)
        FAIL(st, "openib_fetch_add to a removed peer returned %d, not OPENIB_ERR_BAD_PEER", rc);
    /* Removing it again is a no-op. */
    check(openib_del_procs(st->t, &st->peer, 1), "openib_del_procs (again)", st);
    return !has_failed(st);
}

int main(int argc, char **argv) {
    struct state st;
    openib_mem_t *exposed = NULL, *put_src = NULL, *get_dst = NULL, *big = NULL, *res = NULL;
    openib_remote_t mine;
    struct sender senders[2];
    pthread_t threads[2];
    uint64_t token;
    uint8_t verdict;
    char atomics[64];
    double deadline = now() + TIMEOUT_S;
    int rc, k, size, ok, atomics_ok = 0, removed = 0;
    uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 200, busy = 0;
    size_t j;

    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mu, NULL);
    st.per_stream = (n + 1) / 2;
    rc = openib_open(&st.t);
    if (rc != OPENIB_OK) {
        fprintf(stderr, "exchange: openib_open: %d (%s): %s\n", rc, openib_strerror(rc),
                openib_last_error());
        return 1;
    }
    size = openib_size(st.t);
    st.rank = (uint32_t)openib_rank(st.t);
    if (size != 2) {
        fprintf(stderr, "exchange: needs 2 ranks (got %d): openib run -n 2 -- ./exchange\n", size);
        return 1;
    }
    st.peer = 1 - st.rank;
    st.limit = (size_t)openib_eager_limit(st.t);

    /* Tag 0 is the transport's own. */
    if (openib_set_handler(st.t, 0, on_message, &st) != OPENIB_ERR_INVALID)
        FAIL(&st, "openib_set_handler(tag 0) was not refused");
    check(openib_set_handler(st.t, TAG_A, on_message, &st), "openib_set_handler", &st);
    check(openib_set_handler(st.t, TAG_B, on_message, &st), "openib_set_handler", &st);
    check(openib_set_handler(st.t, TAG_L, on_message, &st), "openib_set_handler", &st);
    check(openib_set_handler(st.t, TAG_I, on_message, &st), "openib_set_handler", &st);
    check(openib_set_handler(st.t, TAG_REGION, on_message, &st), "openib_set_handler", &st);
    check(openib_set_handler(st.t, TAG_NOTE, on_message, &st), "openib_set_handler", &st);
    check(openib_set_handler(st.t, TAG_DONE, on_message, &st), "openib_set_handler", &st);
    check(openib_set_handler(st.t, TAG_ATOMICS, on_message, &st), "openib_set_handler", &st);
    check(openib_set_handler(st.t, TAG_ECHO, on_message, &st), "openib_set_handler", &st);

    /* exposed: [0, REGION) for the peer's get, [REGION, 2 REGION) for the peer's put, then the
     * two counters of the atomics at CNT_OFF and CNT2_OFF. */
    check(openib_mem_alloc(st.t, EXPOSED, &exposed), "openib_mem_alloc", &st);
    check(openib_mem_alloc(st.t, REGION, &put_src), "openib_mem_alloc", &st);
    check(openib_mem_alloc(st.t, REGION + 2 * GET_OFF, &get_dst), "openib_mem_alloc", &st);
    check(openib_mem_alloc(st.t, SMALL_OFF + st.limit, &big), "openib_mem_alloc", &st);
    check(openib_mem_alloc(st.t, RES_LEN, &res), "openib_mem_alloc", &st);
    if (has_failed(&st))
        goto out;
    if (openib_mem_len(exposed) != EXPOSED)
        FAIL(&st, "openib_mem_len is %zu", openib_mem_len(exposed));
    for (j = 0; j < REGION; j++) {
        ((uint8_t *)openib_mem_ptr(exposed))[j] = pat(100 + st.rank, j);
        ((uint8_t *)openib_mem_ptr(put_src))[j] = pat(200 + st.rank, j);
    }
    check(openib_mem_remote(exposed, &mine), "openib_mem_remote", &st);
    if (check(openib_send(st.t, st.peer, TAG_REGION, &mine, sizeof mine, &token), "send region",
              &st))
        issued(&st, token);

    /* Two sender threads; this thread sends the mixed stream, progresses and takes
     * completions meanwhile. */
    for (k = 0; k < 2; k++) {
        senders[k].st = &st;
        senders[k].stream = k;
        if (pthread_create(&threads[k], NULL, send_stream, &senders[k]) != 0) {
            perror("pthread_create");
            return 2;
        }
    }
    send_large(&st, big);
    wait_until(&st, all_received, "the peer's messages", deadline);
    for (k = 0; k < 2; k++)
        pthread_join(threads[k], NULL);
    if (has_failed(&st))
        goto out;
    if (!st.reentrant_tried)
        FAIL(&st, "message %d of stream 0 never reached its callback", ECHO_I);
    else if (st.echo_rc != OPENIB_OK)
        FAIL(&st, "openib_send from a callback returned %d, not OPENIB_OK", st.echo_rc);
    else if (st.flush_rc != OPENIB_ERR_REENTRANT)
        FAIL(&st, "openib_flush from a callback returned %d, not OPENIB_ERR_REENTRANT",
             st.flush_rc);
    else if (st.poll_rc != OPENIB_ERR_REENTRANT)
        FAIL(&st, "openib_poll_completion from a callback returned %d, not OPENIB_ERR_REENTRANT",
             st.poll_rc);
    else if (st.progress_rc != 0)
        FAIL(&st, "openib_progress from a callback returned %d, not 0", st.progress_rc);
    else if (st.progress_poll_rc != 0 || st.progress_poll_taken != 0)
        FAIL(&st, "openib_progress_poll from a callback returned %d and took %zu, not 0 and 0",
             st.progress_poll_rc, st.progress_poll_taken);
    else if (st.echo_seen != 1)
        FAIL(&st, "our message came back %d times from the peer's callback", st.echo_seen);

    /* Get: the peer's exposed[GET_ROFF, REGION) into get_dst[GET_OFF, ...). */
    if (!check(openib_get(st.t, st.peer, get_dst, GET_OFF, &st.peer_region, GET_ROFF, GET_LEN,
                          &token),
               "openib_get", &st))
        goto out;
    issued(&st, token);
    wait_token = token;
    if (wait_until(&st, token_completed, "the get", deadline) < 0)
        goto out;
    {
        const uint8_t *g = openib_mem_ptr(get_dst);
        check_bytes(&st, "get: before", g, 0, GET_OFF, 0, 0, 1);
        check_bytes(&st, "get", g, GET_OFF, GET_OFF + GET_LEN, 100 + st.peer,
                    (long)GET_ROFF - GET_OFF, 0);
        check_bytes(&st, "get: after", g, GET_OFF + GET_LEN, openib_mem_len(get_dst), 0, 0, 1);
    }
    /* Out of range: refused before anything is posted. */
    if (openib_get(st.t, st.peer, get_dst, 1, &st.peer_region, 0, openib_mem_len(get_dst), NULL) !=
        OPENIB_ERR_RANGE)
        FAIL(&st, "an out-of-range get was not refused with OPENIB_ERR_RANGE");
    openib_mem_free(get_dst);
    get_dst = NULL;

    /* Put: put_src[PUT_OFF, PUT_OFF + PUT_LEN) to the peer's exposed[PUT_ROFF, ...). */
    if (!check(openib_put(st.t, st.peer, put_src, PUT_OFF, &st.peer_region, PUT_ROFF, PUT_LEN,
                          &token),
               "openib_put", &st))
        goto out;
    issued(&st, token);
    wait_token = token;
    if (wait_until(&st, token_completed, "the put", deadline) < 0)
        goto out;
    /* The put is complete at the peer: a message sent now arrives after its data. */
    if (check(openib_send(st.t, st.peer, TAG_NOTE, NULL, 0, &token), "send note", &st))
        issued(&st, token);
    if (wait_until(&st, got_note, "the peer's put note", deadline) < 0)
        goto out;
    {
        const uint8_t *e = openib_mem_ptr(exposed);
        check_bytes(&st, "own region (read by the peer)", e, 0, REGION, 100 + st.rank, 0, 0);
        check_bytes(&st, "put: before", e, REGION, PUT_ROFF, 0, 0, 1);
        check_bytes(&st, "put", e, PUT_ROFF, PUT_ROFF + PUT_LEN, 200 + st.peer,
                    (long)PUT_OFF - PUT_ROFF, 0);
        check_bytes(&st, "put: after", e, PUT_ROFF + PUT_LEN, 2 * REGION, 0, 0, 1);
    }

    /* Immediate sends, both ways at once. */
    busy = send_immediate(&st, deadline);
    if (has_failed(&st) || wait_until(&st, got_sendi, "the peer's sendi messages", deadline) < 0)
        goto out;

    /* Atomics: rank 1 on rank 0's counters; rank 0 reads them when rank 1 says it is done. */
    atomics_refused(&st, res);
    if (st.rank == 1) {
        if (run_atomics(&st, res, deadline) < 0)
            goto out;
    } else {
        const uint8_t *e = openib_mem_ptr(exposed);
        if (wait_until(&st, got_atomics, "rank 1's atomics", deadline) < 0)
            goto out;
        if (load64(e + CNT_OFF) != MAGIC)
            FAIL(&st, "counter 1 is %#llx after rank 1's atomics, expected %#llx",
                 (unsigned long long)load64(e + CNT_OFF), (unsigned long long)MAGIC);
        if (load64(e + CNT2_OFF) != CAS_N)
            FAIL(&st, "counter 2 is %#llx after rank 1's atomics, expected %#x",
                 (unsigned long long)load64(e + CNT2_OFF), CAS_N);
        check_bytes(&st, "atomics: before the counters", e, 2 * REGION, CNT_OFF, 0, 0, 1);
    }
    atomics_ok = !has_failed(&st);

out:
    /* Verdicts both ways, then flush: every token must have completed exactly once. */
    verdict = has_failed(&st) ? 0 : 1;
    if (check(openib_send(st.t, st.peer, TAG_DONE, &verdict, 1, &token), "send verdict", &st))
        issued(&st, token);
    wait_until(&st, got_done, "the peer's verdict", deadline);
    check(openib_flush(st.t, 30000), "openib_flush", &st);
    pump(&st);
    pthread_mutex_lock(&st.mu);
    qsort(st.issued, st.n_issued, sizeof *st.issued, cmp_u64);
    qsort(st.completed, st.n_completed, sizeof *st.completed, cmp_u64);
    if (st.n_issued != st.n_completed ||
        (st.n_issued && memcmp(st.issued, st.completed, st.n_issued * sizeof *st.issued) != 0))
        fail_locked(&st, "%zu operations issued, %zu completions, or their tokens differ",
                    st.n_issued, st.n_completed);
    for (j = 1; j < st.n_issued; j++)
        if (st.issued[j] == st.issued[j - 1])
            fail_locked(&st, "token %llu issued twice", (unsigned long long)st.issued[j]);
    pthread_mutex_unlock(&st.mu);

    if (res && st.have_region)
        removed = remove_peer(&st, res);
    check(openib_close(st.t), "openib_close", &st);
    /* Regions outlive the handle until freed. */
    if (exposed && openib_mem_len(exposed) != EXPOSED)
        FAIL(&st, "a region did not survive openib_close");
    openib_mem_free(exposed);
    openib_mem_free(put_src);
    openib_mem_free(get_dst);
    openib_mem_free(big);
    openib_mem_free(res);

    ok = !st.errors && st.peer_verdict;
    if (!atomics_ok)
        snprintf(atomics, sizeof atomics, "not checked");
    else if (st.rank == 1)
        snprintf(atomics, sizeof atomics, "ok (%d old values)", ATOMIC_N);
    else
        snprintf(atomics, sizeof atomics, "ok (counters %#llx, %d)", (unsigned long long)MAGIC,
                 CAS_N);
    printf("exchange: rank %u %s: %u messages each way (%llu bytes received, sizes 0..%zu, "
           "2 sender threads), %u mixed messages (%u rendezvous, up to %zu B, %llu bytes, "
           "2 by send_mem), %u sendi (%u busy), get %d B and put %d B checked, atomics %s, "
           "del_procs %s, %zu completions, peer %s%s%s\n",
           st.rank, ok ? "ok" : "FAILED", st.rx[0].next + st.rx[1].next,
           (unsigned long long)(st.rx[0].bytes + st.rx[1].bytes), st.limit, st.rx_large.next,
           st.rx_large.rndv, st.rx_large.max, (unsigned long long)st.rx_large.bytes,
           st.rx_sendi.next, busy, GET_LEN, PUT_LEN, atomics, removed ? "ok" : "not checked", st.n_completed,
           st.peer_done ? (st.peer_verdict ? "ok" : "FAILED") : "silent",
           st.errors ? "; first error: " : "", st.errors ? st.first_error : "");
    free(st.issued);
    free(st.completed);
    return ok ? 0 : 1;
}
