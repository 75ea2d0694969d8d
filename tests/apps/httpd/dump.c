/*
 * test_httpd: the thread dump under load -- SIGQUIT with
 * WEFT_DUMP_ON_SIGQUIT=json to weft-httpd and to the echo example (built
 * as users build, without frame pointers): the JSON parses and names every
 * parked connection, where it waits, and its frames.
 */
#include "httpd_test.h"

/* ------------------------------------------------------------------------ */
/* the thread dump under load (issue 13)                                     */
/* ------------------------------------------------------------------------ */

/*
 * A program under load gets SIGQUIT with WEFT_DUMP_ON_SIGQUIT=json: its
 * dump (on its stderr, a file here) must parse, and name what a reader
 * needs: every vthread waiting in the delay (a weft_sleep) or on a socket
 * has a frame in the program's own sources (src: a path's part, a
 * folder "/apps/httpd/" or a file "/echo_server.c"; with a line), the
 * blocking call among its frames and as "call", and a site there; every connection's vthread is named after its peer ("conn
 * 127.0.0.1:PORT", PORT one of our sockets'); the groups count every
 * vthread.  Half the connections are sent a request (they wait in the
 * delay), half stay idle (they wait in weft_recv); dumps are taken until
 * one shows all of them parked and some in the delay (a loaded machine may
 * take a while to get there), each dump checked as it comes.
 */

#define DUMP_CONNS 100

/* "weft__sleep_until_at" is what the call weft_sleep_until made */
static int same_call(const char *fn, const char *call) {
    if (!fn || !call) return 0;
    if (!strncmp(fn, "weft__", 6)) {
        size_t l = strlen(fn);
        if (l > 9 && !strcmp(fn + l - 3, "_at"))
            return !strncmp(call, "weft_", 5) && strlen(call) == l - 4 && !strncmp(call + 5, fn + 6, l - 9);
    }
    /* weft_recv_until(..., deadline) is the call weft_recv, with its own deadline */
    size_t c = strlen(call);
    if (!strncmp(fn, call, c) && !strcmp(fn + c, "_until")) return 1;
    return !strcmp(fn, call);
}

/* The vthreads of one dump: 1 when it shows every connection parked and at
 * least one in the delay; fails the test on anything wrong. */
/* tls: the TLS-wrapping mode -- the front connects from ports of its own,
 * and a connection's socket call is made by the TLS BIO (its site is
 * apps/common/weft_tls.c's, with the program's frames under it). */
