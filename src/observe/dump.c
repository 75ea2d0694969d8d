/*
 * The thread dump.
 *
 * There is no registry of vthreads to keep up to date on the spawn path:
 * every vthread lives in a stack slot, so the dump walks the slabs
 * (weft__stacks_walk) and reads each slot's descriptor.  The vthreads keep
 * running meanwhile, so every field is read with relaxed atomic loads and
 * anything pointing into a stack is bounds-checked before it is followed:
 * the dump is a consistent-enough snapshot, never a crash.  An age ("parked
 * since", a stall's "since") is taken from the clock read after the field
 * it is measured from, not from the time at the dump's start: a vthread
 * that parks while the walk goes on would otherwise show a negative age.
 *
 * For a parked vthread the saved stack pointer leads to the registers that
 * weft__ctx_switch pushed (switch_x86_64.S); symbolize.c unwinds from
 * there with libdw's DWARF unwinder (the frame-pointer chain where libdw
 * cannot) and names every frame: function+offset, file:line, the functions
 * inlined there, module+offset.  Names are looked up only here, while the
 * dump is written, under the symbolizer's lock (concurrent dumps take
 * turns), never in a signal handler: the dump on SIGQUIT is written by a
 * thread of its own (below).
 *
 * The call site.  The blocking calls behind macros record __FILE__ and
 * __LINE__ (weft.h); the io calls record their return address, fd and
 * operation (io.c, exec: three stores); any other wait is placed by its
 * stack: the first frame outside weft's own sources.  So every parked
 * vthread shows which call it waits in ("call") and where that was made
 * ("site", "site_function").
 *
 * Running vthreads show their carrier but no stack: a carrier's registers
 * can only be had by stopping it with a signal, which would end a foreign
 * system call early (EINTR), and a computing vthread's stack changes
 * under the reader.  A carrier the monitor found pinned shows the site of
 * the blocking call it is stuck in, as the monitor found and named it
 * (monitor.c, "The call site"; libdw's names and lines).
 *
 * Groups.  After the full list, the vthreads are grouped by state, wait,
 * call, site and stack, largest group first ("412 vthreads parked on io in
 * weft_recv at httpd.c:318 (conn_main)"), as Go's goroutine profile with
 * debug=1 does; JSON has both, "vthreads" and "stacks".
 *
 * Scoped values: each vthread shows how many keys it sees bound
 * (weft_thread.scoped_n, kept by the vthread as it binds and unbinds: the
 * frames themselves, on its stack, are not walked) and each scope how many
 * its forks inherit; the values never appear (they may be secrets).
 */
#define _GNU_SOURCE
#include "../scope/scope.h"
#include "../exec/exec.h"
#include "../io/io.h"
#include "observe.h"
#include "symbolize.h"

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
#include <sys/syscall.h>
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
    /* every vthread listed, kept for the groups at the end */
    struct vrec *recs;
    size_t nrec, caprec;
    uintptr_t *pool; /* their stacks' pcs */
    size_t npool, cappool;
    int short_of_memory; /* some vthreads left out of the groups */
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
                                                      "latch", "once",   "channel send", "channel receive", "select", "future", "scope", "blocking", "executor", "async completions",
                                                      "pthread mutex", "pthread condition variable", "POSIX semaphore",
                                                      "pthread rwlock"};
    return why >= 0 && why < WEFT__WHY_COUNT ? names[why] : "?";
}

static uint64_t ld(const void *p) { return __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED); }

/* How long ago `since` was, read from the clock after `since` itself was
 * read: o->now is taken once, at the start, and a vthread that parks (or a
 * carrier that stalls) while the dump walks on has a later `since` than
 * that -- "parked since -0.047 s".  Never below 0. */
static int64_t age_of(int64_t since) {
    int64_t now = weft_now();
    return now > since ? now - since : 0;
}

/* How long is left until `until` (a sleeper's wake-up): 0 once it is due. */
static int64_t left_of(int64_t until) {
    int64_t now = weft_now();
    return until > now ? until - now : 0;
}

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

/* ---- stacks, call sites, groups ---------------------------------------- */

#define MAX_FRAMES 48

/* What the dump knows of one vthread, kept for the groups at the end. */
typedef struct vrec {
    uint64_t id;
    const char *state;
    int why;          /* parked: WEFT__WHY_*, else -1 */
    int op;           /* io: IOR_*, else -1 */
    const char *call; /* the blocking call (a function's name or a table's) */
    int trap;         /* parked inside a trapped system call: its number + 1, else 0 */
    const char *sfile; /* its call site */
    int sline;
    const char *sfunc;
    size_t at;        /* its pcs in the dump's pool */
    int n;
} vrec;

