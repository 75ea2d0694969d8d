/*
 * weft-httpd's response planning: from a parsed request (http_parse.c) to
 * what goes out -- the head's bytes, a small body appended to it, or where
 * a larger body comes from (a cache entry's memory, or a file by
 * sendfile).  GET and HEAD of regular files only; conditions (304, 412),
 * one range (206, 416), a directory's redirect (301) to the normalised,
 * percent-encoded path, and the small HTML answers for errors.  Every
 * header is counted into its buffer: a response is planned whole or not
 * at all (-EOVERFLOW, -ENOMEM: nothing is to be sent, the connection
 * closes).  A file that reads short before its head went out is answered
 * 500 and closes.
 *
 * No sockets and no threads: a plan is made on the connection's thread
 * (or handler) from the request, the docroot (root_fd) and the file cache,
 * and owned by its response (response_free releases the cache entry and
 * the file).  It is sent by httpd.c (blocking) or async.c (handlers), and
 * tested on its own (tests/apps/http_plan).
 */

#define _GNU_SOURCE
#include "httpd_int.h"

/* the docroot (O_PATH), opened by main before the server starts; plan_file opens files under it */
int root_fd = -1;

/* the drain began (the signal watcher sets it, acceptor.c): defined here, with
 * the planner that answers /healthz by it, so the planner builds alone for its tests */
atomic_int draining, unhealthy;

static int head_common(char *b, int cap, int status, int keep_alive) {
    (void)cap; /* under 200 bytes: every caller has 1 KiB */
    char date[HTTP_DATE_LEN];
    http_fmt_date(time(NULL), date);
    int at = APP_LIT(b, 0, "HTTP/1.1 ");
    at = app_u64(b, at, (unsigned)status);
    b[at++] = ' ';
    at = app_str(b, at, http_reason(status));
    at = APP_LIT(b, at, "\r\nServer: weft-httpd\r\nDate: ");
    at = app(b, at, date, HTTP_DATE_LEN - 1);
    if (keep_alive) at = APP_LIT(b, at, "\r\nConnection: keep-alive\r\n");
    else at = APP_LIT(b, at, "\r\nConnection: close\r\n");
    return at;
}

void response_init(response *p) {
    memset(p, 0, offsetof(response, buf));
    p->head = p->buf;
    p->fd = -1;
}

void response_free(response *p) {
    if (p->e) fc_release(p->e);
    if (p->fd >= 0) close(p->fd);
    if (p->head != p->buf) free(p->head);
    p->e = NULL;
    p->fd = -1;
    p->head = p->buf;
}

/* A file that gave fewer bytes than its fstat promised (it shrank, or a
 * read failed): a note on stderr, at most one a second.  sent: whether the
 * head had gone out (then the connection closes after the short body). */
void file_short(const char *path, size_t pn, long long got, long long want, int sent) {
    static _Atomic int64_t last;
    char esc[256];
    int en = (int)http_log_escape(esc, sizeof esc, path, pn);
    note_limited(&last, "weft-httpd: %.*s: the file shrank while it was served (%lld of %lld bytes): %s\n", en, esc,
                 got, want, sent ? "the body is cut short and the connection closed" : "answered 500");
}

/* An error (or redirect) with a small HTML body: 0, or -EOVERFLOW /
 * -ENOMEM (then nothing is to be sent: the connection closes). */
int plan_status(response *p, const http_request *rq, int status, int keep_alive, const char *location) {
    char body[256];
    int bn = snprintf(body, sizeof body,
                      "<html>\r\n<head><title>%d %s</title></head>\r\n<body>\r\n<center><h1>%d %s</h1></center>\r\n"
                      "<hr><center>weft-httpd</center>\r\n</body>\r\n</html>\r\n",
                      status, http_reason(status), status, http_reason(status));
    size_t ln = location ? strlen(location) : 0;
    int cap = 1024;
    char *head = p->buf;
    if (ln > 256) {
        cap = 1024 + (int)ln;
        head = malloc((size_t)cap);
        if (!head) return -ENOMEM;
    }
    int at = head_common(head, cap, status, keep_alive);
    at = put(head, at, cap, "Content-Type: text/html\r\nContent-Length: %d\r\n", bn);
    if (status == 405) at = put(head, at, cap, "Allow: GET, HEAD\r\n");
    if (status == 503) at = put(head, at, cap, "Retry-After: 1\r\n");
    if (location) at = put(head, at, cap, "Location: %s\r\n", location);
    at = put(head, at, cap, "\r\n");
    int with_body = !(rq && rq->method == HTTP_M_HEAD) && status != 304;
    if (at >= cap || (with_body && at + bn > cap)) { /* never a cut header: close instead */
        if (head != p->buf) free(head);
        return -EOVERFLOW;
    }
    if (with_body) {
        memcpy(head + at, body, (size_t)bn);
        at += bn;
    }
    p->head = head;
    p->head_len = (size_t)at;
    p->rq = rq;
    p->code = status;
    p->log_bytes = with_body ? bn : 0;
    return 0;
}

