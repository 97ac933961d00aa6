/*
 * open_fail LIBPATH: loads libopenib.so the way a C runtime does (dlopen + dlsym, nothing linked)
 * and checks the calls that need no RDMA device: NULL arguments are refused with
 * OPENIB_ERR_INVALID and a message, and openib_open on a machine without a device fails with
 * a clean code, leaves the handle NULL and says why. Prints what it saw ("open: CODE NAME" and
 * "error: MESSAGE") for the Rust test to check; exits 0 when every check passed.
 */
#define _POSIX_C_SOURCE 200809L
#include "openib.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The layouts the header promises (C99: a negative array size fails the build). */
typedef char remote_is_24_bytes[sizeof(openib_remote_t) == 24 ? 1 : -1];
typedef char remote_len_at_16[offsetof(openib_remote_t, len) == 16 ? 1 : -1];
typedef char completion_token_at_8[offsetof(openib_completion_t, token) == 8 ? 1 : -1];
typedef char completion_status_at_16[offsetof(openib_completion_t, status) == 16 ? 1 : -1];

static int failures;

static void expect(int cond, const char *what) {
    if (!cond) {
        printf("FAILED: %s\n", what);
        failures++;
    }
}

/* dlsym into a function pointer without the object-to-function pointer cast C forbids. */
#define LOAD(h, name, fp)                                        \
    do {                                                         \
        void *sym_ = dlsym((h), (name));                         \
        if (!sym_) {                                             \
            printf("FAILED: %s is not exported: %s\n", (name), dlerror()); \
            return 1;                                            \
        }                                                        \
        memcpy(&(fp), &sym_, sizeof(fp));                        \
    } while (0)

int main(int argc, char **argv) {
    int (*p_open)(openib_t **);
    int (*p_close)(openib_t *);
    int (*p_rank)(const openib_t *);
    int (*p_send)(openib_t *, uint32_t, uint8_t, const void *, size_t, uint64_t *);
    int (*p_mem_alloc)(openib_t *, size_t, openib_mem_t **);
    const char *(*p_last_error)(void);
    const char *(*p_strerror)(int);
    openib_t *t = (openib_t *)&failures; /* not NULL: openib_open must reset it */
    openib_mem_t *m = (openib_mem_t *)&failures;
    void *h;
    int rc;

    if (argc != 2) {
        fprintf(stderr, "usage: open_fail LIBPATH\n");
        return 2;
    }
    h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAILED: dlopen: %s\n", dlerror());
        return 1;
    }
    LOAD(h, "openib_open", p_open);
    LOAD(h, "openib_close", p_close);
    LOAD(h, "openib_rank", p_rank);
    LOAD(h, "openib_send", p_send);
    LOAD(h, "openib_mem_alloc", p_mem_alloc);
    LOAD(h, "openib_last_error", p_last_error);
    LOAD(h, "openib_strerror", p_strerror);

    expect(strcmp(p_last_error(), "") == 0, "last error is empty before any failure");
    expect(p_open(NULL) == OPENIB_ERR_INVALID, "openib_open(NULL) is OPENIB_ERR_INVALID");
    expect(strstr(p_last_error(), "openib_open") && strstr(p_last_error(), "NULL"),
           "the NULL error names the function and NULL");
    expect(p_rank(NULL) == OPENIB_ERR_INVALID, "openib_rank(NULL)");
    expect(p_send(NULL, 0, 1, "x", 1, NULL) == OPENIB_ERR_INVALID, "openib_send(NULL, ...)");
    expect(p_mem_alloc(NULL, 8, &m) == OPENIB_ERR_INVALID && m == NULL,
           "openib_mem_alloc(NULL, ...) fails and resets *out");
    expect(p_close(NULL) == OPENIB_OK, "openib_close(NULL) is a no-op");
    expect(strcmp(p_strerror(OPENIB_ERR_NO_DEVICE), "no RDMA device") == 0, "openib_strerror");

    rc = p_open(&t);
    printf("open: %d %s\n", rc, p_strerror(rc));
    printf("error: %s\n", p_last_error());
    if (rc == OPENIB_OK) {
        printf("FAILED: openib_open succeeded (is there an RDMA device?)\n");
        p_close(t);
        return 1;
    }
    expect(rc < 0, "openib_open returned a negative code");
    expect(t == NULL, "openib_open left the handle NULL");
    expect(strncmp(p_last_error(), "openib_open: ", 13) == 0, "the error names openib_open");
    dlclose(h);
    return failures ? 1 : 0;
}
