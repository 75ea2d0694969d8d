/*
 * weft-httpd's acceptors and signal watcher: the vthreads that take new
 * connections and the one that starts the drain (the design is httpd.c's
 * essay, "Limits" and "Drain").
 *
 * One acceptor per carrier, each in weft_accept on the listening socket
 * (and with --tls-port one more per carrier on the HTTPS one).  A connection slot (nconns, shared with every model) is taken
 * before the accept and given back by conn_slot_free when the connection's
 * descriptor is closed, which also wakes an acceptor parked at
 * --max-conns.  The descriptor reserve (reserve_fd, one /dev/null opened
 * by main) is what an acceptor gives up at EMFILE to accept and shed a
 * newcomer; one acceptor at a time takes it (an exchange), and whoever
 * finds it missing re-arms it before its next accept.  The signal watcher
 * waits in weft_signal_wait (main asked for SIGTERM and SIGINT with
 * weft_signal_notify, cli.c): the first SIGTERM/SIGINT sets
 * `draining`, cancels the acceptors and ends idle connections' waits; a
 * second one sets drain_cut.
 */
#define _GNU_SOURCE
#include "httpd_int.h"

/* ------------------------------------------------------------------------ */
/* the acceptors (dispatch, in models.c, hands a connection to the model)     */
/* ------------------------------------------------------------------------ */

int listen_fd = -1, tls_listen_fd = -1, listen_tls;
_Atomic int reserve_fd = -1;
weft_thread *acceptors[64];
int nacceptors;
weft_thread *_Atomic acceptor_waiting[64];
_Atomic int64_t drain_started;

/* Puts fd back as the reserve, unless another acceptor re-armed it first. */
static void reserve_put(int fd) {
    int expect = -1;
    if (!atomic_compare_exchange_strong(&reserve_fd, &expect, fd)) close(fd);
}

/* The spare descriptor, given up to shed load at EMFILE, comes back as soon
 * as a descriptor can be had again: an acceptor that finds it missing tries
 * before each accept (the shedding acceptor's own re-arm can lose the race
 * for the number it freed to another thread opening a file or accepting).
 * While it is there this is one load; while it is missing, one failing
 * open() per accept, and accepts at EMFILE are 10 ms apart. */
static void reserve_rearm(void) {
    if (atomic_load_explicit(&reserve_fd, memory_order_relaxed) >= 0) return;
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) reserve_put(fd);
}

/* A connection ended (its descriptor closed): one more may be accepted. */
void conn_slot_free(void) {
    atomic_fetch_sub(&nopen, 1);
    atomic_fetch_sub(&nconns, 1);
    for (int i = 0; i < nacceptors; i++) {
        weft_thread *a = atomic_exchange(&acceptor_waiting[i], NULL);
        if (a) weft_unpark(a);
    }
}

static void log_limited(const char *what, int err) {
    static _Atomic int64_t last;
    int64_t now = weft_now();
    if (now - atomic_load(&last) < NS) return;
    atomic_store(&last, now);
    fprintf(stderr, "weft-httpd: %s: %s\n", what, strerror(err));
}

/* Acceptor me's listening socket, and whether it speaks TLS: the first
 * half of the acceptors take --port's connections, the second half
 * --tls-port's when there is one (server.c starts twice as many then). */
static int acceptor_socket(int me, int *tls) {
    if (tls_listen_fd >= 0 && me >= nacceptors / 2) {
        *tls = 1;
        return tls_listen_fd;
    }
    *tls = listen_tls;
    return listen_fd;
}

