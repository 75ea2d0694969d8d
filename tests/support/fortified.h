/* tests/support/fortified.c: calls compiled with _FORTIFY_SOURCE=2. */
#ifndef WEFT_TEST_FORTIFIED_H
#define WEFT_TEST_FORTIFIED_H
#include <poll.h>
#include <sys/types.h>

enum { FORTIFIED_BUF = 64 };
ssize_t fortified_read(int fd, char *out, size_t n);
ssize_t fortified_pread(int fd, char *out, size_t n, off_t off);
ssize_t fortified_recv(int fd, char *out, size_t n, int flags);
ssize_t fortified_recvfrom(int fd, char *out, size_t n, int flags);
int fortified_poll(int fd, nfds_t n, int timeout);
int fortified_ppoll(int fd, nfds_t n);
#endif
