/*
 * weft-httpd: the static-file side of a response -- everything between "the
 * request names this path" and "send these bytes with these headers" that
 * does not touch a socket.  Pure functions (no weft runtime, no global
 * mutable state), safe to call from any thread.
 *
 * Header values are passed as (pointer, length) and need not be
 * NUL-terminated; none of these functions reads past the length.  A NULL
 * pointer or a zero length means "header absent".  The design and the
 * security argument are at the top of http_files.c.
 */
#ifndef WEFT_HTTP_FILES_H
#define WEFT_HTTP_FILES_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

/* ---- MIME types ------------------------------------------------------- */

/* MIME type for a file name by its extension (case-insensitive): html htm
 * css js mjs json txt xml svg png jpg jpeg gif webp ico avif pdf wasm woff
 * woff2 ttf otf mp4 webm mp3 ogg wav zip gz tar csv md map.  Text types
 * (text/...) carry "; charset=utf-8".  The extension is what follows the
 * last '.' of the last path component, as in nginx ("/.md" is Markdown,
 * "a.tar.gz" is gzip).  Unknown or none: "application/octet-stream".
 * Returns a static string; path may be NULL. */
const char *http_mime_type(const char *path);

/* ---- Dates (RFC 9110 §5.6.7) ------------------------------------------ */

/* IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT"; out must hold
 * HTTP_DATE_LEN (30) bytes including the NUL.  No locale, no static buffer.
 * Times outside years 0001..9999 are clamped to that range so the output
 * always has exactly 29 characters. */
#define HTTP_DATE_LEN 30
void http_fmt_date(time_t t, char *out);

/* Parses IMF-fixdate, the obsolete RFC 850 form ("Sunday, 06-Nov-94
 * 08:49:37 GMT"; the two-digit year is placed within 50 years of now, as
 * RFC 9110 requires) and asctime ("Sun Nov  6 08:49:37 1994").  Leading and
 * trailing spaces/tabs are ignored; day and month names are matched
 * case-insensitively; the weekday must be a weekday name but need not agree
 * with the date.  Out-of-range fields (day 31 of April, hour 24, ...) are
 * invalid; second 60 (a leap second) is accepted.  Returns 0 and *t, or -1.
 * Never reads past s[n-1]. */
int http_parse_date(const char *s, size_t n, time_t *t);

/* ---- Entity tags ------------------------------------------------------ */

/* Strong validator in nginx's style: "\"<mtime hex>-<size hex>\"" (with the
 * quotes), from st_mtime and st_size, lowercase hex.  out holds
 * HTTP_ETAG_LEN (48) bytes. */
#define HTTP_ETAG_LEN 48
void http_etag(const struct stat *st, char *out);

/* If-None-Match: "*" or a comma list of entity-tags, compared weakly (a W/
 * prefix on either side is ignored) with etag.  Returns 1 when one matches.
 * Malformed list members are skipped (they match nothing). */
int http_etag_match_list(const char *v, size_t n, const char *etag);

/* ---- Ranges (RFC 9110 §14) -------------------------------------------- */

/* Range: a single byte range only.  Given the header value and the size:
 *   1    one satisfiable range: [*first, *last] inclusive, last clamped to
 *        size-1 ("bytes=0-99", "bytes=100-", "bytes=-500" suffix);
 *   0    ignore the header and send the whole file with 200: syntactically
 *        invalid, a unit other than "bytes", first > last, a number too big
 *        for off_t, or several ranges (RFC 9110 lets a server ignore Range);
 *   -416 a valid single range that cannot be satisfied (first >= size,
 *        suffix length 0, or size == 0 -- except a suffix range of
 *        non-zero length on an empty file, which is satisfiable (RFC 9110
 *        §14.1.1) and gets 0: the whole, empty, file).
 * *first and *last are written only when 1 is returned. */
int http_parse_range(const char *v, size_t n, off_t size, off_t *first, off_t *last);