static const char *io_call_name(int op) {
    static const char *names[] = {
        [IOR_READ] = "weft_read",       [IOR_WRITE] = "weft_write",   [IOR_PREAD] = "weft_pread",
        [IOR_PWRITE] = "weft_pwrite",   [IOR_READV] = "weft_readv",   [IOR_WRITEV] = "weft_writev",
        [IOR_RECV] = "weft_recv",       [IOR_SEND] = "weft_send",     [IOR_ACCEPT] = "weft_accept",
        [IOR_CONNECT] = "weft_connect", [IOR_POLL] = "weft_poll",     [IOR_FSYNC] = "weft_fsync",
        [IOR_PREADV] = "weft_preadv",   [IOR_PWRITEV] = "weft_pwritev", [IOR_FDATASYNC] = "weft_fdatasync",
        [IOR_FUTEX_WAIT] = "futex",     [IOR_CLOSE] = "weft_close",
    };
    return op >= 0 && op < (int)(sizeof names / sizeof names[0]) && names[op] ? names[op] : "I/O";
}

/* The call a wait of kind why comes from, when its stack does not say. */
static const char *why_call_name(int why) {
    static const char *names[WEFT__WHY_COUNT] = {
        "", "weft_sleep", "weft_join", "weft_park", "I/O", "weft_mutex_lock", "weft_cond_wait",
        "weft_sem_acquire", "weft_rwlock", "weft_latch_await", "weft_once", "weft_chan_send", "weft_chan_recv",
        "weft_select", "weft_future_get", "weft_scope_join", "weft_blocking", "an executor's wait",
        "async completions", "pthread_mutex_lock", "pthread_cond_wait", "sem_wait", "pthread_rwlock"};
    return why >= 0 && why < WEFT__WHY_COUNT ? names[why] : "?";
}

/* A weft function's name as the user wrote the call: "weft__mutex_lock_at"
 * (behind the weft_mutex_lock macro) is weft_mutex_lock. */
static const char *call_label(const char *raw, char *buf, size_t cap) {
    if (!raw || strncmp(raw, "weft__", 6)) return raw ? raw : "?";
    snprintf(buf, cap, "weft_%s", raw + 6);
    size_t l = strlen(buf);
    if (l > 8 && !strcmp(buf + l - 3, "_at")) buf[l - 3] = 0;
    return buf;
}

static void put_hex_json(out *o, const char *key, uintptr_t v) { put(o, ",\"%s\":\"0x%" PRIxPTR "\"", key, v); }

/* The frames of pcs: in JSON, objects (a comma before each but the first);
 * in text, one "at" line each. */
static void put_frames(out *o, const uintptr_t *pcs, int n) {
    int first = 1;
    for (int i = 0; i < n; i++) {
        const weft__sym *s = weft__sym_get(pcs[i]);
        if (!s->n) { /* unresolved: the address, and where it lies */
            if (o->json) {
                put(o, "%s{\"pc\":\"0x%" PRIxPTR "\"", first ? "" : ",", pcs[i]);
                if (s->module) {
                    put(o, ",\"module\":");
                    put_str_json(o, s->module);
                    put_hex_json(o, "module_offset", s->mod_off);
                }
                put(o, "}");
            } else if (s->module) {
                put(o, "      at 0x%" PRIxPTR " (%s+0x%" PRIxPTR ")\n", pcs[i], s->module, s->mod_off);
            } else {
                put(o, "      at 0x%" PRIxPTR "\n", pcs[i]);
            }
            first = 0;
            continue;
        }
        for (int k = 0; k < s->n; k++) {
            const weft__sym_frame *f = &s->f[k];
            if (o->json) {
                put(o, "%s{\"pc\":\"0x%" PRIxPTR "\",\"function\":", first ? "" : ",", pcs[i]);
                if (f->func) put_str_json(o, f->func);
                else put(o, "null");
                if (!f->inlined && f->func) put_hex_json(o, "offset", f->off);
                if (f->file) {
                    put(o, ",\"file\":");
                    put_str_json(o, f->file);
                    put(o, ",\"line\":%d", f->line);
                }
                if (s->module) {
                    put(o, ",\"module\":");
                    put_str_json(o, s->module);
                    put_hex_json(o, "module_offset", s->mod_off);
                }
                if (f->inlined) put(o, ",\"inlined\":true");
                put(o, "}");
            } else {
                put(o, "      at %s", f->func ? f->func : "??");
                if (!f->inlined && f->func) put(o, "+0x%" PRIxPTR, f->off);
                if (f->file) put(o, " (%s:%d)", f->file, f->line);
                if (f->inlined) put(o, " [inlined]\n");
                else if (s->module) put(o, " [%s+0x%" PRIxPTR "]\n", s->module, s->mod_off);
                else put(o, "\n");
            }
            first = 0;
        }
    }
}

