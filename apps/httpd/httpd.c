/*
 * weft-httpd: a static-file HTTP/1.1 server, one vthread per connection
 * (or one of three other models).
 *
 * Shape.  weft_main runs the server: it opens the docroot (O_PATH) and the
 * listening socket, prints "listening on HOST:PORT", starts a signal
 * watcher (a vthread in weft_signal_wait) and one acceptor vthread per
 * carrier.  Every vthread has a name for the thread dump (SIGQUIT writes
 * one to stderr; WEFT_DUMP_ON_SIGQUIT=json for JSON): "main", "watcher",
 * "acceptor 0" ..., "conn 127.0.0.1:53412" (the peer, formatted by hand:
 * the connection path stays cheap), "pool-reaper", "cpu-job".  Each accepted connection is served by serve_conn(), the same
 * code for every model:
 *   virtual   a detached vthread per connection (the default);
 *   thread    a detached pthread per connection (the first article's
 *             server); weft's I/O calls then make the plain system calls;
 *   pool:N    N pthreads taking connections from a bounded queue (Tomcat's
 *             executor): a connection holds its thread while it lives.  A
 *             connection's clocks start at its accept: one that waits in
 *             the queue past --idle-timeout is answered 503 and closed by a
 *             reaper vthread, without taking a worker;
 *   async     no thread per connection: the same HTTP as a chain of
 *             completion handlers (weft/async.h; "--model async" below),
 *             an idle connection holding no stack and no buffer.
 *
 * A connection.  A 16 KiB buffer on the connection's stack holds what was
 * received; the parser (http_parse.c) finds one request head at a time,
 * pipelined requests stay in the buffer for the next round.  A head must
 * arrive within --header-timeout from its first byte (slowloris); an idle
 * keep-alive connection is closed after --idle-timeout; every send must
 * progress within --send-timeout.  These are weft deadlines, so a timed-out
 * read consumes nothing and leaves the connection in a known state (we
 * answer 408 if a head was started, and close).  GET and HEAD of regular
 * files only: a file's head and body go out in one send when the body is
 * small (SMALL_BODY), else the head with MSG_MORE and the body by
 * weft_sendfile (zero-copy).  A request body (Content-Length) is read and
 * dropped up to MAX_BODY, all of it within --body-timeout; a chunked one,
 * or anything after an error response, closes the connection after the
 * answer -- the parser has already refused the smuggling cases.  Every
 * header is counted into its buffer: a response goes out whole or not at
 * all.  A directory's redirect names the normalised path that was looked
 * up, percent-encoded (never the raw target, which could name a host).  A
 * file that gives fewer bytes than its fstat promised (it shrank meanwhile)
 * is answered 500 if its head has not gone out yet; if it has, the
 * connection closes after the short body, as nginx does -- the client sees
 * less than Content-Length, never the next response's bytes in its place.
 * Either way a note goes to stderr (at most one a second) and the access
 * log has the line, with the bytes really sent.
 *
 * The access log (--access-log) is written by a thread of its own from a
 * bounded ring (see "the access log" below): a connection never waits for
 * it; lines it cannot take are dropped, counted and reported on stderr.
 * The request target is escaped in it as nginx does (\x22 for '"').
 *
 * Limits.  --max-conns bounds live connections: an acceptor at the limit
 * waits (weft_park) until one ends, leaving newcomers in the kernel's
 * backlog.  EMFILE/ENFILE: the acceptor gives up a reserved fd, accepts the
 * newcomer and tries to re-reserve: if it can, descriptors were freed since
 * the EMFILE (stale on a loaded machine) and the newcomer is served; if not,
 * it is closed (so it is not left hanging) and the reserve taken back; the
 * acceptor logs at most once a second and sleeps briefly -- no spinning.  If another thread took
 * the freed number first, an acceptor takes a new reserve before a later
 * accept, once a descriptor is free; a newcomer accepted while it still
 * cannot is shed, and its number becomes the reserve.
 *
 * Drain.  SIGTERM/SIGINT: the acceptors are cancelled (their weft_accept
 * returns -ECANCELED) and the listening socket closed; connections waiting
 * for their next request are shut down for reading, which ends their wait;
 * those in the middle of a request finish the response and close.  A
 * request already received is served, not dropped: a connection that
 * waited in the pool's queue reads what is there without waiting and
 * answers it (with "Connection: close").  A new connection that has not
 * sent its first request -- one accepted in the same instant as the
 * signal, whose request is on its way, as when --workers replaces a
 * worker that shares its socket with its successor -- gets
 * DRAIN_FIRST_GRACE (0.5 s) from the drain's start for it: closed at once,
 * its client would see a connection closed without an answer, which
 * clients do not retry on a new connection (they do on a reused one,
 * which is why a connection between requests is closed at once).  Seen
 * before the grace: 1 request in ~10,000 failed across a SIGHUP.  The server exits when the
 * last one is gone (queued ones included), or after --drain-timeout, or at
 * a second SIGTERM/SIGINT; connections cut that way (still queued, or in
 * the middle of a response) make the exit status 3, and stderr says how
 * many.
 *
 * Threads touching what: the connection list (for the drain) is under a
 * mutex, taken twice per connection; counters are atomics; everything else
 * belongs to one connection's thread.
 *
 * Files (httpd_int.h lists what they share): this one holds the shared
 * state, the drain's list of connections and a connection served by a
 * thread (serve_conn); acceptor.c the acceptors, their descriptor reserve
 * and the signal watcher; plan.c plans responses (no sockets, no threads);
 * async.c is --model async; models.c hands a connection to its model
 * (pool:N's queue among them); access_log.c the access log; server.c the
 * start and the drain; cli.c the options and main.
 */

