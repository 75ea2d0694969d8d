/* io_probe: can weft use io_uring here?  Starts the runtime with io_uring
 * asked for by name (no fallback) and says so: exit 0 and "io_uring: yes",
 * or exit 1 and weft's own line telling why not (on stderr).  Used by
 * scripts/test.sh to decide whether the io_uring passes can run. */
#include "weft.h"

#include <stdio.h>

int main(void) {
    weft_runtime_opts cfg = {.carriers = 1, .io = WEFT_IO_URING};
    if (weft_init(&cfg) < 0) return 1;
    int ok = weft_io_backend() == WEFT_IO_URING;
    weft_shutdown();
    if (ok) printf("io_uring: yes\n");
    return ok ? 0 : 1;
}
