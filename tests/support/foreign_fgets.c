/*
 * A program weft did not compile, that waits where the C library makes the
 * system call itself: it says "ready", then fgets a line from stdin (stdio's
 * own read(2), not the PLT's), says what it got, and exits 0.
 *
 * test_console runs it under weft-run with a console and looks at it with
 * weft-top while it waits: main is foreign, has its own TLS, and is parked
 * in a trapped read at this file's fgets.
 */
#include <stdio.h>
#include <string.h>

int main(void) {
    printf("ready\n");
    fflush(stdout);
    char line[128];
    if (!fgets(line, sizeof line, stdin)) return 1;
    printf("got %s", line);
    return strcmp(line, "go\n") != 0;
}
