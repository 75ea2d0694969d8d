/*
 * weft-run [--carriers N] [--io uring|epoll] [--no-main] [--] PROGRAM [ARG...]
 *
 * Runs PROGRAM -- any dynamically linked program, weft did not compile it --
 * with libweft-hook.so preloaded: its main runs on a vthread and its
 * blocking C library calls (read, recv, poll, connect, nanosleep ...) park
 * that vthread instead of blocking a carrier (src/hook/hook.c,
 * src/hook/preload.c).  All this does is set the environment and exec:
 *   LD_PRELOAD   libweft-hook.so in front of what was there
 *   WEFT_CARRIERS, WEFT_IO   from --carriers, --io
 *   WEFT_HOOK_MAIN=0         from --no-main (hooks only: main stays a
 *                            platform thread, so nothing parks until the
 *                            program spawns vthreads itself)
 * The library is $WEFT_HOOK_LIB if set, else the installed one, else the
 * one in the build tree this weft-run was built in.
 * A statically linked program cannot be preloaded into: it is refused by
 * the dynamic linker's absence, and weft-run says so.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: weft-run [--carriers N] [--io uring|epoll] [--no-main] [--] PROGRAM [ARG...]\n"
            "Runs PROGRAM with libweft-hook.so preloaded: main on a vthread, blocking\n"
            "libc calls park it.  WEFT_HOOK_LIB overrides the library's path.\n");
}

static const char *hook_lib(void) {
    const char *e = getenv("WEFT_HOOK_LIB");
    if (e && *e) return e;
    if (access(WEFT_HOOK_INSTALL_PATH, R_OK) == 0) return WEFT_HOOK_INSTALL_PATH;
    if (access(WEFT_HOOK_BUILD_PATH, R_OK) == 0) return WEFT_HOOK_BUILD_PATH;
    return NULL;
}

int main(int argc, char **argv) {
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else if (strcmp(argv[i], "--carriers") == 0 && i + 1 < argc) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > 1024) {
                fprintf(stderr, "weft-run: --carriers wants 1..1024, not '%s'\n", argv[i]);
                return 2;
            }
            setenv("WEFT_CARRIERS", argv[i], 1);
        } else if (strcmp(argv[i], "--io") == 0 && i + 1 < argc) {
            if (strcmp(argv[++i], "uring") && strcmp(argv[i], "epoll")) {
                fprintf(stderr, "weft-run: --io wants uring or epoll, not '%s'\n", argv[i]);
                return 2;
            }
            setenv("WEFT_IO", argv[i], 1);
        } else if (strcmp(argv[i], "--no-main") == 0) {
            setenv("WEFT_HOOK_MAIN", "0", 1);
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "weft-run: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            break;
        }
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    const char *lib = hook_lib();
    if (!lib) {
        fprintf(stderr, "weft-run: libweft-hook.so not found (looked at %s and %s; set WEFT_HOOK_LIB)\n",
                WEFT_HOOK_INSTALL_PATH, WEFT_HOOK_BUILD_PATH);
        return 127;
    }
    const char *old = getenv("LD_PRELOAD");
    size_t len = strlen(lib) + (old ? strlen(old) + 1 : 0) + 1;
    char *pre = malloc(len);
    if (!pre) return 127;
    snprintf(pre, len, "%s%s%s", lib, old && *old ? ":" : "", old ? old : "");
    setenv("LD_PRELOAD", pre, 1);
    execvp(argv[i], argv + i);
    fprintf(stderr, "weft-run: cannot run %s: %s\n", argv[i], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
