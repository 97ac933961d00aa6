/* memcpy of one buffer whole against in pieces of 512 B-4 KiB (docs/PERFORMANCE.md, "Costs
 * in the guest"): 200 copies per size, MB/s = 1e6 B/s.
 *
 *   gcc -O2 -o target/cmp/copy_pieces tests/bench/copy_pieces.c
 *   target/cmp/copy_pieces                                          # natively
 *   tests/softroce/guest run --smp 2 -- target/cmp/copy_pieces      # under TCG
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  const size_t sizes[] = {65536, 262144, 1048576};
  const size_t pieces[] = {0, 512, 1024, 2048, 4096}; /* 0: whole */
  const int reps = 200;
  for (int si = 0; si < 3; si++) {
    size_t n = sizes[si];
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) return 1;
    memset(a, 1, n);
    memset(b, 2, n);
    for (int pi = 0; pi < 5; pi++) {
      size_t c = pieces[pi];
      double t0 = seconds();
      for (int r = 0; r < reps; r++) {
        if (!c)
          memcpy(b, a, n);
        else
          for (size_t o = 0; o < n; o += c) memcpy(b + o, a + o, c);
        __asm__ volatile("" ::"r"(b) : "memory");
      }
      printf("size %7zu piece %5zu: %8.1f MB/s\n", n, c, n * (double)reps / (seconds() - t0) / 1e6);
    }
    free(a);
    free(b);
  }
  return 0;
}