/* The Location of a directory's redirect: the normalised path that was
 * looked up (never the raw target: "//host/.." or "/\\host/.." would send a
 * browser elsewhere), percent-encoded, a '/', then the query as received
 * (the parser allows only visible ASCII in it).  malloc'd; NULL: no memory. */
static char *redirect_location(const char *path, const http_request *rq) {
    static const char hex[] = "0123456789ABCDEF";
    const char *q = memchr(rq->target.p, '?', rq->target.n);
    size_t qn = q ? (size_t)(rq->target.p + rq->target.n - q) : 0;
    if (q) {
        const char *hash = memchr(q, '#', qn);
        if (hash) qn = (size_t)(hash - q);
    }
    size_t pn = strlen(path);
    char *loc = malloc(3 * pn + qn + 2);
    if (!loc) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < pn; i++) {
        unsigned char ch = (unsigned char)path[i];
        /* RFC 3986 pchar and '/', less what some clients misread ('\\') */
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            (ch && strchr("/-._~!$&'()*+,;=:@", ch))) {
            loc[n++] = (char)ch;
        } else {
            loc[n++] = '%';
            loc[n++] = hex[ch >> 4];
            loc[n++] = hex[ch & 15];
        }
    }
    loc[n++] = '/';
    memcpy(loc + n, q ? q : "", qn);
    loc[n + qn] = 0;
    return loc;
}

/* GET/HEAD of a path: finds the file (cache or open), checks conditions and
 * ranges, plans the answer into p.  Returns 0 (answered as keep_alive
 * said), CLOSE (refused, answered with "Connection: close" whatever
 * keep_alive said: close it after) or -errno (nothing to send). */
#define CLOSE 1
static int plan_file(response *p, const http_request *rq, int keep_alive) {
    char path[HTTP_MAX_TARGET + 2];
    int r = http_path_decode(rq->path.p, rq->path.n, path, sizeof path);
    if (r < 0) {
        r = plan_status(p, rq, -r, 0, NULL);
        return r < 0 ? r : CLOSE;
    }
    fc_entry *e = NULL;
    int fd = -1;
    struct stat own_st;
    const struct stat *st = &own_st;
    const char *mime = NULL, *etag, *lm;
    char own_etag[HTTP_ETAG_LEN], own_lm[HTTP_DATE_LEN];
    int status = fc_get(path, &e);
    if (status == 200 && !e) status = http_open_file(root_fd, path, &fd, &own_st, &mime);
    if (status == HTTP_FILE_REDIRECT) {
        char *loc = redirect_location(path, rq);
        r = loc ? plan_status(p, rq, 301, keep_alive, loc) : -ENOMEM;
        free(loc);
        return r;
    }
    if (status != 200) {
        int keep = keep_alive && status < 500;
        r = plan_status(p, rq, status, keep, NULL);
        return r < 0 ? r : keep == keep_alive ? 0 : CLOSE;
    }
    p->e = e;   /* released by response_free */
    p->fd = fd; /* closed by response_free, or read from below */
    if (e) {
        st = &e->st;
        mime = e->mime;
        etag = e->etag;
        lm = e->last_modified;
    } else {
        http_etag(&own_st, own_etag);
        http_fmt_date(own_st.st_mtime, own_lm);
        etag = own_etag;
        lm = own_lm;
    }
    char *head = p->buf;
    const int cap = 1024;
    p->rq = rq;
    int cond = http_conditional(st, etag, rq->if_match.p, rq->if_match.n, rq->if_unmodified_since.p,
                                rq->if_unmodified_since.n, rq->if_none_match.p, rq->if_none_match.n,
                                rq->if_modified_since.p, rq->if_modified_since.n);
    if (cond == 304) {
        int at = head_common(head, cap, 304, keep_alive);
        at = put(head, at, cap, "Last-Modified: %s\r\nETag: %s\r\n\r\n", lm, etag);
        p->head_len = (size_t)at;
        p->code = 304;
        return 0;
    }
    if (cond == 412) return plan_status(p, rq, 412, keep_alive, NULL);
    off_t first = 0, last = st->st_size - 1;
    int partial = 0;
    if (rq->range.n && http_if_range_ok(st, etag, rq->if_range.p, rq->if_range.n)) {
        int rr = http_parse_range(rq->range.p, rq->range.n, st->st_size, &first, &last);
        if (rr == -416) {
            int at = head_common(head, cap, 416, keep_alive);
            at = put(head, at, cap, "Content-Range: bytes */%lld\r\nContent-Length: 0\r\n\r\n", (long long)st->st_size);
            p->head_len = (size_t)at;
            p->code = 416;
            return 0;
        }
        if (rr == 1) partial = 1;
        else first = 0, last = st->st_size - 1;
    }
    long long len = st->st_size ? (long long)(last - first + 1) : 0;
    p->code = partial ? 206 : 200;
    int at = head_common(head, cap, p->code, keep_alive);
    /* mime (< 64), the date (29) and the ETag (< 48) keep this far below cap */
    at = APP_LIT(head, at, "Content-Type: ");
    at = app_str(head, at, mime);
    at = APP_LIT(head, at, "\r\nContent-Length: ");
    at = app_u64(head, at, (unsigned long long)len);
    at = APP_LIT(head, at, "\r\nLast-Modified: ");
    at = app(head, at, lm, HTTP_DATE_LEN - 1);
    at = APP_LIT(head, at, "\r\nETag: ");
    at = app_str(head, at, etag);
    at = APP_LIT(head, at, "\r\nAccept-Ranges: bytes\r\n");
    if (partial)
        at = put(head, at, cap, "Content-Range: bytes %lld-%lld/%lld\r\n", (long long)first, (long long)last,
                 (long long)st->st_size);
    at = APP_LIT(head, at, "\r\n");
    p->head_len = (size_t)at;
    if (rq->method == HTTP_M_HEAD || len == 0) return 0;
    p->log_bytes = len;
    if (e && len <= SMALL_BODY) { /* head and body in one send */
        memcpy(head + at, e->body + first, (size_t)len);
        p->head_len += (size_t)len;
    } else if (e) {
        p->mem = e->body + first;
        p->mem_len = (size_t)len;
    } else if (len <= SMALL_BODY) {
        long long got = 0;
        while (got < len) {
            ssize_t g = weft_pread(fd, head + at + got, (size_t)(len - got), first + (off_t)got);
            if (g <= 0) break;
            got += g;
        }
        if (got != len) { /* shrank since its fstat (or a read error): nothing sent yet, so say so */
            file_short(path, strlen(path), got, len, 0);
            r = plan_status(p, rq, 500, 0, NULL);
            return r < 0 ? r : CLOSE;
        }
        p->head_len += (size_t)len;
    } else {
        p->off = first;
        p->file_len = len;
    }
    return 0;
}

