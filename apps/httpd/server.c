/*
 * weft-httpd's life: server() is weft_main's body -- it starts the signal
 * watcher vthread and the acceptors (both in acceptor.c), the
 * async pool's sweep and the --cpu-job background job -- and the drain at
 * SIGTERM/SIGINT (httpd.c's essay, "Drain"): the watcher sets draining,
 * cancels the acceptors and shuts idle connections for reading; server()
 * waits for the rest, up to --drain-timeout, and exits 3 if it cut any.
 */

#define _GNU_SOURCE
#include "httpd_int.h"

/* ------------------------------------------------------------------------ */
/* start and drain                                                           */
/* ------------------------------------------------------------------------ */

/* ---- the CPU-bound background job (--cpu-job) ------------------------------------
 *
 * For the "mixed run" of issue 12: HTTP latency while a CPU-bound job runs
 * in the same process, either in the default carrier group, sharing the
 * carriers with the connections' vthreads (shared), or in a carrier group
 * of its own with one carrier and the compute option (group).  The job is
 * a driver vthread (N with --cpu-job-vthreads) running weft_parallel_reduce
 * -- the sum of sqrt(i) over 2^22 indices a round, round after round --
 * whose workers are its group's carriers: all of the default group's
 * (shared) or the one carrier of its own (group).  The workers yield about
 * every millisecond (parallel.c), as a well-behaved computation on virtual
 * threads does; progress (rounds, sums in millions) is printed on stderr
 * when the server stops.
 */
#define CPU_JOB_ROUND ((size_t)1 << 22)
static struct {
    weft_group *group;
    weft_thread *t[256];
    int n;
    atomic_int stop;
    atomic_long slices, msums;
    volatile double sink;
} CJ;

static void cpu_job_body(size_t i, void *acc, void *ctx) {
    (void)ctx;
    *(double *)acc += __builtin_sqrt((double)i);
}

static void cpu_job_combine(void *into, const void *from, void *ctx) {
    (void)ctx;
    *(double *)into += *(const double *)from;
}

static void *cpu_job_main(void *arg) {
    size_t base = (size_t)(intptr_t)arg << 40;
    double acc = 0;
    while (!atomic_load_explicit(&CJ.stop, memory_order_relaxed)) {
        double round = 0;
        if (weft_parallel_reduce(base, base + CPU_JOB_ROUND, 0, &round, sizeof round, NULL, cpu_job_body,
                                 cpu_job_combine, NULL) < 0)
            break; /* cancelled (shutdown) or no memory */
        acc += round;
        base += CPU_JOB_ROUND;
        atomic_fetch_add_explicit(&CJ.slices, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&CJ.msums, (long)(CPU_JOB_ROUND / 1000000), memory_order_relaxed);
    }
    CJ.sink = acc;
    return NULL;
}

static int cpu_job_start(void) {
    if (O.cpu_job == CPU_JOB_OFF) return 0;
    int n = O.cpu_job_vthreads > 0 ? O.cpu_job_vthreads : 1;
    if (n > 256) n = 256;
    if (O.cpu_job == CPU_JOB_GROUP) {
        weft_group_opts go = {.compute = 1};
        int r = weft_group_create(&CJ.group, "cpu-job", 1, &go);
        if (r < 0) {
            fprintf(stderr, "weft-httpd: --cpu-job group: cannot make its carrier group: %s\n", strerror(-r));
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        /* group NULL (shared): the spawning vthread's group, the default one */
        weft_thread_opts a = {.name = "cpu-job", .group = CJ.group};
        int r = weft_spawn(&CJ.t[i], cpu_job_main, (void *)(intptr_t)i, &a);
        if (r < 0) {
            fprintf(stderr, "weft-httpd: --cpu-job: cannot start its vthreads: %s\n", strerror(-r));
            return -1;
        }
        CJ.n++;
    }
    if (!O.quiet)
        fprintf(stderr, "weft-httpd: cpu job: %d weft_parallel_reduce driver(s) in %s\n", n,
                CJ.group ? "its own carrier group (1 carrier)" : "the default carrier group");
    return 0;
}

static void cpu_job_stop(void) {
    if (O.cpu_job == CPU_JOB_OFF) return;
    atomic_store(&CJ.stop, 1);
    for (int i = 0; i < CJ.n; i++) weft_join(CJ.t[i], NULL);
    CJ.n = 0;
    fprintf(stderr, "weft-httpd: cpu job (%s): %ld rounds, %ld M sqrt\n",
            O.cpu_job == CPU_JOB_GROUP ? "group" : "shared", atomic_load(&CJ.slices), atomic_load(&CJ.msums));
    if (CJ.group) {
        weft_group_close(CJ.group);
        CJ.group = NULL;
    }
}

/* A listening socket on --host and port (reuseport: SO_REUSEPORT too, for
 * --workers' slots, workers.c).  -1 after saying why. */
int open_listener(const char *port, int reuseport) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res;
    int e = getaddrinfo(O.host, port, &hints, &res);
    if (e) {
        fprintf(stderr, "weft-httpd: --host %s --port %s: %s\n", O.host, port, gai_strerror(e));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        /* non-blocking: the EMFILE shedding accepts with plain accept4, which must
         * never wait (weft_accept waits in the ring either way) */
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) {
            e = errno;
            close(fd);
            fd = -1;
            errno = e;
            continue;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* accepted sockets inherit it */
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4096) == 0) break;
        e = errno;
        close(fd);
        fd = -1;
        errno = e;
    }
    if (fd < 0) fprintf(stderr, "weft-httpd: cannot listen on %s:%s: %s\n", O.host, port, strerror(errno));
    freeaddrinfo(res);
    return fd;
}

