/* weft-httpd's static-file logic: MIME types, dates, ETags, ranges,
 * conditional requests, and opening files under a docroot (symlink escapes,
 * special files, fd leaks).  Header values are copied into exactly-sized
 * heap buffers, so that under ASan a read past n is a crash. */
#include "harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <time.h>

#include "http_files.h"

/* ---- helpers ---------------------------------------------------------- */

/* s without its NUL, in a buffer of exactly strlen(s) bytes */
static char *exact(const char *s, size_t *n) {
    *n = strlen(s);
    char *b = malloc(*n ? *n : 1);
    CHECK(b != NULL);
    memcpy(b, s, *n);
    return b;
}

static int parse_date(const char *s, time_t *t) {
    size_t n;
    char *b = exact(s, &n);
    int r = http_parse_date(b, n, t);
    free(b);
    return r;
}

static int parse_range(const char *s, off_t size, off_t *first, off_t *last) {
    size_t n;
    char *b = exact(s, &n);
    int r = http_parse_range(b, n, size, first, last);
    free(b);
    return r;
}

static int inm(const char *list, const char *etag) {
    size_t n;
    char *b = exact(list, &n);
    int r = http_etag_match_list(b, n, etag);
    free(b);
    return r;
}

static int if_range(const struct stat *st, const char *etag, const char *v) {
    size_t n;
    char *b = exact(v, &n);
    int r = http_if_range_ok(st, etag, b, n);
    free(b);
    return r;
}

/* http_conditional with NUL-terminated strings (NULL = absent) */
static int cond(const struct stat *st, const char *etag, const char *im, const char *ius, const char *inmv,
                const char *ims) {
    size_t n1 = 0, n2 = 0, n3 = 0, n4 = 0;
    char *b1 = im ? exact(im, &n1) : NULL, *b2 = ius ? exact(ius, &n2) : NULL;
    char *b3 = inmv ? exact(inmv, &n3) : NULL, *b4 = ims ? exact(ims, &n4) : NULL;
    int r = http_conditional(st, etag, b1, n1, b2, n2, b3, n3, b4, n4);
    free(b1);
    free(b2);
    free(b3);
    free(b4);
    return r;
}

