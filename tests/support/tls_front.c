/*
 * tls_front PORT [--tls1.2] -- the test client's TLS-wrapping mode: a
 * local front that takes plain TCP connections and carries each one over
 * its own TLS connection to 127.0.0.1:PORT (weft-httpd's HTTPS port), so
 * that every test of tests/apps/httpd, written against plain sockets, runs
 * unchanged over HTTPS (ctest's httpd_tls.* pass; support.c starts one
 * beside each server whose "listening on" line says "(https)").
 *
 * It prints "listening on 127.0.0.1:P" (a free port) as the server does,
 * then serves each accepted connection on a thread of its own: connect,
 * the TLS handshake (no certificate check: the tests' certificate is
 * self-signed; TLS 1.3, or at most 1.2 with --tls1.2), then one loop in
 * poll over both sockets, so that one thread alone uses the SSL (OpenSSL's
 * rule).  What a test sees of the server's side of a connection must
 * come through as it would without TLS:
 *   - bytes, both ways, as they come (one TLS record per client send);
 *   - an end: the client's FIN becomes close_notify and a FIN to the
 *     server; the server's close_notify or FIN a FIN to the client; each
 *     direction goes on alone (half-close), as a lingering close needs;
 *   - a reset: a client's RST resets the server's side (SO_LINGER 0), and
 *     a server's reset -- or any failed TLS call after the handshake --
 *     the client's;
 *   - a handshake the server refuses or cuts (a drain, the header
 *     timeout, max-conns' backlog never accepted) ends the client's
 *     connection with a FIN, as a server closing a new connection would.
 * The first five connections it could not carry to the server, or reset,
 * say why on stderr (connect's error, the handshake's, a failed read or
 * write), for a failing test's log.
 * Nothing is timed here: every wait is the sockets', and the process ends
 * with its parent (PR_SET_PDEATHSIG, set by the test's launcher).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static SSL_CTX *ctx;
static int target_port;

static void rst_close(int fd) {
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

static int send_all(int fd, const char *b, size_t n) {
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int connect_target(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)target_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The first few connections the front could not carry say why on stderr
 * (a test that fails on a connection ended early then shows whether the
 * server refused it, cut its handshake or was gone); the rest, as the
 * tests that shed connections make many, go unsaid. */
static atomic_int said;

static void say(const char *what, int err) {
    if (atomic_fetch_add(&said, 1) >= 5) return;
    char ssl[256] = "";
    unsigned long e = ERR_peek_error();
    if (e) ERR_error_string_n(e, ssl, sizeof ssl);
    fprintf(stderr, "tls_front: %s (port %d): %s%s%s\n", what, target_port, err ? strerror(err) : "no system error",
            *ssl ? "; " : "", ssl);
}

static void *relay(void *arg) {
    int cfd = (int)(intptr_t)arg;
    int sfd = connect_target();
    if (sfd < 0) {
        say("cannot connect to the server", errno);
        close(cfd);
        return NULL;
    }
    SSL *s = SSL_new(ctx);
    errno = 0;
    if (!s || SSL_set_fd(s, sfd) != 1 || SSL_connect(s) != 1) {
        /* refused or cut by the server: the client sees its connection end */
        say("the handshake with the server failed", errno);
        SSL_free(s);
        ERR_clear_error();
        close(sfd);
        shutdown(cfd, SHUT_WR);
        close(cfd);
        return NULL;
    }
    char buf[16384];
    int c_eof = 0, s_eof = 0, reset = 0;
    while (!(c_eof && s_eof) && !reset) {
        /* (a side that ended is left out: its POLLHUP would spin) */
        struct pollfd pf[2] = {{c_eof ? -1 : cfd, POLLIN, 0}, {s_eof ? -1 : sfd, POLLIN, 0}};
        if (!s_eof && SSL_pending(s) > 0) pf[1].revents = POLLIN;
        else if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = recv(cfd, buf, sizeof buf, 0);
            if (n > 0) {
                errno = 0;
                if (SSL_write(s, buf, (int)n) <= 0) {
                    say("a write to the server failed; resetting the client", errno);
                    reset = 1;
                }
            } else if (n == 0) {
                c_eof = 1;
                SSL_shutdown(s); /* close_notify, then the FIN */
                shutdown(sfd, SHUT_WR);
            } else if (errno != EINTR && errno != EAGAIN) {
                reset = 2; /* the client reset: so does the server's side */
            }
        }
        if (!reset && (pf[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            errno = 0;
            int n = SSL_read(s, buf, sizeof buf);
            if (n > 0) {
                if (send_all(cfd, buf, (size_t)n) < 0) reset = 2;
            } else {
                int e = SSL_get_error(s, n);
                if (e == SSL_ERROR_WANT_READ) continue;
                if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0)) {
                    s_eof = 1;
                    shutdown(cfd, SHUT_WR);
                } else {
                    say("a read from the server failed; resetting the client", errno);
                    reset = 1; /* the server reset, or TLS failed: reset the client */
                }
            }
            ERR_clear_error();
        }
    }
    SSL_free(s);
    if (reset == 2) rst_close(sfd);
    else close(sfd);
    if (reset == 1) rst_close(cfd);
    else close(cfd);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2 || (target_port = atoi(argv[1])) <= 0 || target_port > 65535) {
        fprintf(stderr, "usage: tls_front PORT [--tls1.2]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) return 1;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* a record that is no data (TLS 1.3's session ticket, after the
     * handshake) must not leave SSL_read waiting for data that only comes
     * once the client's request went through: back to poll instead */
    SSL_CTX_clear_mode(ctx, SSL_MODE_AUTO_RETRY);
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (argc > 2 && !strcmp(argv[2], "--tls1.2")) SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 4096) < 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &al) < 0) {
        perror("tls_front: listen");
        return 1;
    }
    printf("listening on 127.0.0.1:%d\n", ntohs(a.sin_port));
    fflush(stdout);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 128 * 1024);
    for (;;) {
        int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) {
                usleep(10000);
                continue;
            }
            perror("tls_front: accept");
            return 1;
        }
        int one = 1;
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_t th;
        int e = pthread_create(&th, &at, relay, (void *)(intptr_t)cfd);
        if (e) {
            say("cannot start a thread for a connection; resetting it", e);
            rst_close(cfd);
        }
    }
}
