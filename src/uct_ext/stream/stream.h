/*
 * Stream connection base of the native tcp, cma and shm components: a
 * connection over a stream socket with its framing (stream_wire.h),
 * authentication (base/auth.h), request queues, endpoints that reconnect,
 * and the iface that listens and progresses them. Each component gives its
 * ifaces hooks (ote_stream_hooks_t) for what it adds: tcp its addresses;
 * cma and shm the by-reference mode over a local socket (stream_local.c,
 * stream_ref.c).
 *
 * This header is what the components include from stream/; the base's own
 * files include it too, and nothing else of stream/ is included outside it.
 * It gathers the base's headers, one idea each:
 *   stream_wire.h   the framing: message header, types, capabilities
 *   stream_hooks.h  what a component adds (ote_stream_hooks_t)
 *   stream_conn.h   the connection (stream_conn.c, stream_rx.c)
 *   stream_iface.h  the iface and its settings (stream_iface.c)
 *   stream_ep.h     the endpoint (stream_ep.c)
 *   stream_local.h  the local mode of cma and shm (stream_local.c, stream_ref.c)
 */
#ifndef OTE_STREAM_H
#define OTE_STREAM_H

#include "stream_wire.h"
#include "stream_hooks.h"
#include "stream_conn.h"
#include "stream_iface.h"
#include "stream_ep.h"
#include "stream_local.h"

#endif
