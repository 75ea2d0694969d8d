/*
 * weft-httpd --model async: a connection as a chain of completion handlers.
 *
 * The same HTTP as serve_conn (request_keep, plan_request, the same
 * deadlines, the same lingering close), written as a state machine whose
 * steps are completion handlers (weft/async.h) on the carrier's dispatcher:
 * no thread and no stack per connection.  An idle keep-alive connection
 * holds only its aconn -- its fd, its place in the drain's list, the
 * client's address and its idle clock: 80 bytes -- and waits with
 * weft_poll_async, without a buffer; a request's state and its receive
 * buffer (areq) come from a pool when bytes arrive and go back when the
 * connection is idle again with nothing pipelined; a response is malloc'd
 * while it is being sent.  Each connection has at most one operation in
 * flight, so its handlers never run at the same time and its state needs
 * no lock.  The acceptors are the other models' (a vthread per carrier);
 * dispatch() starts a connection here instead of spawning.
 *
 * HTTPS.  A TLS connection has an atls beside its aconn: tls.c's SSL over
 * weft_tls's BIO turned non-blocking.  Every read and write goes through
 * a_io: plain, weft_recv_async or weft_send_async; TLS, the SSL call made
 * at once, and where it would wait, weft_poll_async for the event it names
 * (a read may have to write, a write to read) and the call again, under
 * the same deadline.  The handshake starts on the dispatcher a new
 * connection is spread to, never on its acceptor (its key exchange is the
 * costly part), and must end within --header-timeout of the accept, as in
 * the thread models.  A TLS call that completes at once hands its result
 * on at once too -- but a pipelining client's requests, each answered
 * without a wait, would nest one handler chain in the next without end:
 * past a few such hand-offs in a row the next goes by the dispatcher's
 * next turn (weft_timer_async), and the stack stays bounded.  A file's body
 * is read into a 16 KiB chunk and written, in turn (sendfile cannot
 * encrypt).  A lingering close sends close_notify, frees the SSL and then
 * drops the raw bytes that still come.
 */

#define _GNU_SOURCE
#include "httpd_int.h"

typedef struct areq areq;

/* A TLS connection's: its one operation in flight through the SSL
 * (a_io), and what the plain path does not need. */
typedef struct atls {
    weft_handler h;    /* gets the operation's result */
    char *buf;
    size_t n, done;    /* a write's bytes, and those written */
    int64_t deadline;
    int write, more;
    int quick;         /* results handed on at once in a row (a_tls_done) */
    ssize_t res;       /* a result handed on at the dispatcher's next turn */
    int64_t ready_at;  /* the handshake's end: the drain's first-request grace runs from it */
    char *chunk;       /* a file body's 16 KiB, while one is sent */
} atls;

typedef struct aconn {
    conn c;           /* registered for the drain, like the others */
    areq *r;          /* while a request is read or answered, or bytes wait */
    int64_t idle_from; /* the idle clock: from the accept, then each answer */
    atls *t;          /* HTTPS (NULL: plain) */
} aconn;

/* A request in progress: its buffer and everything the answer needs.  From
 * the pool when bytes arrive, back to it when the connection is idle with
 * nothing pipelined. */
struct areq {
    areq *next_free;
    size_t len, used;
    int64_t head_deadline, body_deadline, linger_until;
    http_parser ps;
    http_request rq;
    int hl, keep, refused;
    long long body_left;
    size_t dropped;    /* the lingering close's */
    response *resp;    /* while one is being sent */
    char buf[BUF_SIZE];
};

/* The pool of areqs: a free list under a mutex.  Once a second (bp_sweep,
 * a timer handler) those that stayed in the list all that second -- its
 * low-water mark -- are freed and the heap trimmed, so a burst's memory
 * goes back to the system once it is over, as the virtual model's stacks
 * do. */
static struct {
    pthread_mutex_t lock;
    areq *free;
    int n, low;
} BP = {.lock = PTHREAD_MUTEX_INITIALIZER};

static areq *areq_get(void) {
    pthread_mutex_lock(&BP.lock);
    areq *r = BP.free;
    if (r) {
        BP.free = r->next_free;
        if (--BP.n < BP.low) BP.low = BP.n;
    }
    pthread_mutex_unlock(&BP.lock);
    if (!r && !(r = malloc(sizeof *r))) return NULL;
    r->len = r->used = 0;
    r->resp = NULL;
    return r;
}

static void areq_put(areq *r) {
    if (!r) return;
    if (r->resp) {
        response_free(r->resp);
        free(r->resp);
    }
    pthread_mutex_lock(&BP.lock);
    r->next_free = BP.free;
    BP.free = r;
    BP.n++;
    pthread_mutex_unlock(&BP.lock);
}

