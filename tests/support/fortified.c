/*
 * Calls as a program built with _FORTIFY_SOURCE makes them (Debian builds
 * its packages with =2): this file alone is compiled with -O2
 * -D_FORTIFY_SOURCE=2 (tests/CMakeLists.txt), and each call's buffer size
 * is known to the compiler while its length is not, so the compiler emits
 * __read_chk, __pread_chk, __recv_chk, __recvfrom_chk, __poll_chk and
 * __ppoll_chk instead of the plain names (glibc's bits/*2.h).  Used by
 * test_hook's fortified_calls_park.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fortified.h"

#if !defined(__USE_FORTIFY_LEVEL) || __USE_FORTIFY_LEVEL < 1
#error "built without _FORTIFY_SOURCE: the test would not reach the _chk entry points"
#endif

ssize_t fortified_read(int fd, char *out, size_t n) {
    char b[FORTIFIED_BUF];
    ssize_t r = read(fd, b, n); /* n > FORTIFIED_BUF: __chk_fail */
    if (r > 0) memcpy(out, b, (size_t)r);
    return r;
}

ssize_t fortified_pread(int fd, char *out, size_t n, off_t off) {
    char b[FORTIFIED_BUF];
    ssize_t r = pread(fd, b, n, off);
    if (r > 0) memcpy(out, b, (size_t)r);
    return r;
}

ssize_t fortified_recv(int fd, char *out, size_t n, int flags) {
    char b[FORTIFIED_BUF];
    ssize_t r = recv(fd, b, n, flags);
    if (r > 0) memcpy(out, b, (size_t)r);
    return r;
}

ssize_t fortified_recvfrom(int fd, char *out, size_t n, int flags) {
    char b[FORTIFIED_BUF];
    ssize_t r = recvfrom(fd, b, n, flags, NULL, NULL);
    if (r > 0) memcpy(out, b, (size_t)r);
    return r;
}

int fortified_poll(int fd, nfds_t n, int timeout) {
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = -1}};
    return poll(p, n, timeout); /* n > 2: __chk_fail */
}

int fortified_ppoll(int fd, nfds_t n) {
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = -1}};
    return ppoll(p, n, NULL, NULL);
}
