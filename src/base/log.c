#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Atomic int ote_log_level_current = OTE_LOG_WARN;

static const char *const level_names[] = {"none", "error", "warn", "info", "debug", "trace"};

int ote_log_level_parse(const char *s)
{
    for (int i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++) {
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    }
    if (strcasecmp(s, "warning") == 0)
        return OTE_LOG_WARN;
    return -1;
}

void ote_log_set_level(int level)
{
    atomic_store_explicit(&ote_log_level_current, level, memory_order_relaxed);
}

void ote_log_emit(int level, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    struct timespec ts;
    va_list ap;
    const char *base = strrchr(file, '/');

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    clock_gettime(CLOCK_REALTIME, &ts);
    /* One fprintf call per line so that lines from threads do not interleave. */
    fprintf(stderr, "[%ld.%06ld] ote %d:%ld %-5s %s:%d %s\n", (long)ts.tv_sec,
            ts.tv_nsec / 1000, (int)getpid(), (long)syscall(SYS_gettid),
            level_names[level], base ? base + 1 : file, line, msg);
}