void bp_sweep(ssize_t res, void *ctx) {
    areq *drop = NULL;
    pthread_mutex_lock(&BP.lock);
    for (int k = BP.low; k > 0; k--) { /* unused all second: not needed */
        areq *r = BP.free;
        BP.free = r->next_free;
        r->next_free = drop;
        drop = r;
        BP.n--;
    }
    BP.low = BP.n;
    pthread_mutex_unlock(&BP.lock);
    int freed = drop != NULL;
    while (drop) {
        areq *nx = drop->next_free;
        free(drop);
        drop = nx;
    }
    if (freed) malloc_trim(0); /* the heap's free pages, not only its top */
    if (weft_timer_async(weft_now() + NS, bp_sweep, NULL, NULL) < 0) { /* no memory: no more sweeps */
    }
}

static void a_next_request(aconn *a);
static void a_idle(aconn *a);
static void a_parse(aconn *a);

static void a_end(aconn *a) {
    conn_unregister(&a->c);
    if (a->t) {
        tls_close(&a->c);
        free(a->t->chunk);
        free(a->t);
    }
    weft_close(a->c.fd);
    areq_put(a->r);
    free(a);
    conn_slot_free();
}

/* A step that could not be started (no memory): the connection ends. */
static void a_check(aconn *a, int r) {
    if (r < 0) a_end(a);
}

/* -- the connection's bytes, plain or TLS */
static void a_tls_try(aconn *a);

/* Reads at most n bytes into buf (write 0), or sends all n (write 1; more:
 * MSG_MORE), by deadline; h gets what a weft handler would: bytes, 0 at
 * the end, or -errno (-ETIMEDOUT past the deadline). */
static void a_io(aconn *a, int write, void *buf, size_t n, int more, int64_t deadline, weft_handler h) {
    weft_async_opts o = {.deadline = deadline};
    if (!a->t) {
        a_check(a, write ? weft_send_async(a->c.fd, buf, n, MSG_NOSIGNAL | (more ? MSG_MORE : 0), h, a, &o)
                         : weft_recv_async(a->c.fd, buf, n, 0, h, a, &o));
        return;
    }
    atls *t = a->t;
    t->h = h;
    t->buf = buf;
    t->n = n;
    t->done = 0;
    t->deadline = deadline;
    t->write = write;
    t->more = more;
    a_tls_try(a);
}

static void a_tls_later(ssize_t n, void *ctx) {
    aconn *a = ctx;
    a->t->quick = 0;
    a->t->h(a->t->res, a);
}

/* Hands the TLS operation's result r to its handler (see "HTTPS" at the
 * top): at once, or after QUICK_MAX at once in a row, at the next turn. */
static void a_tls_done(aconn *a, ssize_t r) {
    enum { QUICK_MAX = 8 };
    atls *t = a->t;
    if (t->quick++ < QUICK_MAX) {
        t->h(r, a); /* (a may be gone after) */
        return;
    }
    t->res = r;
    a_check(a, weft_timer_async(0, a_tls_later, a, NULL));
}

/* (the wait a_tls_try asked for is over: n the poll's result) */
static void a_tls_ready(ssize_t n, void *ctx) {
    aconn *a = ctx;
    a->t->quick = 0;
    if (n < 0) a_tls_done(a, n); /* -ETIMEDOUT, or the fd closed */
    else a_tls_try(a);
}

static void a_tls_try(aconn *a) {
    atls *t = a->t;
    short wait = 0;
    ssize_t r;
    for (;;) {
        if (!t->write) {
            r = tls_read_nb(&a->c, t->buf, t->n, &wait);
            break;
        }
        r = tls_write_nb(&a->c, t->buf + t->done, t->n - t->done, t->more, &wait);
        if (r < 0) break;
        if ((t->done += (size_t)r) == t->n) {
            r = (ssize_t)t->n;
            break;
        }
    }
    if (r == -EAGAIN) {
        weft_async_opts o = {.deadline = t->deadline};
        a_check(a, weft_poll_async(a->c.fd, wait, a_tls_ready, a, &o));
        return;
    }
    a_tls_done(a, r);
}

/* -- the lingering close: stop sending, drop what still comes for a moment */
static void a_lingered(ssize_t n, void *ctx) {
    aconn *a = ctx;
    areq *r = a->r;
    if (n <= 0 || (r->dropped += (size_t)n) >= (1u << 20)) {
        a_end(a);
        return;
    }
    weft_async_opts o = {.deadline = r->linger_until};
    a_check(a, weft_recv_async(a->c.fd, r->buf, BUF_SIZE, 0, a_lingered, a, &o));
}

