/*
 * The JSON reader (json.h): a strict (RFC 8259) recursive-descent parser
 * over the text, allocating nodes and unescaped strings from an arena of
 * 64 KiB blocks (larger blocks for larger strings), so that a snapshot of a
 * hundred thousand vthreads costs a few hundred allocations, not millions,
 * and is freed in one walk of the block list.  Strict, because the tests
 * use it as the checker of what weft_dump and the console print: a number
 * outside the grammar ("01", "1.", "+1"), a lone surrogate, a control
 * character in a string or a trailing comma is an error, not a guess.
 */
#include "json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 65536
#define MAX_DEPTH 200

typedef struct block {
    struct block *next;
    size_t used, cap;
    _Alignas(16) char data[];
} block;

struct json_doc {
    block *blocks;
    json *root;
};

typedef struct parser {
    const char *p, *end, *start;
    json_doc *d;
    char *err;
    size_t errcap;
    int failed;
} parser;

static void *arena(json_doc *d, size_t n) {
    n = (n + 15) & ~(size_t)15;
    block *b = d->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > BLOCK ? n : BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = d->blocks;
        d->blocks = b;
    }
    void *r = b->data + b->used;
    b->used += n;
    return r;
}

static void fail(parser *ps, const char *what) {
    if (ps->failed) return;
    ps->failed = 1;
    if (ps->err && ps->errcap)
        snprintf(ps->err, ps->errcap, "JSON: %s at byte %zu", what, (size_t)(ps->p - ps->start));
}

static void ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(parser *ps, unsigned *out) {
    if (ps->end - ps->p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(ps->p[i]);
        if (h < 0) return -1;
        v = v * 16 + (unsigned)h;
    }
    ps->p += 4;
    *out = v;
    return 0;
}

/* A string at ps->p (after its opening quote): unescaped into the arena. */
static char *string(parser *ps) {
    const char *q = ps->p;
    size_t raw = 0;
    while (q < ps->end && *q != '"') {
        if (*q == '\\') q++;
        q++;
        raw++;
    }
    if (q >= ps->end) {
        ps->p = ps->end; /* where the text ends: a document cut short says so */
        fail(ps, "unterminated string");
        return NULL;
    }
    char *out = arena(ps->d, (size_t)(q - ps->p) * 2 + 1), *o = out;
    if (!out) {
        fail(ps, "out of memory");
        return NULL;
    }
    while (ps->p < ps->end && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p++;
        if (c < 0x20) {
            fail(ps, "control character in a string");
            return NULL;
        }
        if (c != '\\') {
            *o++ = (char)c;
            continue;
        }
        if (ps->p >= ps->end) break;
        char e = *ps->p++;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(ps, &cp) < 0) {
                fail(ps, "bad \\u escape");
                return NULL;
            }
            if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair */
                unsigned lo;
                if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                    fail(ps, "lone surrogate in a string");
                    return NULL;
                }
                ps->p += 2;
                if (hex4(ps, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF) {
                    fail(ps, "bad surrogate pair");
                    return NULL;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                fail(ps, "lone surrogate in a string");
                return NULL;
            }
            if (cp < 0x80) *o++ = (char)cp;
            else if (cp < 0x800) *o++ = (char)(0xC0 | cp >> 6), *o++ = (char)(0x80 | (cp & 0x3F));
            else if (cp < 0x10000)
                *o++ = (char)(0xE0 | cp >> 12), *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)), *o++ = (char)(0x80 | (cp & 0x3F));
            else
                *o++ = (char)(0xF0 | cp >> 18), *o++ = (char)(0x80 | ((cp >> 12) & 0x3F)),
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)), *o++ = (char)(0x80 | (cp & 0x3F));
            break;
        }
        default: fail(ps, "bad escape"); return NULL;
        }
    }
    (void)raw;
    if (ps->p >= ps->end) {
        fail(ps, "unterminated string");
        return NULL;
    }
    ps->p++; /* the closing quote */
    *o = 0;
    return out;
}

static int digit(const parser *ps, const char *p) { return p < ps->end && *p >= '0' && *p <= '9'; }

/* A number at ps->p, by the grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int number(parser *ps, double *out) {
    const char *p = ps->p;
    if (p < ps->end && *p == '-') p++;
    if (p < ps->end && *p == '0') p++;
    else if (digit(ps, p))
        while (digit(ps, p)) p++;
    else {
        fail(ps, "bad number");
        return -1;
    }
    if (p < ps->end && *p == '.') {
        if (!digit(ps, ++p)) {
            fail(ps, "bad fraction");
            return -1;
        }
        while (digit(ps, p)) p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < ps->end && (*p == '+' || *p == '-')) p++;
        if (!digit(ps, p)) {
            fail(ps, "bad exponent");
            return -1;
        }
        while (digit(ps, p)) p++;
    }
    char buf[64];
    size_t n = (size_t)(p - ps->p);
    if (n >= sizeof buf) n = sizeof buf - 1; /* (the value is only indicative past 63 digits) */
    memcpy(buf, ps->p, n);
    buf[n] = 0;
    *out = strtod(buf, NULL);
    ps->p = p;
    return 0;
}

