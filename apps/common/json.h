/*
 * The one JSON reader of weft's programs and tests (weft-top reads the
 * console's snapshots with it; the tests check weft_dump's and the
 * console's JSON with it): parses one document, strictly (RFC 8259), into
 * a tree of nodes held in one arena (json_free releases it all at once).
 *
 * Each node knows its type, its key (inside an object), a number, a string
 * (unescaped, NUL-terminated; \u escapes become UTF-8), and its children as
 * a linked list (first, next) with their count.  Lookups are linear: the
 * console's objects have tens of keys, and arrays are walked in order.
 * Limits: nesting depth 200; numbers are doubles (the console's counters
 * fit in 2^53 for centuries).  Errors: NULL, with a message naming the
 * byte offset ("... at byte N") and what was expected.
 */
#ifndef WEFT_COMMON_JSON_H
#define WEFT_COMMON_JSON_H

#include <stddef.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ } json_type;

typedef struct json {
    json_type type;
    const char *key;     /* inside an object; NULL otherwise */
    double num;          /* JSON_NUM; JSON_BOOL: 0 or 1 */
    const char *str;     /* JSON_STR */
    struct json *first;  /* JSON_ARR, JSON_OBJ: the children */
    struct json *next;   /* the next sibling */
    size_t n;            /* JSON_ARR, JSON_OBJ: how many children */
} json;

typedef struct json_doc json_doc;

/* Parses text[0..len); the document's root is *root.  Returns the document
 * (free it with json_free), or NULL with a message in err. */
json_doc *json_parse(const char *text, size_t len, const json **root, char *err, size_t errcap);
/* The same, for a document followed by other bytes: *rest gets where the
 * value and the white space after it end (also on an error: where it
 * stopped). */
json_doc *json_parse_prefix(const char *text, size_t len, const json **root, const char **rest, char *err,
                            size_t errcap);
void json_free(json_doc *d);

/* The member `key` of object o (NULL if o is not an object or has none). */
const json *json_get(const json *o, const char *key);
/* A dotted path of member names: json_path(root, "weft_console.stats.live"). */
const json *json_path(const json *o, const char *path);
/* A number's value (def if v is not a number or a bool). */
double json_num(const json *v, double def);
/* A string's value (def if v is not a string). */
const char *json_str(const json *v, const char *def);

#endif