#define _GNU_SOURCE
#include "httpd_int.h"

httpd_opts O = {.cache_bytes = 64 << 20, .host = "127.0.0.1", .port = "8080", .root = "./www", .model = MODEL_VIRTUAL, .pool_threads = 200,
       .header_timeout = 10 * NS, .idle_timeout = 15 * NS, .send_timeout = 30 * NS, .drain_timeout = 10 * NS,
       .body_timeout = 10 * NS, .worker_slot = -1, .ready_fd = -1};

atomic_int nconns, nopen, drain_cut; /* (draining: plan.c's) */
static atomic_long nrequests;

pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
conn *conns_head;

void conn_register(conn *c) {
    pthread_mutex_lock(&conns_lock);
    c->prev = NULL;
    c->next = conns_head;
    if (conns_head) conns_head->prev = c;
    conns_head = c;
    pthread_mutex_unlock(&conns_lock);
}

void conn_unregister(conn *c) {
    pthread_mutex_lock(&conns_lock);
    if (c->prev) c->prev->next = c->next;
    else conns_head = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&conns_lock);
}

/* ------------------------------------------------------------------------ */
/* responses                                                                 */
/* ------------------------------------------------------------------------ */

/* The simulated I/O this request waits for (--delay-ms, --delay-every):
 * ns, or 0. */
int64_t request_delay(void) {
    if (!O.delay_ns) return 0;
    long k = atomic_fetch_add(&nrequests, 1) + 1;
    if (O.delay_every > 1 && k % O.delay_every != 0) return 0;
    return O.delay_ns;
}

static void sleep_delay(void) {
    if (!request_delay()) return;
    if (O.model == MODEL_VIRTUAL) {
        weft_sleep(O.delay_ns);
    } else {
        struct timespec ts = {O.delay_ns / NS, O.delay_ns % NS};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        }
    }
}

/* Sends all of buf on c (through its TLS if it has one); returns 0 or
 * -errno (a send stuck past --send-timeout is -ETIMEDOUT). */
