/*
 * The thread dump.
 *
 * There is no registry of vthreads to keep up to date on the spawn path:
 * every vthread lives in a stack slot, so the dump walks the slabs
 * (weft__stacks_walk) and reads each slot's descriptor.  The vthreads keep
 * running meanwhile, so every field is read with relaxed atomic loads and
 * anything pointing into a stack is bounds-checked before it is followed:
 * the dump is a consistent-enough snapshot, never a crash.
 *
 * For a parked vthread the saved stack pointer leads to the frame that
 * weft__ctx_switch pushed (see switch_x86_64.S: saved rbp at sp[6], return
 * address at sp[7]); from there the frame-pointer chain gives a backtrace.
 *
 * Scoped values: each vthread shows how many keys it sees bound
 * (weft_thread.scoped_n, kept by the vthread as it binds and unbinds: the
 * frames themselves, on its stack, are not walked) and each scope how many
 * its forks inherit; the values never appear (they may be secrets).
 */
#define _GNU_SOURCE
#include "../scope/scope.h"
#include "../exec/exec.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct out {
    int fd;
    int err;
    char buf[8192];
    size_t n;
    int json;
    int first;
    int64_t now;
    uint64_t count;
} out;

static void flush(out *o) {
    size_t off = 0;
    while (off < o->n && !o->err) {
        ssize_t w = write(o->fd, o->buf + off, o->n - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            o->err = -errno;
        } else off += (size_t)w;
    }
    o->n = 0;
}

__attribute__((format(printf, 2, 3))) static void put(out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[1024];
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k >= sizeof tmp) k = sizeof tmp - 1;
    if (o->n + (size_t)k > sizeof o->buf) flush(o);
    memcpy(o->buf + o->n, tmp, (size_t)k);
    o->n += (size_t)k;
}

static const char *why_name(int why) {
    static const char *names[WEFT__WHY_COUNT] = {"",      "sleep",  "join", "park",      "io",        "mutex",  "cond", "semaphore", "rwlock",
                                                      "latch", "once",   "channel send", "channel receive", "select", "future", "scope", "blocking", "executor", "async completions"};
    return why >= 0 && why < WEFT__WHY_COUNT ? names[why] : "?";
}

static uint64_t ld(const void *p) { return __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED); }

/* A word of another vthread's stack.  The dump reads a parked vthread's
 * frames as a snapshot, racing by design with the vthread once it runs
 * again: nothing orders the read before the vthread's later plain writes
 * to the same words (it may be woken through the kernel: an I/O
 * completion), so ThreadSanitizer is told to forget these reads. */
#ifdef WEFT_TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
static uint64_t stack_ld(const void *p) {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    uint64_t v = ld(p);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    return v;
}
#else
#define stack_ld ld
#endif

/* JSON-safe copy of a string. */
static void put_str_json(out *o, const char *s) {
    put(o, "\"");
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') put(o, "\\%c", ch);
        else if (ch < 0x20) put(o, "\\u%04x", ch);
        else put(o, "%c", ch);
    }
    put(o, "\"");
}

static void backtrace_of(out *o, weft_thread *t, const char *top) {
    uint64_t sp = ld(&t->sp);
    const char *lo = t->stk.lo;
    if (sp < (uint64_t)(uintptr_t)lo || sp + 64 > (uint64_t)(uintptr_t)top) return;
    const uint64_t *frame = (const uint64_t *)(uintptr_t)sp;
    uint64_t fp = stack_ld(&frame[6]), pc = stack_ld(&frame[7]);
    if (o->json) put(o, ",\"backtrace\":[");
    for (int depth = 0; depth < 32 && pc; depth++) {
        Dl_info di;
        const char *sym = NULL;
        uintptr_t off = 0;
        if (dladdr((void *)(uintptr_t)pc, &di) && di.dli_sname) {
            sym = di.dli_sname;
            off = (uintptr_t)pc - (uintptr_t)di.dli_saddr;
        }
        if (o->json) {
            put(o, "%s{\"pc\":\"0x%" PRIx64 "\"", depth ? "," : "", pc);
            if (sym) { put(o, ",\"symbol\":"); put_str_json(o, sym); }
            put(o, "}");
        } else if (sym) {
            put(o, "      at %s+0x%zx (0x%" PRIx64 ")\n", sym, (size_t)off, pc);
        } else {
            put(o, "      at 0x%" PRIx64 "\n", pc);
        }
        if (fp < (uint64_t)(uintptr_t)lo || fp + 16 > (uint64_t)(uintptr_t)top || (fp & 7)) break;
        const uint64_t *f = (const uint64_t *)(uintptr_t)fp;
        uint64_t nfp = stack_ld(&f[0]);
        pc = stack_ld(&f[1]);
        if (nfp <= fp) break; /* frames go up the stack */
        fp = nfp;
    }
    if (o->json) put(o, "]");
}

