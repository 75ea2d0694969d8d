/*
 * The descriptors weft made for itself -- a carrier's ring and eventfd, the
 * epoll sets, the stack slots' pidfd, the console's socket and pipes --
 * kept apart from the program's.
 *
 * A program weft did not write may close descriptors it never opened: a
 * daemon's close loop over every number, close_range(3, ~0U, 0) before an
 * exec, a test harness that closes all but 0-2.  Natively those numbers
 * are not open and the calls do nothing; under weft they are the
 * runtime's, and closing one stopped it (a carrier slept on a closed ring:
 * the next parked read hung).  So the interposers (hook.c: close,
 * close_range, and the same calls trapped from the C library) ask here and
 * leave weft's descriptors alone, answering as the kernel would for a
 * number that is not open (EBADF) -- which, to the program, they are not.
 *
 * The set: one bit per descriptor number below 2^20 (Linux's default
 * fs.nr_open, so every number a process can have), 128 KiB of zeroed bss
 * of which only the pages that hold a set bit are ever touched.  Bits are
 * set right after weft makes a descriptor and cleared right before weft
 * closes it (weft__fd_close_own), by whichever thread does; readers load
 * without a lock.  A number the program closes while weft is between the
 * two is the program's race with itself, as natively.  A fork child keeps
 * the bits of the descriptors it inherited; weft closes its copies there
 * through weft__fd_close_own too.
 *
 * This file is the libc layer's (the floor): every layer that makes a
 * descriptor may register it, and it includes nothing of weft's.
 */
#include "real.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>

#define OWN_FDS (1 << 20)
static _Atomic uint64_t own[OWN_FDS / 64];
static _Atomic int own_hi = -1; /* the highest number ever set: a scan stops there */

int weft__fd_own(int fd) {
    if (fd < 0 || fd >= OWN_FDS) return fd;
    /* never 0, 1 or 2: a program started with one of them closed (a
     * daemon, CPython's test of swapped std fds) expects the next file
     * it opens or dups there, and checks them; a weft descriptor made
     * there first took its stdin or stderr.  Moved up, flags kept (every
     * one of weft's is close-on-exec). */
    if (fd < 3) {
        int hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (hi >= 0) {
            close(fd);
            fd = hi;
        }
    }
    atomic_fetch_or_explicit(&own[fd / 64], 1ull << (fd % 64), memory_order_release);
    int hi = atomic_load_explicit(&own_hi, memory_order_relaxed);
    while (fd > hi && !atomic_compare_exchange_weak(&own_hi, &hi, fd)) {
    }
    return fd;
}

void weft__fd_disown(int fd) {
    if (fd >= 0 && fd < OWN_FDS)
        atomic_fetch_and_explicit(&own[fd / 64], ~(1ull << (fd % 64)), memory_order_release);
}

int weft__fd_owned(int fd) {
    if (fd < 0 || fd >= OWN_FDS) return 0;
    return (int)((atomic_load_explicit(&own[fd / 64], memory_order_acquire) >> (fd % 64)) & 1);
}

int weft__fd_next_owned(unsigned from, unsigned to) {
    int hi = atomic_load_explicit(&own_hi, memory_order_acquire);
    if (hi < 0 || from > (unsigned)hi) return -1;
    if (to > (unsigned)hi) to = (unsigned)hi;
    for (unsigned w = from / 64; w <= to / 64; w++) {
        uint64_t bits = atomic_load_explicit(&own[w], memory_order_acquire);
        if (w == from / 64) bits &= ~0ull << (from % 64);
        if (!bits) continue;
        unsigned fd = w * 64 + (unsigned)__builtin_ctzll(bits);
        return fd <= to ? (int)fd : -1;
    }
    return -1;
}

int weft__fd_close_own(int fd) {
    if (fd < 0) return 0;
    weft__fd_disown(fd);
    return close(fd);
}
