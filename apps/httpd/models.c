/*
 * weft-httpd's models: an accepted connection (its descriptor, its accept
 * time, the peer) handed by dispatch() to the model --model chose: a
 * detached vthread named for the peer ("conn 127.0.0.1:53412"), a detached
 * pthread, pool:N's bounded queue (N pthreads take connections from it;
 * one that waits there past --idle-timeout is answered 503 by the reaper
 * vthread), or async.c's handlers.  dispatch runs on an acceptor
 * (httpd.c); a connection's thread owns it from then on.  The pool's queue
 * is under its mutex; -errno from dispatch leaves the descriptor to the
 * acceptor, which closes it.
 */

#define _GNU_SOURCE
#include "httpd_int.h"

/* ------------------------------------------------------------------------ */
/* models                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct accepted {
    int fd;
    int tls;    /* from the HTTPS listener */
    int64_t at; /* weft_now() when accepted */
    struct sockaddr_storage peer;
} accepted;

/* A connection vthread's name, "conn 127.0.0.1:53412" (the dump shows
 * it): written by hand for IPv4, the common case on the connection path,
 * which must stay cheap (snprintf and inet_ntop cost more than the rest of
 * the spawn); inet_ntop for IPv6 ("conn [::1]:53412", cut at 31 bytes).
 * out holds 32 bytes. */
static char *put_u(char *p, unsigned v) {
    char d[10];
    int n = 0;
    do d[n++] = (char)('0' + v % 10);
    while ((v /= 10) && n < 10);
    while (n) *p++ = d[--n];
    return p;
}

static void conn_name(char *out, const struct sockaddr_storage *peer) {
    char *p = out;
    memcpy(p, "conn ", 5);
    p += 5;
    if (peer->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)peer;
        const unsigned char *b = (const unsigned char *)&in->sin_addr;
        for (int i = 0; i < 4; i++) {
            p = put_u(p, b[i]);
            *p++ = i < 3 ? '.' : ':';
        }
        p = put_u(p, ntohs(in->sin_port));
        *p = 0;
    } else if (peer->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)peer;
        char host[INET6_ADDRSTRLEN];
        if (!inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host)) host[0] = 0;
        snprintf(p, 32 - 5, "[%s]:%u", host, (unsigned)ntohs(in6->sin6_port));
    } else {
        memcpy(p, "?", 2);
    }
}

/* A connection's vthread or pthread (it owns the malloc'd accepted). */
static void *conn_main(void *arg) {
    accepted a = *(accepted *)arg;
    free(arg);
    serve_conn(a.fd, &a.peer, a.at, a.tls);
    return NULL;
}

/* Starts fn(arg) on a detached pthread with a 256 KiB stack; 0 or an errno. */
static int start_detached(void *(*fn)(void *), void *arg) {
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 * 1024);
    int e = pthread_create(&th, &at, fn, arg);
    pthread_attr_destroy(&at);
    return e;
}

/* pool:N -- a bounded FIFO of accepted connections.  A connection's idle
 * clock runs from its accept: one still queued when it runs out (every
 * worker busy for --idle-timeout) is answered 503 and closed by the reaper
 * (a vthread sleeping until the oldest entry's deadline), and a worker
 * that dequeues one already late does the same instead of serving it. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t nonempty;
    accepted *q;
    int cap, head, n, stop;
} PQ = {.lock = PTHREAD_MUTEX_INITIALIZER, .nonempty = PTHREAD_COND_INITIALIZER};

static int queue_late(const accepted *a, int64_t now) { return now - a->at >= O.idle_timeout; }

/* A connection that waited out its idle time in the queue (an HTTPS one
 * is closed: a 503 would cost it a handshake first). */
static void refuse_late(const accepted *a) {
    conn c = {.fd = a->fd};
    set_peer(&c, &a->peer);
    if (!a->tls && send_status(&c, NULL, 503, 0, NULL) == 0) shutdown(a->fd, SHUT_WR);
    weft_close(a->fd);
    conn_slot_free();
}

