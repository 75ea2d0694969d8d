/*
 * weft-httpd's open-file cache: small files (<= FC_MAX_FILE) kept in memory
 * with their ready-made validators, revalidated at most once a second.
 */
#ifndef WEFT_HTTPD_FILE_CACHE_H
#define WEFT_HTTPD_FILE_CACHE_H

#include "http_files.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>

#define FC_MAX_FILE (64 * 1024)

typedef struct fc_entry {
    struct fc_entry *next;      /* bucket chain (under the bucket's lock) */
    _Atomic int refs;           /* the table's reference + readers' */
    _Atomic int64_t checked_ns; /* last time the file was found unchanged */
    uint64_t hash;
    struct stat st;
    const char *mime;
    char etag[HTTP_ETAG_LEN];
    char last_modified[HTTP_DATE_LEN];
    char *body;                 /* st.st_size bytes */
    char path[];                /* the decoded path, the key */
} fc_entry;

/* Starts the cache: up to max_bytes of file bodies in memory (0 = off). */
int fc_init(int root_fd, size_t max_bytes, int64_t valid_ns);

/*
 * Looks up path (decoded, normalised).  Returns 200 with *out referenced
 * (fc_release it) when the file is a cacheable regular file; otherwise the
 * status http_open_file gives and *out = NULL -- for 200 that means "too
 * big or cache full: open it yourself".
 */
int fc_get(const char *path, fc_entry **out);
void fc_release(fc_entry *e);
/* Drops every entry (at exit, once no request runs). */
void fc_fini(void);

#endif
