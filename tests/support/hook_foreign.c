/*
 * A blocking client weft did not compile: it links only the C library and
 * knows nothing of weft.  test_hook's preload tests run it under weft-run
 * (LD_PRELOAD=libweft-hook.so) and read what it prints.
 *
 * It looks for weft only to report on it (dlsym, which is in the C
 * library): whether main runs on a vthread, and how many times vthreads
 * parked around its blocking calls.  Then it does what a blocking client
 * does -- sleeps, reads a pipe that a thread of its own fills later,
 * connects, talks to a server thread over TCP -- and checks each result and
 * errno as the C library documents them.
 *
 * Output, one line: "foreign on_vthread=%d parks=%llu ok" or "foreign
 * FAIL: what".  Exit status 0 when every check held.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...)                         \
    do {                                  \
        printf("foreign FAIL: ");         \
        printf(__VA_ARGS__);              \
        printf(" (line %d)\n", __LINE__); \
        return 1;                         \
    } while (0)

static unsigned long long parks(void) {
    /* weft_stats starts with started, live, peak, switches, steals, parks */
    void (*get)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "weft_stats_get");
    if (!get) return 0;
    uint64_t s[64];
    get(s);
    return s[5];
}

static int pipe_fd[2];
static int listen_fd;

static void *filler(void *unused) {
    (void)unused;
    usleep(50 * 1000); /* a platform thread: libc's sleep */
    if (write(pipe_fd[1], "hello", 5) != 5) return (void *)1;
    return NULL;
}

static void *server(void *unused) {
    (void)unused;
    int c = accept(listen_fd, NULL, NULL);
    if (c < 0) return (void *)1;
    char b[64];
    ssize_t n = recv(c, b, sizeof b, 0);
    if (n > 0) send(c, b, (size_t)n, 0);
    close(c);
    return NULL;
}

int main(void) {
    void *(*self)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "weft_self");
    int on_vthread = self && self() != NULL;
    unsigned long long p0 = parks();

    struct timespec ts = {0, 20 * 1000 * 1000};
    if (nanosleep(&ts, NULL) != 0) FAIL("nanosleep: %s", strerror(errno));

    if (pipe(pipe_fd) != 0) FAIL("pipe: %s", strerror(errno));
    pthread_t th;
    if (pthread_create(&th, NULL, filler, NULL) != 0) FAIL("pthread_create");
    char buf[16] = {0};
    ssize_t n = read(pipe_fd[0], buf, sizeof buf); /* blocks until the thread writes */
    if (n != 5 || memcmp(buf, "hello", 5) != 0) FAIL("pipe read %zd", n);
    pthread_join(th, NULL);

    /* errno as libc's */
    errno = 0;
    if (read(-1, buf, 1) != -1 || errno != EBADF) FAIL("read(-1): errno %d", errno);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    /* a port nobody listens on: bind one, then close it */
    int probe = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t l = sizeof a;
    if (bind(probe, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(probe, (struct sockaddr *)&a, &l) != 0)
        FAIL("bind: %s", strerror(errno));
    close(probe);
    errno = 0;
    if (connect(s, (struct sockaddr *)&a, sizeof a) != -1 || errno != ECONNREFUSED)
        FAIL("connect to a closed port: errno %d", errno);
    close(s);

    /* a TCP round trip with a server thread */
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_port = 0;
    l = sizeof a;
    if (bind(listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(listen_fd, 4) != 0 ||
        getsockname(listen_fd, (struct sockaddr *)&a, &l) != 0)
        FAIL("listen: %s", strerror(errno));
    if (pthread_create(&th, NULL, server, NULL) != 0) FAIL("pthread_create");
    s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) FAIL("connect: %s", strerror(errno));
    struct pollfd pf = {.fd = s, .events = POLLOUT};
    if (poll(&pf, 1, 5000) != 1 || !(pf.revents & POLLOUT)) FAIL("poll for POLLOUT");
    if (send(s, "ping", 4, 0) != 4) FAIL("send: %s", strerror(errno));
    n = recv(s, buf, sizeof buf, MSG_WAITALL);
    if (n != 4 || memcmp(buf, "ping", 4) != 0) FAIL("recv %zd", n);
    close(s);
    pthread_join(th, NULL);
    close(listen_fd);

    printf("foreign on_vthread=%d parks=%llu ok\n", on_vthread, parks() - p0);
    return 0;
}
