/*
 * weft-httpd's static-file logic: MIME types, HTTP dates, entity tags,
 * byte ranges, conditional requests and opening a file under the docroot.
 *
 * What this file is.  Everything the server decides about a file response
 * that does not involve a socket, written as pure functions so that it can
 * be tested exhaustively and fuzzed without a runtime.  Nothing here keeps
 * mutable state: the only statics are read-only tables, so every function
 * may be called from any thread (carrier or platform thread) at once.  The
 * only syscalls are openat2/openat, fstat, fcntl and close in
 * http_open_file, and time() in the RFC 850 date parser; they block briefly
 * on local files, which the server accepts.
 *
 * Guarantees, per function.
 *  - http_mime_type: a static string, never NULL.  One backwards scan for
 *    the extension (at most 6 bytes looked at past the last '.') and a
 *    binary search in a sorted table of zero-padded 6-byte keys: about five
 *    6-byte memcmps, no strcasecmp.
 *  - http_fmt_date: exactly 29 characters and a NUL, from civil-calendar
 *    arithmetic (Hinnant's days_from_civil / civil_from_days), so no
 *    gmtime, no locale, no static buffer; proleptic Gregorian for all
 *    time_t, clamped to years 0001..9999 to keep the width fixed.  The
 *    server formats Date once a second and caches it; Last-Modified is
 *    formatted per response (about 30 ns).
 *  - http_parse_date: strict about shape (fixed widths, separators, field
 *    ranges, days per month with leap years), lenient about case and about
 *    a weekday that disagrees with the date; never reads outside [s, s+n).
 *    Every date http_fmt_date writes parses back to the same time_t.
 *  - ETags: "<mtime hex>-<size hex>" like nginx; strong, because it changes
 *    whenever the file is replaced or rewritten with a new mtime or size (the
 *    usual assumption of static servers: a rewrite within the same second
 *    and to the same size goes unnoticed, as with nginx and Apache).
 *    Lists are parsed by the grammar (W/ prefix, quoted opaque tags that
 *    may contain commas); a malformed member matches nothing and parsing
 *    resumes at the next comma.  If-None-Match compares weakly, If-Match and
 *    If-Range strongly (RFC 9110 §8.8.3.2).
 *  - http_parse_range: one byte range or nothing: anything the server would
 *    have to answer with multipart/byteranges is ignored (200 with the whole
 *    file), which RFC 9110 §14.2 allows.  Numbers are parsed with overflow
 *    checks; an overflowing one makes the header ignored.
 *  - http_conditional: RFC 9110 §13.2.2 steps 1-4 for GET/HEAD; an invalid
 *    date in If-(Un)Modified-Since is ignored as §13.1.3/§13.1.4 require.
 *  - http_log_escape: a request's bytes made safe for a quoted field of the
 *    access log, as nginx writes them ("\x22" for '"', "\xHH" for '\\',
 *    control bytes and bytes >= 0x80): a client cannot end the field or the
 *    line and so cannot forge a record.
 *
 * Opening files: why openat2 + RESOLVE_BENEATH.  The classic defences
 * against path traversal are string checks (reject "..", realpath and
 * compare prefixes).  They are racy (a directory inside the docroot can be
 * replaced by a symlink between the check and the open) and they miss
 * symlinks that an attacker, or a careless deploy, placed inside the tree.
 * openat2(root_fd, rel, RESOLVE_BENEATH) moves the check into the kernel's
 * path walk itself: every step, including every symlink target, is
 * resolved relative to root_fd and the walk fails with EXDEV the moment it
 * would leave the subtree (".." above the root, an absolute symlink, a
 * relative symlink climbing out); RESOLVE_NO_MAGICLINKS additionally
 * refuses /proc/<pid>/fd-style links that would jump anywhere.  The check
 * and the open are one atomic operation, so there is no TOCTOU window, and
 * symlinks that stay inside the tree keep working.  We still do not rely on
 * the parser's normalisation for safety: a ".." that reaches us is the
 * kernel's to refuse.  The kernel may answer EAGAIN when a concurrent rename
 * makes ".." ambiguous; we retry a few times.
 *   Without openat2 (Linux < 5.6: ENOSYS; some container seccomp profiles
 * answer EPERM for syscalls they do not know) we fall back to walking the
 * path one component at a time with openat(O_NOFOLLOW) from root_fd and
 * refusing ".." outright: no component can be a symlink, so nothing can
 * lead out, at the price of refusing in-tree symlinks too.  A genuine EPERM
 * costs one extra walk and still ends in EPERM.
 *   Files are opened O_NONBLOCK so that a FIFO in the docroot cannot block
 *   the opening thread waiting for a writer (and a mandatory lease cannot
 *   hold it for lease-break-time), and O_NOCTTY so that a tty can never
 *   become our controlling terminal; fstat then refuses everything that is
 *   not a regular file, and O_NONBLOCK is cleared again on a regular file
 *   (io_uring would otherwise return EAGAIN on uncached pages instead of
 *   punting the read to its workers).
 *
 * fd-leak discipline.  http_open_file owns at most one fd at a time (the
 * compat walk also holds the current directory, closed before moving on):
 * every path after a successful open either hands the fd to the caller with
 * status 200 or reaches the single `fail:` label that closes it.  No status
 * other than 200 leaves an fd open, which the tests check by counting
 * /proc/self/fd around a loop of failing and succeeding opens.
 */
