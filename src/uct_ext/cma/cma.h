/*
 * Native cma component: single-copy transfers between processes of one host
 * with process_vm_readv/writev, checked by the target.
 *
 * It is the tcp component's connection code (tcp/) in by-reference mode over
 * an abstract AF_UNIX stream socket: the initiator names its own buffer in
 * PUT_REF/GET_REF, the target checks the range against its region table
 * (region, bounds, access flag), holds the region while it copies, and
 * copies between its memory and the initiator's (pid from SO_PEERCRED).
 * A PROBE right after HELLO finds a peer the kernel will not let us reach
 * (ptrace permission, Yama, another pid namespace) before the rail is used.
 */
#ifndef OTE_CMA_H
#define OTE_CMA_H

#include "base/par.h"
#include "uct_ext/tcp/tcp.h"

#include <stdbool.h>
#include <sys/types.h>
#include <sys/un.h>

/* Abstract socket names start with this; peers' addresses are checked for it. */
#define OTE_CMA_NAME_PREFIX "orbitte-cma."
/* Largest piece copied under one region guard: deregistration waits at most this long. */
#define OTE_CMA_GUARD_CHUNK (4u << 20)
/* How long one check that the connected process lives stands (cma_copy.c). */
#define OTE_CMA_PEER_RECHECK_NS (1000ull * 1000)
/* Answers from the peer are polled for while they keep coming this often. */
#define OTE_CMA_POLL_NS (1000u * 1000u)
/* A reply to a copy of at least this much is sent at once, not with the next ones. */
#define OTE_CMA_REPLY_NOW (64u << 10)

/*
 * Copy length bytes between local (this process) and peer_addr in process
 * pid; to_peer: write into the peer, else read from it. Partial copies are
 * continued; errors map to statuses (ESRCH: REMOTE_DISCONNECT, EPERM:
 * UNREACHABLE, others: IO).
 */
ote_status_t ote_cma_copy(pid_t pid, void *local, uint64_t peer_addr, size_t length,
                          bool to_peer);

/*
 * Target side: PUT_REF, GET_REF and PROBE (ote_tcp_ref_handle_t). Copies
 * are deferred to the end of the receive call (ote_cma_target_flush,
 * ote_tcp_ref_flush_t), which serves the requests read together in groups.
 */
void ote_cma_target_handle(ote_tcp_conn_t *c, const ote_tcp_hdr_t *h, uint64_t peer_addr);
void ote_cma_target_flush(ote_tcp_conn_t *c);

/* Initiator side: the PROBE exchange after HELLO (ote_tcp_connect_hook_t). */
ote_status_t ote_cma_probe(ote_tcp_iface_t *iface, int fd, const ote_tl_peer_t *peer,
                           uint64_t deadline);

/* Peer address blob: the abstract socket name without its leading NUL. */
ote_status_t ote_cma_addr_unpack(const void *buf, size_t len, struct sockaddr_storage *ss,
                                 socklen_t *sslen_p);

/* Largest name: sun_path less the leading NUL of the abstract namespace. */
#define OTE_CMA_NAME_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* The cma iface; the shm component builds on it. */
typedef struct {
    ote_tcp_iface_t tcp;
    char            name[OTE_CMA_NAME_MAX + 1]; /* abstract socket name, without NUL */
    size_t          name_len;
    uint64_t        last_event_ns; /* last progress call that handled something */
    ote_par_t      *par;           /* copy threads (OTE_CMA_COPY_THREADS), or NULL */
} ote_cma_iface_t;

/* A round's copies of at least this many bytes are shared with the copy threads. */
#define OTE_CMA_PAR_SPLIT (256u * 1024)
/* Largest piece of a shared copy one thread takes. */
#define OTE_CMA_PAR_PIECE (256u * 1024)

/*
 * The settings of an iface on cma's connection code, each component reading
 * them from its own table: OTE_CMA_* for cma, OTE_SHM_* for shm
 * (OTE_CMA_CONFIG_ENTRIES).
 */