static void a_linger(aconn *a) {
    areq *r = a->r;
    tls_close(&a->c); /* (HTTPS: close_notify; what follows is dropped raw) */
    shutdown(a->c.fd, SHUT_WR);
    r->dropped = 0;
    r->linger_until = weft_now() + NS;
    weft_async_opts o = {.deadline = r->linger_until};
    a_check(a, weft_recv_async(a->c.fd, r->buf, BUF_SIZE, 0, a_lingered, a, &o));
}

/* -- after a response: drop the request's body, keep what is pipelined */
static void a_body_bytes(ssize_t n, void *ctx);

static void a_drop_body(aconn *a) {
    areq *r = a->r;
    while (r->body_left > 0) {
        size_t inbuf = r->len - r->used;
        if ((long long)inbuf >= r->body_left) {
            r->used += (size_t)r->body_left;
            r->body_left = 0;
            break;
        }
        r->body_left -= (long long)inbuf;
        r->used = r->len = 0;
        a_io(a, 0, r->buf, BUF_SIZE, 0, r->body_deadline, a_body_bytes);
        return;
    }
    memmove(r->buf, r->buf + r->used, r->len - r->used);
    r->len -= r->used;
    a->idle_from = weft_now();
    a->c.answered = 1;
    a_next_request(a);
}

static void a_body_bytes(ssize_t n, void *ctx) {
    aconn *a = ctx;
    if (n <= 0) {
        a_end(a);
        return;
    }
    a->r->len = (size_t)n;
    a_drop_body(a);
}

static void a_answered(aconn *a) {
    areq *r = a->r;
    response_free(r->resp);
    free(r->resp);
    r->resp = NULL;
    if (!r->keep) {
        /* as serve_conn: a plain end closes at once; a refusal, or input
         * still unread, gets the lingering close */
        if (r->refused || r->len > (size_t)r->hl || r->rq.content_length > 0 || r->rq.chunked) a_linger(a);
        else a_end(a);
        return;
    }
    r->used = (size_t)r->hl;
    r->body_left = r->rq.content_length > 0 ? r->rq.content_length : 0;
    r->body_deadline = weft_now() + O.body_timeout;
    a_drop_body(a);
}

/* -- sending a response: head, then body from memory or by sendfile */
static void a_sent_body(ssize_t n, void *ctx);
static void a_tls_file_sent(ssize_t n, void *ctx);

/* HTTPS: a file's body, a chunk read and written at a time */
static void a_tls_file(aconn *a) {
    enum { CHUNK = 16384 };
    response *p = a->r->resp;
    if (!a->t->chunk && !(a->t->chunk = malloc(CHUNK))) {
        a_end(a);
        return;
    }
    size_t want = p->file_len < CHUNK ? (size_t)p->file_len : CHUNK;
    ssize_t got;
    do got = pread(p->fd, a->t->chunk, want, p->off);
    while (got < 0 && errno == EINTR);
    if (got <= 0) {
        if (got == 0) body_cut(&a->c, p); /* the file shrank */
        a_end(a);
        return;
    }
    a_io(a, 1, a->t->chunk, (size_t)got, p->file_len > got, weft_now() + O.send_timeout, a_tls_file_sent);
}

static void a_tls_file_sent(ssize_t n, void *ctx) {
    aconn *a = ctx;
    if (n < 0) {
        a_end(a);
        return;
    }
    response *p = a->r->resp;
    p->off += n;
    p->file_len -= n;
    if (p->file_len > 0) {
        a_tls_file(a);
        return;
    }
    free(a->t->chunk);
    a->t->chunk = NULL;
    a_sent_body(0, a);
}

static void a_file_ready(ssize_t n, void *ctx) {
    aconn *a = ctx;
    if (n < 0) {
        a_end(a);
        return;
    }
    response *p = a->r->resp;
    while (p->file_len > 0) { /* the socket is O_NONBLOCK (accepted so) */
        ssize_t sn = sendfile(a->c.fd, p->fd, &p->off, (size_t)p->file_len);
        if (sn > 0) {
            p->file_len -= sn;
            continue;
        }
        if (sn < 0 && errno == EINTR) continue;
        if (sn < 0 && errno == EAGAIN) { /* the socket's buffer is full: wait for room */
            weft_async_opts o = {.deadline = weft_now() + O.send_timeout};
            a_check(a, weft_poll_async(a->c.fd, POLLOUT, a_file_ready, a, &o));
            return;
        }
        if (sn == 0) body_cut(&a->c, p); /* the file shrank */
        a_end(a);
        return;
    }
    a_sent_body(0, a);
}

