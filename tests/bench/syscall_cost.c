/* What one system call costs where openib's waiting loops run (docs/PERFORMANCE.md, "Costs
 * in the guest"): 20,000 calls each of clock_gettime, sched_yield, a non-blocking accept4 on an
 * idle listener, getppid, poll of one descriptor, and rdtsc, timed by CLOCK_MONOTONIC.
 *
 *   gcc -O2 -o target/cmp/syscall_cost tests/bench/syscall_cost.c
 *   tests/softroce/guest run --smp 2 -- target/cmp/syscall_cost
 */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  const int n = 20000;
  int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (l < 0 || bind(l, (void *)&a, sizeof a) != 0 || listen(l, 4) != 0) {
    perror("listener");
    return 1;
  }
  const char *names[] = {"clock_gettime", "sched_yield", "accept4 (nothing)", "getppid",
                         "poll (1 fd, 0)", "rdtsc"};
  for (int k = 0; k < 6; k++) {
    double t0 = seconds();
    for (int i = 0; i < n; i++) {
      struct timespec t;
      struct pollfd p = {l, POLLIN, 0};
      switch (k) {
      case 0: clock_gettime(CLOCK_MONOTONIC, &t); break;
      case 1: sched_yield(); break;
      case 2: accept4(l, 0, 0, SOCK_NONBLOCK); break;
      case 3: getppid(); break;
      case 4: poll(&p, 1, 0); break;
      case 5: __rdtsc(); break;
      }
    }
    printf("%-18s %.2f us\n", names[k], (seconds() - t0) / n * 1e6);
  }
  return 0;
}