typedef struct {
    long   copy_threads;
    size_t max_msg; /* <prefix>STREAM_MAX_MSG */
} ote_cma_config_t;

/*
 * The entries of ote_cma_config_t at _base (offset of the struct in the
 * table's options struct): COPY_THREADS, with _threads_alias as its former
 * name (NULL: none), and the stream settings nested as STREAM_*.
 */
#define OTE_CMA_CONFIG_ENTRIES(_base, _threads_alias)                                         \
    {"COPY_THREADS", "-1", OTE_CFG_INT, (_base) + offsetof(ote_cma_config_t, copy_threads),   \
     "Threads per worker that share a progress round's copies with the thread running it "    \
     "once they add up to 256 KiB (cma: the target's process_vm_readv/writev; shm: the "      \
     "initiator's memcpy through mappings); -1 = one less than the CPUs this process may "    \
     "run on, at most 3; 0 = that thread copies alone.",                                      \
     .min = -1, .max = OTE_PAR_MAX, .alias = (_threads_alias)},                               \
        OTE_TCP_STREAM_MAX_MSG_ENTRY((_base) + offsetof(ote_cma_config_t, max_msg))

/* Peer address blob (ote_cma_addr_unpack) as a list of one (ote_tcp_hooks_t.addr_unpack). */
ote_status_t ote_cma_addr_unpack_list(const void *buf, size_t len, ote_tcp_sockaddr_t *out,
                                      size_t max, size_t *count_p);
/* cma's hooks on the connection code (by reference, its address, the probe). */
extern const ote_tcp_hooks_t ote_cma_hooks;

/*
 * Fill a zeroed iface as cma's (listener, epoll, copy threads) with the
 * given hooks (ote_cma_hooks, or a component's built on them) but for its
 * ops tables, which the caller sets; on error the caller closes it with
 * ote_cma_iface_close.
 */
ote_status_t ote_cma_iface_setup(ote_cma_iface_t *iface, const ote_tl_resource_t *res,
                                 const ote_tl_iface_params_t *params,
                                 const ote_cma_config_t *cfg, const ote_tcp_hooks_t *hooks);
void         ote_cma_iface_close(ote_tl_iface_t *iface);
void         ote_cma_iface_query(ote_tl_iface_t *iface, ote_tl_caps_t *caps_p);
ote_status_t ote_cma_iface_get_address(ote_tl_iface_t *iface, void *buf, size_t max,
                                       size_t *len_p);
unsigned     ote_cma_iface_progress(ote_tl_iface_t *iface);
ote_status_t ote_cma_iface_event_arm(ote_tl_iface_t *iface);
/* The iface ops of cma and of shm, which has its own query, progress, event_arm, close. */
#define OTE_CMA_IFACE_OPS_INIT(_query, _progress, _event_arm, _close)                      \
    {                                                                                      \
        .close          = (_close),                                                        \
        .query          = (_query),                                                        \
        .get_address    = ote_cma_iface_get_address,                                       \
        .event_fd       = ote_tcp_iface_event_fd,                                          \
        .progress       = (_progress),                                                     \
        .event_arm      = (_event_arm),                                                    \
        .check_timeouts = ote_tcp_iface_check_timeouts,                                    \
        .has_deadlines  = ote_tcp_iface_has_deadlines,                                     \
        .ep_create      = ote_tcp_ep_create,                                               \
        .format_address = ote_tl_no_format_address,                                        \
        .ep_open        = ote_tl_unsupported_ep_open,                                      \
        .ep_accept      = ote_tl_unsupported_ep_accept,                                    \
        .ep_release     = ote_tl_no_ep_release,                                            \
    }
/* process_vm_readv works in this process (the kernel has it, seccomp allows it). */
bool         ote_cma_available(void);
/*
 * The one resource ("memory") of a component on cma's connection code, named
 * as the component; none where process_vm_readv is not allowed.
 */
ote_status_t ote_cma_query_resources(ote_tl_component_t *comp,
                                     const ote_tl_iface_params_t *params,
                                     ote_tl_resource_t **res_p, size_t *count_p);

#endif
