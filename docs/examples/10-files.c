/* 10-files.c -- a file channel: asynchronous appends coalesced into few
 * writes, completion handlers, a blocking-style read, a close that loses
 * nothing. */
#include <weft.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { LINES = 1000, LINE = 10 };

static weft_latch handlers_left = WEFT_LATCH_INIT(LINES);

/* a completion handler: runs on the file's executor once a write is done */
static void written(ssize_t res, void *ctx) {
    if (res != LINE) fprintf(stderr, "write %ld: %s\n", (long)(intptr_t)ctx, strerror((int)-res));
    weft_latch_count_down(&handlers_left);
}

static int run(void *arg) {
    (void)arg;
    char path[256];
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/weft-guide-%d.txt", dir && *dir ? dir : "/tmp", (int)getpid());
    weft_file *f;
    int r = weft_file_create(&f, path, WEFT_READ | WEFT_WRITE | WEFT_CREATE | WEFT_TRUNCATE | WEFT_DELETE_ON_CLOSE,
                             0600, NULL);
    if (r < 0) return r;

    /* 1000 ten-byte writes: each short buffer is copied when accepted, so
     * `line` may be reused at once; adjacent ones go out as one pwritev */
    weft_future *last = NULL;
    for (int i = 0; i < LINES; i++) {
        char line[LINE + 1];
        snprintf(line, sizeof line, "line %04d\n", i);
        weft_future *fu = weft_file_write_async(f, line, LINE, (off_t)i * LINE, written, (void *)(intptr_t)i);
        if (!fu) {
            r = -ENOMEM;
            break;
        }
        weft_future_unref(last); /* dropping a reference does not cancel the write */
        last = fu;
    }
    void *v;
    if (r == 0) r = weft_future_get(last, &v, 0); /* done in order: so are all before it */
    weft_future_unref(last);
    if (r == 0) r = weft_latch_await(&handlers_left);
    if (r == 0) r = weft_file_force(f, 0); /* fdatasync */
    off_t size = weft_file_size(f);
    char buf[LINE + 1] = {0};
    ssize_t n = weft_file_read(f, buf, LINE, (off_t)(LINES - 1) * LINE); /* parks until read */
    int c = weft_file_close(f); /* completes what was accepted, then deletes the file */
    if (r == 0 && size < 0) r = (int)size;
    if (r == 0 && n < 0) r = (int)n;
    if (r == 0) r = c;
    if (r < 0) return r;
    printf("%lld bytes written, last line: %s", (long long)size, buf);
    printf("deleted on close: %s\n", access(path, F_OK) != 0 ? "yes" : "no");
    return 0;
}

int main(void) {
    int r = weft_main(run, NULL);
    if (r < 0) fprintf(stderr, "files: %s\n", strerror(-r));
    return r == 0 ? 0 : 1;
}
