/* 09-sockets.c -- an echo server and its clients as plain blocking code:
 * one vthread per connection; weft_accept/recv/send park the vthread. */
#include <weft.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

enum { CLIENTS = 10 };

/* serves one connection: echoes until the client closes */
static int echo(void *arg, void **result) {
    (void)result;
    int fd = (int)(intptr_t)arg;
    char buf[256];
    ssize_t n;
    while ((n = weft_recv(fd, buf, sizeof buf, 0)) > 0)
        if ((n = weft_write_all(fd, buf, (size_t)n)) < 0) break;
    weft_close(fd);
    return n < 0 ? (int)n : 0;
}

/* accepts CLIENTS connections, a task per connection in one scope; forked
 * without a handle (weft_fork_released): a finished connection leaves
 * nothing behind, however long the scope stays open */
static void *serve(void *arg) {
    int lfd = (int)(intptr_t)arg;
    weft_scope *s;
    int r = weft_scope_create(&s, WEFT_SCOPE_ALL, 0);
    if (r < 0) return (void *)(intptr_t)r;
    for (int i = 0; i < CLIENTS; i++) {
        int fd = weft_accept(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            r = fd;
            break;
        }
        if ((r = weft_fork_released(s, echo, (void *)(intptr_t)fd)) < 0) {
            weft_close(fd);
            break;
        }
    }
    int j = weft_scope_join(s);
    weft_scope_close(s);
    return (void *)(intptr_t)(r < 0 ? r : j);
}

static void *client(void *arg) {
    const struct sockaddr_in *addr = arg;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return (void *)(intptr_t)-errno;
    char msg[32], back[32];
    int len = snprintf(msg, sizeof msg, "ping from %llu", (unsigned long long)weft_id(weft_self()));
    ssize_t r = weft_connect(fd, (const struct sockaddr *)addr, sizeof *addr);
    if (r == 0) r = weft_write_all(fd, msg, (size_t)len);
    size_t got = 0;
    while (r >= 0 && got < (size_t)len) { /* a stream: the echo may come in pieces */
        r = weft_recv(fd, back + got, (size_t)len - got, 0);
        if (r == 0) r = -ECONNRESET;
        if (r > 0) got += (size_t)r;
    }
    weft_close(fd);
    if (r < 0) return (void *)(intptr_t)r;
    return (void *)(intptr_t)(memcmp(msg, back, (size_t)len) == 0 ? 1 : 0);
}

static int run(void *arg) {
    (void)arg;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof addr;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) return -errno;
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lfd, 64) < 0 ||
        getsockname(lfd, (struct sockaddr *)&addr, &alen) < 0) { /* port 0: the kernel picked one */
        int e = -errno;
        weft_close(lfd);
        return e;
    }
    weft_thread *server, *c[CLIENTS];
    int n = 0, r = weft_spawn(&server, serve, (void *)(intptr_t)lfd, NULL);
    int server_started = r == 0, lfd_open = 1;
    for (; r == 0 && n < CLIENTS; n++)
        if ((r = weft_spawn(&c[n], client, &addr, NULL)) < 0) break;
    int verified = 0;
    for (int i = 0; i < n; i++) {
        void *v;
        int j = weft_join(c[i], &v);
        if (j == 0 && (intptr_t)v < 0) j = (int)(intptr_t)v;
        if (j < 0 && r == 0) r = j;
        verified += j == 0 && (intptr_t)v == 1;
    }
    if (r < 0 && server_started) { /* it may still wait for a client that never came */
        weft_close(lfd);             /* ends its accept with -EBADF */
        lfd_open = 0;
    }
    if (server_started) {
        void *sr;
        weft_join(server, &sr);
        if (r == 0) r = (int)(intptr_t)sr;
    }
    if (lfd_open) weft_close(lfd);
    printf("%d clients, %d echoes verified\n", n, verified);
    return r;
}

int main(void) {
    int r = weft_main(run, NULL);
    if (r < 0) fprintf(stderr, "sockets: %s\n", strerror(-r));
    return r == 0 ? 0 : 1;
}