static void one(weft__stack *s, void *ctx) {
    out *o = ctx;
    weft_thread *t = (weft_thread *)s;
    int rs = __atomic_load_n((uint8_t *)&t->rstate, __ATOMIC_ACQUIRE);
    if (rs == WEFT__RS_FREE) return;
    char name[32];
    uint64_t nw[4];
    for (int i = 0; i < 4; i++) nw[i] = ld(&t->name_words[i]);
    memcpy(name, nw, 32);
    name[31] = 0;
    uint64_t id = ld(&t->id);
    const char *file = (const char *)(uintptr_t)ld(&t->block_file);
    int line = (int)__atomic_load_n((int *)&t->block_line, __ATOMIC_RELAXED);
    int64_t since = (int64_t)ld(&t->block_since), until = (int64_t)ld(&t->block_until);
    int why = __atomic_load_n(&t->why, __ATOMIC_RELAXED);
    unsigned gid = __atomic_load_n(&t->grp_id, __ATOMIC_RELAXED); /* its carrier group, 0: the default */
    unsigned scoped_n = atomic_load_explicit(&t->scoped_n, memory_order_relaxed);
    weft__carrier *c = (weft__carrier *)(uintptr_t)ld(&t->carrier);
    const char *top = (const char *)t;
    size_t res = weft__stack_resident(s);
    int running = rs == WEFT__RS_RUNNABLE && weft__carrier_running(c) == t;
    const char *state = rs == WEFT__RS_NEW ? "new" : running ? "running"
                      : rs == WEFT__RS_RUNNABLE ? "runnable" : rs == WEFT__RS_PARKED ? "parked"
                      : rs == WEFT__RS_DONE ? "done" : "?";
    o->count++;
    if (o->json) {
        put(o, "%s\n    {\"id\":%" PRIu64 ",\"name\":", o->first ? "" : ",", id);
        put_str_json(o, name);
        put(o, ",\"state\":\"%s\"", state);
        /* the scope it is a task of (R is held: tasks and scopes stay) */
        weft_task *task = (weft_task *)(uintptr_t)ld(&t->task);
        if (task) put(o, ",\"container\":\"scope#%" PRIu64 "\"", task->scope->id);
        else put(o, ",\"container\":\"root\"");
        if (gid) put(o, ",\"group\":%u", gid);
        /* how many scoped-value keys it sees bound -- never their values,
         * which may be secrets (a token, a user) */
        put(o, ",\"scoped_bindings\":%u", scoped_n);
        if (running) put(o, ",\"carrier\":%d", weft__carrier_index(c));
        if (rs == WEFT__RS_PARKED) {
            put(o, ",\"waiting_on\":\"%s\",\"since_ns\":%" PRId64, why_name(why), o->now - since);
            if (until) put(o, ",\"until_ns\":%" PRId64, until - o->now);
            if (file) { put(o, ",\"site\":"); char b[512]; snprintf(b, sizeof b, "%s:%d", file, line); put_str_json(o, b); }
        }
        put(o, ",\"stack_size\":%zu,\"stack_resident\":%zu", s->size, res);
        if (rs == WEFT__RS_PARKED) backtrace_of(o, t, top);
        put(o, "}");
        o->first = 0;
        return;
    }
    put(o, "#%" PRIu64 " \"%s\" ", id, name);
    if (gid) put(o, "[group %u] ", gid);
    weft_task *task = (weft_task *)(uintptr_t)ld(&t->task);
    if (task) put(o, "(scope #%" PRIu64 ") ", task->scope->id);
    if (scoped_n) put(o, "[%u scoped binding%s] ", scoped_n, scoped_n == 1 ? "" : "s");
    if (running) put(o, "running on carrier %d\n", weft__carrier_index(c));
    else if (rs == WEFT__RS_PARKED) {
        if (why == WEFT__WHY_SLEEP && until)
            put(o, "sleeping for %.3f s more (since %.3f s)", (double)(until - o->now) / 1e9,
                (double)(o->now - since) / 1e9);
        else
            put(o, "parked on %s since %.3f s", why_name(why), (double)(o->now - since) / 1e9);
        if (file) put(o, " at %s:%d", file, line);
        put(o, "\n");
    } else put(o, "%s\n", state);
    put(o, "    stack %zu KiB reserved, %zu KiB resident\n", s->size / 1024, res / 1024);
    if (rs == WEFT__RS_PARKED) backtrace_of(o, t, top);
}