static int check_dump(const json *root, const char *src, const int *ports, int nports, int tls) {
    const json *d = json_get(root, "weft_dump");
    CHECK(d != NULL);
    const json *vs = json_get(d, "vthreads"), *stacks = json_get(d, "stacks");
    CHECK(vs && vs->type == JSON_ARR);
    CHECK(stacks && stacks->type == JSON_ARR);
    int conns = 0, parked_conns = 0, delayed = 0, listed = 0;
    int seen[DUMP_CONNS] = {0};
    for (const json *v = vs->first; v; v = v->next) {
        listed++;
        const char *name = json_str(json_get(v, "name"), NULL), *state = json_str(json_get(v, "state"), NULL);
        CHECK(name && state);
        if (!*name) FAIL("vthread %.0f has no name", json_get(v, "id") ? json_get(v, "id")->num : -1.0);
        if (!strncmp(name, "conn ", 5)) {
            int port = 0;
            if (sscanf(name, "conn 127.0.0.1:%d", &port) != 1) FAIL("connection vthread named '%s'", name);
            int k = 0;
            while (k < nports && ports[k] != port) k++;
            if (!tls && k == nports) FAIL("'%s': no such client port", name);
            if (!tls && seen[k]++) FAIL("two vthreads named '%s'", name);
            conns++;
        }
        if (strcmp(state, "parked")) continue;
        const char *on = json_str(json_get(v, "waiting_on"), NULL), *call = json_str(json_get(v, "call"), NULL),
                   *site = json_str(json_get(v, "site"), NULL);
        CHECK(on && call);
        if (!strncmp(name, "conn ", 5)) parked_conns++;
        if (strcmp(on, "sleep") && strcmp(on, "io")) continue;
        if (!strcmp(name, "signals")) continue; /* weft's own relay (weft_signal_notify): no frame of the program */
        if (!strcmp(on, "sleep") && !strncmp(name, "conn ", 5)) delayed++;
        /* a frame in the program's file with a line, and the call's own */
        const json *bt = json_get(v, "backtrace");
        CHECK(bt && bt->type == JSON_ARR);
        int in_file = 0, has_call = 0;
        for (const json *f = bt->first; f; f = f->next) {
            const char *file = json_str(json_get(f, "file"), NULL), *fn = json_str(json_get(f, "function"), NULL);
            const json *line = json_get(f, "line");
            if (file && strstr(file, src) && line && line->num > 0) in_file = 1;
            if (same_call(fn, call)) has_call = 1;
        }
        if (!in_file || !has_call || !site || !(strstr(site, src) || (tls && strstr(site, "/apps/common/weft_tls.c")))) {
            FAIL("vthread '%s' waiting on %s in %s: %s%s%s (site %s)", name, on, call,
                 in_file ? "" : "no frame names ", in_file ? "" : src,
                 has_call ? "" : ", the call is not among its frames", site ? site : "none");
        }
    }
    /* the groups hold every vthread listed, once */
    int grouped = 0;
    for (const json *g = stacks->first; g; g = g->next) {
        const json *c = json_get(g, "count"), *ids = json_get(g, "ids");
        CHECK(c && ids && ids->type == JSON_ARR);
        int n = 0;
        for (const json *i = ids->first; i; i = i->next) n++;
        CHECK_EQ(n, (int)c->num);
        grouped += n;
    }
    CHECK_EQ(grouped, listed);
    return conns == nports && parked_conns == nports && delayed > 0;
}

/* The last complete dump in the file at fd (from its "{"weft_dump"), or
 * NULL; *root is its root. */
static json_doc *last_dump(int fd, int *ndumps, const json **root) {
    off_t len = lseek(fd, 0, SEEK_END);
    char *buf = malloc((size_t)len + 1);
    CHECK(buf != NULL);
    CHECK(pread(fd, buf, (size_t)len, 0) == len);
    buf[len] = 0;
    const char *last = NULL;
    int n = 0;
    for (const char *p = buf; (p = strstr(p, "{\"weft_dump\"")); p++) {
        last = p;
        n++;
    }
    json_doc *j = NULL;
    if (last) {
        char err[128];
        const char *rest;
        j = json_parse_prefix(last, (size_t)(buf + len - last), root, &rest, err, sizeof err);
        /* the dump is written in pieces: one cut short is still coming */
        size_t off = 0;
        if (!j) sscanf(strstr(err, "at byte ") ? strstr(err, "at byte ") + 8 : "0", "%zu", &off);
        /* an error where the text ends: the rest has not been written yet */
        if (!j && off < (size_t)(buf + len - last)) {
            size_t from = off > 300 ? off - 300 : 0;
            FAIL("the dump is not JSON: %s; around it:\n%.400s", err, last + from);
        }
    }
    *ndumps = j ? n : n - 1;
    free(buf);
    return j;
}

/* The wait for a dump ran out: what the server wrote last and whether it
 * still runs (a sanitizer's report, with halt_on_error, ends it) say why. */
static _Noreturn void no_dump(server *s, int errfd, int taken, int tries) {
    off_t len = lseek(errfd, 0, SEEK_END);
    char tail[4097];
    off_t from = len > 4096 ? len - 4096 : 0;
    ssize_t n = pread(errfd, tail, (size_t)(len - from), from);
    tail[n > 0 ? n : 0] = 0;
    int st = 0;
    int gone = server_wait(s, 0, &st);
    char how[96];
    if (!gone) snprintf(how, sizeof how, "still running");
    else if (WIFSIGNALED(st)) snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(st));
    else snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(st));
    FAIL("SIGQUIT (%d sent) wrote no complete JSON dump after the %d before; the server %s; its stderr "
         "(%lld bytes) ends:\n%s",
         tries, taken, how, (long long)len, tail);
}