/* ---- Conditional requests (RFC 9110 §13) ------------------------------ */

/* The response to a conditional GET/HEAD, evaluated in RFC 9110 §13.2.2's
 * order:
 *   1. If-Match: 412 unless "*" or a strong match with etag;
 *   2. else If-Unmodified-Since (valid date): 412 if st_mtime is later;
 *   3. If-None-Match: 304 if "*" or a weak match;
 *   4. else If-Modified-Since (valid date; invalid ones are ignored): 304 if
 *      st_mtime is not later.
 * Returns 200 (proceed), 304 or 412.  Any header may be NULL/0 (absent). */
int http_conditional(const struct stat *st, const char *etag,
                     const char *if_match, size_t if_match_n,
                     const char *if_unmodified_since, size_t ius_n,
                     const char *if_none_match, size_t inm_n,
                     const char *if_modified_since, size_t ims_n);

/* If-Range (RFC 9110 §13.1.5): 1 if the Range header applies -- If-Range
 * absent, or a single entity-tag strongly equal to etag (a weak tag never
 * is), or an HTTP-date equal to st_mtime -- else 0 (send the whole file). */
int http_if_range_ok(const struct stat *st, const char *etag, const char *v, size_t n);

/* ---- Opening files under the docroot ---------------------------------- */

/* root_fd: an O_PATH|O_DIRECTORY fd of the docroot.  path: the decoded,
 * normalised request path (starts with '/', NUL-terminated; may end with
 * '/').  The file is opened with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS): ".." and symlinks leading out of the docroot are
 * refused by the kernel, symlinks staying inside work.  Without openat2
 * (ENOSYS, or EPERM from a seccomp filter) every symlink is refused.
 *
 *   200  *fd_out is open (O_RDONLY|O_CLOEXEC), *st is its fstat, *mime (if
 *        mime is non-NULL) is http_mime_type of the final name;
 *   301  HTTP_FILE_REDIRECT: a directory named without a trailing '/'
 *        (answer with Location: path + "/");
 *   400  path does not start with '/';
 *   403  not a regular file (device, fifo, socket, or index.html that is
 *        not a regular file), escapes the docroot (EXDEV), a symlink loop
 *        (ELOOP), EACCES/EPERM;
 *   404  ENOENT/ENOTDIR, or a directory without index.html (no listings);
 *   414  ENAMETOOLONG;
 *   503  EMFILE/ENFILE (the fd table is full: not "not found");
 *   500  anything else.
 * A path ending in '/' serves index.html inside it.  On any status other
 * than 200 nothing is left open.  Plain blocking syscalls. */
enum { HTTP_FILE_REDIRECT = 301 };
int http_open_file(int root_fd, const char *path, int *fd_out, struct stat *st, const char **mime);

/* Reason phrase for a status code ("OK", "Partial Content", ...), for all
 * of 100 101 200 204 206 301 302 304 400 403 404 405 408 411 412 413 414
 * 416 417 431 500 501 503 505; any other: "Unknown". */
const char *http_reason(int status);

/* ---- The access log --------------------------------------------------- */

/* Copies s[0..n) into out for a quoted field of a log line, as nginx
 * escapes its variables: '"', '\\', bytes below 0x20, 0x7f and bytes from
 * 0x80 up become "\xHH" (upper-case hex), every other byte is itself, so
 * no request can end the field or the line early.  Writes at most cap
 * bytes and never half an escape (what does not fit is left out: the
 * caller's line length bounds the field); no NUL.  Returns the bytes
 * written. */
size_t http_log_escape(char *out, size_t cap, const char *s, size_t n);

/* ---- Internal, for tests ---------------------------------------------- */

/* http_open_file as it behaves on a kernel without openat2: the path is
 * walked one component at a time with O_NOFOLLOW, so every symlink and
 * every ".." is refused (403). */
int http__open_file_compat(int root_fd, const char *path, int *fd_out, struct stat *st,
                           const char **mime);

#endif
