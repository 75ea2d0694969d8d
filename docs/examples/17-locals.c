/* 17-locals.c -- per-request state without __thread: a scoped value bound
 * for a call tree (seen by the forks of a scope opened inside it), and a
 * vthread-local key for each vthread's own mutable state. */
#include <weft.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static weft_scoped_key request_id = WEFT_SCOPED_KEY("request-id");
static weft_local_key calls_key; /* each vthread's call counter */
static atomic_int freed;

static void free_counter(void *p) {
    free(p);
    atomic_fetch_add(&freed, 1);
}

/* Counts a call of the calling vthread: its own counter, on any carrier. */
static int count_call(void) {
    long *n = weft_local_get(calls_key);
    if (!n) {
        if (!(n = calloc(1, sizeof *n))) return -ENOMEM;
        int r = weft_local_set(calls_key, n);
        if (r < 0) {
            free(n);
            return r;
        }
    }
    return (int)++*n;
}

static const char *current_request(void) {
    void *id;
    return weft_scoped_get(&request_id, &id) == 0 ? id : "(none)";
}

typedef struct part {
    const char *name;
    char out[96];
} part;

static int fetch(void *arg, void **result) {
    part *p = arg;
    int calls = 0;
    for (int i = 0; i < 3; i++) {
        int r = weft_sleep(1000000); /* blocks: may resume on another carrier */
        if (r < 0) return r;
        if ((calls = count_call()) < 0) return calls;
    }
    snprintf(p->out, sizeof p->out, "%s for request %s (%d calls on this vthread)", p->name,
             current_request(), calls);
    *result = p->out;
    return 0;
}

static void *spawned(void *arg) {
    (void)arg;
    return (void *)current_request();
}

/* Runs inside the binding: everything it calls sees request_id. */
static int handle(void *arg) {
    (void)arg;
    part parts[2] = {{.name = "profile"}, {.name = "orders"}};
    weft_scope *s;
    int r = weft_scope_create(&s, WEFT_SCOPE_ALL, 0); /* its forks inherit the binding */
    if (r < 0) return r;
    for (int i = 0; i < 2; i++)
        if (!weft_fork(s, fetch, &parts[i])) {
            weft_scope_close(s);
            return -ENOMEM;
        }
    r = weft_scope_join(s);
    weft_scope_close(s); /* the forks have ended: their counters are freed */
    if (r < 0) return r;
    for (int i = 0; i < 2; i++) printf("  %s\n", parts[i].out);
    /* weft_spawn does not inherit bindings (nor does Java's Thread) */
    weft_thread *t;
    void *seen;
    if ((r = weft_spawn(&t, spawned, NULL, NULL)) < 0 || (r = weft_join(t, &seen)) < 0) return r;
    printf("  a vthread made by weft_spawn sees request %s\n", (const char *)seen);
    return 0;
}

static int run(void *arg) {
    (void)arg;
    int r = weft_local_key_create(&calls_key, free_counter);
    if (r < 0) return r;
    const char *ids[2] = {"r-17", "r-18"};
    for (int i = 0; i < 2 && r >= 0; i++) {
        printf("request %s:\n", ids[i]);
        weft_binding b = {&request_id, (void *)ids[i]};
        r = weft_scoped_run(&b, 1, handle, NULL); /* binds for handle's extent */
    }
    if (r >= 0) {
        printf("outside any binding: request %s\n", current_request());
        printf("counters freed by their destructors: %d\n", atomic_load(&freed));
    }
    weft_local_key_delete(calls_key);
    return r;
}

int main(void) {
    int r = weft_main(run, NULL);
    if (r < 0) {
        fprintf(stderr, "locals example: %s\n", strerror(-r));
        return 1;
    }
    return 0;
}
