/*
 * Tests between network namespaces: the parent makes them and runs the
 * program again inside one of them through `ip netns exec`, as
 * `PROG --in-netns NS_A NS_B`; the helpers below run the commands.
 */
#ifndef OTE_MP_NETNS_H
#define OTE_MP_NETNS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run argv (quiet: without its output) and wait for it: its exit status. */
static inline int mp_run(const char *const *argv, bool quiet)
{
    pid_t pid = fork();
    int status;

    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (quiet) {
            (void)!freopen("/dev/null", "w", stdout);
            (void)!freopen("/dev/null", "w", stderr);
        }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) != pid) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Run a shell-free command line of up to 15 words; 0 on success. */
static inline int mp_cmd(bool quiet, const char *fmt, ...)
{
    char line[512], *argv[16], *save = NULL;
    int n = 0;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    for (char *w = strtok_r(line, " ", &save); w != NULL && n < 15;
         w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    argv[n] = NULL;
    return mp_run((const char *const *)argv, quiet);
}

/*
 * This program's path, for the parent to run it again in a namespace (the
 * child runs under `ip`, where /proc/self/exe would be ip itself); NULL if
 * unknown.
 */
static inline const char *mp_netns_self(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);

    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    return buf;
}

/* Whether this is the run inside the namespaces: then the names are copied to ns_a, ns_b. */
static inline bool mp_netns_child(int argc, char **argv, char *ns_a, size_t a_len, char *ns_b,
                                  size_t b_len)
{
    if (argc != 4 || strcmp(argv[1], "--in-netns") != 0)
        return false;
    snprintf(ns_a, a_len, "%s", argv[2]);
    snprintf(ns_b, b_len, "%s", argv[3]);
    return true;
}

/*
 * Add namespace ns, the first of a test (prog names it): 0, or 77 (the
 * exit status of a skipped test) having said why it cannot.
 */
static inline int mp_netns_add_first(const char *prog, const char *ns)
{
    if (geteuid() != 0) {
        printf("%s: skipped: needs root to create network namespaces\n", prog);
        return 77;
    }
    if (mp_cmd(true, "ip netns add %s", ns) != 0) {
        printf("%s: skipped: `ip netns add` failed (no ip tool or no permission)\n", prog);
        return 77;
    }
    return 0;
}

#endif
