/*
 * A thread-per-connection HTTP server written as any C programmer would --
 * plain C library and pthreads, no weft header and no weft library (issue
 * 27, Deliver 7): weft-bench runs it natively and under weft-run in one
 * sitting, beside weft-httpd --model virtual, to show what weft-run does for
 * code it never compiled.
 *
 * What it does, deliberately the ordinary way:
 *  - one detached pthread per accepted connection (pthread_create);
 *  - fdopen + fgets for the request line and headers, keep-alive until
 *    the client closes or says "Connection: close" -- one stream per
 *    connection, "r+", so a connection costs one descriptor (a dup'd
 *    write stream made it two, and the 20,000 descriptors this machine
 *    allows a process held only 9,990 connections).  C lets a stream go
 *    from reading to writing only through a seek, which a socket refuses;
 *    glibc makes the switch without one when nothing read is left in the
 *    buffer, which is so here: the request is read to its blank line, the
 *    response flushed before the next read.  (A client that pipelines --
 *    sends its next request before this response -- leaves bytes there:
 *    the flush then fails and the connection is closed; ab and weft-load
 *    do not pipeline.);
 *  - the response built in a __thread buffer;
 *  - a request counter under a pthread_mutex;
 *  - nanosleep for the articles' simulated work (--delay-ms, default 100);
 *  - fprintf + fflush for the response.
 * Every request gets 200 and the same body (constant length: ab checks it);
 * only GET and HEAD are answered, anything else 405.
 *
 *   tpc_server [--port N] [--delay-ms D]
 * prints "listening on 127.0.0.1:PORT" (PORT is the one the kernel chose
 * with --port 0, the default) and serves until SIGTERM or SIGINT, then
 * prints "served N requests" on stderr and exits 0.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long delay_ms = 100;
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long served;
static volatile sig_atomic_t stopping;

static const char body[] = "Hello from a thread per connection.\n";
static __thread char response[512];

static void on_stop(int sig) {
    (void)sig;
    stopping = 1;
}

static void *serve(void *arg) {
    int fd = (int)(long)arg;
    FILE *in = fdopen(fd, "r+"), *out = in; /* (the top comment) */
    if (!in) {
        close(fd);
        return NULL;
    }
    char line[8192];
    for (;;) {
        if (!fgets(line, sizeof line, in)) break; /* the client closed */
        char method[16] = {0};
        int head = 0, get = 0, keep = 1;
        if (sscanf(line, "%15s", method) == 1) {
            get = !strcmp(method, "GET");
            head = !strcmp(method, "HEAD");
        }
        if (strstr(line, "HTTP/1.0")) keep = 0;
        /* the headers, up to the empty line */
        while (fgets(line, sizeof line, in) && strcmp(line, "\r\n") != 0 && strcmp(line, "\n") != 0) {
            if (!strncasecmp(line, "Connection:", 11)) {
                if (strcasestr(line + 11, "close")) keep = 0;
                else if (strcasestr(line + 11, "keep-alive")) keep = 1;
            }
        }
        if (delay_ms > 0) {
            struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&count_lock);
        served++;
        pthread_mutex_unlock(&count_lock);
        int n;
        if (get || head)
            n = snprintf(response, sizeof response,
                         "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\nConnection: %s\r\n\r\n",
                         sizeof body - 1, keep ? "keep-alive" : "close");
        else
            n = snprintf(response, sizeof response,
                         "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        fprintf(out, "%.*s", n, response);
        if (get) fputs(body, out);
        if (fflush(out) != 0 || !(get || head)) break;
        if (!keep) break;
    }
    fclose(in);
    return NULL;
}

int main(int argc, char **argv) {
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc) port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--delay-ms") && i + 1 < argc) delay_ms = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: tpc_server [--port N] [--delay-ms D]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop; /* no SA_RESTART: accept returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0) {
        perror("socket");
        return 1;
    }
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 4096) < 0 ||
        getsockname(ls, (struct sockaddr *)&a, &al) < 0) {
        perror("bind/listen");
        return 1;
    }
    printf("listening on 127.0.0.1:%d\n", ntohs(a.sin_port));
    fflush(stdout);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (!stopping) {
        int c = accept(ls, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) { /* out of descriptors: let some close */
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
                continue;
            }
            perror("accept");
            break;
        }
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_t th;
        int e = pthread_create(&th, &attr, serve, (void *)(long)c);
        if (e) { /* no thread: this connection is refused, the next may fit */
            static int told;
            if (!told++) fprintf(stderr, "tpc_server: pthread_create: %s (connections refused while it lasts)\n", strerror(e));
            close(c);
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    pthread_mutex_lock(&count_lock);
    unsigned long long n = served;
    pthread_mutex_unlock(&count_lock);
    fprintf(stderr, "served %llu requests\n", n);
    return 0;
}