void *acceptor_main(void *arg) {
    int me = (int)(intptr_t)arg, tls;
    int lfd = acceptor_socket(me, &tls);
    while (!atomic_load(&draining)) {
        /* take a connection slot before accepting (several acceptors share
         * the limit); at the limit wait for a connection to end */
        int n = atomic_load(&nconns);
        if (n >= O.max_conns) {
            atomic_store(&acceptor_waiting[me], weft_self());
            if (atomic_load(&nconns) >= O.max_conns && weft_park(weft_now() + NS / 10) == -ECANCELED) return NULL;
            atomic_store(&acceptor_waiting[me], NULL);
            continue;
        }
        if (!atomic_compare_exchange_weak(&nconns, &n, n + 1)) continue;
        reserve_rearm();
        struct sockaddr_storage peer;
        socklen_t pl = sizeof peer;
        int fd = weft_accept(lfd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) atomic_fetch_sub(&nconns, 1); /* the slot was not used */
        if (fd == -ECANCELED) break;
        if (fd == -EMFILE || fd == -ENFILE) {
            log_limited("accept (out of file descriptors; shedding connections)", -fd);
            /* one acceptor at a time gives up the reserve (the exchange) */
            int rfd = atomic_exchange(&reserve_fd, -1);
            if (rfd >= 0) {
                close(rfd);
                pl = sizeof peer;
                int x = accept4(lfd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC | SOCK_NONBLOCK);
                /* Out of descriptors still?  The EMFILE may be stale: on a
                 * loaded machine the accept's completion can be handled
                 * after the connections that filled the table have gone.
                 * If the reserve can be had back while x is open, there
                 * is room: serve x rather than shed it. */
                int spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (x >= 0 && spare >= 0 && atomic_fetch_add(&nconns, 1) < O.max_conns) {
                    reserve_put(spare);
                    atomic_fetch_add(&nopen, 1);
                    if (dispatch(x, &peer, weft_now(), tls) < 0) {
                        close(x);
                        conn_slot_free();
                    }
                    continue;
                }
                if (x >= 0 && spare >= 0) atomic_fetch_sub(&nconns, 1); /* at the limit after all */
                if (x >= 0) close(x); /* shed */
                if (spare < 0) spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (spare >= 0) reserve_put(spare);
            }
            weft_sleep(10 * 1000000);
            continue;
        }
        if (fd < 0) {
            if (fd != -ECONNABORTED && fd != -EINTR) log_limited("accept", -fd);
            if (fd == -ENOBUFS || fd == -ENOMEM) weft_sleep(10 * 1000000);
            continue;
        }
        if (atomic_load_explicit(&reserve_fd, memory_order_relaxed) < 0) {
            /* The reserve is missing and could not be had back before
             * this accept: the table is full but for the newcomer's
             * descriptor (another acceptor's accept, pending in its ring,
             * can take the number a shedding acceptor freed).  Shed the
             * newcomer and take its number as the reserve, or shedding
             * would stop until some connection ends. */
            int spare = open("/dev/null", O_RDONLY | O_CLOEXEC), shed = spare < 0;
            if (shed) {
                close(fd);
                atomic_fetch_sub(&nconns, 1);
                spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
            }
            if (spare >= 0) reserve_put(spare);
            if (shed) continue;
        }
        atomic_fetch_add(&nopen, 1);
        int r = dispatch(fd, &peer, weft_now(), tls);
        if (r < 0) {
            log_limited("cannot start a connection", -r);
            close(fd);
            conn_slot_free();
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* signals                                                                   */
/* ------------------------------------------------------------------------ */

/* Ends the wait of every connection waiting as `what` (conn.idle). */
static void shut_waiting(int what) {
    pthread_mutex_lock(&conns_lock);
    for (conn *c = conns_head; c; c = c->next)
        if (atomic_load(&c->idle) == what) shutdown(c->fd, SHUT_RD);
    pthread_mutex_unlock(&conns_lock);
}

/* The first SIGTERM/SIGINT starts the drain; a second one cuts it short.
 * With --drain-notice S the drain waits S seconds first, serving as before
 * but answering /healthz 503, so that a load balancer's health check takes
 * the server out before it stops accepting (a second signal ends the
 * notice at once).  A --workers worker leaves the notice to its supervisor,
 * which sends SIGUSR2 for it: then /healthz answers 503 from then on, and
 * the SIGTERM that follows drains at once. */
void *signal_watcher(void *unused) {
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    if (O.worker_slot >= 0) sigaddset(&ss, SIGUSR2);
    int sig;
    while ((sig = weft_signal_wait(&ss, 0)) == SIGUSR2) atomic_store(&unhealthy, 1);
    if (sig < 0) return NULL; /* (-ECANCELED: the server is ending) */
    if (O.drain_notice > 0 && O.worker_slot < 0) {
        atomic_store(&unhealthy, 1);
        if (!O.quiet)
            fprintf(stderr, "weft-httpd: %s: /healthz answers 503 for %.3g s, then the drain\n", strsignal(sig),
                    (double)O.drain_notice / NS);
        int again = weft_signal_wait(&ss, weft_now() + O.drain_notice);
        if (again == -ECANCELED) return NULL;
    }
    /* the flag before the line: whoever reads the line knows that every
     * answer decided from now on closes its connection */
    int open_now = atomic_load(&nopen);
    atomic_store(&drain_started, weft_now());
    atomic_store(&draining, 1);
    if (!O.quiet)
        fprintf(stderr, "weft-httpd: %s: draining %d connection(s)\n", strsignal(sig), open_now);
    for (int i = 0; i < nacceptors; i++) weft_cancel(acceptors[i]);
    /* connections waiting for their next request: end their wait; those
     * waiting for their first one get DRAIN_FIRST_GRACE (httpd_int.h) for
     * it, then theirs ends too */
    shut_waiting(CONN_IDLE);
    int64_t grace_end = atomic_load(&drain_started) + DRAIN_FIRST_GRACE;
    while ((sig = weft_signal_wait(&ss, grace_end)) == SIGUSR2) continue;
    if (sig == -ETIMEDOUT) {
        shut_waiting(CONN_FIRST);
        while ((sig = weft_signal_wait(&ss, 0)) == SIGUSR2) continue;
    }
    if (sig < 0) return NULL;
    if (!O.quiet) fprintf(stderr, "weft-httpd: %s again: not waiting for the drain\n", strsignal(sig));
    atomic_store(&drain_cut, 1);
    return NULL;
}