/* Where a parked vthread's blocking call was made, and which call it is:
 * the site its macro recorded (__FILE__:__LINE__), unless that is inside
 * weft; else the io call's return address (io.c records it); else the
 * first frame of its stack outside weft's own code.  The call: an io
 * operation's name; else the weft function that frame called (a hooked
 * libc function's name, say); else the kind of wait's. */
/* The frame of s a site names: its innermost, unless that is a system
 * header's inline function -- _FORTIFY_SOURCE's read wrapper
 * (bits/unistd.h), say -- then the first one out of them, the program's
 * own line that called it. */
static const weft__sym_frame *user_frame(const weft__sym *s) {
    for (int i = 0; i < s->n; i++) {
        const char *f = s->f[i].file;
        if (!f || (strncmp(f, "/usr/include/", 13) != 0 && strncmp(f, "/usr/lib/gcc/", 13) != 0)) return &s->f[i];
    }
    return &s->f[0];
}

static void site_of(vrec *r, weft_thread *t, const uintptr_t *pcs, int n, int trapped) {
    const char *bf = (const char *)(uintptr_t)ld(&t->block_file);
    int bl = (int)__atomic_load_n((int *)&t->block_line, __ATOMIC_RELAXED);
    /* the first frame outside weft -- and, for a trapped call, outside the
     * C library too: stdio's read under fgets is the program's fgets */
    int outside = -1;
    for (int i = 0; i < n && outside < 0; i++) {
        const weft__sym *s = weft__sym_get(pcs[i]);
        if (!s->weft && s->n && !(trapped && weft__pc_in_libc(pcs[i]))) outside = i;
    }
    r->sfile = NULL;
    r->sline = 0;
    r->sfunc = NULL;
    const weft__sym *bs = NULL;
    if (r->why == WEFT__WHY_IO) {
        uintptr_t bpc = (uintptr_t)ld(&t->block_pc);
        if (bpc) bs = weft__sym_get(bpc);
        if (bs && (bs->weft || !bs->n)) bs = NULL;
    }
    if (bf && !weft__sym_is_weft_file(bf)) {
        r->sfile = bf;
        r->sline = bl;
        if (outside >= 0) r->sfunc = user_frame(weft__sym_get(pcs[outside]))->func;
    } else if (bs) {
        const weft__sym_frame *f = user_frame(bs);
        r->sfile = f->file;
        r->sline = f->line;
        r->sfunc = f->func;
    } else if (outside >= 0) {
        const weft__sym_frame *f = user_frame(weft__sym_get(pcs[outside]));
        r->sfile = f->file;
        r->sline = f->line;
        r->sfunc = f->func;
    } else if (bf) {
        r->sfile = bf;
        r->sline = bl;
    }
    if (r->op >= 0) {
        r->call = io_call_name(r->op);
    } else {
        r->call = why_call_name(r->why);
        if (outside > 0) {
            const weft__sym *c = weft__sym_get(pcs[outside - 1]);
            const char *fn = c->n ? c->f[c->n - 1].func : NULL;
            if (fn && !strncmp(fn, "weft_", 5)) r->call = fn;
        }
    }
}
static void put_site_json(out *o, const vrec *r) {
    if (r->sfile) {
        put(o, ",\"site\":");
        char b[600];
        snprintf(b, sizeof b, "%s:%d", r->sfile, r->sline);
        put_str_json(o, b);
    }
    if (r->sfunc) {
        put(o, ",\"site_function\":");
        put_str_json(o, r->sfunc);
    }
}

static void put_site_text(out *o, const vrec *r) {
    if (r->sfile) put(o, " at %s:%d", r->sfile, r->sline);
    if (r->sfunc) put(o, " (%s)", r->sfunc);
}

/* Keeps r (and its n pcs) for the groups. */
static void keep(out *o, const vrec *r, const uintptr_t *pcs, int n) {
    if (o->nrec == o->caprec) {
        size_t cap = o->caprec ? 2 * o->caprec : 256;
        vrec *v = realloc(o->recs, cap * sizeof *v);
        if (!v) goto short_of_memory;
        o->recs = v;
        o->caprec = cap;
    }
    if (o->npool + (size_t)n > o->cappool) {
        size_t cap = o->cappool ? 2 * o->cappool : 4096;
        while (cap < o->npool + (size_t)n) cap *= 2;
        uintptr_t *p = realloc(o->pool, cap * sizeof *p);
        if (!p) goto short_of_memory;
        o->pool = p;
        o->cappool = cap;
    }
    o->recs[o->nrec] = *r;
    o->recs[o->nrec].at = o->npool;
    if (n) memcpy(o->pool + o->npool, pcs, (size_t)n * sizeof *pcs);
    o->npool += (size_t)n;
    o->nrec++;
    return;
short_of_memory:
    o->short_of_memory = 1;
}

