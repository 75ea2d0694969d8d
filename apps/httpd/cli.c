/*
 * weft-httpd's command line: the options into O, --help, and main, which
 * opens the docroot, the access log and the listening socket, starts the
 * pool's threads and the runtime, prints "listening on HOST:PORT" and runs
 * server() (server.c) as weft_main.  Exit status: 0, 1 (cannot start), 2
 * (a bad option), 3 (the drain cut connections).
 */

#define _GNU_SOURCE
#include "httpd_int.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: weft-httpd [options]\n"
            "A static-file HTTP/1.1 server on weft: one virtual thread per connection.\n\n"
            "  --host ADDR            address to listen on (default 127.0.0.1)\n"
            "  --port N               port (default 8080; 0 picks a free one)\n"
            "  --root DIR             document root (default ./www)\n"
            "  --model M              virtual | thread | pool:N | async  (default virtual)\n"
            "                         virtual: a vthread per connection; thread: a pthread per\n"
            "                         connection; pool:N: N pthreads with a bounded queue;\n"
            "                         async: completion handlers, no thread per connection\n"
            "  --carriers N           carrier threads (default: online CPUs, or $WEFT_CARRIERS)\n"
            "  --max-conns N          live connections at most (default 60000, or the fd limit)\n"
            "  --delay-ms D           every request sleeps D ms before it is answered\n"
            "  --delay-every K        ... only every K-th request (default 1)\n"
            "  --header-timeout S     a request head must arrive within S s (default 10)\n"
            "  --idle-timeout S       close keep-alive connections idle for S s (default 15)\n"
            "  --send-timeout S       a send that makes no progress for S s fails (default 30)\n"
            "  --body-timeout S       a request body must arrive within S s (default 10)\n"
            "  --drain-timeout S      on SIGTERM/SIGINT wait at most S s for requests in progress\n"
            "                         or already received (default 10);\n"
            "                         a second SIGTERM/SIGINT stops at once\n"
            "  --drain-notice S       at SIGTERM/SIGINT first serve S s more with /healthz answering\n"
            "                         503, so a load balancer's health check takes this server\n"
            "                         out before it stops accepting (default: none)\n"
            "  --access-log FILE|-    log every request (- is stdout), from a queue by a thread\n"
            "                         of its own: lines it cannot take are dropped and counted\n"
            "  --cache-mb N           keep small files (<= 64 KiB) in memory, N MiB at most,\n"
            "                         looked at again once a second (default 64; 0: off)\n"
            "  --cpu-job shared|group run a CPU-bound background job in the process (default: none):\n"
            "                         weft_parallel_reduce summing sqrt, round after round, its\n"
            "                         workers yielding every ~1 ms; shared: in the default carrier\n"
            "                         group, with the connections; group: in a carrier group of its\n"
            "                         own, 1 carrier, compute option.  Its progress goes to stderr\n"
            "                         when the server stops\n"
            "  --cpu-job-vthreads N   vthreads driving such loops (default 1; at most 256)\n"
            "  --workers N            N processes (1-256) share the port (SO_REUSEPORT sockets),\n"
            "                         each with its own runtime (--carriers 1 each unless given);\n"
            "                         this one supervises: it restarts a worker that dies,\n"
            "                         SIGHUP replaces them one at a time (the binary now at this\n"
            "                         program's path, the same options) without refusing a\n"
            "                         connection, SIGTERM drains them all\n"
            "  --tls-cert FILE        HTTPS: the certificate (chain) in PEM, the server's first\n"
            "  --tls-key FILE         ... and its private key in PEM (TLS 1.2 and 1.3, OpenSSL)\n"
            "  --tls-port N           HTTPS on port N and plain HTTP on --port (without it,\n"
            "                         --port speaks HTTPS only); models virtual, thread, pool:N\n"
            "  --quiet                no start/stop messages on stderr\n"
            "  --help                 this text\n"
            "It prints \"listening on HOST:PORT\" when ready (\"... (https)\" for HTTPS's port).\n"
            "Errors go to stderr.\n"
            "GET /healthz answers 200 \"ok\" without looking at the docroot (503 while draining).\n"
            "SIGQUIT writes a thread dump to stderr: every vthread (\"conn 127.0.0.1:53412\",\n"
            "\"acceptor 0\", \"watcher\", \"main\") with its state, blocking call and site, and\n"
            "its stack with file:line; then the vthreads grouped by stack.  In JSON with\n"
            "WEFT_DUMP_ON_SIGQUIT=json.\n"
            "Exit status: 0 after a clean stop (every connection finished), 3 when the\n"
            "drain cut connections (its timeout, or a second signal), 1 when it cannot\n"
            "start, 2 for a bad option.\n");
}