/* the reference: gmtime_r + strftime in the C locale */
static void ref_date(time_t t, char *out) {
    struct tm tm;
    CHECK(gmtime_r(&t, &tm) != NULL);
    static const char *wd[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char *mo[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    snprintf(out, HTTP_DATE_LEN, "%s, %02d %s %04d %02d:%02d:%02d GMT", wd[tm.tm_wday], tm.tm_mday, mo[tm.tm_mon],
             tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

static void check_roundtrip(time_t t) {
    char a[HTTP_DATE_LEN], b[HTTP_DATE_LEN];
    memset(a, 'x', sizeof a);
    http_fmt_date(t, a);
    CHECK_EQ(strlen(a), HTTP_DATE_LEN - 1);
    ref_date(t, b);
    if (strcmp(a, b) != 0) {
        fprintf(stderr, "t=%lld: %s vs %s\n", (long long)t, a, b);
        CHECK(0);
    }
    time_t back = 0;
    CHECK_EQ(parse_date(a, &back), 0);
    CHECK_EQ(back, t);
}

/* ---- MIME ------------------------------------------------------------- */

TEST(mime_every_extension) {
    static const struct { const char *ext, *type; } want[] = {
        {"html", "text/html; charset=utf-8"}, {"htm", "text/html; charset=utf-8"},
        {"css", "text/css; charset=utf-8"}, {"js", "text/javascript; charset=utf-8"},
        {"mjs", "text/javascript; charset=utf-8"}, {"json", "application/json"},
        {"txt", "text/plain; charset=utf-8"}, {"xml", "text/xml; charset=utf-8"},
        {"svg", "image/svg+xml"}, {"png", "image/png"}, {"jpg", "image/jpeg"}, {"jpeg", "image/jpeg"},
        {"gif", "image/gif"}, {"webp", "image/webp"}, {"ico", "image/x-icon"}, {"avif", "image/avif"},
        {"pdf", "application/pdf"}, {"wasm", "application/wasm"}, {"woff", "font/woff"},
        {"woff2", "font/woff2"}, {"ttf", "font/ttf"}, {"otf", "font/otf"}, {"mp4", "video/mp4"},
        {"webm", "video/webm"}, {"mp3", "audio/mpeg"}, {"ogg", "audio/ogg"}, {"wav", "audio/wav"},
        {"zip", "application/zip"}, {"gz", "application/gzip"}, {"tar", "application/x-tar"},
        {"csv", "text/csv; charset=utf-8"}, {"md", "text/markdown; charset=utf-8"},
        {"map", "application/json"},
    };
    CHECK_EQ(sizeof want / sizeof want[0], 33);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char p[64], q[64], r[64];
        snprintf(p, sizeof p, "/dir/file.%s", want[i].ext);
        CHECK(strcmp(http_mime_type(p), want[i].type) == 0);
        /* all upper case, and mixed case */
        snprintf(q, sizeof q, "FILE.%s", want[i].ext);
        for (char *c = q; *c; c++)
            if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 32);
        CHECK(strcmp(http_mime_type(q), want[i].type) == 0);
        snprintf(r, sizeof r, "/a.b/c.%s", want[i].ext);
        r[7] = (char)(r[7] >= 'a' && r[7] <= 'z' ? r[7] - 32 : r[7]);
        CHECK(strcmp(http_mime_type(r), want[i].type) == 0);
    }
}

TEST(mime_unknown_and_edge_cases) {
    const char *dflt = "application/octet-stream";
    const char *cases[] = {"/file", "/file.", "/", "", "/dir.html/file", "/dir.html/", "/x.exe", "/x.woff22",
                           "/x.htmlx", "/x.h", "/x.jsonp", "/x.tar.bz2", "/x.abcdefgh", ".htaccess", "/x.ht ml",
                           "/x.html/", "/x.\xc3\xa9"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) CHECK(strcmp(http_mime_type(cases[i]), dflt) == 0);
    CHECK(strcmp(http_mime_type(NULL), dflt) == 0);
    CHECK(strcmp(http_mime_type("/a.tar.gz"), "application/gzip") == 0);
    CHECK(strcmp(http_mime_type("/sub/index.html"), "text/html; charset=utf-8") == 0);
    CHECK(strcmp(http_mime_type("index.HtMl"), "text/html; charset=utf-8") == 0);
    CHECK(strcmp(http_mime_type("/.md"), "text/markdown; charset=utf-8") == 0); /* as nginx */
    CHECK(strcmp(http_mime_type("x.js"), "text/javascript; charset=utf-8") == 0);
}

/* ---- dates ------------------------------------------------------------ */

TEST(date_format_known_values) {
    static const struct { long long t; const char *s; } v[] = {
        {0, "Thu, 01 Jan 1970 00:00:00 GMT"},
        {784111777, "Sun, 06 Nov 1994 08:49:37 GMT"},
        {951782400, "Tue, 29 Feb 2000 00:00:00 GMT"},
        {951868799, "Tue, 29 Feb 2000 23:59:59 GMT"},
        {2147483647, "Tue, 19 Jan 2038 03:14:07 GMT"},
        {2147483648LL, "Tue, 19 Jan 2038 03:14:08 GMT"},
        {4107542400LL, "Mon, 01 Mar 2100 00:00:00 GMT"}, /* 2100 is not leap */
        {-1, "Wed, 31 Dec 1969 23:59:59 GMT"},
        {-2208988800LL, "Mon, 01 Jan 1900 00:00:00 GMT"},
        {253402300799LL, "Fri, 31 Dec 9999 23:59:59 GMT"},
        {-62135596800LL, "Mon, 01 Jan 0001 00:00:00 GMT"},
        /* clamped */
        {253402300800LL, "Fri, 31 Dec 9999 23:59:59 GMT"},
        {INT64_MAX, "Fri, 31 Dec 9999 23:59:59 GMT"},
        {INT64_MIN, "Mon, 01 Jan 0001 00:00:00 GMT"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char out[HTTP_DATE_LEN];
        http_fmt_date((time_t)v[i].t, out);
        if (strcmp(out, v[i].s) != 0) fprintf(stderr, "%lld: %s\n", v[i].t, out);
        CHECK(strcmp(out, v[i].s) == 0);
    }
}

TEST(date_roundtrip_many) {
    /* every second-ish of a sweep from 1900 to 2500 with an odd step,
     * checked against gmtime_r and parsed back */
    for (long long t = -2208988800LL; t < 16725225600LL; t += 86400LL * 3 + 3607)
        check_roundtrip((time_t)t);
    /* every day 1999-12-25 .. 2001-03-05, and around 2100-02-28 and the 2038 boundary */
    for (long long d = 10950; d < 11386; d++) check_roundtrip((time_t)(d * 86400 + 86399));
    for (long long d = 47540; d < 47560; d++) check_roundtrip((time_t)(d * 86400));
    for (long long t = 2147483647LL - 100; t < 2147483647LL + 100; t++) check_roundtrip((time_t)t);
    /* leap days */
    static const int leap_years[] = {1972, 1996, 2000, 2004, 2024, 2040, 2400};
    for (size_t i = 0; i < sizeof leap_years / sizeof leap_years[0]; i++) {
        struct tm tm = {.tm_year = leap_years[i] - 1900, .tm_mon = 1, .tm_mday = 29, .tm_hour = 12};
        time_t t = timegm(&tm);
        check_roundtrip(t);
        char out[HTTP_DATE_LEN];
        http_fmt_date(t, out);
        CHECK(strncmp(out + 5, "29 Feb", 6) == 0);
    }
    /* pseudo-random times from 1601 (negative) to 9999 */
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        long long t = (long long)(x % (253402300800ULL + 11644473600ULL)) - 11644473600LL;
        check_roundtrip((time_t)t);
    }
}

TEST(date_parse_three_formats) {
    time_t t = 0;
    CHECK_EQ(parse_date("Sun, 06 Nov 1994 08:49:37 GMT", &t), 0);
    CHECK_EQ(t, 784111777);
    t = 0;
    CHECK_EQ(parse_date("Sunday, 06-Nov-94 08:49:37 GMT", &t), 0);
    CHECK_EQ(t, 784111777);
    t = 0;
    CHECK_EQ(parse_date("Sun Nov  6 08:49:37 1994", &t), 0);
    CHECK_EQ(t, 784111777);
    t = 0;
    CHECK_EQ(parse_date("Sun Nov 06 08:49:37 1994", &t), 0); /* zero-padded day */
    CHECK_EQ(t, 784111777);
    /* every long weekday name */
    const char *longs[] = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};
    for (int i = 0; i < 7; i++) {
        char b[64];
        snprintf(b, sizeof b, "%s, 06-Nov-94 08:49:37 GMT", longs[i]);
        t = 0;
        CHECK_EQ(parse_date(b, &t), 0); /* a weekday that disagrees is accepted */
        CHECK_EQ(t, 784111777);
    }
    /* case-insensitive names, surrounding whitespace */
    CHECK_EQ(parse_date("sun, 06 nov 1994 08:49:37 gmt", &t), 0);
    CHECK_EQ(t, 784111777);
    CHECK_EQ(parse_date(" \tSun, 06 Nov 1994 08:49:37 GMT \t", &t), 0);
    CHECK_EQ(t, 784111777);
    CHECK_EQ(parse_date("Mon, 06 Nov 1994 08:49:37 GMT", &t), 0); /* wrong weekday */
    CHECK_EQ(t, 784111777);
    /* leap second rolls into the next minute */
    CHECK_EQ(parse_date("Sat, 31 Dec 2016 23:59:60 GMT", &t), 0);
    CHECK_EQ(t, 1483228800);
    /* leap days */
    CHECK_EQ(parse_date("Tue, 29 Feb 2000 00:00:00 GMT", &t), 0);
    CHECK_EQ(t, 951782400);
    CHECK_EQ(parse_date("Thu, 29 Feb 2024 00:00:00 GMT", &t), 0);
    CHECK_EQ(parse_date("Thu Feb 29 00:00:00 2024", &t), 0);
    CHECK_EQ(parse_date("Thursday, 29-Feb-24 00:00:00 GMT", &t), 0);
    /* a value followed by other bytes that n excludes: must not be read */
    const char *longer = "Sun, 06 Nov 1994 08:49:37 GMTXXXX";
    char *b = malloc(29);
    memcpy(b, longer, 29);
    CHECK_EQ(http_parse_date(b, 29, &t), 0);
    CHECK_EQ(t, 784111777);
    free(b);
    CHECK_EQ(http_parse_date(longer, 33, &t), -1);
}

TEST(date_rfc850_two_digit_year_window) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    int this_year = tm.tm_year + 1900;
    for (int yy = 0; yy < 100; yy++) {
        char b[64];
        snprintf(b, sizeof b, "Friday, 01-Jan-%02d 00:00:00 GMT", yy);
        time_t t;
        CHECK_EQ(parse_date(b, &t), 0);
        gmtime_r(&t, &tm);
        int y = tm.tm_year + 1900;
        CHECK_EQ(y % 100, yy);
        CHECK(y <= this_year + 50 && y > this_year - 50);
        CHECK_EQ(tm.tm_mon, 0);
        CHECK_EQ(tm.tm_mday, 1);
    }
}

