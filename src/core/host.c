/* Host identity: peers with the same one may use intra-host transports. */
#include "select.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");

    buf[0] = '\0';
    if (f == NULL)
        return;
    if (fgets(buf, (int)len, f) == NULL)
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
}

void ote_host_id(char *buf, size_t len)
{
    char machine[64], boot[64];
    struct stat st;
    unsigned long long netns = 0;

    read_line("/etc/machine-id", machine, sizeof(machine));
    read_line("/proc/sys/kernel/random/boot_id", boot, sizeof(boot));
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