/*
 * Foreign code.  What the trap is making for a vthread (sched.h: trap_call,
 * trap_pc, trap_arg, written by hook/trap.c): the call's name, what its
 * first argument is to it (a futex word's address, an fd, a pid), and the
 * program's syscall instruction it came from -- in the C library mostly
 * ("__lll_lock_wait_private+0x2b (libc.so.6)"), the stack showing whose
 * call it made.
 */
typedef struct trapped {
    int call; /* number + 1; 0: none */
    uint64_t arg;
    uintptr_t pc;
} trapped;

static const char *trap_call_name(int call, char *buf, size_t cap) {
    const char *n = weft__syscall_name(call - 1);
    if (n) return n;
    snprintf(buf, cap, "system call %d", call - 1);
    return buf;
}

/* What the first argument is, by call: "futex", "fd", "pid" or NULL. */
static const char *trap_arg_kind(int call) {
    switch (call - 1) {
    case SYS_futex: return "futex";
    case SYS_wait4: return "pid";
    case SYS_read: case SYS_write: case SYS_readv: case SYS_writev: case SYS_pread64: case SYS_pwrite64:
    case SYS_recvfrom: case SYS_sendto: case SYS_recvmsg: case SYS_sendmsg: case SYS_accept: case SYS_accept4:
    case SYS_connect: case SYS_epoll_pwait:
#ifdef SYS_epoll_wait
    case SYS_epoll_wait:
#endif
        return "fd";
    default: return NULL;
    }
}