TEST(date_parse_invalid) {
    const char *bad[] = {
        "", " ", "garbage", "0", "784111777", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 32 Nov 1994 08:49:37 GMT", "Sun, 00 Nov 1994 08:49:37 GMT", "Sun, 31 Nov 1994 08:49:37 GMT",
        "Sun, 31 Apr 1994 08:49:37 GMT", "Wed, 29 Feb 1995 08:49:37 GMT", "Wed, 30 Feb 2000 08:49:37 GMT",
        "Wed, 29 Feb 2100 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 23:60:00 GMT",
        "Sun, 06 Nov 1994 23:59:61 GMT", "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 19x4 08:49:37 GMT",
        "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 8:49:37 GMT", "Sun, 06 Nov 1994 08:49:37  GMT",
        "Sun, 06 Nov 1994 08-49-37 GMT", "Sun,  06 Nov 1994 08:49:37 GMT", "Sun 06 Nov 1994 08:49:37 GMT",
        "Xyz, 06 Nov 1994 08:49:37 GMT", "Sunday, 06 Nov 1994 08:49:37 GMT", "Sun, 06-Nov-94 08:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37", "Sunday, 6-Nov-94 08:49:37 GMT",
        "Sundae, 06-Nov-94 08:49:37 GMT", "Sunday, 31-Sep-94 08:49:37 GMT", "Sunday, 06-Nov-94 25:49:37 GMT",
        "Sunday, 06/Nov/94 08:49:37 GMT", "Sun Nov  6 08:49:37 94", "Sun Nov  6 08:49:37 1994 GMT",
        "Sun Nov 6 08:49:37 1994", "Sun Nov  6 08:49:37 19944", "Sun Nov 31 08:49:37 1994",
        "Sun Nov  0 08:49:37 1994", "Sun Nov  6 08:49:3  1994", "Sun Xov  6 08:49:37 1994",
        "Sun Nov  x 08:49:37 1994", "Sun, 06 Nov 1994 08:49:37 GMT\r\n", "Sun, 06 Nov +994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:-7 GMT", "Sun, 06 Nov 1994 08:49:37 GM\xff",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        time_t t = 12345;
        int r = parse_date(bad[i], &t);
        if (r != -1) fprintf(stderr, "accepted: \"%s\"\n", bad[i]);
        CHECK_EQ(r, -1);
        CHECK_EQ(t, 12345); /* untouched on failure */
    }
    time_t t;
    CHECK_EQ(http_parse_date(NULL, 0, &t), -1);
    CHECK_EQ(http_parse_date("x", 0, &t), -1);
    /* every truncation of every valid form fails, and reads only n bytes */
    const char *good[] = {"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                          "Sun Nov  6 08:49:37 1994", "Wednesday, 09-Nov-94 08:49:37 GMT"};
    for (size_t g = 0; g < sizeof good / sizeof good[0]; g++) {
        size_t len = strlen(good[g]);
        for (size_t k = 0; k < len; k++) {
            char *b = malloc(k ? k : 1);
            memcpy(b, good[g], k);
            CHECK_EQ(http_parse_date(b, k, &t), -1);
            free(b);
            /* and every proper suffix */
            if (k > 0) {
                b = malloc(len - k);
                memcpy(b, good[g] + k, len - k);
                CHECK_EQ(http_parse_date(b, len - k, &t), -1);
                free(b);
            }
        }
        CHECK_EQ(parse_date(good[g], &t), 0);
    }
}

/* ---- ETags ------------------------------------------------------------ */

TEST(etag_format) {
    struct stat st;
    memset(&st, 0, sizeof st);
    char e[HTTP_ETAG_LEN];
    st.st_mtime = 0x5f5e0ff;
    st.st_size = 1234;
    http_etag(&st, e);
    CHECK(strcmp(e, "\"5f5e0ff-4d2\"") == 0);
    st.st_mtime = 0;
    st.st_size = 0;
    http_etag(&st, e);
    CHECK(strcmp(e, "\"0-0\"") == 0);
    st.st_mtime = 1700000000;
    st.st_size = (off_t)1 << 40;
    http_etag(&st, e);
    CHECK(strcmp(e, "\"6553f100-10000000000\"") == 0);
    /* the widest: fits with room to spare */
    st.st_mtime = (time_t)-1;
    st.st_size = INT64_MAX;
    memset(e, 'x', sizeof e);
    http_etag(&st, e);
    CHECK(strcmp(e, "\"ffffffffffffffff-7fffffffffffffff\"") == 0);
    CHECK(strlen(e) < HTTP_ETAG_LEN);
}

TEST(etag_if_none_match_lists) {
    const char *et = "\"5f5e0ff-4d2\"";
    CHECK_EQ(inm("\"5f5e0ff-4d2\"", et), 1);
    CHECK_EQ(inm("W/\"5f5e0ff-4d2\"", et), 1); /* weak comparison */
    CHECK_EQ(inm("*", et), 1);
    CHECK_EQ(inm("  *  ", et), 1);
    CHECK_EQ(inm("\"a\", \"b\",\"5f5e0ff-4d2\"", et), 1);
    CHECK_EQ(inm("\"a\" ,\t W/\"5f5e0ff-4d2\" , \"c\"", et), 1);
    CHECK_EQ(inm(" , ,\"5f5e0ff-4d2\",,", et), 1); /* empty members */
    CHECK_EQ(inm("\"a\", \"b\"", et), 0);
    CHECK_EQ(inm("\"5f5e0ff-4d3\"", et), 0);
    CHECK_EQ(inm("\"5f5e0ff-4d2", et), 0);     /* unterminated */
    CHECK_EQ(inm("5f5e0ff-4d2", et), 0);       /* unquoted */
    CHECK_EQ(inm("\"5F5E0FF-4D2\"", et), 0);   /* opaque tags are case-sensitive */
    CHECK_EQ(inm("w/\"5f5e0ff-4d2\"", et), 0); /* "W/" is case-sensitive */
    CHECK_EQ(inm("\"5f5e0ff-4d2\"x", et), 0);  /* junk after the tag */
    CHECK_EQ(inm("\"5f5e0ff-4d2\" \"x\"", et), 0);
    CHECK_EQ(inm("\"x y\", \"5f5e0ff-4d2\"", et), 1); /* a malformed member is skipped */
    CHECK_EQ(inm("garbage, \"5f5e0ff-4d2\"", et), 1);
    CHECK_EQ(inm("\"a,b\", \"5f5e0ff-4d2\"", et), 1); /* commas inside a tag */
    CHECK_EQ(inm("\"a,b\"", "\"a,b\""), 1);
    CHECK_EQ(inm("*, \"a\"", et), 0);
    CHECK_EQ(inm("", et), 0);
    CHECK_EQ(inm("\"\"", "\"\""), 1);
    CHECK_EQ(inm("\"abc\"", "W/\"abc\""), 1); /* weak on our side too */
    CHECK_EQ(http_etag_match_list(NULL, 0, et), 0);
    /* not NUL-terminated: n stops before the match */
    const char *s = "\"a\", \"5f5e0ff-4d2\"";
    CHECK_EQ(http_etag_match_list(s, 3, et), 0);
    CHECK_EQ(http_etag_match_list(s, strlen(s) - 1, et), 0);
    CHECK_EQ(http_etag_match_list(s, strlen(s), et), 1);
    /* truncations never crash and never match, except the full one */
    size_t len = strlen(s);
    for (size_t k = 0; k < len; k++) {
        char *b = malloc(k ? k : 1);
        memcpy(b, s, k);
        CHECK_EQ(http_etag_match_list(b, k, et), 0);
        free(b);
    }
}

/* ---- ranges ----------------------------------------------------------- */

TEST(range_forms) {
    off_t f = -7, l = -7;
    CHECK_EQ(parse_range("bytes=0-99", 1000, &f, &l), 1);
    CHECK_EQ(f, 0);
    CHECK_EQ(l, 99);
    CHECK_EQ(parse_range("bytes=100-", 1000, &f, &l), 1);
    CHECK_EQ(f, 100);
    CHECK_EQ(l, 999);
    CHECK_EQ(parse_range("bytes=-500", 1000, &f, &l), 1);
    CHECK_EQ(f, 500);
    CHECK_EQ(l, 999);
    CHECK_EQ(parse_range("bytes=0-0", 1000, &f, &l), 1);
    CHECK_EQ(f, 0);
    CHECK_EQ(l, 0);
    CHECK_EQ(parse_range("bytes=999-999", 1000, &f, &l), 1);
    CHECK_EQ(f, 999);
    CHECK_EQ(l, 999);
    CHECK_EQ(parse_range("bytes=500-5000", 1000, &f, &l), 1); /* last clamped */
    CHECK_EQ(f, 500);
    CHECK_EQ(l, 999);
    CHECK_EQ(parse_range("bytes=-5000", 1000, &f, &l), 1); /* suffix larger than the file */
    CHECK_EQ(f, 0);
    CHECK_EQ(l, 999);
    CHECK_EQ(parse_range("bytes=-1", 1, &f, &l), 1);
    CHECK_EQ(f, 0);
    CHECK_EQ(l, 0);
    CHECK_EQ(parse_range("BYTES=1-2", 10, &f, &l), 1); /* the unit is case-insensitive */
    CHECK_EQ(parse_range("  bytes=1-2 ", 10, &f, &l), 1);
    CHECK_EQ(parse_range("bytes=1-2,", 10, &f, &l), 1); /* empty list members */
    CHECK_EQ(parse_range("bytes= 1-2", 10, &f, &l), 1);
    CHECK_EQ(f, 1);
    CHECK_EQ(l, 2);
    CHECK_EQ(parse_range("bytes=0-9223372036854775807", 10, &f, &l), 1); /* OFF_T_MAX itself */
    CHECK_EQ(l, 9);
    CHECK_EQ(parse_range("bytes=00000000000000000000000001-2", 10, &f, &l), 1); /* leading zeros */
    CHECK_EQ(f, 1);
}

TEST(range_unsatisfiable_and_ignored) {
    off_t f = -7, l = -7;
    /* 416 */
    CHECK_EQ(parse_range("bytes=1000-", 1000, &f, &l), -416);
    CHECK_EQ(parse_range("bytes=1000-2000", 1000, &f, &l), -416);
    CHECK_EQ(parse_range("bytes=-0", 1000, &f, &l), -416);
    CHECK_EQ(parse_range("bytes=0-0", 0, &f, &l), -416);
    CHECK_EQ(parse_range("bytes=0-", 0, &f, &l), -416);
    /* an empty file: a suffix range of non-zero length is satisfiable (RFC
     * 9110 §14.1.1) by the whole, empty, file (200); the others are not */
    CHECK_EQ(parse_range("bytes=-5", 0, &f, &l), 0);
    CHECK_EQ(parse_range("bytes=-1", 0, &f, &l), 0);
    CHECK_EQ(parse_range("bytes=-0", 0, &f, &l), -416);
    CHECK_EQ(f, -7); /* not written */
    CHECK_EQ(l, -7);
    /* ignored */
    const char *ign[] = {
        "bytes=5-4", "bytes=0-1,2-3", "bytes=0-1, -5", "bytes=-5,0-1", "bytes=0-1,0-1", "items=0-1",
        "bytes 0-1", "bytes=", "bytes=,", "bytes=-", "bytes=--5", "bytes=a-b", "bytes=1-2-3", "bytes=1",
        "bytes=+1-2", "bytes=1-+2", "bytes=0x10-20", "bytes=1 -2", "bytes=1- 2", "bytes = 0-1", "bytes=0-1;",
        "bytes=9223372036854775808-", "bytes=0-9223372036854775808", "bytes=-9223372036854775808",
        "bytes=99999999999999999999999-", "bytes=0-99999999999999999999999999999", "", "b", "bytes",
        "bytesx=0-1", "bytes=1-2 x",
    };
    for (size_t i = 0; i < sizeof ign / sizeof ign[0]; i++) {
        int r = parse_range(ign[i], 1000, &f, &l);
        if (r != 0) fprintf(stderr, "not ignored: \"%s\" -> %d\n", ign[i], r);
        CHECK_EQ(r, 0);
    }
    CHECK_EQ(f, -7);
    CHECK_EQ(http_parse_range(NULL, 0, 1000, &f, &l), 0);
    /* multi-range with unsatisfiable parts is still just ignored */
    CHECK_EQ(parse_range("bytes=2000-3000,4000-5000", 1000, &f, &l), 0);
    /* not NUL-terminated: "bytes=0-99" then more digits outside n */
    const char *s = "bytes=0-999999";
    CHECK_EQ(http_parse_range(s, 10, 1000, &f, &l), 1);
    CHECK_EQ(l, 99);
    /* truncations never read past n */
    const char *forms[] = {"bytes=100-199", "bytes=-500", "bytes=0-1,2-3"};
    for (size_t g = 0; g < 3; g++)
        for (size_t k = 0; k <= strlen(forms[g]); k++) {
            char *b = malloc(k ? k : 1);
            memcpy(b, forms[g], k);
            int r = http_parse_range(b, k, 1000, &f, &l);
            CHECK(r == 0 || r == 1 || r == -416);
            free(b);
        }
}

/* ---- conditional requests --------------------------------------------- */

TEST(conditional_order) {
    struct stat st;
    memset(&st, 0, sizeof st);
    st.st_mtime = 784111777; /* Sun, 06 Nov 1994 08:49:37 GMT */
    st.st_size = 100;
    char et[HTTP_ETAG_LEN];
    http_etag(&st, et);
    const char *at = "Sun, 06 Nov 1994 08:49:37 GMT", *before = "Sun, 06 Nov 1994 08:49:36 GMT",
               *after = "Sun, 06 Nov 1994 08:49:38 GMT", *baddate = "yesterday";
    char weak[HTTP_ETAG_LEN + 2];
    snprintf(weak, sizeof weak, "W/%s", et);

    CHECK_EQ(cond(&st, et, NULL, NULL, NULL, NULL), 200);
    /* If-Modified-Since alone */
    CHECK_EQ(cond(&st, et, NULL, NULL, NULL, at), 304);
    CHECK_EQ(cond(&st, et, NULL, NULL, NULL, after), 304);
    CHECK_EQ(cond(&st, et, NULL, NULL, NULL, before), 200);
    CHECK_EQ(cond(&st, et, NULL, NULL, NULL, baddate), 200);              /* invalid: ignored */
    CHECK_EQ(cond(&st, et, NULL, NULL, NULL, "Sunday, 06-Nov-94 08:49:37 GMT"), 304);
    /* If-None-Match alone */
    CHECK_EQ(cond(&st, et, NULL, NULL, et, NULL), 304);
    CHECK_EQ(cond(&st, et, NULL, NULL, weak, NULL), 304);
    CHECK_EQ(cond(&st, et, NULL, NULL, "*", NULL), 304);
    CHECK_EQ(cond(&st, et, NULL, NULL, "\"other\"", NULL), 200);
    /* If-None-Match beats If-Modified-Since, both ways */
    CHECK_EQ(cond(&st, et, NULL, NULL, "\"other\"", at), 200);
    CHECK_EQ(cond(&st, et, NULL, NULL, et, before), 304);
    /* If-Match */
    CHECK_EQ(cond(&st, et, et, NULL, NULL, NULL), 200);
    CHECK_EQ(cond(&st, et, "*", NULL, NULL, NULL), 200);
    CHECK_EQ(cond(&st, et, "\"a\", \"b\"", NULL, NULL, NULL), 412);
    CHECK_EQ(cond(&st, et, weak, NULL, NULL, NULL), 412); /* strong comparison */
    CHECK_EQ(cond(&st, et, "\"a\", " "\"64-2ebc7e21\"", NULL, NULL, NULL), 412);
    /* If-Unmodified-Since */
    CHECK_EQ(cond(&st, et, NULL, at, NULL, NULL), 200);
    CHECK_EQ(cond(&st, et, NULL, after, NULL, NULL), 200);
    CHECK_EQ(cond(&st, et, NULL, before, NULL, NULL), 412);
    CHECK_EQ(cond(&st, et, NULL, baddate, NULL, NULL), 200); /* invalid: ignored */
    /* If-Match present: If-Unmodified-Since is not evaluated */
    CHECK_EQ(cond(&st, et, et, before, NULL, NULL), 200);
    CHECK_EQ(cond(&st, et, "\"x\"", after, NULL, NULL), 412);
    /* 412 comes before 304 */
    CHECK_EQ(cond(&st, et, "\"x\"", NULL, et, at), 412);
    CHECK_EQ(cond(&st, et, NULL, before, et, at), 412);
    /* preconditions pass, then 304 */
    CHECK_EQ(cond(&st, et, et, NULL, et, NULL), 304);
    CHECK_EQ(cond(&st, et, NULL, after, NULL, at), 304);
    /* zero-length = absent */
    CHECK_EQ(http_conditional(&st, et, "\"x\"", 0, before, 0, et, 0, at, 0), 200);
}

TEST(if_range) {
    struct stat st;
    memset(&st, 0, sizeof st);
    st.st_mtime = 784111777;
    st.st_size = 100;
    char et[HTTP_ETAG_LEN];
    http_etag(&st, et);
    char weak[HTTP_ETAG_LEN + 2];
    snprintf(weak, sizeof weak, "W/%s", et);
    CHECK_EQ(http_if_range_ok(&st, et, NULL, 0), 1);
    CHECK_EQ(http_if_range_ok(&st, et, et, 0), 1);
    CHECK_EQ(if_range(&st, et, et), 1);
    CHECK_EQ(if_range(&st, et, weak), 0); /* weak never matches strongly */
    CHECK_EQ(if_range(&st, weak, weak), 0);
    CHECK_EQ(if_range(&st, et, "\"other\""), 0);
    CHECK_EQ(if_range(&st, et, "*"), 0);
    CHECK_EQ(if_range(&st, et, "Sun, 06 Nov 1994 08:49:37 GMT"), 1);
    CHECK_EQ(if_range(&st, et, "Sun Nov  6 08:49:37 1994"), 1);
    CHECK_EQ(if_range(&st, et, "Sun, 06 Nov 1994 08:49:38 GMT"), 0); /* equal, not "not later" */
    CHECK_EQ(if_range(&st, et, "Sun, 06 Nov 1994 08:49:36 GMT"), 0);
    CHECK_EQ(if_range(&st, et, "garbage"), 0);
    CHECK_EQ(if_range(&st, et, "   "), 0);
    char two[2 * HTTP_ETAG_LEN + 4];
    snprintf(two, sizeof two, "%s, %s", et, et);
    CHECK_EQ(if_range(&st, et, two), 0); /* one tag only */
    char sp[HTTP_ETAG_LEN + 4];
    snprintf(sp, sizeof sp, " %s ", et);
    CHECK_EQ(if_range(&st, et, sp), 1);
    /* a truncated tag */
    CHECK_EQ(http_if_range_ok(&st, et, et, strlen(et) - 1), 0);
}

TEST(reason_phrases) {
    static const struct { int code; const char *s; } r[] = {
        {100, "Continue"}, {101, "Switching Protocols"}, {200, "OK"}, {204, "No Content"},
        {206, "Partial Content"}, {301, "Moved Permanently"}, {302, "Found"}, {304, "Not Modified"},
        {400, "Bad Request"}, {403, "Forbidden"}, {404, "Not Found"}, {405, "Method Not Allowed"},
        {408, "Request Timeout"}, {411, "Length Required"}, {412, "Precondition Failed"},
        {413, "Content Too Large"}, {414, "URI Too Long"}, {416, "Range Not Satisfiable"},
        {417, "Expectation Failed"}, {431, "Request Header Fields Too Large"},
        {500, "Internal Server Error"}, {501, "Not Implemented"}, {503, "Service Unavailable"},
        {505, "HTTP Version Not Supported"},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) CHECK(strcmp(http_reason(r[i].code), r[i].s) == 0);
    CHECK(strcmp(http_reason(0), "Unknown") == 0);
    CHECK(strcmp(http_reason(299), "Unknown") == 0);
    CHECK(strcmp(http_reason(-1), "Unknown") == 0);
    CHECK(strcmp(http_reason(999), "Unknown") == 0);
}

/* ---- the access log ---------------------------------------------------- */

/* Every byte: visible ASCII but '"' and '\' is itself, everything else
 * \xHH (upper-case hex); the input is read only within its length. */
TEST(log_escape_every_byte) {
    for (int ch = 0; ch < 256; ch++) {
        char *in = malloc(1);
        CHECK(in != NULL);
        in[0] = (char)ch;
        char out[8] = {0};
        size_t n = http_log_escape(out, sizeof out, in, 1);
        free(in);
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') {
            CHECK_EQ(n, (size_t)1);
            CHECK_EQ(out[0], (char)ch);
        } else {
            char want[8];
            snprintf(want, sizeof want, "\\x%02X", ch);
            CHECK_EQ(n, (size_t)4);
            CHECK(memcmp(out, want, 4) == 0);
        }
    }
    size_t n;
    char *in = exact("GET /a\"x HTTP/1.1\" 200 1\n", &n);
    char out[128];
    size_t w = http_log_escape(out, sizeof out, in, n);
    free(in);
    out[w] = 0;
    CHECK(strcmp(out, "GET /a\\x22x HTTP/1.1\\x22 200 1\\x0A") == 0);
}

