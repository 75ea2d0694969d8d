/*
 * weft/file.h -- file channels (java.nio.channels.AsynchronousFileChannel,
 * and more).  Included by weft.h; the conventions stated there apply.
 *
 * A weft_file is an open regular file with positioned I/O in two styles:
 *  - blocking-style: weft_file_read / weft_file_write park the calling
 *    vthread (block a platform thread) until done;
 *  - asynchronous: weft_file_read_async / weft_file_write_async return at
 *    once with a future for the count, and optionally call a completion
 *    handler `done(res, ctx)` on an executor.
 * Asynchronous operations on one file are carried out in the order they
 * were accepted, and runs of adjacent writes are coalesced into one
 * vectored write (pwritev): 1,000 five-byte appends cost one system call
 * (or one io_uring operation), not 1,000.  Blocking-style calls go straight
 * to the kernel and are not ordered with the asynchronous ones (as with
 * Java's channel, concurrent operations on overlapping ranges are the
 * caller's to order).
 *
 * Results: a count (>= 0) or -errno; the futures complete with the count as
 * (void *)(intptr_t)count or fail with the error.  A write is complete or
 * an error: a short write is continued, never returned as success; if the
 * disk fills, the writes that did not fit fail with -ENOSPC (bytes of a
 * write that straddled the end may be on disk; it still fails).
 *
 * Buffers: a write of at most WEFT_FILE_INLINE bytes is copied when it is
 * accepted (the caller may reuse its buffer at once); a longer write's and
 * every read's buffer must stay valid until the future is filled.
 *
 * Close loses nothing: weft_file_close carries out every operation accepted
 * before it, then closes (Java fails them with AsynchronousCloseException).
 * weft_file_close_now fails what has not started with -ECANCELED, waits for
 * what has, and says how many it cancelled.
 *
 * Thread safety: any number of threads, of either world, may use one file
 * at once, until one of them closes it.  A completion handler may run on the
 * file's own flusher (an executor that refuses it, or CALLER_RUNS): it may
 * submit more operations, but closing or forcing that file there would wait
 * for itself: those calls return -EDEADLK on the flusher (the file stays
 * open) -- close it from another thread.
 */
/* weft.h first: it includes this header where its concept stands, after
 * the types and sections this one uses; so this header compiles alone. */
#include "../weft.h"

#ifndef WEFT_FILE_H
#define WEFT_FILE_H

#include "exec.h"

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* weft_file_create flags (StandardOpenOption) */
enum {
    WEFT_READ = 1 << 0,
    WEFT_WRITE = 1 << 1,
    WEFT_CREATE = 1 << 2,          /* create if missing */
    WEFT_CREATE_NEW = 1 << 3,      /* create; -EEXIST if it exists */
    WEFT_TRUNCATE = 1 << 4,        /* to 0 bytes (with WRITE) */
    WEFT_APPEND = 1 << 5,          /* every write goes to the end; pos is ignored */
    WEFT_DELETE_ON_CLOSE = 1 << 6, /* unlinked by weft_file_close */
    WEFT_DSYNC = 1 << 7,           /* each write reaches the disk with its data (O_DSYNC) */
    WEFT_SYNC = 1 << 8,            /* ... and its metadata (O_SYNC) */
};

#define WEFT_FILE_INLINE 64


typedef struct weft_file_opts {
    /* where completion handlers run (it must outlive the file); NULL:
     * weft_file_default_executor() */
    weft_executor *executor;
    /* asynchronous operations accepted and not yet complete; a submitter
     * beyond it waits (parks; its deadline and cancellation apply).  0:
     * 65,536 */
    size_t max_inflight;
} weft_file_opts;

/*
 * Opens path (flags above; mode for a created file) as a file channel and
 * stores it in *f.  Returns 0, or (*f then NULL) -EINVAL (f or path NULL,
 * an unknown flag, no READ/WRITE, or a bad combination), -ENOMEM, -EISDIR,
 * or open(2)'s -errno (-ENOENT, -EEXIST for CREATE_NEW ...).
 */
WEFT_API int weft_file_create(weft_file **f, const char *path, int flags, mode_t mode, const weft_file_opts *o);

/* Blocking-style positioned I/O.  write: all n bytes, or -errno. read: the
 * count (0 at end of file), or -errno.  Cancellation points. */
WEFT_API ssize_t weft_file_write(weft_file *f, const void *b, size_t n, off_t pos);
WEFT_API ssize_t weft_file_read(weft_file *f, void *b, size_t n, off_t pos);

/*
 * Asynchronous forms: the returned future (the caller's reference) is
 * filled with the count or the error; done, if not NULL, is then called as
 * done(res, ctx) on the file's executor (res: the count or -errno).
 * Returns NULL only when f is NULL or memory ran out.  On a file being
 * closed the future fails with -EBADF.
 */
WEFT_API weft_future *weft_file_write_async(weft_file *f, const void *b, size_t n, off_t pos,
                                            void (*done)(ssize_t res, void *ctx), void *ctx);
WEFT_API weft_future *weft_file_read_async(weft_file *f, void *b, size_t n, off_t pos,
                                           void (*done)(ssize_t res, void *ctx), void *ctx);

/* Waits until every asynchronous operation accepted before the call is
 * done, then fsync (metadata != 0) or fdatasync.  0 or -errno. */
WEFT_API int weft_file_force(weft_file *f, int metadata);
/* The size in bytes, or -errno. */
WEFT_API off_t weft_file_size(weft_file *f);
/* Truncates (or extends) to size.  0 or -errno. */
WEFT_API int weft_file_truncate(weft_file *f, off_t size);

/*
 * Byte-range locks (FileLock), shared or exclusive, on [pos, pos + len)
 * (len 0: to the end of the file, however it grows).  They are open-file-
 * description locks: two weft_files conflict even in one process, and a
 * lock goes with the file's close.  weft_file_lock waits for a conflicting
 * lock to go (deadline absolute, 0 = none; cancellation applies):
 * 0, -ETIMEDOUT, -ECANCELED or -errno.  try_lock: 0 or -EAGAIN.
 */
WEFT_API int weft_file_lock(weft_file *f, off_t pos, off_t len, int shared, int64_t deadline_ns);
WEFT_API int weft_file_try_lock(weft_file *f, off_t pos, off_t len, int shared);
WEFT_API int weft_file_unlock(weft_file *f, off_t pos, off_t len);

/* Carries out every operation accepted before it, closes, unlinks a
 * DELETE_ON_CLOSE file, frees f.  0, or the first error of that (an
 * operation's own error goes to its future, not here); -EBADF when another
 * close of f is under way.  A close of a file already closed is a use
 * after free, which the runtime stops, where it can tell, with "weft:
 * weft_file_close(...): not an open file" and the caller's address, then
 * abort (docs/errors.md, "Misuse"); so do both calls here. */
WEFT_API int weft_file_close(weft_file *f);
/* Fails every operation not yet started with -ECANCELED, waits for those
 * under way, then closes as weft_file_close.  Returns how many it
 * cancelled, or -errno. */
WEFT_API int weft_file_close_now(weft_file *f);

/* The executor that runs completion handlers by default: shaped like the
 * NIO.2 article's bounded pool -- 5 threads, a queue of 2,500, the caller
 * runs a handler that does not fit.  Made on first use; lives until exit. */
WEFT_API weft_executor *weft_file_default_executor(void);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_FILE_H */