/*
 * The tree of scopes, as Loom's JSON dump shows its thread containers: a
 * flat list, each with its parent, its owner and the vthreads running its
 * tasks; "root" holds every vthread outside any scope.  In text, one line
 * per scope, indented by depth.
 */
static const char *policy_name(int p) {
    return p == WEFT_SCOPE_FAIL_FAST ? "FAIL_FAST" : p == WEFT_SCOPE_FIRST_SUCCESS ? "FIRST_SUCCESS" : "ALL";
}

static int depth_of(const weft_scope *s) {
    int d = 0;
    for (; s->parent && d < 64; s = s->parent) d++;
    return d;
}

static void containers(out *o) {
    if (o->json) put(o, "\"containers\":[\n    {\"container\":\"root\",\"parent\":null,\"owner\":null}");
    int n = 0;
    for (weft_scope *s = weft__scopes_first(); s; s = s->live_next) n++;
    if (!o->json && n) put(o, "%d open scope%s:\n", n, n == 1 ? "" : "s");
    for (weft_scope *s = weft__scopes_first(); s; s = s->live_next) {
        int shut = __atomic_load_n(&s->shutdown, __ATOMIC_RELAXED);
        int running = __atomic_load_n(&s->running, __ATOMIC_RELAXED);
        if (o->json) {
            put(o, ",\n    {\"container\":\"scope#%" PRIu64 "\",\"parent\":", s->id);
            if (s->parent) put(o, "\"scope#%" PRIu64 "\"", s->parent->id);
            else put(o, "\"root\"");
            if (s->owner) put(o, ",\"owner\":%" PRIu64, s->owner_id);
            else put(o, ",\"owner\":\"platform thread\"");
            put(o, ",\"policy\":\"%s\",\"state\":\"%s\",\"tasks\":%d,\"running\":%d", policy_name(s->policy),
                shut ? "shutdown" : "open", s->ntasks, running);
            /* the opener's scoped-value bindings its forks inherit: a count */
            put(o, ",\"inherited_bindings\":%u", s->inherited);
            if (s->deadline) put(o, ",\"deadline_in_ns\":%" PRId64, s->deadline - o->now);
            put(o, ",\"threads\":[");
            int first = 1;
            for (weft_task *t = s->tasks; t; t = t->next) {
                if (!t->thread || atomic_load(&t->state) != WEFT_TASK_RUNNING) continue;
                put(o, "%s%" PRIu64, first ? "" : ",", weft_id(t->thread));
                first = 0;
            }
            put(o, "]}");
        } else {
            put(o, "%*sscope #%" PRIu64 " %s, owner %s", 2 + 2 * depth_of(s), "", s->id, policy_name(s->policy),
                s->owner ? "" : "a platform thread");
            if (s->owner) put(o, "#%" PRIu64, s->owner_id);
            put(o, ", %d task%s, %d running%s", s->ntasks, s->ntasks == 1 ? "" : "s", running, shut ? ", shut down" : "");
            if (s->inherited) put(o, ", %u inherited scoped binding%s", s->inherited, s->inherited == 1 ? "" : "s");
            if (s->deadline) put(o, ", deadline in %.3f s", (double)(s->deadline - o->now) / 1e9);
            put(o, "\n");
        }
    }
    if (o->json) put(o, "\n  ],\n  ");
}

/* Executors: one line (an object in JSON) each, with the counters the
 * articles' harnesses print. */