/* The numeric address and port fd listens on, for "listening on HOST:PORT". */
void listen_addr(int fd, char *host, size_t hn, int *port) {
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    snprintf(host, hn, "?");
    *port = 0;
    if (getsockname(fd, (struct sockaddr *)&a, &al) < 0) return;
    if (a.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&a)->sin_addr, host, (socklen_t)hn);
        *port = ntohs(((struct sockaddr_in *)&a)->sin_port);
    } else if (a.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&a)->sin6_addr, host, (socklen_t)hn);
        *port = ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
    }
}

int server(void *unused) {
    weft_set_name("main");
    /* SIGQUIT writes a thread dump to stderr, as a JVM's does, unless
     * WEFT_DUMP_ON_SIGQUIT chose otherwise (weft_init armed it then) */
    const char *dq = getenv("WEFT_DUMP_ON_SIGQUIT");
    if ((!dq || !*dq) && weft_dump_on_signal(SIGQUIT, 2, WEFT_DUMP_TEXT) < 0)
        fprintf(stderr, "weft-httpd: cannot arm the thread dump on SIGQUIT\n");
    nacceptors = O.carriers > 0 ? O.carriers : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nacceptors > 32) nacceptors = 32;
    if (nacceptors < 1) nacceptors = 1;
    if (tls_listen_fd >= 0) nacceptors *= 2; /* as many again for --tls-port (acceptor.c) */
    for (int i = 0; i < nacceptors; i++) {
        char an[32];
        snprintf(an, sizeof an, "acceptor %d", i);
        weft_thread_opts aa = {.name = an};
        if (weft_spawn(&acceptors[i], acceptor_main, (void *)(intptr_t)i, &aa) < 0) {
            fprintf(stderr, "weft-httpd: cannot start acceptors\n");
            return 1;
        }
    }
    /* after the acceptors: it reads acceptors[] (a signal that came
     * meanwhile is counted: weft_signal_wait takes it) */
    weft_thread *sw, *reaper = NULL;
    weft_thread_opts sa = {.name = "watcher", .daemon = 1}; /* of SIGTERM and SIGINT */
    if (weft_spawn(&sw, signal_watcher, NULL, &sa) < 0) return 1;
    weft_thread_opts ra = {.name = "pool-reaper", .daemon = 1};
    if (O.model == MODEL_POOL && weft_spawn(&reaper, pool_reaper, NULL, &ra) < 0) return 1;
    if (O.model == MODEL_ASYNC && weft_timer_async(weft_now() + NS, bp_sweep, NULL, NULL) < 0) return 1;
    if (tls_start() < 0) return 1;
    if (cpu_job_start() < 0) {
        cpu_job_stop();
        return 1;
    }
    for (int i = 0; i < nacceptors; i++) weft_join(acceptors[i], NULL);
    cpu_job_stop(); /* (prints its progress) */
    close(listen_fd);
    if (tls_listen_fd >= 0) close(tls_listen_fd);
    int64_t until = weft_now() + O.drain_timeout;
    while (atomic_load(&nconns) > 0 && weft_now() < until && !atomic_load(&drain_cut)) weft_sleep(5 * 1000000);
    int left = atomic_load(&nopen);
    if (left && !O.quiet)
        fprintf(stderr, "weft-httpd: %s: %d connection(s) cut\n",
                atomic_load(&drain_cut) ? "stopped by a second signal" : "drain timeout", left);
    log_stop(); /* what is queued, and how many lines were dropped */
    if (!O.quiet) fprintf(stderr, "weft-httpd: stopped\n");
    /* with connections cut, their vthreads may still hold carriers' work:
     * leave without waiting for them, and say so in the exit status */
    if (left) {
        fflush(NULL);
        _exit(EXIT_CUT);
    }
    weft_cancel(sw);
    weft_join(sw, NULL);
    if (reaper) {
        weft_cancel(reaper);
        weft_join(reaper, NULL);
    }
    if (O.model == MODEL_POOL) pool_stop();
    return 0;
}
