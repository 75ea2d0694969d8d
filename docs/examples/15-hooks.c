/* 15-hooks.c -- blocking code weft did not write: with the libc hooks on,
 * a plain read() or usleep() on a vthread parks it instead of blocking
 * its carrier.  One carrier here: without the hooks the reader's read()
 * would hold it, the writer could never run, and the program would hang. */
#include <weft.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int fds[2];

/* stands for a library's code: plain libc calls, errno-style errors */
static void *reader(void *arg) {
    (void)arg;
    char buf[32] = {0};
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    if (n < 0) printf("read: %s\n", strerror(errno));
    else printf("reader got \"%s\"\n", buf);
    return NULL;
}

static void *writer(void *arg) {
    (void)arg;
    usleep(10000); /* parks too */
    if (write(fds[1], "hello", 5) != 5) perror("write");
    return NULL;
}

static int run(void *arg) {
    (void)arg;
    printf("hooks active: %s\n", weft_hook_active() ? "yes" : "no");
    if (pipe(fds) < 0) return -errno;
    weft_thread *r, *w;
    int e = weft_spawn(&r, reader, NULL, NULL);
    if (e == 0) {
        if ((e = weft_spawn(&w, writer, NULL, NULL)) == 0) weft_join(w, NULL);
        else weft_close(fds[1]), fds[1] = -1; /* no writer: end of file ends the read */
        weft_join(r, NULL);
    }
    weft_close(fds[0]);
    if (fds[1] >= 0) weft_close(fds[1]);
    return e;
}

int main(void) {
    weft_runtime_opts cfg = {.carriers = 1, .hook = WEFT_HOOK_ON};
    int r = weft_init(&cfg);
    if (r == 0) r = weft_main(run, NULL);
    if (r < 0) fprintf(stderr, "hooks: %s\n", strerror(-r));
    return r == 0 ? 0 : 1;
}
