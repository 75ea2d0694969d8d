/*
 * weft-run [--carriers N] [--io uring|epoll] [--threads vthread|kernel] [--no-main] [--] PROGRAM [ARG...]
 *
 * Runs PROGRAM -- any dynamically linked program, weft did not compile it --
 * with libweft-hook.so preloaded: its main runs on a vthread and its
 * blocking C library calls (read, recv, poll, connect, nanosleep ...) park
 * that vthread instead of blocking a carrier (src/hook/hook.c,
 * src/hook/preload.c).  All this does is set the environment and exec:
 *   LD_PRELOAD   libweft-hook.so in front of what was there
 *   WEFT_CARRIERS, WEFT_IO   from --carriers, --io
 *   WEFT_VIRTUAL_PTHREADS    from --threads: 1 (vthread, the default:
 *                            every thread PROGRAM creates is a vthread,
 *                            src/hook/threads.c) or 0 (kernel)
 *   WEFT_HOOK_MAIN=0         from --no-main (hooks only: main stays a
 *                            platform thread, so nothing parks until the
 *                            program spawns vthreads itself)
 * The library is $WEFT_HOOK_LIB if set, else the one installed beside this
 * weft-run (BINDIR/../LIBDIR/weft), else the one in the build tree it was built
 * in.  A statically linked program has no dynamic linker to preload
 * anything: it runs as it would without weft-run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: weft-run [--carriers N] [--io uring|epoll] [--threads vthread|kernel] [--no-main]\n"
            "                [--] PROGRAM [ARG...]\n"
            "Runs PROGRAM with libweft-hook.so preloaded: main and every thread it creates\n"
            "on vthreads (--threads kernel: its threads stay the kernel's), blocking libc\n"
            "calls park them.  WEFT_HOOK_LIB overrides the library's path.\n");
}

/* The library next to an installed weft-run (BINDIR/../LIBDIR/weft, wherever
 * the tree was installed or moved to), else the build tree's. */
static const char *hook_lib(char *buf, size_t len) {
    const char *e = getenv("WEFT_HOOK_LIB");
    if (e && *e) return e;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        if (WEFT_HOOK_LIBDIR[0] == '/') snprintf(buf, len, "%s/%s", WEFT_HOOK_LIBDIR, WEFT_HOOK_NAME);
        else snprintf(buf, len, "%s/../%s/%s", exe, WEFT_HOOK_LIBDIR, WEFT_HOOK_NAME);
        if (access(buf, R_OK) == 0) return buf;
    }
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
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            if (strcmp(argv[++i], "vthread") && strcmp(argv[i], "kernel")) {
                fprintf(stderr, "weft-run: --threads wants vthread or kernel, not '%s'\n", argv[i]);
                return 2;
            }
            setenv("WEFT_VIRTUAL_PTHREADS", strcmp(argv[i], "vthread") ? "0" : "1", 1);
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
    char found[4200];
    const char *lib = hook_lib(found, sizeof found);
    if (!lib) {
        fprintf(stderr, "weft-run: %s not found (next to weft-run in ../%s, nor at %s; set WEFT_HOOK_LIB)\n",
                WEFT_HOOK_NAME, WEFT_HOOK_LIBDIR, WEFT_HOOK_BUILD_PATH);
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
