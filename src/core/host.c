/* Host identity: peers with the same one may use intra-host transports. */
#include "select.h"

#include "base/util.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

void ote_host_id(char *buf, size_t len)
{
    char machine[64], boot[64];
    struct stat st;
    unsigned long long netns = 0;

    (void)ote_read_attr("/etc/machine-id", machine, sizeof(machine));
    (void)ote_read_attr("/proc/sys/kernel/random/boot_id", boot, sizeof(boot));
    /*
     * The network namespace is part of the identity: processes in different
     * namespaces are treated as different hosts (that is how tests model
     * several hosts on one machine), and their sockets cannot meet anyway.
     */
    if (stat("/proc/self/ns/net", &st) == 0)
        netns = (unsigned long long)st.st_ino;
    snprintf(buf, len, "%.40s/%.40s/%llu", machine[0] ? machine : "-", boot[0] ? boot : "-",
             netns);
}