static void put_trapped(out *o, const trapped *tr) {
    char nb[32];
    const char *name = trap_call_name(tr->call, nb, sizeof nb), *kind = trap_arg_kind(tr->call);
    const weft__sym *s = tr->pc ? weft__sym_get(tr->pc) : NULL;
    const weft__sym_frame *f = s && s->n ? &s->f[s->n - 1] : NULL;
    const char *mod = s && s->module ? strrchr(s->module, '/') : NULL;
    mod = mod ? mod + 1 : s ? s->module : NULL;
    if (o->json) {
        put(o, ",\"trapped\":{\"call\":");
        put_str_json(o, name);
        put(o, ",\"nr\":%d", tr->call - 1);
        if (kind && !strcmp(kind, "futex")) put_hex_json(o, "futex", (uintptr_t)tr->arg);
        else if (kind) put(o, ",\"%s\":%d", kind, (int)tr->arg);
        put_hex_json(o, "pc", tr->pc);
        if (f && f->func) {
            put(o, ",\"function\":");
            put_str_json(o, f->func);
            put_hex_json(o, "offset", f->off);
        }
        if (s && s->module) {
            put(o, ",\"module\":");
            put_str_json(o, s->module);
        }
        put(o, "}");
        return;
    }
    put(o, " in trapped %s (", name);
    if (kind && !strcmp(kind, "futex")) put(o, "futex 0x%" PRIx64 ", ", tr->arg);
    else if (kind) put(o, "%s %d, ", kind, (int)tr->arg);
    if (f && f->func) put(o, "from %s+0x%" PRIxPTR, f->func, f->off);
    else put(o, "from 0x%" PRIxPTR, tr->pc);
    if (mod) put(o, " in %s", mod);
    put(o, ")");
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
    int64_t since = (int64_t)ld(&t->block_since), until = (int64_t)ld(&t->block_until);
    int why = __atomic_load_n(&t->why, __ATOMIC_RELAXED);
    unsigned gid = __atomic_load_n(&t->grp_id, __ATOMIC_RELAXED); /* its carrier group, 0: the default */
    unsigned scoped_n = atomic_load_explicit(&t->scoped_n, memory_order_relaxed);
    int own_tls = __atomic_load_n(&t->tls, __ATOMIC_RELAXED) != NULL; /* its own TLS block (arch/tls.c) */
    int foreign = atomic_load_explicit(&t->foreign, memory_order_relaxed);
    uint64_t ntrapped = atomic_load_explicit(&t->trap_count, memory_order_relaxed);
    trapped tr = {.call = atomic_load_explicit(&t->trap_call, memory_order_acquire)};
    if (tr.call) {
        tr.pc = (uintptr_t)atomic_load_explicit(&t->trap_pc, memory_order_relaxed);
        tr.arg = atomic_load_explicit(&t->trap_arg, memory_order_relaxed);
    }
    /* acquire: c may be a spare the monitor made after the walk began
     * (sched.c's enter) */
    weft__carrier *c = __atomic_load_n(&t->carrier, __ATOMIC_ACQUIRE);
    size_t res = weft__stack_resident(s);
    int running = rs == WEFT__RS_RUNNABLE && weft__carrier_running(c) == t;
    const char *state = rs == WEFT__RS_NEW ? "new" : running ? "running"
                      : rs == WEFT__RS_RUNNABLE ? "runnable" : rs == WEFT__RS_PARKED ? "parked"
                      : rs == WEFT__RS_DONE ? "done" : "?";
    int parked = rs == WEFT__RS_PARKED;
    uintptr_t pcs[MAX_FRAMES];
    int n = parked ? weft__sym_stack(t, pcs, MAX_FRAMES) : 0;
    vrec r = {.id = id, .state = state, .why = parked ? why : -1, .op = -1};
    int fd = -1;
    if (parked && why == WEFT__WHY_IO && ld(&t->block_pc)) {
        r.op = atomic_load_explicit(&t->block_op, memory_order_relaxed);
        fd = atomic_load_explicit(&t->block_fd, memory_order_relaxed);
    }
    if (!parked) tr.call = 0; /* (shown for a wait only) */
    if (parked) site_of(&r, t, pcs, n, tr.call != 0);
    if (tr.call) { /* the trapped call is the call it waits in */
        /* a futex wait or wait4 is made by a blocking-pool thread (trap.c):
         * "io" is how the vthread waits for that thread, not what for */
        if (why == WEFT__WHY_IO && (tr.call - 1 == SYS_futex || tr.call - 1 == SYS_wait4)) {
            why = WEFT__WHY_BLOCKING;
            r.why = why;
            r.op = -1;
        }
        r.trap = tr.call;
        r.call = weft__syscall_name(tr.call - 1);
        if (!r.call) r.call = "a system call";
    }
    char cb[96];
    const char *call = parked ? call_label(r.call, cb, sizeof cb) : NULL;
    o->count++;
    if (o->json) {
        put(o, "%s\n    {\"id\":%" PRIu64 ",\"name\":", o->first ? "" : ",", id);
        put_str_json(o, name);
        put(o, ",\"state\":\"%s\"", state);
        /* the scope it is a task of (its id: the record may go as it ends) */
        uint64_t tsc = atomic_load_explicit(&t->task_scope, memory_order_relaxed);
        if (tsc) put(o, ",\"container\":\"scope#%" PRIu64 "\"", tsc);
        else put(o, ",\"container\":\"root\"");
        if (gid) put(o, ",\"group\":%u", gid);
        /* how many scoped-value keys it sees bound -- never their values,
         * which may be secrets (a token, a user) */
        put(o, ",\"scoped_bindings\":%u", scoped_n);
        if (own_tls) put(o, ",\"own_tls\":true");
        if (foreign) put(o, ",\"foreign\":true");
        if (ntrapped) put(o, ",\"trapped_calls\":%" PRIu64, ntrapped);
        if (running) put(o, ",\"carrier\":%d", weft__carrier_index(c));
        if (parked) {
            put(o, ",\"waiting_on\":\"%s\",\"call\":", why_name(why));
            put_str_json(o, call);
            if (r.op >= 0) put(o, ",\"fd\":%d", fd);
            if (tr.call) put_trapped(o, &tr);
            put(o, ",\"since_ns\":%" PRId64, age_of(since));
            if (until) put(o, ",\"until_ns\":%" PRId64, left_of(until));
            put_site_json(o, &r);
        }
        put(o, ",\"stack_size\":%zu,\"stack_resident\":%zu", s->size, res);
        if (parked) {
            put(o, ",\"backtrace\":[");
            put_frames(o, pcs, n);
            put(o, "]");
        }
        put(o, "}");
        o->first = 0;
    } else {
        put(o, "#%" PRIu64 " \"%s\" ", id, name);
        if (gid) put(o, "[group %u] ", gid);
        uint64_t tsc = atomic_load_explicit(&t->task_scope, memory_order_relaxed);
        if (tsc) put(o, "(scope #%" PRIu64 ") ", tsc);
        if (scoped_n) put(o, "[%u scoped binding%s] ", scoped_n, scoped_n == 1 ? "" : "s");
        if (own_tls) put(o, "[own TLS] ");
        if (foreign) put(o, "[foreign] ");
        if (ntrapped) put(o, "[%" PRIu64 " trapped call%s] ", ntrapped, ntrapped == 1 ? "" : "s");
        if (running) put(o, "running on carrier %d\n", weft__carrier_index(c));
        else if (parked) {
            if (why == WEFT__WHY_SLEEP && until)
                put(o, "sleeping for %.3f s more (asleep for %.3f s)", (double)left_of(until) / 1e9,
                    (double)age_of(since) / 1e9);
            else
                put(o, "parked on %s for %.3f s", why_name(why), (double)age_of(since) / 1e9);
            if (tr.call) put_trapped(o, &tr);
            else put(o, " in %s", call);
            if (r.op >= 0) put(o, " (fd %d)", fd);
            put_site_text(o, &r);
            put(o, "\n");
        } else put(o, "%s\n", state);
        put(o, "    stack %zu KiB reserved, %zu KiB resident\n", s->size / 1024, res / 1024);
        if (parked) put_frames(o, pcs, n);
    }
    r.n = n;
    keep(o, &r, pcs, n);
}