/* Room runs out: never half an escape, never past cap. */
TEST(log_escape_bounded) {
    char out[16];
    memset(out, '#', sizeof out);
    CHECK_EQ(http_log_escape(out, 5, "ab\"cd", 5), (size_t)2); /* "ab" + \x22 needs 6 */
    CHECK(memcmp(out, "ab###", 5) == 0);
    CHECK_EQ(http_log_escape(out, 6, "ab\"cd", 5), (size_t)6);
    CHECK(memcmp(out, "ab\\x22#", 7) == 0);
    CHECK_EQ(http_log_escape(out, 7, "ab\"cd", 5), (size_t)7);
    CHECK(memcmp(out, "ab\\x22c", 7) == 0);
    CHECK_EQ(http_log_escape(out, 0, "abc", 3), (size_t)0);
    CHECK_EQ(http_log_escape(out, 16, "", 0), (size_t)0);
}

/* ---- opening files ---------------------------------------------------- */

static char tmp_dir[64];

static void put_file(const char *rel, const char *content, mode_t mode) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", tmp_dir, rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, content, strlen(content)), (ssize_t)strlen(content));
    CHECK_EQ(close(fd), 0);
}

static void put_dir(const char *rel) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", tmp_dir, rel);
    CHECK_EQ(mkdir(p, 0755), 0);
}