static void a_sent_body(ssize_t n, void *ctx) {
    aconn *a = ctx;
    if (n < 0) {
        a_end(a);
        return;
    }
    response *p = a->r->resp;
    access_log(&a->c, p->rq, p->code, p->log_bytes);
    a_answered(a);
}

static void a_sent_head(ssize_t n, void *ctx) {
    aconn *a = ctx;
    if (n < 0) {
        a_end(a);
        return;
    }
    response *p = a->r->resp;
    if (p->mem_len) {
        a_io(a, 1, (void *)p->mem, p->mem_len, 0, weft_now() + O.send_timeout, a_sent_body);
    } else if (p->file_len) {
        if (a->t) a_tls_file(a);
        else a_file_ready(POLLOUT, a);
    } else {
        a_sent_body(0, a);
    }
}

static void a_send(aconn *a) {
    response *p = a->r->resp;
    a_io(a, 1, p->head, p->head_len, p->mem_len || p->file_len, weft_now() + O.send_timeout, a_sent_head);
}

/* A status answer outside a request's normal course (400..., 408), then
 * the connection ends: lingering (malformed input) or not (a timeout). */
static void a_status_then(aconn *a, int status, int linger) {
    areq *r = a->r;
    if (!(r->resp = malloc(sizeof *r->resp))) {
        a_end(a);
        return;
    }
    response_init(r->resp);
    if (plan_status(r->resp, NULL, status, 0, NULL) < 0) {
        a_end(a);
        return;
    }
    r->keep = 0;
    r->refused = linger;
    memset(&r->rq, 0, sizeof r->rq); /* no request: a_answered goes by `refused` alone */
    r->hl = (int)r->len;
    a_send(a);
}

/* -- a request */
static void a_respond(aconn *a) {
    areq *r = a->r;
    r->keep = request_keep(&r->rq); /* at answer time: a drain begun in a --delay-ms wait closes */
    if (!(r->resp = malloc(sizeof *r->resp))) {
        a_end(a);
        return;
    }
    response_init(r->resp);
    r->refused = 0;
    if (plan_request(r->resp, &r->rq, &r->keep, &r->refused) < 0) {
        a_end(a);
        return;
    }
    a_send(a);
}

static void a_delayed(ssize_t n, void *ctx) {
    aconn *a = ctx;
    if (a->t) a->t->quick = 0;
    a_respond(a);
}

static void a_request(aconn *a) {
    int64_t d = request_delay();
    if (d) a_check(a, weft_timer_async(weft_now() + d, a_delayed, a, NULL));
    else a_respond(a);
}

/* -- reading a request head */
static void a_head_bytes(ssize_t n, void *ctx) {
    aconn *a = ctx;
    if (n == -ETIMEDOUT) {
        if (a->r->len) a_status_then(a, 408, 0);
        else a_end(a);
        return;
    }
    if (n <= 0) {
        a_end(a);
        return;
    }
    a->r->len += (size_t)n;
    a_parse(a);
}

static void a_parse(aconn *a) {
    areq *r = a->r;
    r->hl = http_parse_request(&r->ps, r->buf, r->len, &r->rq);
    if (r->hl < 0) { /* malformed: answer and close */
        a_status_then(a, -r->hl, 1);
        return;
    }
    if (r->hl > 0) {
        a_request(a);
        return;
    }
    a_io(a, 0, r->buf + r->len, BUF_SIZE - r->len, 0, r->head_deadline, a_head_bytes);
}

/* -- idle: waiting for a request's first byte, holding no buffer */

/* Reads what a readable connection has: the start of a request, parsed.
 * Nothing there is a stale readiness (idle again) -- or, draining, the end. */
static void a_take_request(aconn *a, int draining_now) {
    if (!(a->r = areq_get())) {
        a_end(a);
        return;
    }
    areq *r = a->r;
    ssize_t n;
    if (a->t) {
        short wait = 0;
        n = tls_read_nb(&a->c, r->buf, BUF_SIZE, &wait);
        if (n == -EAGAIN && !draining_now) {
            if (wait == POLLIN) { /* a record not whole yet, or none for the application */
                a_idle(a);
            } else { /* the SSL must write first: read through a_io, from an empty head */
                r->len = 0;
                r->head_deadline = weft_now() + O.header_timeout;
                http_parser_init(&r->ps);
                a_io(a, 0, r->buf, BUF_SIZE, 0, r->head_deadline, a_head_bytes);
            }
            return;
        }
    } else {
        do n = recv(a->c.fd, r->buf, BUF_SIZE, MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !draining_now) {
            a_idle(a);
            return;
        }
    }
    if (n <= 0) { /* the client closed, or reset; or draining, and nothing came */
        a_end(a);
        return;
    }
    r->len = (size_t)n;
    r->head_deadline = weft_now() + O.header_timeout;
    http_parser_init(&r->ps);
    a_parse(a);
}