static void one_executor(const char *label, const weft_executor_stats *s, int shut, void *ctx) {
    out *o = ctx;
    if (o->json) {
        put(o, "%s\n    {\"kind\":", o->first ? "" : ",");
        put_str_json(o, label);
        put(o, ",\"shutdown\":%s,\"threads_started\":%" PRIu64 ",\"threads_live\":%" PRIu64
               ",\"threads_peak\":%" PRIu64 ",\"queued\":%" PRIu64 ",\"queued_peak\":%" PRIu64
               ",\"submitted\":%" PRIu64 ",\"completed\":%" PRIu64 ",\"rejected\":%" PRIu64
               ",\"cancelled\":%" PRIu64 "}",
            shut ? "true" : "false", s->threads_started, s->threads_live, s->threads_peak, s->queued,
            s->queued_peak, s->submitted, s->completed, s->rejected, s->cancelled);
        o->first = 0;
    } else {
        if (o->first) put(o, "executors:\n");
        o->first = 0;
        put(o,
            "  %s%s: threads started %" PRIu64 ", live %" PRIu64 ", peak %" PRIu64 "; queued %" PRIu64
            ", peak %" PRIu64 "; submitted %" PRIu64 ", completed %" PRIu64 ", rejected %" PRIu64
            ", cancelled %" PRIu64 "\n",
            label, shut ? " (shut down)" : "", s->threads_started, s->threads_live, s->threads_peak, s->queued,
            s->queued_peak, s->submitted, s->completed, s->rejected, s->cancelled);
    }
}

/* One carrier's line (or JSON object; first: no comma before it). */
static void one_carrier(out *o, const weft__carrier_view *vp, int first) {
    weft__carrier_view v = *vp;
    int k = v.index;
    const char *sys = v.stall == WEFT__STALL_PINNED ? weft__syscall_name(v.sysno) : NULL;
    char sysbuf[48];
    if (sys) snprintf(sysbuf, sizeof sysbuf, "%s", sys);
    else if (v.sysno >= 0) snprintf(sysbuf, sizeof sysbuf, "syscall %ld", v.sysno);
    else snprintf(sysbuf, sizeof sysbuf, "%s", v.sysno == -1 ? "the kernel" : "an unknown call");
    char gbuf[32];
    snprintf(gbuf, sizeof gbuf, " (group %u)", v.group);
    const char *role = v.group ? gbuf : !v.spare ? "" : v.active ? " (spare, compensating)" : " (spare, retired)";
    if (o->json) {
        put(o, "%s\n    {\"index\":%d,\"spare\":%s,\"active\":%s,\"state\":\"%s\"", first ? "" : ",", k,
            v.spare ? "true" : "false", v.active ? "true" : "false",
            v.stall == WEFT__STALL_PINNED ? "pinned" : v.stall == WEFT__STALL_HOG ? "hog"
            : v.running ? "running" : v.idle ? "idle" : "scheduling");
        if (v.group) put(o, ",\"group\":%u", v.group);
        if (v.running) put(o, ",\"running\":%" PRIu64, v.running);
        if (v.stall) {
            put(o, ",\"vthread\":%" PRIu64 ",\"name\":", v.vid);
            put_str_json(o, v.vname);
            put(o, ",\"since_ns\":%" PRId64, o->now - v.since);
            if (v.stall == WEFT__STALL_PINNED) {
                put(o, ",\"syscall\":");
                put_str_json(o, sysbuf);
                put(o, ",\"syscall_nr\":%ld", v.sysno);
            }
        }
        put(o, "}");
    } else if (v.stall == WEFT__STALL_PINNED) {
        put(o, "  carrier %d%s: pinned in %s since %.3f s by vthread #%" PRIu64 " \"%s\"\n", k, role, sysbuf,
            (double)(o->now - v.since) / 1e9, v.vid, v.vname);
    } else if (v.stall == WEFT__STALL_HOG) {
        put(o, "  carrier %d%s: held by vthread #%" PRIu64 " \"%s\" for %.0f ms\n", k, role, v.vid, v.vname,
            (double)(o->now - v.since) / 1e6);
    } else if (v.running) {
        put(o, "  carrier %d%s: running vthread #%" PRIu64 "\n", k, role, v.running);
    } else {
        put(o, "  carrier %d%s: %s\n", k, role, v.idle ? "idle" : "scheduling");
    }
}

/* The carriers: what each is doing, the monitor's stalls ("pinned in
 * <syscall> since <t> by vthread #N", "held by vthread #N for X ms") and
 * its totals (weft.h, "The monitor"). */