static int parse_seconds(const char *v, int64_t *out) {
    char *end;
    double d = strtod(v, &end);
    if (*end || d <= 0 || d > 86400) return -1;
    *out = (int64_t)(d * NS);
    return 0;
}

static int parse_int(const char *v, long lo, long hi, long *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

int main(int argc, char **argv) {
    enum { OPT_HOST = 256, OPT_PORT, OPT_ROOT, OPT_MODEL, OPT_CARRIERS, OPT_MAXC, OPT_DELAY, OPT_EVERY, OPT_HT,
           OPT_IT, OPT_ST, OPT_DT, OPT_LOG, OPT_QUIET, OPT_HELP, OPT_CACHE, OPT_BT, OPT_CPU, OPT_CPUN,
           OPT_WORKERS, OPT_WORKER, OPT_NOTICE, OPT_TLS_CERT, OPT_TLS_KEY, OPT_TLS_PORT };
    static const struct option opts[] = {
        {"host", 1, 0, OPT_HOST}, {"port", 1, 0, OPT_PORT}, {"root", 1, 0, OPT_ROOT},
        {"model", 1, 0, OPT_MODEL}, {"carriers", 1, 0, OPT_CARRIERS}, {"max-conns", 1, 0, OPT_MAXC},
        {"delay-ms", 1, 0, OPT_DELAY}, {"delay-every", 1, 0, OPT_EVERY}, {"header-timeout", 1, 0, OPT_HT},
        {"idle-timeout", 1, 0, OPT_IT}, {"send-timeout", 1, 0, OPT_ST}, {"drain-timeout", 1, 0, OPT_DT},
        {"access-log", 1, 0, OPT_LOG}, {"quiet", 0, 0, OPT_QUIET}, {"help", 0, 0, OPT_HELP},
        {"cache-mb", 1, 0, OPT_CACHE}, {"body-timeout", 1, 0, OPT_BT}, {"cpu-job", 1, 0, OPT_CPU},
        {"cpu-job-vthreads", 1, 0, OPT_CPUN}, {"workers", 1, 0, OPT_WORKERS},
        /* --worker LISTEN_FD,READY_FD,SLOT[,TLS_FD,KEY_FD]: how the supervisor starts a worker (workers.c; TLS_FD -1 without --tls-port) */
        {"worker", 1, 0, OPT_WORKER}, {"drain-notice", 1, 0, OPT_NOTICE}, {"tls-cert", 1, 0, OPT_TLS_CERT},
        {"tls-key", 1, 0, OPT_TLS_KEY}, {"tls-port", 1, 0, OPT_TLS_PORT}, {0, 0, 0, 0}};
    int worker_lfd = -1, worker_tfd = -1, worker_kfd = -1;
    long x;
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case OPT_HOST: O.host = optarg; break;
        case OPT_PORT:
            if (parse_int(optarg, 0, 65535, &x)) goto bad;
            O.port = optarg;
            break;
        case OPT_ROOT: O.root = optarg; break;
        case OPT_MODEL:
            if (!strcmp(optarg, "virtual")) O.model = MODEL_VIRTUAL;
            else if (!strcmp(optarg, "thread")) O.model = MODEL_THREAD;
            else if (!strcmp(optarg, "async")) O.model = MODEL_ASYNC;
            else if (!strncmp(optarg, "pool:", 5) && !parse_int(optarg + 5, 1, 100000, &x)) {
                O.model = MODEL_POOL;
                O.pool_threads = (int)x;
            } else goto bad;
            break;
        case OPT_CARRIERS:
            if (parse_int(optarg, 1, 1024, &x)) goto bad;
            O.carriers = (int)x;
            break;
        case OPT_MAXC:
            if (parse_int(optarg, 1, 10000000, &x)) goto bad;
            O.max_conns = (int)x;
            break;
        case OPT_DELAY:
            if (parse_int(optarg, 0, 86400000, &x)) goto bad;
            O.delay_ns = x * 1000000LL;
            break;
        case OPT_EVERY:
            if (parse_int(optarg, 1, LONG_MAX, &x)) goto bad;
            O.delay_every = x;
            break;
        case OPT_HT: if (parse_seconds(optarg, &O.header_timeout)) goto bad; break;
        case OPT_IT: if (parse_seconds(optarg, &O.idle_timeout)) goto bad; break;
        case OPT_ST: if (parse_seconds(optarg, &O.send_timeout)) goto bad; break;
        case OPT_DT: if (parse_seconds(optarg, &O.drain_timeout)) goto bad; break;
        case OPT_BT: if (parse_seconds(optarg, &O.body_timeout)) goto bad; break;
        case OPT_NOTICE: if (parse_seconds(optarg, &O.drain_notice)) goto bad; break;
        case OPT_LOG: O.access_log = optarg; break;
        case OPT_QUIET: O.quiet = 1; break;
        case OPT_CACHE:
            if (parse_int(optarg, 0, 1 << 20, &x)) goto bad;
            O.cache_bytes = (size_t)x << 20;
            break;
        case OPT_CPU:
            if (!strcmp(optarg, "shared")) O.cpu_job = CPU_JOB_SHARED;
            else if (!strcmp(optarg, "group")) O.cpu_job = CPU_JOB_GROUP;
            else goto bad;
            break;
        case OPT_CPUN:
            if (parse_int(optarg, 1, 256, &x)) goto bad;
            O.cpu_job_vthreads = (int)x;
            break;
        case OPT_WORKERS:
            if (parse_int(optarg, 1, 256, &x)) goto bad;
            O.workers = (int)x;
            break;
        case OPT_WORKER: {
            /* LFD,READY,SLOT[,TLSFD,KEYFD]: TLSFD -1 without --tls-port */
            int a, b, c, t = -1, k = -1, n1 = 0, n2 = 0;
            if (sscanf(optarg, "%d,%d,%d%n", &a, &b, &c, &n1) != 3 || a < 0 || b < 0 || c < 0) goto bad;
            if (optarg[n1] && (sscanf(optarg + n1, ",%d,%d%n", &t, &k, &n2) != 2 || t < -1 || k < 0 || optarg[n1 + n2]))
                goto bad;
            worker_lfd = a;
            worker_tfd = t;
            worker_kfd = k;
            O.ready_fd = b;
            O.worker_slot = c;
            break;
        }
        case OPT_TLS_CERT: O.tls_cert = optarg; break;
        case OPT_TLS_KEY: O.tls_key = optarg; break;
        case OPT_TLS_PORT:
            if (parse_int(optarg, 0, 65535, &x)) goto bad;
            O.tls_port = optarg;
            break;
        case OPT_HELP:
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        continue;
    bad:
        fprintf(stderr, "weft-httpd: bad value for --%s: '%s'\n", opts[o - OPT_HOST].name, optarg);
        return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "weft-httpd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (O.tls_port && !O.tls_cert && !O.tls_key) {
        fprintf(stderr, "weft-httpd: --tls-port needs --tls-cert and --tls-key\n");
        return 2;
    }
    /* the certificate and key are checked here, before anything starts
     * (the supervisor of --workers too: a bad file is one clear error) */
    if (tls_setup() < 0) return 1;
    /* descriptors: as many as allowed; connections bounded below that */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    getrlimit(RLIMIT_NOFILE, &rl);
    long fd_room = (long)rl.rlim_cur - 64;
    if (!O.max_conns) O.max_conns = fd_room < 60000 ? (int)(fd_room > 16 ? fd_room : 16) : 60000;
    root_fd = open(O.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) {
        fprintf(stderr, "weft-httpd: --root %s: %s\n", O.root, strerror(errno));
        return 1;
    }
    /* O_PATH opens a directory we may not read: say so now, not with a 403
     * to every request */
    if (faccessat(AT_FDCWD, O.root, R_OK | X_OK, AT_EACCESS) < 0) {
        fprintf(stderr, "weft-httpd: --root %s: %s: the server must be able to read and search it (r-x)\n", O.root,
                strerror(errno));
        return 1;
    }
    if (O.access_log) {
        log_fd = !strcmp(O.access_log, "-") ? dup(1) : open(O.access_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (log_fd < 0) {
            fprintf(stderr, "weft-httpd: --access-log %s: %s\n", O.access_log, strerror(errno));
            return 1;
        }
    }
    if (O.workers && O.worker_slot < 0) {
        /* the supervisor: each worker opens the log, the docroot and its
         * TLS context itself */
        tls_fini();
        if (log_fd >= 0) close(log_fd);
        close(root_fd);
        log_fd = root_fd = -1;
        return supervise(argc, argv);
    }
    if (O.workers > 1 && !O.carriers) O.carriers = 1;
    atomic_store(&reserve_fd, open("/dev/null", O_RDONLY | O_CLOEXEC));
    fc_init(root_fd, O.cache_bytes, NS);
    signal(SIGPIPE, SIG_IGN);
    if (log_start() < 0) return 1;
    if (O.worker_slot >= 0) { /* a worker: its slot's socket, from the supervisor */
        int on = 0;
        socklen_t ol = sizeof on;
        if (getsockopt(worker_lfd, SOL_SOCKET, SO_ACCEPTCONN, &on, &ol) < 0 || !on) {
            fprintf(stderr, "weft-httpd: --worker: descriptor %d is not a listening socket\n", worker_lfd);
            return 1;
        }
        fcntl(worker_lfd, F_SETFD, FD_CLOEXEC);
        fcntl(O.ready_fd, F_SETFD, FD_CLOEXEC);
        listen_fd = worker_lfd;
        if (O.tls_port) {
            if (worker_tfd < 0 || getsockopt(worker_tfd, SOL_SOCKET, SO_ACCEPTCONN, &on, &ol) < 0 || !on) {
                fprintf(stderr, "weft-httpd: --worker: no listening socket for --tls-port\n");
                return 1;
            }
            fcntl(worker_tfd, F_SETFD, FD_CLOEXEC);
            tls_listen_fd = worker_tfd;
        }
        /* HTTPS: the ticket key every worker shares (tls.c) */
        if (worker_kfd >= 0 && tls_ticket_keys_use(worker_kfd) < 0) return 1;
    } else {
        listen_fd = open_listener(O.port, 0);
        if (listen_fd >= 0 && O.tls_port && (tls_listen_fd = open_listener(O.tls_port, 0)) < 0) return 1;
    }
    if (listen_fd < 0) return 1;
    listen_tls = tls_on() && !O.tls_port;
    if (O.model == MODEL_POOL && pool_start() < 0) return 1;
    weft_runtime_opts cfg = {.carriers = O.carriers};
    int r = weft_init(&cfg);
    if (r < 0) {
        fprintf(stderr, "weft-httpd: cannot start the runtime: %s\n", strerror(-r));
        return 1;
    }
    /* SIGTERM/SIGINT from here on: counted for the signal watcher
     * (weft_signal_wait, acceptor.c); before, their default action */
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    if (O.worker_slot >= 0) sigaddset(&ss, SIGUSR2); /* the supervisor's drain notice */
    if ((r = weft_signal_notify(&ss)) < 0) {
        fprintf(stderr, "weft-httpd: cannot catch SIGTERM and SIGINT: %s\n", strerror(-r));
        return 1;
    }
    if (O.worker_slot >= 0) {
        /* ready: the supervisor announces the port once every worker is */
        ssize_t w;
        do w = write(O.ready_fd, "r", 1);
        while (w < 0 && errno == EINTR);
        close(O.ready_fd);
        O.ready_fd = -1;
    } else {
        char host[INET6_ADDRSTRLEN];
        int port;
        listen_addr(listen_fd, host, sizeof host, &port);
        printf("listening on %s:%d%s\n", host, port, listen_tls ? " (https)" : "");
        if (tls_listen_fd >= 0) {
            listen_addr(tls_listen_fd, host, sizeof host, &port);
            printf("listening on %s:%d (https)\n", host, port);
        }
        fflush(stdout);
    }
    r = weft_main(server, NULL);
    fc_fini();
    tls_fini();
    return r < 0 ? 1 : r;
}