/*
 * Groups: the vthreads whose state, wait, call, site and stack are the
 * same, largest group first, as Go's goroutine profile (debug=1) prints
 * them: "412 vthreads parked on io in weft_recv at .../httpd.c:318
 * (conn_main)", the stack once, and the vthreads' ids.  Made from what the
 * walk kept (every vthread listed, unless memory ran short: then said).
 */
static int str_cmp(const char *a, const char *b) {
    if (a == b) return 0;
    if (!a) return -1;
    if (!b) return 1;
    return strcmp(a, b);
}

/* equal but for the id: the same group */
static int rec_key_cmp(const vrec *a, const vrec *b, const uintptr_t *pool) {
    int d;
    if ((d = strcmp(a->state, b->state))) return d;
    if (a->why != b->why) return a->why < b->why ? -1 : 1;
    if (a->op != b->op) return a->op < b->op ? -1 : 1;
    if ((d = str_cmp(a->call, b->call))) return d;
    if (a->trap != b->trap) return a->trap < b->trap ? -1 : 1;
    if ((d = str_cmp(a->sfile, b->sfile))) return d;
    if (a->sline != b->sline) return a->sline < b->sline ? -1 : 1;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    for (int i = 0; i < a->n; i++) {
        uintptr_t x = pool[a->at + (size_t)i], y = pool[b->at + (size_t)i];
        if (x != y) return x < y ? -1 : 1;
    }
    return 0;
}

static int rec_cmp(const void *x, const void *y, void *pool) {
    const vrec *a = x, *b = y;
    int d = rec_key_cmp(a, b, pool);
    return d ? d : a->id < b->id ? -1 : a->id > b->id;
}

typedef struct grp {
    size_t first, count;
} grp;

static int grp_cmp(const void *x, const void *y) {
    const grp *a = x, *b = y;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    return a->first < b->first ? -1 : a->first > b->first;
}

#define GROUP_IDS_TEXT 16 /* ids listed per group in text (JSON: all) */

