/* 16-weft-run.c -- a program that knows nothing of weft.  Built with a
 * plain `cc 16-weft-run.c` and started as `weft-run ./a.out`, its main runs
 * on a vthread and its blocking libc calls park that vthread. */
#define _GNU_SOURCE /* RTLD_DEFAULT, usleep */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
    /* weft_self exists only when weft-run preloaded libweft-hook.so */
    void *(*self)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "weft_self");
    if (usleep(1000) != 0) perror("usleep"); /* hooked: parks the vthread */
    printf("main runs on a vthread: %s\n", self && self() ? "yes" : "no");
    return 0;
}