static void a_readable(ssize_t n, void *ctx) {
    aconn *a = ctx;
    atomic_store_explicit(&a->c.idle, 0, memory_order_relaxed);
    if (a->t) a->t->quick = 0;
    if (n < 0) { /* the idle timeout, or closed */
        a_end(a);
        return;
    }
    a_take_request(a, 0);
}

static void a_next_request(aconn *a) {
    if (a->r && a->r->len) { /* pipelined: its first byte is here, its clock runs from now */
        http_parser_init(&a->r->ps);
        a->r->head_deadline = weft_now() + O.header_timeout;
        a_parse(a);
        return;
    }
    if (a->t && tls_pending(&a->c)) { /* HTTPS: bytes OpenSSL read ahead (a_take_request goes to a_idle
                                       * if they are only a record begun) */
        areq_put(a->r);
        a->r = NULL;
        a_take_request(a, 0);
        return;
    }
    a_idle(a);
}

/* Idle: no request begun, the areq given back; waits for the next one's
 * first byte (or, draining, serves only what is there). */
static void a_idle(aconn *a) {
    areq_put(a->r);
    a->r = NULL;
    /* idle first, then look at draining: the drain looks at them in the
     * other order (seq_cst both), so it cannot miss us */
    atomic_store(&a->c.idle, a->c.answered ? CONN_IDLE : CONN_FIRST);
    int64_t deadline = a->idle_from + O.idle_timeout;
    int64_t g = atomic_load(&drain_started);
    if (a->t && a->t->ready_at > g) g = a->t->ready_at; /* (as recv_more) */
    g += DRAIN_FIRST_GRACE;
    if (atomic_load(&draining) && !a->c.answered && weft_now() < g) {
        /* as recv_more: a new connection's first request may be on its
         * way -- it gets the drain's grace (DRAIN_FIRST_GRACE) */
        if (g < deadline) deadline = g;
    } else if (atomic_load(&draining)) {
        /* as recv_more: a request already here is served, else we are done */
        atomic_store_explicit(&a->c.idle, 0, memory_order_relaxed);
        a_take_request(a, 1);
        return;
    }
    /* a new connection goes to the carriers' dispatchers in turn (its
     * acceptor runs wherever the scheduler put it); its later steps stay
     * on the one it got */
    weft_async_opts o = {.deadline = deadline, .spread = a->c.fresh};
    a->c.fresh = 0;
    a_check(a, weft_poll_async(a->c.fd, POLLIN, a_readable, a, &o));
}

/* HTTPS: the handshake's steps (n: the wait's result) */
static void a_handshake(ssize_t n, void *ctx) {
    aconn *a = ctx;
    short wait = 0;
    a->t->quick = 0;
    int r = n < 0 ? (int)n : tls_handshake_nb(&a->c, &wait);
    if (r == -EAGAIN) {
        weft_async_opts o = {.deadline = a->t->deadline};
        a_check(a, weft_poll_async(a->c.fd, wait, a_handshake, a, &o));
        return;
    }
    if (r < 0) { /* garbage, a refused version, cut short, or too slow */
        a_end(a);
        return;
    }
    a->t->ready_at = weft_now();
    a_next_request(a);
}

/* Serves a connection accepted at accepted_at with handlers (tls: from the
 * HTTPS listener): 0 or -ENOMEM (fd then the caller's). */
int a_start(int fd, const struct sockaddr_storage *peer, int64_t accepted_at, int tls) {
    aconn *a = calloc(1, sizeof *a);
    if (!a) return -ENOMEM;
    a->c.fd = fd;
    if (tls && (!(a->t = calloc(1, sizeof *a->t)) || tls_open_nb(&a->c) < 0)) {
        free(a->t);
        free(a);
        return -ENOMEM;
    }
    set_peer(&a->c, peer);
    a->idle_from = accepted_at;
    a->c.fresh = 1;
    conn_register(&a->c);
    if (!tls) {
        a_next_request(a);
        return 0;
    }
    /* the handshake starts on the dispatcher the connection is spread to
     * (when its ClientHello is there), bounded as the thread models' */
    a->t->deadline = accepted_at + O.header_timeout;
    weft_async_opts o = {.deadline = a->t->deadline, .spread = 1};
    a->c.fresh = 0;
    a_check(a, weft_poll_async(fd, POLLIN, a_handshake, a, &o));
    return 0;
}