static void carriers(out *o, const weft_stats *st) {
    int n = weft__carriers_all();
    if (o->json)
        put(o, "\"pinned_events\":%" PRIu64 ",\"hog_events\":%" PRIu64 ",\"spares\":%" PRIu64
               ",\"compensating\":%" PRIu64 ",\n  \"carrier_states\":[",
            st->pinned, st->hogs, st->spares, st->compensating);
    else
        put(o, "carriers: %" PRIu64 " + %" PRIu64 " spare%s (%" PRIu64 " compensating); monitor: %" PRIu64
               " pinned, %" PRIu64 " hog events\n",
            st->carriers, st->spares, st->spares == 1 ? "" : "s", st->compensating, st->pinned, st->hogs);
    int listed = 0;
    for (int k = 0; k < n; k++) {
        weft__carrier_view v;
        if (weft__carrier_view_get(k, &v) < 0) break;
        one_carrier(o, &v, !listed++);
    }
    /* the carrier groups' carriers, at their own indices (weft.h, "Carrier groups") */
    for (int k = n; k < WEFT__MAX_CARRIERS; k++) {
        weft__carrier_view v;
        if (weft__carrier_view_get(k, &v) == 0) one_carrier(o, &v, !listed++);
    }
    if (o->json) put(o, "%s],\n  ", listed ? "\n  " : "");
}

/* A carrier group: its name, carriers and counters (weft_group_stats). */
static void one_group(const weft_group_stats *g, const int *idx, int n, void *ctx) {
    out *o = ctx;
    if (o->json) {
        put(o, "%s\n    {\"id\":%u,\"name\":", o->first ? "" : ",", g->id);
        put_str_json(o, g->name);
        put(o, ",\"compute\":%s,\"carriers\":[", g->compute ? "true" : "false");
        for (int i = 0; i < n; i++) put(o, "%s%d", i ? "," : "", idx[i]);
        put(o, "],\"live\":%" PRIu64 ",\"started\":%" PRIu64 ",\"runnable\":%" PRIu64 ",\"switches\":%" PRIu64
               ",\"steals\":%" PRIu64 "}",
            g->live, g->started, g->runnable, g->switches, g->steals);
    } else {
        put(o, "  group %u \"%s\"%s: %d carrier%s [", g->id, g->name, g->compute ? " (compute)" : "", g->carriers,
            g->carriers == 1 ? "" : "s");
        for (int i = 0; i < n; i++) put(o, "%s%d", i ? " " : "", idx[i]);
        if (g->id)
            put(o, "], %" PRIu64 " live, %" PRIu64 " started, ", g->live, g->started);
        else
            put(o, "], ");
        put(o, "%" PRIu64 " runnable, %" PRIu64 " switches, %" PRIu64 " steals\n", g->runnable, g->switches,
            g->steals);
    }
    o->first = 0;
}

int weft_dump(int fd, int format) {
    if (format != WEFT_DUMP_TEXT && format != WEFT_DUMP_JSON) return -EINVAL;
    int r;
    out *o = calloc(1, sizeof *o);
    if (!o) return -ENOMEM;
    o->fd = fd;
    o->json = format == WEFT_DUMP_JSON;
    o->first = 1;
    o->now = weft_now();
    weft_stats st;
    weft_stats_get(&st);
    if (o->json)
        put(o, "{\"weft_dump\":{\"time_ns\":%" PRId64 ",\"carriers\":%" PRIu64 ",\"live\":%" PRIu64 ",",
            o->now, st.carriers, st.live);
    else
        put(o, "weft thread dump: %" PRIu64 " live vthreads on %" PRIu64 " carriers\n", st.live, st.carriers);
    carriers(o, &st);
    if (o->json) put(o, "\"groups\":[");
    else put(o, "carrier groups:\n");
    o->first = 1;
    weft__groups_each(one_group, o);
    if (o->json) put(o, "%s],\n  ", o->first ? "" : "\n  ");
    o->first = 1;
    if (o->json) put(o, "\"executors\":[");
    weft__executors_each(one_executor, o);
    if (o->json) put(o, "%s],\n  ", o->first ? "" : "\n  ");
    o->first = 1;
    weft__scopes_lock(); /* scopes and their tasks stay while we look */
    containers(o);
    if (o->json) put(o, "\"vthreads\":[");
    weft__stacks_walk(one, o);
    weft__scopes_unlock();
    if (o->json) put(o, "\n  ]}}\n");
    else put(o, "end of dump: %" PRIu64 " vthreads listed\n", o->count);
    flush(o);
    r = o->err;
    free(o);
    return r;
}

/* ---- dump on a signal --------------------------------------------------- */

/*
 * The handler writes one byte to a pipe (async-signal-safe); a platform
 * thread blocked on the pipe's other end writes the dump.  The thread and
 * the pipe live as long as the process (started once).  A fork child has
 * neither the thread nor a pipe of its own (it shares the parent's: its
 * signal would make the parent dump the parent): its atfork handler closes
 * its copies, and its next weft_init starts them again (weft__dump_env).
 */
