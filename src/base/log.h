/* Leveled logging to stderr, threshold from OTE_LOG_LEVEL. */
#ifndef OTE_BASE_LOG_H
#define OTE_BASE_LOG_H

#include <stdatomic.h>

typedef enum {
    OTE_LOG_NONE = 0,
    OTE_LOG_ERROR,
    OTE_LOG_WARN,
    OTE_LOG_INFO,
    OTE_LOG_DEBUG,
    OTE_LOG_TRACE,
} ote_log_level_t;

/* Set by every engine that is created, read by every thread that logs. */
extern _Atomic int ote_log_level_current;

/* Parse "error", "warn", "info", "debug", "trace", "none"; -1 if unknown. */
int  ote_log_level_parse(const char *s);
void ote_log_set_level(int level);
void ote_log_emit(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define ote_log(_lvl, ...)                                                 \
    do {                                                                   \
        if ((_lvl) <= atomic_load_explicit(&ote_log_level_current,       \
                                           memory_order_relaxed))         \
            ote_log_emit((_lvl), __FILE__, __LINE__, __VA_ARGS__);         \
    } while (0)

#define ote_error(...) ote_log(OTE_LOG_ERROR, __VA_ARGS__)
#define ote_warn(...)  ote_log(OTE_LOG_WARN, __VA_ARGS__)
#define ote_info(...)  ote_log(OTE_LOG_INFO, __VA_ARGS__)
#define ote_debug(...) ote_log(OTE_LOG_DEBUG, __VA_ARGS__)
#define ote_trace(...) ote_log(OTE_LOG_TRACE, __VA_ARGS__)

#endif
