/* Selection of transports and devices (OTE_TLS, OTE_NET_DEVICES): select.c. */
#ifndef OTE_CORE_SELECT_H
#define OTE_CORE_SELECT_H

#include <ote/ote.h>
#include <stdbool.h>

typedef struct ote_select ote_select_t;
ote_status_t ote_select_parse(const char *tls, const char *devices, ote_select_t **sel_p);
bool         ote_select_tl(ote_select_t *sel, const char *tl_name);
bool         ote_select_device(ote_select_t *sel, const char *dev_name);
/*
 * A device that passed ote_select_device was used (why NULL), or why it
 * could not be. A name listed without ^ whose devices all came back with a
 * reason fails ote_select_check_unmatched, with those reasons: a device
 * named explicitly is used or the engine does not start.
 */
void         ote_select_device_result(ote_select_t *sel, const char *dev_name,
                                      const char *why);
/*
 * Names listed explicitly that matched nothing offered here (every resource
 * passed through ote_select_tl and, if a network one, ote_select_device),
 * or only devices reported unusable: OTE_ERR_NO_DEVICE, with a log line
 * naming them and what is here.
 */
ote_status_t ote_select_check_unmatched(ote_select_t *sel);
/* OTE_TLS is an exclusion list (^...) that names tl_name. */
bool         ote_select_excludes(const ote_select_t *sel, const char *tl_name);
void         ote_select_free(ote_select_t *sel);

/* host.c: this machine's id (OTE_HOST_ID, else derived from the machine). */
void ote_host_id(char *buf, size_t len);

#endif
