/* What registering memory costs against copying it, where openib runs (docs/PERFORMANCE.md,
 * "Costs in the guest"): for 64 KiB, 256 KiB and 1 MiB, three times each, the time
 * of calloc, of ibv_reg_mr on the fresh (untouched) buffer, of writing it once (memset), of
 * ibv_dereg_mr, of ibv_reg_mr plus ibv_dereg_mr of the same buffer now touched, of an mmap with
 * MAP_POPULATE, and of ibv_reg_mr of that mapping. Timed by CLOCK_MONOTONIC, in ms.
 *
 *   gcc -O2 -o target/cmp/reg_cost tests/bench/reg_cost.c -libverbs
 *   tests/softroce/guest run --smp 4 -- target/cmp/reg_cost
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(void) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    fprintf(stderr, "reg_cost: no RDMA device\n");
    return 1;
  }
  struct ibv_context *ctx = ibv_open_device(list[0]);
  struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
  if (!pd) {
    fprintf(stderr, "reg_cost: cannot open %s\n", ibv_get_device_name(list[0]));
    return 1;
  }
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
               IBV_ACCESS_REMOTE_ATOMIC;
  size_t sizes[] = {65536, 262144, 1048576};
  for (int s = 0; s < 3; s++) {
    size_t len = sizes[s];
    for (int rep = 0; rep < 3; rep++) {
      double t0 = ms();
      char *buf = calloc(1, len);
      double t1 = ms();
      struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, access);
      double t2 = ms();
      memset(buf, 1, len);
      double t3 = ms();
      ibv_dereg_mr(mr);
      double t4 = ms();
      mr = ibv_reg_mr(pd, buf, len, access);
      ibv_dereg_mr(mr);
      double t5 = ms();
      free(buf);
      double t6 = ms();
      void *map = mmap(NULL, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
      double t7 = ms();
      mr = ibv_reg_mr(pd, map, len, access);
      double t8 = ms();
      if (!mr) {
        perror("reg_cost: ibv_reg_mr");
        return 1;
      }
      ibv_dereg_mr(mr);
      munmap(map, len);
      printf("%7zu calloc %.2f reg(fresh) %.2f memset %.2f dereg %.2f reg+dereg(touched) %.2f "
             "mmap_populate %.2f reg(populated) %.2f ms\n",
             len, t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t7 - t6, t8 - t7);
    }
  }
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