static struct {
    pthread_mutex_t lock;
    int pipe[2];
    _Atomic int signo, fd, format;
    int started;
    struct sigaction old;
} SQ = {.lock = PTHREAD_MUTEX_INITIALIZER, .pipe = {-1, -1}};

static void sq_handler(int sig) {
    int e = errno;
    char b = 1;
    if (write(SQ.pipe[1], &b, 1) < 0) { /* a full pipe: a dump is coming anyway */
    }
    errno = e;
}

static void *sq_main(void *unused) {
    (void)unused;
    char b[64];
    for (;;) {
        ssize_t n = read(SQ.pipe[0], b, sizeof b);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return NULL;
        /* under the lock: once weft_dump_on_signal returns, no dump is
         * still being written to the fd it replaced */
        pthread_mutex_lock(&SQ.lock);
        if (atomic_load(&SQ.signo)) weft_dump(atomic_load(&SQ.fd), atomic_load(&SQ.format));
        pthread_mutex_unlock(&SQ.lock);
    }
}

static void sq_fork_child(void) {
    SQ.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    if (!SQ.started) return;
    int r = SQ.pipe[0], w = SQ.pipe[1];
    SQ.pipe[1] = -1; /* the handler, still installed, writes nowhere until re-armed */
    SQ.pipe[0] = -1;
    close(r);
    close(w);
    SQ.started = 0;
}

static void sq_register_atfork(void) { pthread_atfork(NULL, NULL, sq_fork_child); }

int weft_dump_on_signal(int signo, int fd, int format) {
    if (format != WEFT_DUMP_TEXT && format != WEFT_DUMP_JSON) return -EINVAL;
    if (signo < 0 || signo >= 65 || signo == SIGKILL || signo == SIGSTOP || signo == SIGSEGV) return -EINVAL;
    pthread_mutex_lock(&SQ.lock);
    int r = 0;
    int old = atomic_load(&SQ.signo);
    if (old && old != signo) sigaction(old, &SQ.old, NULL);
    atomic_store(&SQ.signo, 0);
    if (signo) {
        if (!SQ.started) {
            static pthread_once_t once = PTHREAD_ONCE_INIT;
            pthread_once(&once, sq_register_atfork);
            if (pipe2(SQ.pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
                r = -errno;
                goto out;
            }
            /* the reader blocks: only the write end is non-blocking */
            fcntl(SQ.pipe[0], F_SETFL, 0);
            pthread_t th;
            pthread_attr_t a;
            pthread_attr_init(&a);
            pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
            pthread_attr_setstacksize(&a, 256 * 1024);
            /* the dump thread takes no signals itself */
            sigset_t all, prev;
            sigfillset(&all);
            pthread_sigmask(SIG_SETMASK, &all, &prev);
            int e = pthread_create(&th, &a, sq_main, NULL);
            pthread_sigmask(SIG_SETMASK, &prev, NULL);
            pthread_attr_destroy(&a);
            if (e) {
                close(SQ.pipe[0]);
                close(SQ.pipe[1]);
                r = -e;
                goto out;
            }
            pthread_setname_np(th, "weft-dump");
            SQ.started = 1;
        }
        atomic_store(&SQ.fd, fd);
        atomic_store(&SQ.format, format);
        if (old != signo) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = sq_handler;
            sa.sa_flags = SA_RESTART;
            sigemptyset(&sa.sa_mask);
            if (sigaction(signo, &sa, &SQ.old) < 0) {
                r = -errno;
                goto out;
            }
        }
        atomic_store(&SQ.signo, signo);
    }
out:
    pthread_mutex_unlock(&SQ.lock);
    return r;
}

/* From weft_init: WEFT_DUMP_ON_SIGQUIT=text|json; in a fork child, what
 * the parent had armed. */
void weft__dump_env(void) {
    const char *v = getenv("WEFT_DUMP_ON_SIGQUIT");
    int armed = atomic_load(&SQ.signo);
    if (armed && !SQ.started && weft_dump_on_signal(armed, atomic_load(&SQ.fd), atomic_load(&SQ.format)) < 0)
        fprintf(stderr, "weft: cannot re-arm the dump on signal %d after fork\n", armed);
    if (!v || !*v || !strcmp(v, "0")) return;
    int fmt = !strcmp(v, "json") ? WEFT_DUMP_JSON : WEFT_DUMP_TEXT;
    if (weft_dump_on_signal(SIGQUIT, 2, fmt) < 0) fprintf(stderr, "weft: WEFT_DUMP_ON_SIGQUIT: cannot install the handler\n");
}
