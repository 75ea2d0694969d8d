/* 01-hello.c -- the smallest weft program: main's work runs on a vthread. */
#include <weft.h>

#include <stdio.h>
#include <string.h>

static int hello(void *arg) {
    const char *who = arg;
    weft_thread *self = weft_self(); /* NULL on a platform thread */
    printf("hello, %s, from vthread \"%s\"\n", who, weft_name(self));
    return 0;
}

int main(void) {
    /* weft_main starts the runtime, runs hello(arg) as a vthread named
     * "main", waits for it, shuts the runtime down and returns its result */
    int r = weft_main(hello, "world");
    if (r < 0) {
        fprintf(stderr, "weft_main: %s\n", strerror(-r));
        return 1;
    }
    return r;
}