static json *value(parser *ps, int depth);

static json *node(parser *ps, json_type t) {
    json *v = arena(ps->d, sizeof *v);
    if (!v) {
        fail(ps, "out of memory");
        return NULL;
    }
    memset(v, 0, sizeof *v);
    v->type = t;
    return v;
}

static int lit(parser *ps, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n)) return 0;
    ps->p += n;
    return 1;
}

static json *value(parser *ps, int depth) {
    if (depth > MAX_DEPTH) {
        fail(ps, "nested too deep");
        return NULL;
    }
    ws(ps);
    if (ps->p >= ps->end) {
        fail(ps, "unexpected end, expected a value");
        return NULL;
    }
    char c = *ps->p;
    if (c == '{' || c == '[') {
        int obj = c == '{';
        ps->p++;
        json *v = node(ps, obj ? JSON_OBJ : JSON_ARR), **tail;
        if (!v) return NULL;
        tail = &v->first;
        ws(ps);
        if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
            ps->p++;
            return v;
        }
        for (;;) {
            const char *key = NULL;
            if (obj) {
                ws(ps);
                if (ps->p >= ps->end || *ps->p != '"') {
                    fail(ps, "expected a member name");
                    return NULL;
                }
                ps->p++;
                key = string(ps);
                if (!key) return NULL;
                ws(ps);
                if (ps->p >= ps->end || *ps->p != ':') {
                    fail(ps, "expected ':'");
                    return NULL;
                }
                ps->p++;
            }
            json *m = value(ps, depth + 1);
            if (!m) return NULL;
            m->key = key;
            *tail = m;
            tail = &m->next;
            v->n++;
            ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
                ps->p++;
                return v;
            }
            fail(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'");
            return NULL;
        }
    }
    if (c == '"') {
        ps->p++;
        json *v = node(ps, JSON_STR);
        if (!v) return NULL;
        v->str = string(ps);
        return v->str ? v : NULL;
    }
    if (lit(ps, "true") || lit(ps, "false")) {
        json *v = node(ps, JSON_BOOL);
        if (v) v->num = ps->p[-1] == 'e' && ps->p[-2] == 'u';
        return v;
    }
    if (lit(ps, "null")) return node(ps, JSON_NULL);
    if (c == '-' || (c >= '0' && c <= '9')) {
        double d;
        if (number(ps, &d) < 0) return NULL;
        json *v = node(ps, JSON_NUM);
        if (v) v->num = d;
        return v;
    }
    fail(ps, "expected a value");
    return NULL;
}

static json_doc *parse(const char *text, size_t len, const json **root, const char **rest, char *err,
                       size_t errcap) {
    json_doc *d = calloc(1, sizeof *d);
    if (!d) {
        if (err && errcap) snprintf(err, errcap, "JSON: out of memory");
        return NULL;
    }
    parser ps = {.p = text, .end = text + len, .start = text, .d = d, .err = err, .errcap = errcap};
    d->root = value(&ps, 0);
    if (d->root) {
        ws(&ps);
        if (!rest && ps.p != ps.end) fail(&ps, "trailing bytes after the document");
    }
    if (rest) *rest = ps.p;
    if (ps.failed || !d->root) {
        json_free(d);
        return NULL;
    }
    *root = d->root;
    return d;
}

json_doc *json_parse(const char *text, size_t len, const json **root, char *err, size_t errcap) {
    return parse(text, len, root, NULL, err, errcap);
}

json_doc *json_parse_prefix(const char *text, size_t len, const json **root, const char **rest, char *err,
                            size_t errcap) {
    return parse(text, len, root, rest, err, errcap);
}

void json_free(json_doc *d) {
    if (!d) return;
    for (block *b = d->blocks, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    free(d);
}

const json *json_get(const json *o, const char *key) {
    if (!o || o->type != JSON_OBJ) return NULL;
    for (const json *m = o->first; m; m = m->next)
        if (m->key && !strcmp(m->key, key)) return m;
    return NULL;
}

const json *json_path(const json *o, const char *path) {
    char part[128];
    while (o && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof part) return NULL;
        memcpy(part, path, n);
        part[n] = 0;
        o = json_get(o, part);
        path += n + (path[n] == '.');
    }
    return o;
}

double json_num(const json *v, double def) {
    return v && (v->type == JSON_NUM || v->type == JSON_BOOL) ? v->num : def;
}

const char *json_str(const json *v, const char *def) { return v && v->type == JSON_STR ? v->str : def; }