#define _GNU_SOURCE
#include "http_files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define HTTP_HAVE_OPENAT2_H 1
#endif
#endif
#ifndef HTTP_HAVE_OPENAT2_H
struct open_how { uint64_t flags, mode, resolve; };
#define RESOLVE_NO_MAGICLINKS 0x02
#define RESOLVE_BENEATH 0x08
#endif
#ifndef SYS_openat2
#define SYS_openat2 437 /* the same number on every architecture */
#endif

/* ---- small helpers ---------------------------------------------------- */

static int is_ows(char c) { return c == ' ' || c == '\t'; }

/* Strips optional whitespace from both ends of [*s, *s + *n). */
static void trim_ows(const char **s, size_t *n) {
    while (*n && is_ows((*s)[0])) (*s)++, (*n)--;
    while (*n && is_ows((*s)[*n - 1])) (*n)--;
}

/* ASCII lowercase; c | 0x20 maps only letters onto letters. */
static unsigned char lower(unsigned char c) { return c >= 'A' && c <= 'Z' ? c | 0x20 : c; }

/* ---- MIME types ------------------------------------------------------- */

typedef struct mime_entry { char ext[6]; const char *type; } mime_entry;

/* Sorted by memcmp of the zero-padded key ("htm" < "html", "js" < "json"). */
static const mime_entry mime_table[] = {
    {"avif", "image/avif"},
    {"css", "text/css; charset=utf-8"},
    {"csv", "text/csv; charset=utf-8"},
    {"gif", "image/gif"},
    {"gz", "application/gzip"},
    {"htm", "text/html; charset=utf-8"},
    {"html", "text/html; charset=utf-8"},
    {"ico", "image/x-icon"},
    {"jpeg", "image/jpeg"},
    {"jpg", "image/jpeg"},
    {"js", "text/javascript; charset=utf-8"}, /* RFC 9239 */
    {"json", "application/json"},              /* RFC 8259: no charset parameter */
    {"map", "application/json"},              /* source maps */
    {"md", "text/markdown; charset=utf-8"},
    {"mjs", "text/javascript; charset=utf-8"},
    {"mp3", "audio/mpeg"},
    {"mp4", "video/mp4"},
    {"ogg", "audio/ogg"},
    {"otf", "font/otf"},
    {"pdf", "application/pdf"},
    {"png", "image/png"},
    {"svg", "image/svg+xml"},
    {"tar", "application/x-tar"},
    {"ttf", "font/ttf"},
    {"txt", "text/plain; charset=utf-8"},
    {"wasm", "application/wasm"},
    {"wav", "audio/wav"},
    {"webm", "video/webm"},
    {"webp", "image/webp"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"xml", "text/xml; charset=utf-8"},
    {"zip", "application/zip"},
};

