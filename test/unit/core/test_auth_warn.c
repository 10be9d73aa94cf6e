/* The warning about running without OTE_AUTH_KEY is printed once per process, whatever the
 * number of engines it creates; an engine with a key prints none. */
#include <ote/ote.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WARNING "no OTE_AUTH_KEY"

/* Creates and destroys n engines with stderr sent to a temporary file; returns how many
 * lines of that file hold the warning, or -1 on an error. */
static int warnings_for(int n)
{
    FILE *tmp = tmpfile();
    char line[2048];
    int saved, count = 0;

    if (tmp == NULL)
        return -1;
    fflush(stderr);
    saved = dup(STDERR_FILENO);
    if (saved < 0 || dup2(fileno(tmp), STDERR_FILENO) < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
        ote_engine_h e;

        if (ote_engine_create(&p, &e) != OTE_OK) {
            count = -1;
            break;
        }
        ote_engine_destroy(e);
    }
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(tmp);
    while (count >= 0 && fgets(line, sizeof(line), tmp) != NULL) {
        fputs(line, stderr); /* keep what the engines printed in the test's log */
        if (strstr(line, WARNING) != NULL)
            count++;
    }
    fclose(tmp);
    return count;
}

int main(void)
{
    int n;

    /* A key first: no warning, and the once-per-process latch is not spent. */
    setenv("OTE_AUTH_KEY", "0123456789abcdef0123456789abcdef", 1);
    unsetenv("OTE_AUTH_KEY_FILE");
    n = warnings_for(2);
    if (n != 0) {
        fprintf(stderr, "with a key: %d warnings, expected 0\n", n);
        return 1;
    }
    unsetenv("OTE_AUTH_KEY");
    n = warnings_for(3);
    if (n != 1) {
        fprintf(stderr, "three engines without a key: %d warnings, expected 1\n", n);
        return 1;
    }
    n = warnings_for(2);
    if (n != 0) {
        fprintf(stderr, "two more engines without a key: %d warnings, expected 0\n", n);
        return 1;
    }
    printf("the OTE_AUTH_KEY warning was printed once for five engines without a key\n");
    return 0;
}
