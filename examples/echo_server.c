/*
 * A line echo server: one vthread per connection, written as plain
 * blocking code, and a thread dump worth reading when it is sent SIGQUIT.
 *
 *   echo_server [--port N] [--delay-ms D]
 *
 * It listens on 127.0.0.1 (port 0: any; it prints "listening on
 * 127.0.0.1:PORT"), and each connection's vthread, named after its peer
 * ("conn 127.0.0.1:53412"), reads a line and after D ms (a weft_sleep: the
 * articles' simulated I/O) sends it back.  SIGQUIT writes a thread dump to
 * stderr (JSON with WEFT_DUMP_ON_SIGQUIT=json): every connection's
 * vthread, the call it waits in (weft_recv, weft_sleep_until), the line of
 * this file it was made at, and its stack, function by function, with
 * file:line -- even built with plain -O2 (no frame pointers) and without
 * -rdynamic, as the build's echo_server target is.  SIGTERM or SIGINT
 * stops it.
 */
#include <weft.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

static int64_t delay_ns;

typedef struct conn {
    int fd;
} conn;

/* One connection: read whatever came, wait the delay, send it back. */
static void *serve(void *arg) {
    conn c = *(conn *)arg;
    free(arg);
    char buf[4096];
    for (;;) {
        ssize_t n = weft_recv(c.fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        if (delay_ns && weft_sleep(delay_ns) < 0) break;
        if (weft_write_all(c.fd, buf, (size_t)n) < 0) break;
    }
    weft_close(c.fd);
    return NULL;
}

static void *acceptor(void *arg) {
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        struct sockaddr_in peer;
        socklen_t pl = sizeof peer;
        int fd = weft_accept(lfd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
        if (fd == -ECANCELED) return NULL;
        if (fd < 0) {
            fprintf(stderr, "echo_server: accept: %s\n", strerror(-fd));
            weft_sleep(10 * 1000000);
            continue;
        }
        conn *c = malloc(sizeof *c);
        if (!c) {
            weft_close(fd);
            continue;
        }
        c->fd = fd;
        char name[32], host[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &peer.sin_addr, host, sizeof host);
        snprintf(name, sizeof name, "conn %s:%u", host, (unsigned)ntohs(peer.sin_port));
        weft_thread_opts a = {.name = name};
        if (weft_spawn(NULL, serve, c, &a) < 0) {
            free(c);
            weft_close(fd);
        }
    }
}

static int run(void *arg) {
    int lfd = (int)(intptr_t)arg;
    weft_set_name("main");
    weft_thread *acc;
    weft_thread_opts a = {.name = "acceptor"};
    if (weft_spawn(&acc, acceptor, (void *)(intptr_t)lfd, &a) < 0) return 1;
    /* until SIGTERM or SIGINT, read from a signalfd: the vthread parks,
     * its carrier goes on (they are blocked in every thread: main blocked
     * them before the runtime started its threads) */
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    int sfd = signalfd(-1, &ss, SFD_CLOEXEC);
    struct signalfd_siginfo si;
    if (sfd < 0 || weft_read(sfd, &si, sizeof si) < 0) perror("echo_server: signalfd");
    weft_cancel(acc);
    weft_join(acc, NULL);
    return 0;
}

int main(int argc, char **argv) {
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc) port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--delay-ms") && i + 1 < argc) delay_ns = atoll(argv[++i]) * 1000000LL;
        else {
            fprintf(stderr, "usage: echo_server [--port N] [--delay-ms D]\n");
            return 2;
        }
    }
    /* a peer that closes while its echo is written: the write fails with
     * EPIPE (and the connection ends) instead of the process dying */
    signal(SIGPIPE, SIG_IGN);
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    pthread_sigmask(SIG_BLOCK, &ss, NULL); /* before the carriers start: they inherit it */
    /* The runtime before "listening on": with WEFT_DUMP_ON_SIGQUIT set its
     * start arms the dump, and a SIGQUIT sent as soon as we say we listen
     * must find it armed, not SIGQUIT's default action (weft_main below
     * runs on this runtime and shuts it down). */
    int r = weft_init(NULL);
    if (r < 0) {
        fprintf(stderr, "echo_server: weft_init: %s\n", strerror(-r));
        return 1;
    }
    const char *dq = getenv("WEFT_DUMP_ON_SIGQUIT");
    if ((!dq || !*dq) && weft_dump_on_signal(SIGQUIT, 2, WEFT_DUMP_TEXT) < 0)
        fprintf(stderr, "echo_server: cannot arm the dump on SIGQUIT\n");
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 1024) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0) {
        perror("echo_server");
        return 1;
    }
    printf("listening on 127.0.0.1:%u\n", (unsigned)ntohs(sa.sin_port));
    fflush(stdout);
    return weft_main(run, (void *)(intptr_t)lfd);
}