static void groups(out *o) {
    size_t ng = 0;
    grp *g = NULL;
    if (o->nrec) {
        qsort_r(o->recs, o->nrec, sizeof *o->recs, rec_cmp, o->pool);
        g = malloc(o->nrec * sizeof *g);
        if (!g) o->short_of_memory = 1;
    }
    if (o->json) {
        if (o->short_of_memory) put(o, ",\n  \"stacks_incomplete\":true");
        put(o, ",\n  \"stacks\":[");
    } else {
        put(o, "vthreads by stack (identical stacks together, largest first):\n");
        if (o->short_of_memory) put(o, "(memory ran short: some vthreads are missing from the groups)\n");
    }
    if (g) {
        for (size_t i = 0; i < o->nrec; i++) {
            if (ng && !rec_key_cmp(&o->recs[g[ng - 1].first], &o->recs[i], o->pool)) g[ng - 1].count++;
            else g[ng++] = (grp){i, 1};
        }
        qsort(g, ng, sizeof *g, grp_cmp);
    }
    for (size_t k = 0; k < ng; k++) {
        const vrec *r = &o->recs[g[k].first];
        char cb[96];
        const char *call = r->why >= 0 ? call_label(r->call, cb, sizeof cb) : NULL;
        if (o->json) {
            put(o, "%s\n    {\"count\":%zu,\"state\":\"%s\"", k ? "," : "", g[k].count, r->state);
            if (r->why >= 0) {
                put(o, ",\"waiting_on\":\"%s\",\"call\":", why_name(r->why));
                put_str_json(o, call);
                if (r->trap) put(o, ",\"trapped\":true");
                put_site_json(o, r);
            }
            put(o, ",\"ids\":[");
            for (size_t i = 0; i < g[k].count; i++) put(o, "%s%" PRIu64, i ? "," : "", o->recs[g[k].first + i].id);
            put(o, "]");
            if (r->why >= 0) {
                put(o, ",\"backtrace\":[");
                put_frames(o, o->pool + r->at, r->n);
                put(o, "]");
            }
            put(o, "}");
        } else {
            put(o, "%zu vthread%s %s", g[k].count, g[k].count == 1 ? "" : "s", r->state);
            if (r->why >= 0) {
                put(o, " on %s in %s%s", why_name(r->why), r->trap ? "trapped " : "", call);
                put_site_text(o, r);
            }
            put(o, ":");
            for (size_t i = 0; i < g[k].count && i < GROUP_IDS_TEXT; i++)
                put(o, " #%" PRIu64, o->recs[g[k].first + i].id);
            if (g[k].count > GROUP_IDS_TEXT) put(o, " ...");
            put(o, "\n");
            put_frames(o, o->pool + r->at, r->n);
        }
    }
    free(g);
    if (o->json) put(o, "%s]", ng ? "\n  " : "");
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
        uint64_t ntasks = __atomic_load_n(&s->ntasks, __ATOMIC_RELAXED);
        if (o->json) {
            put(o, ",\n    {\"container\":\"scope#%" PRIu64 "\",\"parent\":", s->id);
            if (s->parent) put(o, "\"scope#%" PRIu64 "\"", s->parent->id);
            else put(o, "\"root\"");
            if (s->owner) put(o, ",\"owner\":%" PRIu64, s->owner_id);
            else put(o, ",\"owner\":\"platform thread\"");
            put(o, ",\"policy\":\"%s\",\"state\":\"%s\",\"tasks\":%" PRIu64 ",\"running\":%d",
                policy_name(s->policy), shut ? "shutdown" : "open", ntasks, running);
            /* the opener's scoped-value bindings its forks inherit: a count */
            put(o, ",\"inherited_bindings\":%u", s->inherited);
            if (s->deadline) put(o, ",\"deadline_in_ns\":%" PRId64, s->deadline - o->now);
            put(o, ",\"threads\":[");
            int first = 1;
            /* the live tasks' vthreads: under the scope's lock, which keeps
             * them from finishing (scope.c, "Records"; R then the scope's
             * lock, as the tree walks take them) */
            pthread_mutex_lock(&s->lock);
            for (weft_task *t = s->live; t; t = t->next) {
                if (!t->thread) continue;
                put(o, "%s%" PRIu64, first ? "" : ",", weft_id(t->thread));
                first = 0;
            }
            pthread_mutex_unlock(&s->lock);
            put(o, "]}");
        } else {
            put(o, "%*sscope #%" PRIu64 " %s, owner %s", 2 + 2 * depth_of(s), "", s->id, policy_name(s->policy),
                s->owner ? "" : "a platform thread");
            if (s->owner) put(o, "#%" PRIu64, s->owner_id);
            put(o, ", %" PRIu64 " task%s forked, %d running%s", ntasks, ntasks == 1 ? "" : "s", running,
                shut ? ", shut down" : "");
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
    char site[512] = "";
    if (v.stall == WEFT__STALL_PINNED) weft__stall_site_name(v.site, site, sizeof site);
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
            put(o, ",\"since_ns\":%" PRId64, age_of(v.since));
            if (v.stall == WEFT__STALL_PINNED) {
                put(o, ",\"syscall\":");
                put_str_json(o, sysbuf);
                put(o, ",\"syscall_nr\":%ld", v.sysno);
                if (site[0]) {
                    put(o, ",\"site\":");
                    put_str_json(o, site);
                }
            }
        }
        put(o, "}");
    } else if (v.stall == WEFT__STALL_PINNED) {
        put(o, "  carrier %d%s: pinned in %s for %.3f s by vthread #%" PRIu64 " \"%s\"", k, role, sysbuf,
            (double)age_of(v.since) / 1e9, v.vid, v.vname);
        if (site[0]) put(o, " at %.480s", site);
        put(o, "\n");
    } else if (v.stall == WEFT__STALL_HOG) {
        put(o, "  carrier %d%s: held by vthread #%" PRIu64 " \"%s\" for %.0f ms\n", k, role, v.vid, v.vname,
            (double)age_of(v.since) / 1e6);
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

static int dump_here(int fd, int format) {
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
    weft__sym_lock(); /* one dump at a time names frames (symbolize.c) */
    weft__scopes_lock(); /* scopes and their tasks stay while we look */
    containers(o);
    if (o->json) put(o, "\"vthreads\":[");
    weft__stacks_walk(one, o);
    weft__scopes_unlock();
    /* (the JSON still ends in "]}}": the stacks last) */
    if (o->json)
        put(o, "\n  ],\n  \"unwinder\":\"%s\",\"frame_pointer_walks\":%d", weft__sym_unwinder(),
            weft__sym_fp_walks());
    groups(o);
    if (o->json) put(o, "}}\n");
    else put(o, "end of dump: %" PRIu64 " vthreads listed\n", o->count);
    weft__sym_unlock();
    flush(o);
    r = o->err;
    free(o->recs);
    free(o->pool);
    free(o);
    return r;
}

/* The dump needs room on its stack for libdw (symbolize.c, "Stack room"):
 * where the caller has less -- a vthread, a small platform thread -- a
 * thread with a big stack (only touched pages cost) writes it while the
 * caller waits: a vthread parks in weft_blocking, whose pool thread waits
 * for it.  If no thread can be made, the dump is written here, frames
 * named by module+offset only. */
#define DUMP_STACK ((size_t)16 * 1024 * 1024)

typedef struct dump_job {
    int fd, format, r;
} dump_job;

static void *dump_job_main(void *arg) {
    dump_job *j = arg;
    j->r = dump_here(j->fd, j->format);
    return NULL;
}

static void *dump_elsewhere(void *arg) {
    dump_job *j = arg;
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, DUMP_STACK);
    int e = pthread_create(&th, &a, dump_job_main, j);
    pthread_attr_destroy(&a);
    if (e) dump_job_main(j);
    else pthread_join(th, NULL);
    return NULL;
}

