/*
 * Tests between network namespaces: the parent makes them and runs the
 * program again inside one of them through `ip netns exec`, as
 * `PROG --in-netns NS_A NS_B`; the helpers below run the commands.
 */
#ifndef OTE_MP_NETNS_H
#define OTE_MP_NETNS_H

#include "mp_util.h"
#include "proto/proto.h"

#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The namespaces mp_netns_delete removes: A, and B (or, with b_count > 0, B_0 .. B_<b_count - 1>). */
struct mp_netns_owned {
    char a[32], b[32];
    int  b_count;
};

static inline struct mp_netns_owned *mp_netns_owned(void)
{
    static struct mp_netns_owned owned;

    return &owned;
}

static inline void mp_netns_delete(void)
{
    const struct mp_netns_owned *o = mp_netns_owned();

    mp_cmd(true, "ip netns del %s", o->a);
    if (o->b_count == 0)
        mp_cmd(true, "ip netns del %s", o->b);
    for (int c = 0; c < o->b_count; c++)
        mp_cmd(true, "ip netns del %s_%d", o->b, c);
}

static inline void mp_netns_on_signal(int sig)
{
    mp_netns_delete();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The test's namespaces (see mp_netns_owned) go however it ends: at exit or on a signal. */
static inline void mp_netns_delete_at_exit(const char *ns_a, const char *ns_b, int b_count)
{
    struct mp_netns_owned *o = mp_netns_owned();

    snprintf(o->a, sizeof(o->a), "%s", ns_a);
    snprintf(o->b, sizeof(o->b), "%s", ns_b);
    o->b_count = b_count;
    atexit(mp_netns_delete);
    signal(SIGINT, mp_netns_on_signal);
    signal(SIGTERM, mp_netns_on_signal);
    signal(SIGHUP, mp_netns_on_signal);
}

/*
 * Add namespaces A and B (prog names the test), both deleted however the
 * test ends: 0, or 77 having said why they cannot be.
 */
static inline int mp_netns_add_both(const char *prog, const char *ns_a, const char *ns_b)
{
    int rc = mp_netns_add_first(prog, ns_a);

    if (rc != 0)
        return rc;
    mp_netns_delete_at_exit(ns_a, ns_b, 0);
    if (mp_cmd(false, "ip netns add %s", ns_b) != 0) {
        printf("%s: skipped: cannot add a second namespace\n", prog);
        return 77;
    }
    return 0;
}

/*
 * A veth pair <pfx><id>a<k> / <pfx><id>b<k> moved into A and B, named dev on
 * both sides, with <net>.1/24 in A and <net>.2/24 in B (net "10.81.0"), up.
 */
static inline int mp_netns_veth(const char *ns_a, const char *ns_b, const char *pfx, unsigned id,
                                int k, const char *dev, const char *net)
{
    if (mp_cmd(false, "ip link add %s%ua%d type veth peer name %s%ub%d", pfx, id, k, pfx, id,
               k) != 0 ||
        mp_cmd(false, "ip link set %s%ua%d netns %s", pfx, id, k, ns_a) != 0 ||
        mp_cmd(false, "ip link set %s%ub%d netns %s", pfx, id, k, ns_b) != 0 ||
        mp_cmd(false, "ip -n %s link set %s%ua%d name %s", ns_a, pfx, id, k, dev) != 0 ||
        mp_cmd(false, "ip -n %s link set %s%ub%d name %s", ns_b, pfx, id, k, dev) != 0 ||
        mp_cmd(false, "ip -n %s addr add %s.1/24 dev %s", ns_a, net, dev) != 0 ||
        mp_cmd(false, "ip -n %s addr add %s.2/24 dev %s", ns_b, net, dev) != 0 ||
        mp_cmd(false, "ip -n %s link set %s up", ns_a, dev) != 0 ||
        mp_cmd(false, "ip -n %s link set %s up", ns_b, dev) != 0)
        return -1;
    return 0;
}

/*
 * Wait, up to 10 s, until dev in ns is running (operstate "up"): the kernel
 * sets IFF_RUNNING from a deferred work item that it rate-limits while
 * other links change (a test beside this one taking its links down), so
 * `ip link set up` returning does not mean the engine sees the device yet.
 * 0 once it is up, -1 if it never came.
 */
static inline int mp_netns_wait_up(const char *ns, const char *dev)
{
    for (int i = 0; i < 200; i++) {
        if (mp_cmd(true, "ip netns exec %s grep -qx up /sys/class/net/%s/operstate", ns, dev) ==
            0)
            return 0;
        usleep(50000);
    }
    return -1;
}

/* Run this program (self) again inside A as `self --in-netns A B`: its exit status. */
static inline int mp_netns_run_child(const char *self, const char *ns_a, const char *ns_b)
{
    const char *child[] = {"ip", "netns", "exec", ns_a, self, "--in-netns", ns_a, ns_b, NULL};

    return mp_run(child, false);
}

/*
 * The parent of a test between two "hosts" A and B joined by devs[0..n)
 * (veth pairs <pfx><id>a<k>/b<k>, named alike on both sides, devs[k] on
 * <net>.<nets[k]>.0/24, A .1 and B .2), loopback up: makes them, deletes
 * them however the test ends, runs the tests in A. 77 (said why) without
 * root, `ip netns`, or `tc` where need_tc.
 */
static inline int mp_netns_hosts(const char *prog, const char *self, const char *ns_a,
                                 const char *ns_b, const char *pfx, unsigned id, const char *net,
                                 const char *const *devs, const int *nets, int n, bool need_tc)
{
    int rc = mp_netns_add_both(prog, ns_a, ns_b);

    if (rc != 0)
        return rc;
    if (need_tc && mp_cmd(true, "tc -V") != 0) {
        printf("%s: skipped: no tc\n", prog);
        return 77;
    }
    for (int k = 0; k < n; k++) {
        char sub[32];

        snprintf(sub, sizeof(sub), "%s.%d", net, nets[k]);
        if (mp_netns_veth(ns_a, ns_b, pfx, id, k, devs[k], sub) != 0) {
            printf("%s: skipped: cannot set up the veth pairs\n", prog);
            return 77;
        }
    }
    if (mp_cmd(false, "ip -n %s link set lo up", ns_a) != 0 ||
        mp_cmd(false, "ip -n %s link set lo up", ns_b) != 0)
        return 77;
    for (int k = 0; k < n; k++) {
        if (mp_netns_wait_up(ns_a, devs[k]) != 0 || mp_netns_wait_up(ns_b, devs[k]) != 0) {
            printf("%s: %s not up within 10 s of `ip link set up`\n", prog, devs[k]);
            return 1;
        }
    }
    return mp_netns_run_child(self, ns_a, ns_b);
}

/*
 * main() of a test between namespaces: inside them (--in-netns) in_netns_tests();
 * outside, name them <prefix>_a<id> and <prefix>_b<id> (id from the pid)
 * and run parent(self, id). ns_a and ns_b hold 32 bytes.
 */
static inline int mp_netns_main(int argc, char **argv, const char *prefix, char *ns_a,
                                char *ns_b, int (*in_netns_tests)(void),
                                int (*parent)(const char *self, unsigned id))
{
    unsigned id = (unsigned)getpid() % 100000u;
    char path[4096];
    const char *self;

    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (mp_netns_child(argc, argv, ns_a, 32, ns_b, 32))
        return in_netns_tests();
    snprintf(ns_a, 32, "%s_a%u", prefix, id);
    snprintf(ns_b, 32, "%s_b%u", prefix, id);
    self = mp_netns_self(path, sizeof(path));
    return self != NULL ? parent(self, id) : 1;
}

/* ---- An engine pair across the namespaces (the tests inside A) -------------------- */

/*
 * The usual group setup of these tests: start the engine pair (this engine on
 * tls listening on listen_a, the test target in namespace B as `ip netns exec
 * B [env ENV_B] ote_test_target ARGS_B`, env_b NULL for none, region bytes of
 * local memory), say the target's name, check that it begins with name_on
 * where that is not NULL (the link the name and descriptor must travel on,
 * "10.82.9.2:"), and open the target's segment into (*fx_p)->seg. 0, or -1
 * having said why; a pair that started is in *fx_p for the teardown.
 */
static inline int mp_netns_pair_open(ote_test_pair_t **fx_p, const char *ns_b, const char *env_b,
                                     const char *tls, const char *listen_a,
                                     const char *const *args_b, size_t region,
                                     const char *name_on)
{
    const char *wrap_b[] = {"ip", "netns", "exec", ns_b, env_b != NULL ? "env" : NULL, env_b,
                            NULL};
    ote_test_pair_t *fx  = ote_test_pair_start(tls, listen_a, wrap_b, args_b, region);

    *fx_p = fx;
    if (fx == NULL)
        return -1;
    printf("target %s\n", fx->target.name);
    if (name_on != NULL && strncmp(fx->target.name, name_on, strlen(name_on)) != 0) {
        printf("the target's name is not on the link of %s\n", name_on);
        return -1;
    }
    return ote_segment_open(fx->e, fx->target.name, &fx->seg) == OTE_OK ? 0 : -1;
}

/*
 * The usual group teardown: the root qdisc of each of tc_devs (NULL-terminated,
 * or NULL) removed (where a test shaped the link), then the pair stopped.
 */
static inline void mp_netns_pair_stop(ote_test_pair_t **fx_p, const char *const *tc_devs)
{
    for (size_t i = 0; tc_devs != NULL && tc_devs[i] != NULL; i++)
        mp_cmd(true, "tc qdisc del dev %s root", tc_devs[i]);
    if (*fx_p != NULL)
        ote_test_pair_stop(*fx_p);
    *fx_p = NULL;
}

/* dev's bandwidth limited to rate (tc's words: "100mbit"), its former qdisc removed; 0 on success. */
static inline int mp_netns_shape(const char *dev, const char *rate)
{
    mp_cmd(true, "tc qdisc del dev %s root", dev);
    return mp_cmd(false, "tc qdisc add dev %s root tbf rate %s burst 512k latency 200ms", dev,
                  rate);
}

/* `ip link set DEV state` for each of devs (NULL-terminated), each asserted to succeed. */
static inline void mp_netns_links_set(const char *const *devs, const char *state)
{
    for (size_t i = 0; devs[i] != NULL; i++)
        assert_int_equal(mp_cmd(false, "ip link set %s %s", devs[i], state), 0);
}

/* Every rail of seg paused for its port (cooldown UINT64_MAX): the engine saw the links go. */
static inline bool mp_rails_link_down(ote_segment_h seg)
{
    ote_rail_info_t r[OTE_PROTO_MAX_RAILS];
    size_t n = 0, down = 0;

    assert_int_equal(ote_segment_rails(seg, r, OTE_PROTO_MAX_RAILS, &n), OTE_OK);
    for (size_t i = 0; i < n && i < OTE_PROTO_MAX_RAILS; i++)
        down += r[i].cooldown_ms == UINT64_MAX;
    return n > 0 && down == n;
}

#endif