const char *http_mime_type(const char *path) {
    static const char dflt[] = "application/octet-stream";
    if (!path) return dflt;
    size_t len = strlen(path), i = len;
    /* back to the last '.' of the last component, looking at 6 bytes at most */
    while (i > 0 && len - i < sizeof mime_table[0].ext) {
        char c = path[i - 1];
        if (c == '.' || c == '/') break;
        i--;
    }
    size_t elen = len - i;
    if (i == 0 || path[i - 1] != '.' || elen == 0 || elen >= sizeof mime_table[0].ext) return dflt;
    char key[sizeof mime_table[0].ext] = {0};
    for (size_t k = 0; k < elen; k++) key[k] = (char)lower((unsigned char)path[i + k]);
    size_t lo = 0, hi = sizeof mime_table / sizeof mime_table[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = memcmp(key, mime_table[mid].ext, sizeof key);
        if (c == 0) return mime_table[mid].type;
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return dflt;
}

/* ---- Dates ------------------------------------------------------------ */

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b < 0); }

static const char wday_names[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char month_names[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

#define DATE_MIN INT64_C(-62135596800) /* 0001-01-01 00:00:00 */
#define DATE_MAX INT64_C(253402300799) /* 9999-12-31 23:59:59 */

static char *put2(char *p, unsigned v) {
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
    return p + 2;
}

void http_fmt_date(time_t t, char *out) {
    int64_t s = (int64_t)t;
    if (s < DATE_MIN) s = DATE_MIN;
    if (s > DATE_MAX) s = DATE_MAX;
    int64_t days = floor_div(s, 86400);
    unsigned sod = (unsigned)(s - days * 86400);
    int64_t y;
    unsigned m, d;
    civil_from_days(days, &y, &m, &d);
    unsigned wd = (unsigned)(days - floor_div(days + 4, 7) * 7 + 4); /* 1970-01-01 was a Thursday */
    char *p = out;
    memcpy(p, wday_names[wd], 3);
    p[3] = ',';
    p[4] = ' ';
    p = put2(p + 5, d);
    *p++ = ' ';
    memcpy(p, month_names[m - 1], 3);
    p[3] = ' ';
    p = put2(p + 4, (unsigned)(y / 100));
    p = put2(p, (unsigned)(y % 100));
    *p++ = ' ';
    p = put2(p, sod / 3600);
    *p++ = ':';
    p = put2(p, sod / 60 % 60);
    *p++ = ':';
    p = put2(p, sod % 60);
    memcpy(p, " GMT", 5);
}

static int digit(char c) { return c >= '0' && c <= '9' ? c - '0' : -1; }

static int dig2(const char *p) {
    int a = digit(p[0]), b = digit(p[1]);
    return a < 0 || b < 0 ? -1 : a * 10 + b;
}

/* 1..12 for a month name, case-insensitive, else 0. */
static int month_of(const char *p) {
    char k[3] = {(char)lower((unsigned char)p[0]), (char)lower((unsigned char)p[1]),
                 (char)lower((unsigned char)p[2])};
    for (int i = 0; i < 12; i++)
        if (k[0] == (month_names[i][0] | 0x20) && k[1] == month_names[i][1] && k[2] == month_names[i][2])
            return i + 1;
    return 0;
}

static int ieq(const char *p, const char *lit, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)p[i]) != lower((unsigned char)lit[i])) return 0;
    return 1;
}

static int is_wday3(const char *p) {
    for (int i = 0; i < 7; i++)
        if (ieq(p, wday_names[i], 3)) return 1;
    return 0;
}

static int is_wday_long(const char *p, size_t n) {
    static const char *const names[7] = {"Sunday", "Monday", "Tuesday", "Wednesday",
                                         "Thursday", "Friday", "Saturday"};
    for (int i = 0; i < 7; i++)
        if (strlen(names[i]) == n && ieq(p, names[i], n)) return 1;
    return 0;
}