int weft_dump(int fd, int format) {
    if (format != WEFT_DUMP_TEXT && format != WEFT_DUMP_JSON) return -EINVAL;
    if (weft__sym_stack_left() >= 2 * WEFT__SYM_STACK_NEED) return dump_here(fd, format);
    dump_job j = {fd, format, 0};
    if (weft_self()) {
        int r = weft_blocking(dump_elsewhere, &j, NULL);
        if (r < 0) return r;
    } else {
        dump_elsewhere(&j);
    }
    return j.r;
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

/* Installed with weft__sigaction_now, so that it runs at once under TSan
 * too (libc/real.h). */
WEFT__SIGNAL_NOW static void sq_handler(int sig) {
    int e = errno;
    char b = 1;
    if (weft__signal_write(SQ.pipe[1], &b, 1) < 0) { /* a full pipe: a dump is coming anyway */
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
    weft__fd_close_own(r);
    weft__fd_close_own(w);
    SQ.started = 0;
}

static void sq_register_atfork(void) { pthread_atfork(NULL, NULL, sq_fork_child); }

int weft_dump_on_signal(int signo, int fd, int format) {
    if (format != WEFT_DUMP_TEXT && format != WEFT_DUMP_JSON) return -EINVAL;
    if (signo < 0 || signo >= 65 || signo == SIGKILL || signo == SIGSTOP || signo == SIGSEGV) return -EINVAL;
    pthread_mutex_lock(&SQ.lock);
    int r = 0;
    int old = atomic_load(&SQ.signo);
    if (old && old != signo) weft__sigaction_now(old, &SQ.old, NULL);
    atomic_store(&SQ.signo, 0);
    if (signo) {
        if (!SQ.started) {
            static pthread_once_t once = PTHREAD_ONCE_INIT;
            pthread_once(&once, sq_register_atfork);
            if (pipe2(SQ.pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
                r = -errno;
                goto out;
            }
            SQ.pipe[0] = weft__fd_own(SQ.pipe[0]);
            SQ.pipe[1] = weft__fd_own(SQ.pipe[1]);
            /* the reader blocks: only the write end is non-blocking */
            fcntl(SQ.pipe[0], F_SETFL, 0);
            pthread_t th;
            pthread_attr_t a;
            pthread_attr_init(&a);
            pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
            pthread_attr_setstacksize(&a, DUMP_STACK); /* libdw's room: the dump runs right here */
            /* the dump thread takes no signals itself -- but the faults:
             * one blocked there would kill the process with no word from
             * the sanitizers or a handler */
            sigset_t all, prev;
            sigfillset(&all);
            sigdelset(&all, SIGSEGV);
            sigdelset(&all, SIGBUS);
            sigdelset(&all, SIGILL);
            sigdelset(&all, SIGFPE);
            pthread_sigmask(SIG_SETMASK, &all, &prev);
            int e = pthread_create(&th, &a, sq_main, NULL);
            pthread_sigmask(SIG_SETMASK, &prev, NULL);
            pthread_attr_destroy(&a);
            if (e) {
                weft__fd_close_own(SQ.pipe[0]);
                weft__fd_close_own(SQ.pipe[1]);
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
            if (weft__sigaction_now(signo, &sa, &SQ.old) < 0) {
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
