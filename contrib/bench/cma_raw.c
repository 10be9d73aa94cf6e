/*
 * Reference: the kernel's single-copy rate between two processes, the
 * ceiling of any cma transport. A child holds a 1 MiB buffer on CPU A; the
 * parent, on CPU B, copies 1 MiB from it (process_vm_readv, what a target
 * does for a WRITE) and into it (process_vm_writev, what UCX's put does and
 * a target does for a READ), the same buffers every time.
 * Usage: cma_raw [ITERS [CPU_CHILD CPU_PARENT]]; CPU -1 leaves it unbound.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LEN (1u << 20)

static double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void bind_cpu(int cpu)
{
    cpu_set_t set;

    if (cpu < 0)
        return;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
        perror("sched_setaffinity");
}

int main(int argc, char **argv)
{
    int iters      = argc > 1 ? atoi(argv[1]) : 4000;
    int cpu_child  = argc > 3 ? atoi(argv[2]) : 1;
    int cpu_parent = argc > 3 ? atoi(argv[3]) : 0;
    char *peer = malloc(LEN), *local = malloc(LEN);
    pid_t child;

    if (peer == NULL || local == NULL || iters <= 0)
        return 1;
    memset(peer, 1, LEN);
    memset(local, 2, LEN);
    child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        bind_cpu(cpu_child);
        pause();
        _exit(0);
    }
    bind_cpu(cpu_parent);
    for (int write = 0; write < 2; write++) {
        double t0 = now_s(), s;

        for (int i = 0; i < iters; i++) {
            /* After fork the child's buffer is at the same address. */
            struct iovec l = {.iov_base = local, .iov_len = LEN};
            struct iovec r = {.iov_base = peer, .iov_len = LEN};
            ssize_t n = write ? process_vm_writev(child, &l, 1, &r, 1, 0)
                              : process_vm_readv(child, &l, 1, &r, 1, 0);

            if (n != (ssize_t)LEN) {
                perror(write ? "process_vm_writev" : "process_vm_readv");
                kill(child, SIGKILL);
                return 1;
            }
        }
        s = now_s() - t0;
        printf("%s 1 MiB x %d: %.2f GB/s\n", write ? "process_vm_writev" : "process_vm_readv",
               iters, (double)LEN * iters / s / 1e9);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 0;
}
