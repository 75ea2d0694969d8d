/*
 * A small strict JSON parser for the tests (RFC 8259): it reads one value
 * into a tree, or says where the text stops being JSON.  Used to check
 * that weft_dump's JSON parses and to walk it (tests/test_httpd.c).
 *
 * Tree: every value is a json node, malloc'd; an object's members and an
 * array's items are a linked list (kids, next; a member's key in key).
 * Strings are unescaped into UTF-8 (\uXXXX, surrogate pairs included);
 * numbers are kept as double.  json_free frees a tree.  Depth is bounded
 * (JSON_MAX_DEPTH) so hostile input cannot exhaust the stack; nothing here
 * is fast or meant to be -- it is a checker.
 */
#ifndef WEFT_TEST_JSON_H
#define WEFT_TEST_JSON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 128

enum { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

typedef struct json {
    int type;
    double num;
    char *str;           /* JSON_STRING */
    char *key;           /* a member of an object: its name */
    struct json *kids;   /* JSON_ARRAY, JSON_OBJECT */
    struct json *next;
} json;

typedef struct json_in {
    const char *s, *end;
    const char *err;     /* what went wrong, NULL if nothing */
    const char *at;      /* where */
} json_in;

static void json_free(json *j) {
    while (j) {
        json *n = j->next;
        json_free(j->kids);
        free(j->str);
        free(j->key);
        free(j);
        j = n;
    }
}

static int json_fail(json_in *in, const char *what) {
    if (!in->err) {
        in->err = what;
        in->at = in->s;
    }
    return -1;
}

static void json_ws(json_in *in) {
    while (in->s < in->end && (*in->s == ' ' || *in->s == '\t' || *in->s == '\n' || *in->s == '\r')) in->s++;
}

static int json_hex4(json_in *in, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++, in->s++) {
        if (in->s >= in->end) return json_fail(in, "short \\u escape");
        char c = *in->s;
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (d == 16) return json_fail(in, "bad hex digit in \\u escape");
        *v = *v * 16 + d;
    }
    return 0;
}

