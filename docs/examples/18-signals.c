/* 18-signals.c -- graceful shutdown: SIGTERM (or SIGINT) reaches a vthread
 * through weft_signal_wait, which shuts the server's scope down; each task
 * cleans up in a shield, and close waits for that. */
#include <weft.h>

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const int64_t MS = 1000000;
static atomic_int cleaned;

/* serves requests from the queue until cancelled, then cleans up:
 * blocking calls in a shield run */
static int worker(void *arg, void **result) {
    weft_chan *requests = arg;
    (void)result;
    int req, r;
    while ((r = weft_chan_recv(requests, &req)) == 0) {
        /* handle req (none come in this example) */
    }
    if (r != -ECANCELED) return r;
    weft_shield sh;
    weft_shield_begin(&sh, weft_now() + 1000 * MS); /* cleanup gets 1 s at most */
    if (weft_sleep(10 * MS) == 0) atomic_fetch_add(&cleaned, 1); /* e.g. a goodbye send */
    return weft_shield_end(&sh); /* -ECANCELED: the cancellation applies again */
}

static int run(void *arg) {
    (void)arg;
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGINT);
    sigaddset(&ss, SIGTERM);
    int r = weft_signal_notify(&ss); /* first: from here on they are caught */
    if (r < 0) return r;
    weft_chan *requests;
    if ((r = weft_chan_create(&requests, sizeof(int), 16)) < 0) return r;
    weft_scope *s;
    if ((r = weft_scope_create(&s, WEFT_SCOPE_ALL, 0)) < 0) {
        weft_chan_free(requests);
        return r;
    }
    for (int i = 0; i < 3; i++)
        if ((r = weft_fork_released(s, worker, requests)) < 0) break;
    kill(getpid(), SIGTERM); /* what a supervisor (systemd, kubectl) sends */
    int sig = weft_signal_wait(&ss, 0);
    printf("%s: shutting down\n", sig > 0 ? strsignal(sig) : strerror(-sig));
    weft_scope_shutdown(s); /* cancels every task */
    weft_scope_join(s);     /* -ECANCELED: shut down from outside */
    weft_scope_close(s);    /* waits for their cleanup */
    weft_chan_free(requests);
    printf("%d workers cleaned up\n", atomic_load(&cleaned));
    return r < 0 ? r : 0;
}

int main(void) {
    int r = weft_main(run, NULL);
    if (r < 0) fprintf(stderr, "signals: %s\n", strerror(-r));
    return r == 0 ? 0 : 1;
}
