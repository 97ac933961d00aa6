/*
 * exchange: the C ABI end to end between two ranks (run: `openib run -n 2 -- ./exchange [N]`).
 *
 * Each rank
 *   1. sets receive callbacks and sends the peer the remote handle of a registered region;
 *   2. sends N messages (default 200) of varying sizes, 0 up to the eager limit, from two
 *      threads at once (tags 1 and 5, N/2 each) while a third thread also progresses, and
 *      checks every message it receives: its length and each byte, in order per tag;
 *   3. gets part of the peer's region and checks it byte by byte;
 *   4. puts into the peer's region, tells the peer when the put completed, and checks what
 *      the peer put into its own region byte by byte (and that the bytes around it are
 *      untouched);
 *   5. checks that a call from inside a callback is refused (OPENIB_ERR_REENTRANT), that every
 *      operation's token completed exactly once with status 0, exchanges verdicts, flushes
 *      and closes.
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

#define REGION (64 * 1024 + 13) /* odd on purpose */
#define GET_OFF 16              /* where the get lands in the local region */
#define GET_ROFF 7              /* where it reads in the peer's */
#define GET_LEN (REGION - GET_ROFF)
#define PUT_OFF 5         /* where the put reads locally */
#define PUT_ROFF (REGION + 3) /* where it lands in the peer's exposed region */
#define PUT_LEN (REGION - 8)
#define TIMEOUT_S 240

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

struct stream {
    uint32_t next;  /* messages received */
    uint64_t bytes; /* their bytes */
};

