/*
 * The open-file cache.
 *
 * Why.  Serving a small file from disk costs openat2 + fstat + fcntl +
 * pread + close per request -- five system calls, ~6 us on this VM, as
 * much as the rest of a keep-alive request.  Like nginx's open_file_cache,
 * we keep small files' bodies and validators in memory and look at the file
 * again only when the entry is older than `valid_ns` (1 s by default): a
 * change is visible within that time.
 *
 * Structure.  A fixed table of NBUCKETS chains, each under its own mutex
 * (held for a few pointer steps, never across a blocking call, so a vthread
 * never parks with it).  Entries are immutable once published, except
 * checked_ns.  A reader takes a reference under the bucket lock; a
 * replaced or evicted entry is unlinked and freed by its last reference,
 * so a response still being sent from it is never cut short.
 *
 * Loading.  Done outside any lock: http_open_file (openat2 with
 * RESOLVE_BENEATH: the same security rules as the uncached path), fstat,
 * read.  Two threads missing the same path at once both load; the second
 * insert replaces the first -- harmless.  A stale entry is revalidated by
 * opening the path again and comparing device, inode, size and mtime; if
 * equal only checked_ns moves.
 *
 * Bounds.  Files above FC_MAX_FILE are not cached (they go by sendfile);
 * when the bodies cached reach max_bytes, new files are served uncached
 * until entries are replaced.  Statuses other than 200 are not cached (a
 * file that appears is served at once).
 */
#define _GNU_SOURCE
#include "file_cache.h"

#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NBUCKETS 4096

static struct {
    int root_fd;
    size_t max_bytes;
    int64_t valid_ns;
    _Atomic size_t bytes;
    pthread_mutex_t lock[NBUCKETS];
    fc_entry *head[NBUCKETS];
} C;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int fc_init(int root_fd, size_t max_bytes, int64_t valid_ns) {
    C.root_fd = root_fd;
    C.max_bytes = max_bytes;
    C.valid_ns = valid_ns;
    for (int i = 0; i < NBUCKETS; i++) pthread_mutex_init(&C.lock[i], NULL);
    return 0;
}

void fc_release(fc_entry *e) {
    if (atomic_fetch_sub(&e->refs, 1) == 1) {
        atomic_fetch_sub(&C.bytes, (size_t)e->st.st_size);
        free(e->body);
        free(e);
    }
}

static fc_entry *find(uint64_t h, const char *path) {
    for (fc_entry *e = C.head[h % NBUCKETS]; e; e = e->next)
        if (e->hash == h && !strcmp(e->path, path)) return e;
    return NULL;
}

/* Unlinks e from its bucket (lock held) and drops the table's reference. */
static void unlink_entry(fc_entry *e) {
    fc_entry **pp = &C.head[e->hash % NBUCKETS];
    while (*pp && *pp != e) pp = &(*pp)->next;
    if (*pp) {
        *pp = e->next;
        fc_release(e);
    }
}

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

int fc_get(const char *path, fc_entry **out) {
    *out = NULL;
    uint64_t h = hash_str(path);
    pthread_mutex_t *lk = &C.lock[h % NBUCKETS];
    int64_t now = weft_now();
    fc_entry *stale = NULL;
    if (C.max_bytes) {
        pthread_mutex_lock(lk);
        fc_entry *e = find(h, path);
        if (e) {
            atomic_fetch_add(&e->refs, 1);
            if (now - atomic_load_explicit(&e->checked_ns, memory_order_relaxed) < C.valid_ns) {
                pthread_mutex_unlock(lk);
                *out = e;
                return 200;
            }
            stale = e;
        }
        pthread_mutex_unlock(lk);
    }
    int fd;
    struct stat st;
    const char *mime;
    int status = http_open_file(C.root_fd, path, &fd, &st, &mime);
    if (status != 200) {
        if (stale) { /* gone or changed into something else: forget it */
            pthread_mutex_lock(lk);
            unlink_entry(stale);
            pthread_mutex_unlock(lk);
            fc_release(stale);
        }
        return status;
    }
    if (stale && same_file(&stale->st, &st)) {
        close(fd);
        atomic_store_explicit(&stale->checked_ns, now, memory_order_relaxed);
        *out = stale;
        return 200;
    }
    if (stale) {
        pthread_mutex_lock(lk);
        unlink_entry(stale);
        pthread_mutex_unlock(lk);
        fc_release(stale);
    }
    /* cacheable? */
    size_t size = (size_t)st.st_size;
    if (!C.max_bytes || st.st_size > FC_MAX_FILE || atomic_load(&C.bytes) + size > C.max_bytes) {
        close(fd);
        return 200; /* *out NULL: the caller opens it itself */
    }
    size_t plen = strlen(path);
    fc_entry *e = calloc(1, sizeof *e + plen + 1);
    char *body = malloc(size ? size : 1);
    if (!e || !body) {
        free(e);
        free(body);
        close(fd);
        return 200;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = weft_pread(fd, body + got, size - got, (off_t)got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != size) { /* changed under us: serve it uncached this time */
        free(e);
        free(body);
        return 200;
    }
    e->hash = h;
    e->st = st;
    e->mime = mime;
    http_etag(&st, e->etag);
    http_fmt_date(st.st_mtime, e->last_modified);
    e->body = body;
    memcpy(e->path, path, plen + 1);
    atomic_store(&e->checked_ns, now);
    atomic_store(&e->refs, 2); /* the table's and the caller's */
    atomic_fetch_add(&C.bytes, size);
    pthread_mutex_lock(lk);
    fc_entry *old = find(h, path);
    if (old) unlink_entry(old);
    e->next = C.head[h % NBUCKETS];
    C.head[h % NBUCKETS] = e;
    pthread_mutex_unlock(lk);
    *out = e;
    return 200;
}

void fc_fini(void) {
    for (int i = 0; i < NBUCKETS; i++) {
        pthread_mutex_lock(&C.lock[i]);
        fc_entry *e = C.head[i];
        C.head[i] = NULL;
        pthread_mutex_unlock(&C.lock[i]);
        while (e) {
            fc_entry *nx = e->next;
            fc_release(e);
            e = nx;
        }
        pthread_mutex_destroy(&C.lock[i]);
    }
}