/* in->s at the opening quote; *out: the unescaped string */
static int json_string(json_in *in, char **out) {
    in->s++;
    size_t cap = 32, n = 0;
    char *b = malloc(cap);
    if (!b) return json_fail(in, "out of memory");
    for (;;) {
        if (in->s >= in->end) {
            free(b);
            return json_fail(in, "unterminated string");
        }
        unsigned char c = (unsigned char)*in->s;
        if (n + 5 > cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                return json_fail(in, "out of memory");
            }
            b = nb;
        }
        if (c == '"') {
            in->s++;
            b[n] = 0;
            *out = b;
            return 0;
        }
        if (c < 0x20) {
            free(b);
            return json_fail(in, "control character in string");
        }
        if (c != '\\') {
            b[n++] = (char)c;
            in->s++;
            continue;
        }
        if (++in->s >= in->end) break;
        char e = *in->s++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            b[n++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            continue;
        }
        if (e != 'u') {
            free(b);
            return json_fail(in, "bad escape in string");
        }
        unsigned cp;
        if (json_hex4(in, &cp) < 0) break;
        if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair */
            unsigned lo;
            if (in->end - in->s < 2 || in->s[0] != '\\' || in->s[1] != 'u') {
                free(b);
                return json_fail(in, "lone surrogate in string");
            }
            in->s += 2;
            if (json_hex4(in, &lo) < 0) break;
            if (lo < 0xDC00 || lo > 0xDFFF) {
                free(b);
                return json_fail(in, "bad surrogate pair in string");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
            free(b);
            return json_fail(in, "lone surrogate in string");
        }
        if (cp < 0x80) b[n++] = (char)cp;
        else if (cp < 0x800) {
            b[n++] = (char)(0xC0 | cp >> 6);
            b[n++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            b[n++] = (char)(0xE0 | cp >> 12);
            b[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            b[n++] = (char)(0x80 | (cp & 0x3F));
        } else {
            b[n++] = (char)(0xF0 | cp >> 18);
            b[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            b[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            b[n++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    free(b);
    return json_fail(in, "bad string");
}

static int json_number(json_in *in, double *v) {
    const char *p = in->s;
    if (p < in->end && *p == '-') p++;
    if (p >= in->end) return json_fail(in, "bad number");
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < in->end && *p >= '0' && *p <= '9') p++;
    else return json_fail(in, "bad number");
    if (p < in->end && *p == '.') {
        if (++p >= in->end || *p < '0' || *p > '9') return json_fail(in, "bad fraction");
        while (p < in->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < in->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < in->end && (*p == '+' || *p == '-')) p++;
        if (p >= in->end || *p < '0' || *p > '9') return json_fail(in, "bad exponent");
        while (p < in->end && *p >= '0' && *p <= '9') p++;
    }
    char tmp[64];
    size_t l = (size_t)(p - in->s);
    if (l >= sizeof tmp) l = sizeof tmp - 1; /* (the value is only indicative past 63 digits) */
    memcpy(tmp, in->s, l);
    tmp[l] = 0;
    *v = strtod(tmp, NULL);
    in->s = p;
    return 0;
}

static json *json_value(json_in *in, int depth);

static int json_word(json_in *in, const char *w) {
    size_t l = strlen(w);
    if ((size_t)(in->end - in->s) < l || memcmp(in->s, w, l)) return json_fail(in, "unexpected word");
    in->s += l;
    return 0;
}

static json *json_value(json_in *in, int depth) {
    if (depth > JSON_MAX_DEPTH) {
        json_fail(in, "nested too deep");
        return NULL;
    }
    json_ws(in);
    if (in->s >= in->end) {
        json_fail(in, "unexpected end");
        return NULL;
    }
    json *j = calloc(1, sizeof *j);
    if (!j) {
        json_fail(in, "out of memory");
        return NULL;
    }
    char c = *in->s;
    int r = 0;
    if (c == '{' || c == '[') {
        j->type = c == '{' ? JSON_OBJECT : JSON_ARRAY;
        char close = c == '{' ? '}' : ']';
        in->s++;
        json_ws(in);
        json **tail = &j->kids;
        if (in->s < in->end && *in->s == close) {
            in->s++;
            return j;
        }
        for (;;) {
            char *key = NULL;
            if (j->type == JSON_OBJECT) {
                json_ws(in);
                if (in->s >= in->end || *in->s != '"' || json_string(in, &key) < 0) {
                    json_fail(in, "expected a member name");
                    break;
                }
                json_ws(in);
                if (in->s >= in->end || *in->s != ':') {
                    free(key);
                    json_fail(in, "expected ':'");
                    break;
                }
                in->s++;
            }
            json *k = json_value(in, depth + 1);
            if (!k) {
                free(key);
                break;
            }
            k->key = key;
            *tail = k;
            tail = &k->next;
            json_ws(in);
            if (in->s < in->end && *in->s == ',') {
                in->s++;
                continue;
            }
            if (in->s < in->end && *in->s == close) {
                in->s++;
                return j;
            }
            json_fail(in, j->type == JSON_OBJECT ? "expected ',' or '}'" : "expected ',' or ']'");
            break;
        }
        json_free(j);
        return NULL;
    }
    if (c == '"') {
        j->type = JSON_STRING;
        r = json_string(in, &j->str);
    } else if (c == 't') {
        j->type = JSON_TRUE;
        r = json_word(in, "true");
    } else if (c == 'f') {
        j->type = JSON_FALSE;
        r = json_word(in, "false");
    } else if (c == 'n') {
        j->type = JSON_NULL;
        r = json_word(in, "null");
    } else {
        j->type = JSON_NUMBER;
        r = json_number(in, &j->num);
    }
    if (r < 0) {
        json_free(j);
        return NULL;
    }
    return j;
}

/* Parses one JSON value from [s, s + n), whitespace around it allowed;
 * *rest (if not NULL) gets where it ended.  NULL on error, with a message
 * naming the problem and its offset in err (errcap bytes). */
static json *json_parse(const char *s, size_t n, const char **rest, char *err, size_t errcap) {
    json_in in = {.s = s, .end = s + n};
    json *j = json_value(&in, 0);
    if (j) json_ws(&in);
    if (!j && err) snprintf(err, errcap, "%s at offset %zu", in.err ? in.err : "?", (size_t)(in.at - s));
    if (rest) *rest = in.s;
    return j;
}

/* An object's member, or NULL. */
static const json *json_get(const json *o, const char *key) {
    if (!o || o->type != JSON_OBJECT) return NULL;
    for (const json *k = o->kids; k; k = k->next)
        if (!strcmp(k->key, key)) return k;
    return NULL;
}

/* A member's string, or NULL when absent or not a string. */
static const char *json_str(const json *o, const char *key) {
    const json *v = json_get(o, key);
    return v && v->type == JSON_STRING ? v->str : NULL;
}

#endif /* WEFT_TEST_JSON_H */