static void put_link(const char *target, const char *rel) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", tmp_dir, rel);
    CHECK_EQ(symlink(target, p), 0);
}

/* The docroot is tmp_dir/root; tmp_dir/outside.txt is outside it.  Returns
 * an O_PATH|O_DIRECTORY fd of the root; *sock_fd is the listening socket
 * bound at root/sock (kept open so the socket stays a socket). */
static int make_docroot(int *sock_fd) {
    strcpy(tmp_dir, "/tmp/weft-http-files-XXXXXX");
    CHECK(mkdtemp(tmp_dir) != NULL);
    put_file("outside.txt", "secret\n", 0644);
    put_dir("outside-dir");
    put_file("outside-dir/index.html", "secret index\n", 0644);
    put_dir("root");
    put_file("root/file.txt", "hello world\n", 0644);
    put_file("root/page.HTML", "<p>hi</p>\n", 0644);
    put_file("root/.hidden", "hidden\n", 0644);
    put_dir("root/.well-known");
    put_file("root/.well-known/acme", "token\n", 0644);
    put_dir("root/sub");
    put_file("root/sub/index.html", "<h1>sub</h1>\n", 0644);
    put_file("root/sub/data.json", "{}\n", 0644);
    put_dir("root/empty");
    put_dir("root/idxdir");
    put_dir("root/idxdir/index.html");
    put_file("root/noread.txt", "x\n", 0000);
    put_link("file.txt", "root/link-in");
    put_link("sub", "root/link-dir-in");
    put_link("../file.txt", "root/sub/link-up-in"); /* climbs, but stays inside */
    char abs_in[PATH_MAX];
    snprintf(abs_in, sizeof abs_in, "%s/root/file.txt", tmp_dir);
    put_link(abs_in, "root/link-abs-in"); /* absolute: RESOLVE_BENEATH refuses these */
    put_link("/etc/passwd", "root/link-out");
    put_link("../outside.txt", "root/link-out-rel");
    put_link("/etc", "root/link-dir-out");
    put_link("../outside-dir", "root/link-dir-out-rel");
    put_link("/proc/self/root/etc/passwd", "root/link-magic");
    put_link("loop2", "root/loop1");
    put_link("loop1", "root/loop2");
    put_link("nonexistent", "root/dangling");
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/root/fifo", tmp_dir);
    CHECK_EQ(mkfifo(p, 0644), 0);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(s >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/root/sock", tmp_dir);
    CHECK_EQ(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    *sock_fd = s;
    if (geteuid() == 0) {
        /* a character device (/dev/null's numbers); on a nodev mount the
         * open fails with EACCES instead, which is 403 too */
        snprintf(p, sizeof p, "%s/root/null", tmp_dir);
        CHECK_EQ(mknod(p, S_IFCHR | 0666, makedev(1, 3)), 0);
    }
    snprintf(p, sizeof p, "%s/root", tmp_dir);
    int root = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
    CHECK(root >= 0);
    return root;
}

static int rm_entry(const char *p, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    return remove(p);
}

static void remove_docroot(int root, int sock) {
    close(root);
    close(sock);
    CHECK_EQ(nftw(tmp_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
    struct stat st;
    CHECK(stat(tmp_dir, &st) < 0 && errno == ENOENT);
}

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

typedef int (*open_fn)(int, const char *, int *, struct stat *, const char **);

/* Opens path; on 200 checks the fd (flags, stat, content prefix), closes it. */
static int try_open(open_fn fn, int root, const char *path, const char *content, const char *mime_want) {
    int fd = -12345;
    struct stat st;
    const char *mime = NULL;
    int r = fn(root, path, &fd, &st, &mime);
    if (r != 200) {
        CHECK_EQ(fd, -12345);
        return r;
    }
    CHECK(fd >= 0);
    CHECK(S_ISREG(st.st_mode));
    int fl = fcntl(fd, F_GETFL);
    CHECK((fl & O_ACCMODE) == O_RDONLY);
    CHECK((fl & O_NONBLOCK) == 0);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    struct stat st2;
    CHECK_EQ(fstat(fd, &st2), 0);
    CHECK_EQ(st2.st_ino, st.st_ino);
    if (content) {
        char buf[256];
        ssize_t n = pread(fd, buf, sizeof buf, 0);
        CHECK_EQ(n, (ssize_t)strlen(content));
        CHECK(memcmp(buf, content, (size_t)n) == 0);
        CHECK_EQ(st.st_size, (off_t)strlen(content));
    }
    if (mime_want) CHECK(mime && strcmp(mime, mime_want) == 0);
    CHECK_EQ(close(fd), 0);
    return r;
}

static const char *long_name(void) {
    static char p[300];
    p[0] = '/';
    memset(p + 1, 'a', 290);
    p[291] = '\0';
    return p;
}

/* The cases both modes agree on. */
static void check_common(open_fn fn, int root) {
    const char *html = "text/html; charset=utf-8", *txt = "text/plain; charset=utf-8";
    CHECK_EQ(try_open(fn, root, "/file.txt", "hello world\n", txt), 200);
    CHECK_EQ(try_open(fn, root, "/page.HTML", "<p>hi</p>\n", html), 200);
    CHECK_EQ(try_open(fn, root, "/.hidden", "hidden\n", "application/octet-stream"), 200);
    CHECK_EQ(try_open(fn, root, "/.well-known/acme", "token\n", NULL), 200);
    CHECK_EQ(try_open(fn, root, "/sub/", "<h1>sub</h1>\n", html), 200);
    CHECK_EQ(try_open(fn, root, "/sub/data.json", "{}\n", "application/json"), 200);
    CHECK_EQ(try_open(fn, root, "/sub", NULL, NULL), HTTP_FILE_REDIRECT);
    CHECK_EQ(try_open(fn, root, "/.well-known", NULL, NULL), HTTP_FILE_REDIRECT);
    CHECK_EQ(try_open(fn, root, "/empty", NULL, NULL), HTTP_FILE_REDIRECT);
    CHECK_EQ(try_open(fn, root, "/empty/", NULL, NULL), 404);
    CHECK_EQ(try_open(fn, root, "/idxdir/", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/", NULL, NULL), 404); /* no index.html at the top (yet) */
    CHECK_EQ(try_open(fn, root, "/nonexistent", NULL, NULL), 404);
    CHECK_EQ(try_open(fn, root, "/nonexistent/", NULL, NULL), 404);
    CHECK_EQ(try_open(fn, root, "/no/such/dir/file", NULL, NULL), 404);
    CHECK_EQ(try_open(fn, root, "/file.txt/", NULL, NULL), 404);
    CHECK_EQ(try_open(fn, root, "/file.txt/x", NULL, NULL), 404);
    CHECK_EQ(try_open(fn, root, long_name(), NULL, NULL), 414);
    CHECK_EQ(try_open(fn, root, "file.txt", NULL, NULL), 400);
    CHECK_EQ(try_open(fn, root, "", NULL, NULL), 400);
    /* escapes */
    CHECK_EQ(try_open(fn, root, "/../outside.txt", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/sub/../../outside.txt", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/link-out", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/link-out-rel", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/link-dir-out", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/link-dir-out/", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/link-dir-out/passwd", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/link-dir-out-rel/", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/link-dir-out-rel/index.html", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/link-magic", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/link-abs-in", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/loop1", NULL, NULL), 403);
    /* special files: 403, and the fifo must not block */
    CHECK_EQ(try_open(fn, root, "/fifo", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/sock", NULL, NULL), 403);
    if (geteuid() == 0) CHECK_EQ(try_open(fn, root, "/null", NULL, NULL), 403);
    else CHECK_EQ(try_open(fn, root, "/noread.txt", NULL, NULL), 403);
}

TEST(open_file_docroot) {
    int sock;
    int root = make_docroot(&sock);
    open_fn fn = http_open_file;
    check_common(fn, root);
    /* symlinks that stay inside work */
    CHECK_EQ(try_open(fn, root, "/link-in", "hello world\n", NULL), 200);
    CHECK_EQ(try_open(fn, root, "/link-dir-in/", "<h1>sub</h1>\n", "text/html; charset=utf-8"), 200);
    CHECK_EQ(try_open(fn, root, "/link-dir-in/data.json", "{}\n", "application/json"), 200);
    CHECK_EQ(try_open(fn, root, "/link-dir-in", NULL, NULL), HTTP_FILE_REDIRECT);
    CHECK_EQ(try_open(fn, root, "/sub/link-up-in", "hello world\n", NULL), 200);
    CHECK_EQ(try_open(fn, root, "/dangling", NULL, NULL), 404);
    /* ".." that stays beneath the root is the kernel's to allow */
    CHECK_EQ(try_open(fn, root, "/sub/../file.txt", "hello world\n", NULL), 200);
    CHECK_EQ(try_open(fn, root, "//file.txt", "hello world\n", NULL), 200);
    /* a top-level index */
    put_file("root/index.html", "top\n", 0644);
    CHECK_EQ(try_open(fn, root, "/", "top\n", "text/html; charset=utf-8"), 200);
    /* a NULL st or mime is fine */
    int fd = -1;
    CHECK_EQ(http_open_file(root, "/file.txt", &fd, NULL, NULL), 200);
    CHECK(fd >= 0);
    close(fd);
    /* an unreadable directory (root bypasses permissions) */
    if (geteuid() != 0) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/root/sub", tmp_dir);
        CHECK_EQ(chmod(p, 0), 0);
        CHECK_EQ(try_open(fn, root, "/sub/data.json", NULL, NULL), 403);
        CHECK_EQ(chmod(p, 0755), 0);
    }
    remove_docroot(root, sock);
}

TEST(open_file_compat_walk) {
    int sock;
    int root = make_docroot(&sock);
    open_fn fn = http__open_file_compat;
    check_common(fn, root);
    /* without openat2 every symlink and every ".." is refused */
    CHECK_EQ(try_open(fn, root, "/link-in", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/link-dir-in/", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/link-dir-in/data.json", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/link-dir-in", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/sub/link-up-in", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/dangling", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/sub/../file.txt", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "/..", NULL, NULL), 403);
    CHECK_EQ(try_open(fn, root, "//file.txt", "hello world\n", NULL), 200);
    CHECK_EQ(try_open(fn, root, "/./sub/./data.json", "{}\n", NULL), 200);
    put_file("root/index.html", "top\n", 0644);
    CHECK_EQ(try_open(fn, root, "/", "top\n", "text/html; charset=utf-8"), 200);
    remove_docroot(root, sock);
}

TEST(open_file_no_fd_leaks) {
    int sock;
    int root = make_docroot(&sock);
    static const char *paths[] = {
        "/file.txt", "/sub/", "/sub", "/empty/", "/idxdir/", "/nonexistent", "/file.txt/x", "/../outside.txt",
        "/link-in", "/link-out", "/link-dir-out/passwd", "/link-dir-out-rel/", "/loop1", "/fifo", "/sock",
        "/noread.txt", "/link-dir-in/data.json", "/sub/../../outside.txt", "file.txt", "/dangling",
    };
    int before = count_fds();
    for (int round = 0; round < 50; round++)
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
            try_open(http_open_file, root, paths[i], NULL, NULL);
            try_open(http__open_file_compat, root, paths[i], NULL, NULL);
        }
    try_open(http_open_file, root, long_name(), NULL, NULL);
    try_open(http__open_file_compat, root, long_name(), NULL, NULL);
    CHECK_EQ(count_fds(), before);
    remove_docroot(root, sock);
}

TEST(open_file_fd_table_full_is_503) {
    int sock;
    int root = make_docroot(&sock);
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = 64;
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    int fds[64], n = 0;
    for (;;) {
        int fd = dup(root);
        if (fd < 0) {
            CHECK_EQ(errno, EMFILE);
            break;
        }
        CHECK(n < 64);
        fds[n++] = fd;
    }
    int fd = -1;
    CHECK_EQ(http_open_file(root, "/file.txt", &fd, NULL, NULL), 503);
    CHECK_EQ(http_open_file(root, "/sub/", &fd, NULL, NULL), 503);
    CHECK_EQ(http__open_file_compat(root, "/file.txt", &fd, NULL, NULL), 503);
    CHECK_EQ(http__open_file_compat(root, "/sub/data.json", &fd, NULL, NULL), 503);
    CHECK_EQ(fd, -1);
    /* one free slot: the openat2 path needs one fd, the walk needs two */
    close(fds[--n]);
    CHECK_EQ(http_open_file(root, "/sub/data.json", &fd, NULL, NULL), 200);
    close(fd);
    CHECK_EQ(http__open_file_compat(root, "/sub/data.json", &fd, NULL, NULL), 503);
    CHECK_EQ(http__open_file_compat(root, "/file.txt", &fd, NULL, NULL), 200);
    close(fd);
    while (n) close(fds[--n]);
    rl.rlim_cur = old;
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    remove_docroot(root, sock);
}