static void dump_under_load(server *s, int errfd, const char *src, const char *request) {
    int fds[DUMP_CONNS], ports[DUMP_CONNS];
    for (int i = 0; i < DUMP_CONNS; i++) {
        fds[i] = tcp_connect(s->port);
        struct sockaddr_in a;
        socklen_t al = sizeof a;
        CHECK(getsockname(fds[i], (struct sockaddr *)&a, &al) == 0);
        ports[i] = ntohs(a.sin_port);
    }
    int64_t until = now_ms() + (TEST_SANITIZED ? 120000 : 40000);
    int taken = 0, ready = 0, tries = 0;
    while (!ready) {
        if (now_ms() > until) FAIL("no dump showed all %d connections parked, some in the delay (%d dumps)", DUMP_CONNS, taken);
        /* half of them make a request: they wait in the delay (1 s); the
         * answers pile up unread in our receive buffers, which is fine */
        for (int i = 0; i < DUMP_CONNS; i += 2) {
            size_t n = strlen(request);
            CHECK(send(fds[i], request, n, MSG_NOSIGNAL) == (ssize_t)n);
        }
        sleep_ms(tries++ ? 300 : 100);
        CHECK(kill(s->pid, SIGQUIT) == 0);
        json_doc *j = NULL;
        const json *root = NULL;
        int n = taken;
        /* (as long as the whole budget: a first dump loads the debug
         * information, and under TSan on a loaded machine it once took
         * longer than the 30 s this wait had) */
        while (n <= taken) {
            if (now_ms() > until) no_dump(s, errfd, taken, tries);
            sleep_ms(20);
            json_free(j);
            j = last_dump(errfd, &n, &root);
        }
        taken = n;
        ready = check_dump(root, src, ports, DUMP_CONNS, s->front);
        json_free(j);
    }
    printf("dump %d of the program shows %d connections parked, each named and placed in %s\n", taken, DUMP_CONNS,
           src);
    for (int i = 0; i < DUMP_CONNS; i++) close(fds[i]);
}

static int tmp_stderr(void) {
    char path[] = "/tmp/weft-dump-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    return fd;
}

TEST(sigquit_dump_under_load) {
    NEED_SERVER();
    const char *model = getenv("WEFT_TEST_HTTPD_MODEL");
    if (model && *model) {
        printf("skipped: the dump names connection vthreads, which only the virtual model has (runs once, there)\n");
        return;
    }
    docroot d;
    make_root(&d);
    int errfd = tmp_stderr();
    child_stderr = errfd;
    child_env[0] = "WEFT_DUMP_ON_SIGQUIT=json";
    child_env[1] = "WEFT_MONITOR=off"; /* no monitor line on stderr in the middle of the JSON */
    server s;
    server_start(&s, d.root, "--model", "virtual", "--delay-ms", "1000", "--max-conns", "1000", NULL);
    dump_under_load(&s, errfd, "/apps/httpd/", "GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n");
    server_stop(&s);
    close(errfd);
}

#ifdef WEFT_ECHO_SERVER_PATH
/* The same for examples/echo_server.c, built with -O2, no frame pointers
 * and no -rdynamic (CMakeLists.txt): libdw's unwinder walks its frames. */
TEST(example_dump_names_frames) {
    const char *model = getenv("WEFT_TEST_HTTPD_MODEL");
    if (model && *model) {
        printf("skipped: runs once, not per server model\n");
        return;
    }
    int errfd = tmp_stderr();
    child_stderr = errfd;
    child_env[0] = "WEFT_DUMP_ON_SIGQUIT=json";
    child_env[1] = "WEFT_MONITOR=off"; /* no monitor line on stderr in the middle of the JSON */
    server s;
    const char *argv[] = {WEFT_ECHO_SERVER_PATH, "--delay-ms", "1000", NULL};
    prog_start(&s, argv);
    dump_under_load(&s, errfd, "/echo_server.c", "hello\n");
    server_stop(&s);
    close(errfd);
}
#endif