static int send_all(conn *c, const char *buf, size_t n, int more) {
    if (c->ssl) return tls_send(c, buf, n, more);
    while (n) {
        ssize_t r = weft_send_until(c->fd, buf, n, MSG_NOSIGNAL | (more ? MSG_MORE : 0), weft_now() + O.send_timeout);
        if (r < 0) return (int)r;
        buf += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Receives into buf from c (through its TLS if it has one), by deadline. */
static ssize_t conn_recv(conn *c, char *buf, size_t n, int64_t deadline) {
    if (c->ssl) return tls_recv(c, buf, n, deadline);
    return weft_recv_until(c->fd, buf, n, 0, deadline);
}

/* The body of p stopped short (the file shrank under sendfile): the head
 * went out, so the only honest end is to close after what was sent -- the
 * client sees fewer bytes than Content-Length.  Logged, with the bytes
 * sent. */
void body_cut(const conn *c, const response *p) {
    long long sent = p->log_bytes - p->file_len;
    file_short(p->rq ? p->rq->path.p : "-", p->rq ? p->rq->path.n : 1, sent, p->log_bytes, 1);
    access_log(c, p->rq, p->code, sent);
}

/* Sends p as a blocking call: 0 or -errno. */
static int send_response(conn *c, response *p) {
    int more = p->mem_len || p->file_len;
    int err = send_all(c, p->head, p->head_len, more);
    if (!err && p->mem_len) err = send_all(c, p->mem, p->mem_len, 0);
    while (!err && p->file_len > 0) {
        /* HTTPS: pread and SSL_write (tls.c); plain: zero-copy */
        long long sn = c->ssl ? tls_send_file(c, p->fd, &p->off, p->file_len)
                              : weft_sendfile_until(c->fd, p->fd, &p->off, (size_t)p->file_len,
                                                    weft_now() + O.send_timeout);
        if (sn < 0) {
            err = (int)sn;
        } else if (sn == 0) { /* the file shrank: the response cannot be completed */
            body_cut(c, p);
            err = -EIO;
        } else {
            p->file_len -= sn;
        }
    }
    if (!err) access_log(c, p->rq, p->code, p->log_bytes);
    return err;
}

int send_status(conn *c, const http_request *rq, int status, int keep_alive, const char *location) {
    response p;
    response_init(&p);
    int r = plan_status(&p, rq, status, keep_alive, location);
    if (!r) r = send_response(c, &p);
    response_free(&p);
    return r;
}

/* Whether the connection may stay open after rq's answer, as far as rq
 * says: a body we do not want is read and dropped (Content-Length), but a
 * chunked or too large one closes the connection after the answer. */
int request_keep(const http_request *rq) {
    int keep = rq->keep_alive && !atomic_load_explicit(&draining, memory_order_relaxed);
    if (rq->chunked || rq->content_length > MAX_BODY) keep = 0;
    return keep;
}

/* ------------------------------------------------------------------------ */
/* a connection                                                              */
/* ------------------------------------------------------------------------ */

/* Receives more into buf; the deadline depends on whether a head started.
 * first: no request answered on the connection yet; ready_at: when it
 * could first send one (HTTPS: its handshake's end; 0: at its accept) --
 * a first request's grace in the drain runs from then if that is later
 * than the drain's start. */
static ssize_t recv_more(conn *c, char *buf, size_t len, size_t cap, int64_t head_deadline, int64_t idle_from,
                         int first, int64_t ready_at) {
    int64_t d = len ? head_deadline : idle_from + O.idle_timeout;
    if (!len) {
        /* idle first, then look at draining: the drain looks at them in the
         * other order (seq_cst both), so it cannot miss us */
        atomic_store(&c->idle, first ? CONN_FIRST : CONN_IDLE);
        int64_t g = atomic_load(&drain_started);
        g = (ready_at > g ? ready_at : g) + DRAIN_FIRST_GRACE;
        if (atomic_load(&draining) && first && weft_now() < g) {
            /* a new connection's first request may be on its way: it gets
             * the grace from the drain's start (the drain shuts what is
             * still waiting then); past it, what is there, as below */
            ssize_t r = conn_recv(c, buf, cap, g < d ? g : d);
            atomic_store_explicit(&c->idle, CONN_BUSY, memory_order_relaxed);
            return r == -ETIMEDOUT ? 0 : r;
        }
        if (atomic_load(&draining)) {
            /* a request already here is served (the drain waits for it):
             * a connection that waited in the pool's queue, or started
             * after the drain did, may well have one; none: we are done */
            atomic_store_explicit(&c->idle, CONN_BUSY, memory_order_relaxed);
            if (c->ssl) return tls_recv_now(c, buf, cap);
            ssize_t r;
            do r = recv(c->fd, buf, cap, MSG_DONTWAIT);
            while (r < 0 && errno == EINTR);
            if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
            return r;
        }
    }
    ssize_t r = conn_recv(c, buf + len, cap - len, d);
    atomic_store_explicit(&c->idle, CONN_BUSY, memory_order_relaxed);
    return r;
}

/* Serves a connection accepted at accepted_at (weft_now()): the first
 * request's idle clock runs from then, whatever the connection waited for.
 * tls: HTTPS -- the handshake first, within --header-timeout; a failed
 * one closes quietly. */
void serve_conn(int fd, const struct sockaddr_storage *peer, int64_t accepted_at, int tls) {
    conn c = {.fd = fd};
    int64_t idle_from = accepted_at;
    set_peer(&c, peer);
    conn_register(&c);
    char buf[BUF_SIZE];
    size_t len = 0;
    int keep = 1, first = 1;
    int64_t ready_at = 0;
    if (tls) {
        /* the handshake is bounded by --header-timeout, drain or not: a
         * client that connected before the drain (one pool:N kept queued)
         * has its request on its way behind it */
        if (tls_accept(&c, weft_now() + O.header_timeout) < 0) goto out;
        ready_at = weft_now();
    }
    while (keep) {
        http_parser ps;
        http_parser_init(&ps);
        http_request rq;
        /* a head that began with the previous read (pipelined) has had its
         * first byte already: its clock runs from now */
        int64_t head_deadline = len ? weft_now() + O.header_timeout : 0;
        int hl;
        for (;;) {
            hl = len ? http_parse_request(&ps, buf, len, &rq) : 0;
            if (hl != 0) break;
            ssize_t r = recv_more(&c, buf, len, sizeof buf, head_deadline, idle_from, first, ready_at);
            if (r == 0 || r == -ECONNRESET || r == -ECANCELED) goto out;
            if (r == -ETIMEDOUT) {
                if (len) send_status(&c, NULL, 408, 0, NULL);
                goto out;
            }
            if (r < 0) goto out;
            if (!len) head_deadline = weft_now() + O.header_timeout;
            len += (size_t)r;
        }
        if (hl < 0) { /* malformed: answer and close */
            if (send_status(&c, NULL, -hl, 0, NULL) < 0) goto out;
            goto linger;
        }
        sleep_delay();
        keep = request_keep(&rq); /* after the wait: a drain begun meanwhile closes */
        int refused = 0;
        response resp;
        response_init(&resp);
        int err = plan_request(&resp, &rq, &keep, &refused);
        if (err >= 0) err = send_response(&c, &resp);
        response_free(&resp);
        if (err < 0) goto out;
        if (!keep) {
            /* a plain end (HTTP/1.0, Connection: close) closes at once; an
             * answer that refused the request, or input still unread, gets
             * the lingering close */
            if (refused || len > (size_t)hl || rq.content_length > 0 || rq.chunked) goto linger;
            goto out;
        }
        /* drop the head, then the body if any, keep what is pipelined; the
         * whole body must come within --body-timeout (a trickle of bytes
         * cannot hold the connection) */
        size_t used = (size_t)hl;
        long long body = rq.content_length > 0 ? rq.content_length : 0;
        int64_t body_deadline = weft_now() + O.body_timeout;
        while (body > 0) {
            size_t inbuf = len - used;
            if ((long long)inbuf >= body) {
                used += (size_t)body;
                body = 0;
                break;
            }
            body -= (long long)inbuf;
            used = len = 0;
            ssize_t r = conn_recv(&c, buf, sizeof buf, body_deadline);
            if (r <= 0) goto out;
            len = (size_t)r;
        }
        memmove(buf, buf + used, len - used);
        len -= used;
        idle_from = weft_now();
        first = 0;
    }
    goto out;
linger:
    /* Closing with unread input makes the kernel send RST, which can
     * destroy the answer before the client read it.  So, as nginx's
     * lingering close: stop sending, read and drop what still comes for a
     * moment (bounded in time and bytes), then close.  HTTPS: close_notify
     * first, then the same with the records left unread. */
    tls_close(&c);
    shutdown(fd, SHUT_WR);
    {
        int64_t until = weft_now() + NS;
        size_t dropped = 0;
        while (dropped < (1u << 20)) {
            ssize_t r = weft_recv_until(fd, buf, sizeof buf, 0, until);
            if (r <= 0) break;
            dropped += (size_t)r;
        }
    }
out:
    tls_close(&c);
    conn_unregister(&c);
    weft_close(fd);
    conn_slot_free();
}