void *pool_reaper(void *unused) {
    for (;;) {
        accepted late[64];
        int k = 0;
        int64_t now = weft_now(), next;
        pthread_mutex_lock(&PQ.lock);
        while (PQ.n && k < 64 && queue_late(&PQ.q[PQ.head], now)) {
            late[k++] = PQ.q[PQ.head];
            PQ.head = (PQ.head + 1) % PQ.cap;
            PQ.n--;
        }
        next = (PQ.n ? PQ.q[PQ.head].at : now) + O.idle_timeout;
        pthread_mutex_unlock(&PQ.lock);
        for (int i = 0; i < k; i++) refuse_late(&late[i]);
        if (k == 64) continue;
        /* entries queued meanwhile are due later than the head */
        if (weft_sleep_until(next) == -ECANCELED) return NULL;
    }
}

static void *pool_worker(void *unused) {
    for (;;) {
        pthread_mutex_lock(&PQ.lock);
        while (!PQ.n && !PQ.stop) pthread_cond_wait(&PQ.nonempty, &PQ.lock);
        if (!PQ.n) {
            pthread_mutex_unlock(&PQ.lock);
            return NULL;
        }
        accepted a = PQ.q[PQ.head];
        PQ.head = (PQ.head + 1) % PQ.cap;
        PQ.n--;
        pthread_mutex_unlock(&PQ.lock);
        if (queue_late(&a, weft_now())) refuse_late(&a);
        else serve_conn(a.fd, &a.peer, a.at, a.tls);
    }
}

/* Hands a connection to the model; returns 0 or -errno (fd then closed by caller). */
int dispatch(int fd, const struct sockaddr_storage *peer, int64_t at, int tls) {
    if (O.model == MODEL_POOL) {
        for (;;) {
            pthread_mutex_lock(&PQ.lock);
            if (PQ.n < PQ.cap) {
                PQ.q[(PQ.head + PQ.n) % PQ.cap] = (accepted){fd, tls, at, *peer};
                PQ.n++;
                pthread_cond_signal(&PQ.nonempty);
                pthread_mutex_unlock(&PQ.lock);
                return 0;
            }
            pthread_mutex_unlock(&PQ.lock);
            weft_sleep(1000000); /* queue full: the backlog holds the rest */
            if (atomic_load(&draining)) return -ECANCELED;
        }
    }
    if (O.model == MODEL_ASYNC) return a_start(fd, peer, at, tls);
    accepted *a = malloc(sizeof *a);
    if (!a) return -ENOMEM;
    a->fd = fd;
    a->tls = tls;
    a->at = at;
    a->peer = *peer;
    if (O.model == MODEL_VIRTUAL) {
        char name[32];
        conn_name(name, peer);
        weft_thread_opts wa = {.name = name};
        int r = weft_spawn(NULL, conn_main, a, &wa);
        if (r < 0) free(a);
        return r;
    }
    int e = start_detached(conn_main, a);
    if (e) {
        free(a);
        return -e;
    }
    return 0;
}

/* pool:N's queue and workers, before the runtime starts (main): 0 or -1. */
int pool_start(void) {
    PQ.cap = O.max_conns;
    PQ.q = calloc((size_t)PQ.cap, sizeof *PQ.q);
    if (!PQ.q) {
        fprintf(stderr, "weft-httpd: out of memory for the pool's queue\n");
        return -1;
    }
    for (int i = 0; i < O.pool_threads; i++) {
        int e = start_detached(pool_worker, NULL);
        if (e) {
            fprintf(stderr, "weft-httpd: pool:%d: thread %d: %s\n", O.pool_threads, i, strerror(e));
            return -1;
        }
    }
    return 0;
}

/* The workers end once the queue is empty (the server's clean stop). */
void pool_stop(void) {
    pthread_mutex_lock(&PQ.lock);
    PQ.stop = 1;
    pthread_cond_broadcast(&PQ.nonempty);
    pthread_mutex_unlock(&PQ.lock);
}
