/*
 * util.c -- clocks, memory figures and /proc readers for weft-bench.
 */
#define _GNU_SOURCE
#include "bench.h"

#include <weft.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sleep_ns_os(int64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

long long rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    long long size = 0, res = 0;
    int ok = fscanf(f, "%lld %lld", &size, &res) == 2;
    fclose(f);
    if (!ok) return -1;
    return res * sysconf(_SC_PAGESIZE);
}

static double tv_s(struct timeval tv) { return (double)tv.tv_sec + (double)tv.tv_usec / 1e6; }

void cpu_usage_get(cpu_usage *u) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) {
        memset(u, 0, sizeof *u);
        return;
    }
    u->user_s = tv_s(ru.ru_utime);
    u->sys_s = tv_s(ru.ru_stime);
    u->maxrss_mib = (double)ru.ru_maxrss / 1024.0; /* ru_maxrss is in KiB on Linux */
}

void br_set_cpu(bench_result *r, const cpu_usage *before, const cpu_usage *after) {
    br_setf(r, "user_s", 3, after->user_s - before->user_s);
    br_setf(r, "sys_s", 3, after->sys_s - before->sys_s);
}

long long read_proc_ll(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long long v;
    int ok = fscanf(f, "%lld", &v) == 1;
    fclose(f);
    return ok ? v : -1;
}

long count_maps(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    long lines = 0;
    int c;
    while ((c = getc(f)) != EOF) lines += c == '\n';
    fclose(f);
    return lines;
}

/* The value of "Field:" in a /proc/.../status file, or -1. */
static long status_field(const char *path, const char *field, long *uid) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t flen = strlen(field);
    while (fgets(line, sizeof line, f)) {
        if (uid && strncmp(line, "Uid:", 4) == 0) *uid = strtol(line + 4, NULL, 10);
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') v = strtol(line + flen + 1, NULL, 10);
    }
    fclose(f);
    return v;
}

long self_threads(void) { return status_field("/proc/self/status", "Threads", NULL); }

long system_threads(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return -1;
    double a, b, c;
    long running, total;
    int ok = fscanf(f, "%lf %lf %lf %ld/%ld", &a, &b, &c, &running, &total) == 5;
    fclose(f);
    return ok ? total : -1;
}

long user_threads(void) {
    DIR *d = opendir("/proc");
    if (!d) return -1;
    long me = (long)getuid(), sum = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
        long uid = -1;
        long n = status_field(path, "Threads", &uid);
        if (n > 0 && uid == me) sum += n;
    }
    closedir(d);
    return sum;
}

const char *errno_name(int e, char *buf, size_t len) {
    const char *name = strerrorname_np(e < 0 ? -e : e);
    if (name) snprintf(buf, len, "%s%s", e < 0 ? "-" : "", name);
    else snprintf(buf, len, "%d", e);
    return buf;
}

int weft_carriers_for(int cfg_carriers) {
    weft_runtime_opts cfg = {.carriers = cfg_carriers};
    int r = weft_init(&cfg);
    if (r < 0) return r;
    weft_stats s;
    weft_stats_get(&s);
    weft_shutdown();
    return (int)s.carriers;
}