/* GET or HEAD /healthz, for load balancers' health checks: 200 "ok", or
 * 503 "draining" (and the connection closes) once the drain or its notice
 * (--drain-notice) began -- from memory, never the docroot: a file of that
 * name there is not served. */
static int plan_health(response *p, const http_request *rq, int keep_alive) {
    int drain = atomic_load_explicit(&draining, memory_order_relaxed) ||
                atomic_load_explicit(&unhealthy, memory_order_relaxed);
    const char *body = drain ? "draining\n" : "ok\n";
    size_t bn = strlen(body);
    int status = drain ? 503 : 200;
    int at = head_common(p->buf, 1024, status, keep_alive && !drain);
    at = APP_LIT(p->buf, at, "Content-Type: text/plain\r\nCache-Control: no-store\r\nContent-Length: ");
    at = app_u64(p->buf, at, bn);
    at = APP_LIT(p->buf, at, "\r\n\r\n");
    p->head_len = (size_t)at;
    if (rq->method != HTTP_M_HEAD) {
        p->head_len = (size_t)app(p->buf, at, body, bn);
        p->log_bytes = (long long)bn;
    }
    p->rq = rq;
    p->code = status;
    return drain ? CLOSE : 0;
}

/* The answer to a parsed request, into p: 0 or -errno (nothing to send).
 * *refused (and *keep = 0) when the answer refuses it. */
int plan_request(response *p, const http_request *rq, int *keep, int *refused) {
    int status = 0;
    if (rq->method != HTTP_M_GET && rq->method != HTTP_M_HEAD) status = rq->content_length > MAX_BODY ? 413 : 405;
    else if (rq->content_length > MAX_BODY) status = 413;
    else if (rq->path.n == 0 || rq->path.p[0] != '/') status = 400;
    int r;
    if (status) {
        r = plan_status(p, rq, status, 0, NULL);
    } else {
        if (rq->path.n == 8 && !memcmp(rq->path.p, "/healthz", 8)) r = plan_health(p, rq, *keep);
        else r = plan_file(p, rq, *keep);
        if (r != CLOSE) return r;
        r = 0;
    }
    *keep = 0;
    *refused = 1;
    return r;
}