/* "HH:MM:SS" */
static int parse_hms(const char *p, int *h, int *mi, int *s) {
    if (p[2] != ':' || p[5] != ':') return -1;
    *h = dig2(p);
    *mi = dig2(p + 3);
    *s = dig2(p + 6);
    return *h < 0 || *mi < 0 || *s < 0 ? -1 : 0;
}

static int days_in_month(int64_t y, int m) {
    static const unsigned char dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return dim[m - 1] + (m == 2 && leap);
}

/* The RFC 850 two-digit year, placed in [now - 49, now + 50] (RFC 9110
 * §5.6.7: a year more than 50 years in the future is the most recent past
 * year with the same last two digits). */
static int64_t year_from_2digits(int yy) {
    int64_t y, lo;
    unsigned m, d;
    civil_from_days(floor_div((int64_t)time(NULL), 86400), &y, &m, &d);
    lo = y - 49;
    int64_t r = (yy - lo) % 100;
    return lo + (r < 0 ? r + 100 : r);
}

int http_parse_date(const char *s, size_t n, time_t *t) {
    if (!s) return -1;
    trim_ows(&s, &n);
    int64_t year;
    int mon, day, h, mi, sec;
    if (n == 29 && s[3] == ',') {
        /* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
        if (!is_wday3(s) || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' || s[25] != ' ' ||
            !ieq(s + 26, "GMT", 3))
            return -1;
        day = dig2(s + 5);
        mon = month_of(s + 8);
        int y1 = dig2(s + 12), y2 = dig2(s + 14);
        if (day < 0 || y1 < 0 || y2 < 0 || parse_hms(s + 17, &h, &mi, &sec) < 0) return -1;
        year = y1 * 100 + y2;
    } else if (n == 24 && s[3] == ' ') {
        /* asctime: "Sun Nov  6 08:49:37 1994" (day space-padded; "06" accepted) */
        if (!is_wday3(s) || s[7] != ' ' || s[10] != ' ' || s[19] != ' ') return -1;
        mon = month_of(s + 4);
        day = s[8] == ' ' ? digit(s[9]) : dig2(s + 8);
        int y1 = dig2(s + 20), y2 = dig2(s + 22);
        if (day < 0 || y1 < 0 || y2 < 0 || parse_hms(s + 11, &h, &mi, &sec) < 0) return -1;
        year = y1 * 100 + y2;
    } else {
        /* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" */
        size_t c = 0;
        while (c < n && c < 10 && s[c] != ',') c++;
        if (c >= n || s[c] != ',' || n != c + 24 || !is_wday_long(s, c)) return -1;
        const char *p = s + c + 1; /* " 06-Nov-94 08:49:37 GMT" */
        if (p[0] != ' ' || p[3] != '-' || p[7] != '-' || p[10] != ' ' || p[19] != ' ' || !ieq(p + 20, "GMT", 3))
            return -1;
        day = dig2(p + 1);
        mon = month_of(p + 4);
        int yy = dig2(p + 8);
        if (day < 0 || yy < 0 || parse_hms(p + 11, &h, &mi, &sec) < 0) return -1;
        year = year_from_2digits(yy);
    }
    if (mon == 0 || day < 1 || day > days_in_month(year, mon) || h > 23 || mi > 59 || sec > 60) return -1;
    int64_t r = days_from_civil(year, (unsigned)mon, (unsigned)day) * 86400 + h * 3600 + mi * 60 + sec;
    if ((int64_t)(time_t)r != r) return -1; /* a 32-bit time_t */
    *t = (time_t)r;
    return 0;
}

/* ---- Entity tags ------------------------------------------------------ */

