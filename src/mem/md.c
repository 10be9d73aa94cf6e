/* Memory domains: defaults for what a domain lacks. */
#include "mem.h"

ote_status_t ote_md_unsupported_rkey_pack(ote_md_t *md, void *memh, void *buf, size_t max,
                                          size_t *length_p)
{
    return OTE_ERR_UNSUPPORTED;
}
