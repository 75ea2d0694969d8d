/* no_uring CMD [ARGS...]: runs CMD with io_uring forbidden (no_uring.h), as
 * in a container with the default seccomp profile.  For trying weft, the
 * tests or scripts/test.sh there:  build-release/tests/no_uring scripts/test.sh */
#include "no_uring.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CMD [ARGS...]\n", argv[0]);
        return 2;
    }
    int r = forbid_io_uring();
    if (r < 0) {
        fprintf(stderr, "no_uring: cannot install the seccomp filter: %s\n", strerror(-r));
        return 2;
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "no_uring: %s: %s\n", argv[1], strerror(errno));
    return 127;
}