static char *put_hex(char *p, uint64_t v) {
    char tmp[16];
    int k = 0;
    do {
        tmp[k++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    while (k) *p++ = tmp[--k];
    return p;
}

void http_etag(const struct stat *st, char *out) {
    char *p = out;
    *p++ = '"';
    p = put_hex(p, (uint64_t)st->st_mtime);
    *p++ = '-';
    p = put_hex(p, (uint64_t)st->st_size);
    *p++ = '"';
    *p = '\0';
}

/* One entity-tag at v[*i]: [ "W/" ] DQUOTE *etagc DQUOTE, where etagc is
 * %x21 / %x23-7E / obs-text.  On success: 0, *weak, the opaque tag (with
 * its quotes) in [*op, *op + *oplen), *i past it. */
static int parse_etag(const char *v, size_t n, size_t *i, int *weak, const char **op, size_t *oplen) {
    size_t j = *i;
    *weak = 0;
    if (j + 1 < n && v[j] == 'W' && v[j + 1] == '/') {
        *weak = 1;
        j += 2;
    }
    if (j >= n || v[j] != '"') return -1;
    size_t start = j++;
    while (j < n && v[j] != '"') {
        unsigned char c = (unsigned char)v[j];
        if (c < 0x21 || c == 0x7f) return -1;
        j++;
    }
    if (j >= n) return -1;
    j++;
    *op = v + start;
    *oplen = j - start;
    *i = j;
    return 0;
}

/* "*" or a list of entity-tags, compared with etag weakly or strongly. */
static int etag_list_match(const char *v, size_t n, const char *etag, int strong) {
    if (!v || !etag) return 0;
    trim_ows(&v, &n);
    if (n == 1 && v[0] == '*') return 1;
    int eweak = etag[0] == 'W' && etag[1] == '/';
    const char *eo = etag + (eweak ? 2 : 0);
    size_t elen = strlen(eo);
    if (strong && eweak) return 0;
    size_t i = 0;
    while (i < n) {
        while (i < n && (is_ows(v[i]) || v[i] == ',')) i++;
        if (i == n) break;
        int w;
        const char *op;
        size_t oplen;
        int ok = parse_etag(v, n, &i, &w, &op, &oplen) == 0;
        if (ok) {
            while (i < n && is_ows(v[i])) i++;
            ok = i == n || v[i] == ',';
        }
        if (!ok) { /* a malformed member: skip it */
            while (i < n && v[i] != ',') i++;
            continue;
        }
        if (!(strong && w) && oplen == elen && memcmp(op, eo, elen) == 0) return 1;
    }
    return 0;
}

int http_etag_match_list(const char *v, size_t n, const char *etag) {
    return etag_list_match(v, n, etag, 0);
}

/* ---- Ranges ----------------------------------------------------------- */

#define OFF_T_MAX ((off_t)((((uint64_t)1) << (sizeof(off_t) * 8 - 1)) - 1))

/* 1*DIGIT at v[*i] into *out; -1 if there is none or it overflows off_t. */
static int parse_off(const char *v, size_t n, size_t *i, off_t *out) {
    size_t j = *i;
    off_t x = 0;
    if (j >= n || digit(v[j]) < 0) return -1;
    for (; j < n && digit(v[j]) >= 0; j++) {
        int dg = digit(v[j]);
        if (x > (OFF_T_MAX - dg) / 10) return -1;
        x = x * 10 + dg;
    }
    *i = j;
    *out = x;
    return 0;
}

int http_parse_range(const char *v, size_t n, off_t size, off_t *first, off_t *last) {
    if (!v) return 0;
    trim_ows(&v, &n);
    if (n < 6 || !ieq(v, "bytes=", 6)) return 0;
    /* range-set = 1#range-spec: exactly one non-empty member is accepted */
    size_t i = 6;
    int members = 0, suffix = 0;
    off_t a = 0, b = -1; /* b == -1: no last-pos */
    for (;;) {
        while (i < n && (is_ows(v[i]) || v[i] == ',')) i++;
        if (i == n) break;
        if (members++) return 0; /* several ranges */
        if (v[i] == '-') {
            i++;
            suffix = 1;
            if (parse_off(v, n, &i, &a) < 0) return 0;
        } else {
            if (parse_off(v, n, &i, &a) < 0 || i == n || v[i] != '-') return 0;
            i++;
            if (i < n && digit(v[i]) >= 0 && parse_off(v, n, &i, &b) < 0) return 0;
            if (b >= 0 && b < a) return 0; /* last-pos < first-pos: invalid */
        }
        while (i < n && is_ows(v[i])) i++;
        if (i < n && v[i] != ',') return 0;
    }
    if (members == 0) return 0;
    /* RFC 9110 §14.1.1: of an empty representation only a suffix range
     * with a non-zero length is satisfiable -- and the whole (empty) file
     * is its answer, with 200 as nginx does (no Content-Range can name
     * zero bytes) */
    if (size <= 0) return suffix && a > 0 ? 0 : -416;
    if (suffix) {
        if (a == 0) return -416;
        *first = a >= size ? 0 : size - a;
        *last = size - 1;
        return 1;
    }
    if (a >= size) return -416;
    *first = a;
    *last = b < 0 || b >= size ? size - 1 : b;
    return 1;
}

/* ---- Conditional requests --------------------------------------------- */

int http_conditional(const struct stat *st, const char *etag,
                     const char *if_match, size_t if_match_n,
                     const char *if_unmodified_since, size_t ius_n,
                     const char *if_none_match, size_t inm_n,
                     const char *if_modified_since, size_t ims_n) {
    time_t d;
    /* 1. If-Match, else 2. If-Unmodified-Since */
    if (if_match && if_match_n) {
        if (!etag_list_match(if_match, if_match_n, etag, 1)) return 412;
    } else if (if_unmodified_since && ius_n && http_parse_date(if_unmodified_since, ius_n, &d) == 0 &&
               st->st_mtime > d) {
        return 412;
    }
    /* 3. If-None-Match, else 4. If-Modified-Since */
    if (if_none_match && inm_n) {
        if (etag_list_match(if_none_match, inm_n, etag, 0)) return 304;
    } else if (if_modified_since && ims_n && http_parse_date(if_modified_since, ims_n, &d) == 0 &&
               st->st_mtime <= d) {
        return 304;
    }
    return 200;
}

int http_if_range_ok(const struct stat *st, const char *etag, const char *v, size_t n) {
    if (!v || !n) return 1;
    trim_ows(&v, &n);
    if (n >= 1 && (v[0] == '"' || (n >= 2 && v[0] == 'W' && v[1] == '/'))) {
        size_t i = 0;
        int w;
        const char *op;
        size_t oplen;
        if (!etag || parse_etag(v, n, &i, &w, &op, &oplen) < 0 || i != n || w) return 0;
        if (etag[0] == 'W') return 0; /* strong comparison: a weak validator never matches */
        return strlen(etag) == oplen && memcmp(op, etag, oplen) == 0;
    }
    time_t d;
    return http_parse_date(v, n, &d) == 0 && d == st->st_mtime;
}

/* ---- Opening files ---------------------------------------------------- */

/* O_NONBLOCK: a FIFO must not block the open (see the top of the file). */
#define OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)

static int status_of_errno(int e) {
    switch (e) {
    case ENOENT:
    case ENOTDIR: return 404;
    case EXDEV:  /* RESOLVE_BENEATH: would leave the docroot */
    case ELOOP:  /* a symlink loop, or a symlink in compat mode */
    case EACCES:
    case EPERM:
    case ENXIO:  /* a socket, or a device without its driver */
    case ENODEV: return 403;
    case ENAMETOOLONG: return 414;
    case EMFILE:
    case ENFILE:
    case EAGAIN: /* a lease held by another process, or a rename race that persisted */
        return 503;
    default: return 500;
    }
}

/* openat2 beneath root_fd.  The fd, or -errno. */
static int open_beneath(int root_fd, const char *rel) {
    struct open_how how = {.flags = OPEN_FLAGS, .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    for (int tries = 0;; tries++) {
        long fd = syscall(SYS_openat2, root_fd, rel, &how, sizeof how);
        if (fd >= 0) return (int)fd;
        int e = errno;
        if ((e == EINTR || e == EAGAIN) && tries < 4) continue;
        return -e;
    }
}

/* The compat walk: one component at a time, no symlinks, no "..".  The
 * fd, or -errno. */
static int open_walk(int root_fd, const char *rel) {
    char buf[PATH_MAX];
    size_t len = strlen(rel);
    if (len >= sizeof buf) return -ENAMETOOLONG;
    memcpy(buf, rel, len + 1);
    int dir = root_fd, fd = -1, e = 0;
    char *p = buf;
    for (;;) {
        char *slash = strchr(p, '/');
        if (slash) *slash = '\0';
        if (strcmp(p, "..") == 0) {
            e = EXDEV;
            break;
        }
        if (!slash) {
            fd = openat(dir, *p ? p : ".", OPEN_FLAGS | O_NOFOLLOW);
            if (fd < 0) e = errno;
            break;
        }
        if (*p && strcmp(p, ".") != 0) {
            int nd = openat(dir, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (nd < 0) {
                struct stat lst;
                e = errno;
                /* O_DIRECTORY reports a symlink as ENOTDIR: call it what it is */
                if (e == ENOTDIR && fstatat(dir, p, &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode))
                    e = ELOOP;
                break;
            }
            if (dir != root_fd) close(dir);
            dir = nd;
        }
        p = slash + 1;
    }
    if (dir != root_fd) close(dir);
    return fd >= 0 ? fd : -e;
}

static int open_file(int root_fd, const char *path, int *fd_out, struct stat *st_out, const char **mime,
                     int compat) {
    struct stat stbuf, *st = st_out ? st_out : &stbuf;
    char buf[PATH_MAX];
    if (!path || path[0] != '/') return 400;
    const char *rel = path + 1;
    while (*rel == '/') rel++; /* "//x" would be absolute: EXDEV */
    size_t len = strlen(rel);
    int want_index = len == 0 || rel[len - 1] == '/';
    if (want_index) {
        if (len + sizeof "index.html" > sizeof buf) return 414;
        memcpy(buf, rel, len);
        memcpy(buf + len, "index.html", sizeof "index.html");
        rel = buf;
    }
    int fd = compat ? -ENOSYS : open_beneath(root_fd, rel);
    if (fd == -ENOSYS || fd == -EPERM) fd = open_walk(root_fd, rel);
    if (fd < 0) return status_of_errno(-fd);

    int status;
    if (fstat(fd, st) < 0) {
        status = 500;
        goto fail;
    }
    if (S_ISDIR(st->st_mode)) {
        status = want_index ? 403 : HTTP_FILE_REDIRECT;
        goto fail;
    }
    if (!S_ISREG(st->st_mode)) {
        status = 403;
        goto fail;
    }
    if (fcntl(fd, F_SETFL, 0) < 0) { /* drop O_NONBLOCK */
        status = 500;
        goto fail;
    }
    *fd_out = fd;
    if (mime) *mime = http_mime_type(rel);
    return 200;
fail:
    close(fd);
    return status;
}

int http_open_file(int root_fd, const char *path, int *fd_out, struct stat *st, const char **mime) {
    return open_file(root_fd, path, fd_out, st, mime, 0);
}

int http__open_file_compat(int root_fd, const char *path, int *fd_out, struct stat *st, const char **mime) {
    return open_file(root_fd, path, fd_out, st, mime, 1);
}

/* ---- The access log --------------------------------------------------- */

size_t http_log_escape(char *out, size_t cap, const char *s, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') {
            if (at == cap) break;
            out[at++] = (char)ch;
        } else {
            if (cap - at < 4) break;
            out[at++] = '\\';
            out[at++] = 'x';
            out[at++] = hex[ch >> 4];
            out[at++] = hex[ch & 15];
        }
    }
    return at;
}

/* ---- Reason phrases --------------------------------------------------- */

const char *http_reason(int status) {
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}