struct state {
    openib_t *t;
    uint32_t rank, peer;
    size_t limit;
    uint32_t per_stream;
    pthread_mutex_t mu; /* guards everything below (callbacks may run on any progress thread) */
    struct stream rx[2];
    int have_region;
    openib_remote_t peer_region;
    int notes;
    int peer_done, peer_verdict;
    int reentrant_rc, reentrant_tried;
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

/* The receive callback of every tag. Runs inside openib_progress with the handle's lock held. */
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
        if (!st->reentrant_tried) {
            /* The handle's lock is held: a call into the same handle must be refused. */
            st->reentrant_tried = 1;
            st->reentrant_rc = openib_send(st->t, st->peer, TAG_A, "x", 1, NULL);
        }
        if (i >= st->per_stream) {
            fail_locked(st, "tag %u: message %u is one too many", tag, i);
        } else if (len != want) {
            fail_locked(st, "tag %u message %u: %zu bytes, expected %zu", tag, i, len, want);
        } else {
            uint32_t seed = msg_seed(src, s, i);
            size_t j;
            for (j = 0; j < len; j++) {
                if (b[j] != pat(seed, j)) {
                    fail_locked(st, "tag %u message %u (%zu bytes): byte %zu is %u, expected %u",
                                tag, i, len, j, b[j], pat(seed, j));
                    break;
                }
            }
        }
        st->rx[s].bytes += len;
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

/* One round of progress, then every completion into st->completed. */
static int pump(struct state *st) {
    openib_completion_t c;
    int rc = openib_progress(st->t);
    if (rc < 0) {
        FAIL(st, "openib_progress: %d (%s): %s", rc, openib_strerror(rc), openib_last_error());
        return -1;
    }
    while ((rc = openib_poll_completion(st->t, &c)) == 1) {
        pthread_mutex_lock(&st->mu);
        if (c.status != OPENIB_OK)
            fail_locked(st, "operation %llu to rank %u failed: %d (%s): %s",
                        (unsigned long long)c.token, c.peer, c.status, openib_strerror(c.status),
                        openib_last_error());
        else if (c.peer != st->peer)
            fail_locked(st, "completion names rank %u", c.peer);
        push(&st->completed, &st->n_completed, &st->cap_completed, c.token);
        pthread_mutex_unlock(&st->mu);
    }
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
           st->senders_done == 2 && st->have_region;
}
static int got_note(struct state *st) { return st->notes >= 1; }
static int got_done(struct state *st) { return st->peer_done; }

static uint64_t wait_token;
static int token_completed(struct state *st) {
    size_t k;
    for (k = 0; k < st->n_completed; k++)
        if (st->completed[k] == wait_token)
            return 1;
    return 0;
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

int main(int argc, char **argv) {
    struct state st;
    openib_mem_t *exposed = NULL, *put_src = NULL, *get_dst = NULL;
    openib_remote_t mine;
    struct sender senders[2];
    pthread_t threads[2];
    uint64_t token;
    uint8_t verdict;
    double deadline = now() + TIMEOUT_S;
    int rc, k, size, ok;
    uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 200;
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
    check(openib_set_handler(st.t, TAG_REGION, on_message, &st), "openib_set_handler", &st);
    check(openib_set_handler(st.t, TAG_NOTE, on_message, &st), "openib_set_handler", &st);
    check(openib_set_handler(st.t, TAG_DONE, on_message, &st), "openib_set_handler", &st);

    /* exposed: [0, REGION) for the peer's get, [REGION, 2 REGION) for the peer's put. */
    check(openib_mem_alloc(st.t, 2 * REGION, &exposed), "openib_mem_alloc", &st);
    check(openib_mem_alloc(st.t, REGION, &put_src), "openib_mem_alloc", &st);
    check(openib_mem_alloc(st.t, REGION + 2 * GET_OFF, &get_dst), "openib_mem_alloc", &st);
    if (has_failed(&st))
        goto out;
    if (openib_mem_len(exposed) != 2 * REGION)
        FAIL(&st, "openib_mem_len is %zu", openib_mem_len(exposed));
    for (j = 0; j < REGION; j++) {
        ((uint8_t *)openib_mem_ptr(exposed))[j] = pat(100 + st.rank, j);
        ((uint8_t *)openib_mem_ptr(put_src))[j] = pat(200 + st.rank, j);
    }
    check(openib_mem_remote(exposed, &mine), "openib_mem_remote", &st);
    if (check(openib_send(st.t, st.peer, TAG_REGION, &mine, sizeof mine, &token), "send region",
              &st))
        issued(&st, token);

    /* Two sender threads; this thread progresses and takes completions meanwhile. */
    for (k = 0; k < 2; k++) {
        senders[k].st = &st;
        senders[k].stream = k;
        if (pthread_create(&threads[k], NULL, send_stream, &senders[k]) != 0) {
            perror("pthread_create");
            return 2;
        }
    }
    wait_until(&st, all_received, "the peer's messages", deadline);
    for (k = 0; k < 2; k++)
        pthread_join(threads[k], NULL);
    if (has_failed(&st))
        goto out;
    if (st.reentrant_rc != OPENIB_ERR_REENTRANT)
        FAIL(&st, "openib_send from a callback returned %d, not OPENIB_ERR_REENTRANT",
             st.reentrant_rc);

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

    check(openib_close(st.t), "openib_close", &st);
    /* Regions outlive the handle until freed. */
    if (exposed && openib_mem_len(exposed) != 2 * REGION)
        FAIL(&st, "a region did not survive openib_close");
    openib_mem_free(exposed);
    openib_mem_free(put_src);
    openib_mem_free(get_dst);

    ok = !st.errors && st.peer_verdict;
    printf("exchange: rank %u %s: %u messages each way (%llu bytes received, sizes 0..%zu, "
           "2 sender threads), get %d B and put %d B checked, %zu completions, peer %s%s%s\n",
           st.rank, ok ? "ok" : "FAILED", st.rx[0].next + st.rx[1].next,
           (unsigned long long)(st.rx[0].bytes + st.rx[1].bytes), st.limit, GET_LEN, PUT_LEN,
           st.n_completed, st.peer_done ? (st.peer_verdict ? "ok" : "FAILED") : "silent",
           st.errors ? "; first error: " : "", st.errors ? st.first_error : "");
    free(st.issued);
    free(st.completed);
    return ok ? 0 : 1;
}
