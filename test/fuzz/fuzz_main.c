/*
 * Entry point shared by every fuzz target (each defines
 * LLVMFuzzerTestOneInput and may define LLVMFuzzerInitialize).
 *
 * Built with --enable-fuzzers (clang, libFuzzer): with arguments it is a
 * plain libFuzzer binary (./fuzz_desc -max_total_time=3600 corpus/...);
 * without arguments, as `make check` runs it, it fuzzes for
 * $OTE_FUZZ_SECONDS (default 20) seconds from the seed corpus and the
 * regression inputs, writing what it learns to ./fuzz/<name>.corpus/ and any
 * crashing input to ./fuzz/<name>-crash-*, and exits 1 on a finding (a test
 * failure; libFuzzer's own 77 would read as a skipped test).
 *
 * Built without it: replays the seed corpus and regression inputs (or the
 * files and folders given as arguments) once, so `make check` exercises
 * every decoder on them with any compiler.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

#ifndef OTE_FUZZ_NAME
#error "OTE_FUZZ_NAME must name the target"
#endif
#ifndef OTE_FUZZ_DIR
#error "OTE_FUZZ_DIR must name test/fuzz in the source tree"
#endif

static const char *seed_dir(void)
{
    static char path[4096];

    snprintf(path, sizeof(path), "%s/corpus/%s", OTE_FUZZ_DIR, OTE_FUZZ_NAME);
    return path;
}

static const char *regress_dir(void)
{
    static char path[4096];

    snprintf(path, sizeof(path), "%s/regress/%s", OTE_FUZZ_DIR, OTE_FUZZ_NAME);
    return path;
}

static int is_dir(const char *p)
{
    struct stat st;

    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

#ifdef OTE_FUZZ_LIBFUZZER

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*cb)(const uint8_t *, size_t));

int main(int argc, char **argv)
{
    char time_arg[64], artifact[256], work[256];
    const char *secs = getenv("OTE_FUZZ_SECONDS");
    char *args[16];
    char **av = args;
    int n = 0;

    if (argc > 1)
        return LLVMFuzzerRunDriver(&argc, &argv, LLVMFuzzerTestOneInput);
    snprintf(time_arg, sizeof(time_arg), "-max_total_time=%s", secs && *secs ? secs : "20");
    snprintf(artifact, sizeof(artifact), "-artifact_prefix=fuzz/%s-", OTE_FUZZ_NAME);
    snprintf(work, sizeof(work), "fuzz/%s.corpus", OTE_FUZZ_NAME);
    mkdir("fuzz", 0755);
    if (mkdir(work, 0755) != 0 && errno != EEXIST) {
        perror(work);
        return 1;
    }
    args[n++] = argv[0];
    args[n++] = time_arg;
    args[n++] = artifact;
    args[n++] = "-print_final_stats=1";
    /*
     * libFuzzer exits 77 on a finding by default, which the test driver
     * reads as SKIP: a finding must be a FAIL.
     */
    args[n++] = "-error_exitcode=1";
    args[n++] = "-timeout_exitcode=1";
    args[n++] = "-max_len=65536";
    args[n++] = work; /* first folder: where new inputs go */
    args[n++] = (char *)seed_dir();
    if (is_dir(regress_dir()))
        args[n++] = (char *)regress_dir();
    args[n] = NULL;
    return LLVMFuzzerRunDriver(&n, &av, LLVMFuzzerTestOneInput);
}

#else

static long replayed;

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long len;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "%s: cannot read\n", path);
        if (f)
            fclose(f);
        return -1;
    }
    buf = malloc(len ? (size_t)len : 1);
    if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "%s: cannot read\n", path);
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)len);
    free(buf);
    replayed++;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_path(const char *path)
{
    char **names = NULL;
    size_t count = 0, cap = 0;
    struct dirent *de;
    DIR *d;
    int rc = 0;

    if (!is_dir(path))
        return replay_file(path);
    d = opendir(path);
    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (count == cap) {
            char **n;

            cap   = cap ? 2 * cap : 64;
            n     = realloc(names, cap * sizeof(*names));
            if (n == NULL) {
                rc = -1;
                break;
            }
            names = n;
        }
        names[count] = malloc(strlen(path) + strlen(de->d_name) + 2);
        if (names[count] == NULL) {
            rc = -1;
            break;
        }
        sprintf(names[count], "%s/%s", path, de->d_name);
        count++;
    }
    closedir(d);
    /* A fixed order, so that a failure reproduces. */
    qsort(names, count, sizeof(*names), cmp_names);
    for (size_t i = 0; i < count; i++) {
        if (rc == 0 && replay_file(names[i]) != 0)
            rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = 0;

    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            rc |= replay_path(argv[i]);
    } else {
        if (!is_dir(seed_dir())) {
            fprintf(stderr, "no seed corpus at %s\n", seed_dir());
            return 1;
        }
        rc |= replay_path(seed_dir());
        if (is_dir(regress_dir()))
            rc |= replay_path(regress_dir());
    }
    printf("%s: %ld inputs replayed\n", OTE_FUZZ_NAME, replayed);
    return rc ? 1 : 0;
}

#endif
