#include <ote/ote.h>

const char *ote_status_string(ote_status_t status)
{
    switch (status) {
    case OTE_OK:                    return "success";
    case OTE_INPROGRESS:            return "operation in progress";
    case OTE_ERR_INVALID_PARAM:     return "invalid parameter";
    case OTE_ERR_NO_MEMORY:         return "out of memory";
    case OTE_ERR_NOT_REGISTERED:    return "address not inside a registered region";
    case OTE_ERR_OUT_OF_BOUNDS:     return "range crosses the end of a region";
    case OTE_ERR_ACCESS:            return "region lacks the needed access flag";
    case OTE_ERR_UNREACHABLE:       return "no transport reaches both memories";
    case OTE_ERR_NOT_FOUND:         return "no such segment or peer";
    case OTE_ERR_TIMEOUT:           return "timed out";
    case OTE_ERR_CANCELED:          return "canceled";
    case OTE_ERR_REMOTE_DISCONNECT: return "remote peer disconnected";
    case OTE_ERR_BUSY:
        return "busy: the batch is full, an admission limit is reached or the peer's backlog is "
               "full";
    case OTE_ERR_IO:                return "input/output error";
    case OTE_ERR_UNSUPPORTED:       return "operation not supported";
    case OTE_ERR_PROTOCOL:          return "malformed or incompatible peer message";
    case OTE_ERR_AUTH:
        return "authentication failed: OTE_AUTH_KEY is set on one side only or differs between "
               "the two, or the metadata store refused its password (the log says which)";
    case OTE_ERR_EXISTS:            return "already exists";
    case OTE_ERR_PEER_RESTARTED:    return "the peer restarted: the instance this segment was opened on is gone";
    case OTE_ERR_NO_DEVICE:         return "no transport or device of that name";
    case OTE_ERR_STORE_UNAVAILABLE: return "the metadata store did not answer";
    case OTE_ERR_REMOTE_NOT_REGISTERED:
        return "remote address not inside any region the peer registered";
    }
    return "unknown status";
}

const char *ote_version(void)
{
    return OTE_VERSION_STRING;
}
