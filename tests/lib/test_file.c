/* file channels: open flags, blocking-style and asynchronous I/O from both
 * worlds, close loses nothing (100,000 records verified byte for byte),
 * DELETE_ON_CLOSE, force survives SIGKILL, a full disk, handlers on
 * executors, close_now, backpressure and byte-range locks. */
#include "harness.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mount.h>
#include <sys/stat.h>

#define MS 1000000LL
#define I(p) ((intptr_t)(p))

static char dir[64];

static void tmpdir(void) {
    snprintf(dir, sizeof dir, "/tmp/weft-file-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
}

static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", dir, name); }

static void rm_all(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* The whole file, malloc'd; its size in *n. */
static char *slurp(const char *p, size_t *n) {
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    char *b = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
        CHECK(r > 0);
        got += (size_t)r;
    }
    close(fd);
    *n = got;
    return b;
}

/* Record i: 16 bytes, "r%013d\n" with i, at position 16 * i. */
enum { REC = 16 };
static void rec_of(int i, char *out) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "r%014d\n", i);
    memcpy(out, tmp, REC);
}

static void check_records(const char *p, int n) {
    size_t len;
    char *b = slurp(p, &len);
    CHECK_EQ(len, (size_t)n * REC);
    for (int i = 0; i < n; i++) {
        char want[REC];
        rec_of(i, want);
        if (memcmp(b + (size_t)i * REC, want, REC) != 0) {
            fprintf(stderr, "record %d differs\n", i);
            CHECK(0);
        }
    }
    free(b);
}

/* ---- open ---------------------------------------------------------------------- */

/* A file channel the test needs: opened, or the test fails here. */
static weft_file *file_new(const char *path, int flags, mode_t mode, const weft_file_opts *o) {
    weft_file *f = NULL;
    CHECK_EQ(weft_file_create(&f, path, flags, mode, o), 0);
    return f;
}

TEST(open_flags) {
    tmpdir();
    char p[128];
    path_of(p, sizeof p, "a");
    weft_file *f = (weft_file *)&f;
    CHECK(weft_file_create(&f, p, WEFT_READ, 0, NULL) == -ENOENT && f == NULL);
    CHECK_EQ(weft_file_create(&f, p, 0, 0, NULL), -EINVAL);
    CHECK_EQ(weft_file_create(&f, p, WEFT_READ | WEFT_CREATE, 0644, NULL), -EINVAL); /* CREATE needs WRITE */
    CHECK_EQ(weft_file_create(NULL, p, WEFT_READ, 0, NULL), -EINVAL);
    f = file_new(p, WEFT_WRITE | WEFT_CREATE_NEW, 0644, NULL);
    CHECK(f != NULL);
    CHECK_EQ(weft_file_write(f, "hello", 5, 0), 5);
    CHECK_EQ(weft_file_close(f), 0);
    CHECK_EQ(weft_file_create(&f, p, WEFT_WRITE | WEFT_CREATE_NEW, 0644, NULL), -EEXIST);
    CHECK_EQ(weft_file_create(&f, dir, WEFT_READ, 0, NULL), -EISDIR);
    CHECK(f == NULL);
    /* APPEND: every write at the end, whatever pos says */
    f = file_new(p, WEFT_WRITE | WEFT_APPEND, 0, NULL);
    CHECK_EQ(weft_file_write(f, " world", 6, 0), 6);
    weft_future *u = weft_file_write_async(f, "!", 1, 0, NULL, NULL);
    CHECK_EQ(weft_future_get(u, NULL, 0), 0);
    weft_future_unref(u);
    CHECK_EQ(weft_file_size(f), 12);
    CHECK_EQ(weft_file_close(f), 0);
    size_t n;
    char *b = slurp(p, &n);
    CHECK(n == 12 && memcmp(b, "hello world!", 12) == 0);
    free(b);
    /* TRUNCATE; READ|WRITE */
    f = file_new(p, WEFT_READ | WEFT_WRITE | WEFT_TRUNCATE, 0, NULL);
    CHECK_EQ(weft_file_size(f), 0);
    CHECK_EQ(weft_file_write(f, "abcdef", 6, 10), 6); /* a hole before it */
    char r[32];
    CHECK_EQ(weft_file_read(f, r, sizeof r, 10), 6);
    CHECK(memcmp(r, "abcdef", 6) == 0);
    CHECK_EQ(weft_file_read(f, r, sizeof r, 100), 0); /* end of file */
    CHECK_EQ(weft_file_truncate(f, 3), 0);
    CHECK_EQ(weft_file_size(f), 3);
    CHECK_EQ(weft_file_write(f, "x", 1, -1), -EINVAL);
    CHECK_EQ(weft_file_close(f), 0);
    /* DSYNC and SYNC open and write */
    f = file_new(p, WEFT_WRITE | WEFT_DSYNC, 0, NULL);
    CHECK_EQ(weft_file_write(f, "d", 1, 0), 1);
    CHECK_EQ(weft_file_close(f), 0);
    f = file_new(p, WEFT_WRITE | WEFT_SYNC, 0, NULL);
    CHECK_EQ(weft_file_write(f, "s", 1, 0), 1);
    CHECK_EQ(weft_file_close(f), 0);
    rm_all();
}

/* ---- close loses nothing ------------------------------------------------------------ */

/* n async writes of distinct records at distinct positions, submitted in
 * an order that defeats coalescing when shuffled, then an immediate close. */
static void async_records(const char *p, int n, int shuffled, int flags) {
    weft_file *f = file_new(p, WEFT_WRITE | WEFT_CREATE | WEFT_TRUNCATE | flags, 0644, NULL);
    CHECK(f != NULL);
    int *order = malloc((size_t)n * sizeof *order);
    for (int i = 0; i < n; i++) order[i] = i;
    if (shuffled) {
        unsigned s = 12345;
        for (int i = n - 1; i > 0; i--) {
            s = s * 1103515245u + 12345u;
            int j = (int)(s % (unsigned)(i + 1));
            int t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    for (int k = 0; k < n; k++) {
        char rec[REC];
        rec_of(order[k], rec);
        weft_future *u = weft_file_write_async(f, rec, REC, (off_t)order[k] * REC, NULL, NULL); /* copied */
        CHECK(u != NULL);
        weft_future_unref(u); /* not awaited: close must still carry it out */
    }
    CHECK_EQ(weft_file_close(f), 0);
    free(order);
}

static void *records_fn(void *arg) {
    const char *p = arg;
    async_records(p, SCALE(100000), 0, 0);
    check_records(p, SCALE(100000));
    async_records(p, SCALE(100000), 1, 0);
    check_records(p, SCALE(100000));
    return NULL;
}

TEST(close_loses_no_async_write) {
    tmpdir();
    char p[128];
    path_of(p, sizeof p, "records");
    records_fn(p); /* from this platform thread */
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, records_fn, p, NULL), 0); /* and from a vthread */
    CHECK_EQ(weft_join(t, NULL), 0);
    rm_all();
}

TEST(delete_on_close_leaves_no_file) {
    tmpdir();
    char p[128];
    path_of(p, sizeof p, "gone");
    async_records(p, SCALE(20000), 0, WEFT_DELETE_ON_CLOSE);
    struct stat st;
    CHECK(stat(p, &st) < 0 && errno == ENOENT);
    rm_all();
}

/* ---- force survives SIGKILL ------------------------------------------------------------ */

TEST(force_then_sigkill_keeps_every_byte) {
    tmpdir();
    char p[128];
    path_of(p, sizeof p, "forced");
    int n = SCALE(50000);
    int pp[2];
    CHECK(pipe(pp) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(pp[0]);
        weft_file *f = file_new(p, WEFT_WRITE | WEFT_CREATE | WEFT_TRUNCATE, 0644, NULL);
        if (!f) _exit(2);
        for (int i = 0; i < n; i++) {
            char rec[REC];
            rec_of(i, rec);
            weft_future_unref(weft_file_write_async(f, rec, REC, (off_t)i * REC, NULL, NULL));
        }
        if (weft_file_force(f, 1) != 0) _exit(3);
        if (write(pp[1], "F", 1) != 1) _exit(4);
        /* more writes that may or may not land: the kill comes now */
        for (int i = n;; i++) {
            char rec[REC];
            rec_of(i, rec);
            weft_future_unref(weft_file_write_async(f, rec, REC, (off_t)i * REC, NULL, NULL));
        }
    }
    close(pp[1]);
    char c;
    CHECK_EQ(read(pp[0], &c, 1), 1);
    kill(pid, SIGKILL);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st));
    close(pp[0]);
    size_t len;
    char *b = slurp(p, &len);
    CHECK(len >= (size_t)n * REC);
    for (int i = 0; i < n; i++) {
        char want[REC];
        rec_of(i, want);
        CHECK(memcmp(b + (size_t)i * REC, want, REC) == 0);
    }
    free(b);
    rm_all();
}

/* ---- a full disk --------------------------------------------------------------------- */

TEST(full_disk_fails_only_what_did_not_fit) {
    tmpdir();
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("tmpfs", dir, "tmpfs", 0, "size=64k") < 0) {
        printf("skipped: cannot mount a small tmpfs here (%s): needs root\n", strerror(errno));
        rm_all();
        return;
    }
    char p[128];
    path_of(p, sizeof p, "full");
    weft_file *f = file_new(p, WEFT_WRITE | WEFT_CREATE, 0644, NULL);
    CHECK(f != NULL);
    enum { N = 2000, SZ = 100 }; /* 200,000 bytes into 64 KiB */
    static char data[N][SZ];
    weft_future *fs[N];
    for (int i = 0; i < N; i++) {
        memset(data[i], 'a' + i % 26, SZ);
        fs[i] = weft_file_write_async(f, data[i], SZ, (off_t)i * SZ, NULL, NULL);
    }
    int ok = 0, nospc = 0;
    for (int i = 0; i < N; i++) {
        void *v;
        int r = weft_future_get(fs[i], &v, 0);
        if (r == 0) {
            CHECK_EQ(I(v), SZ);
            CHECK(nospc == 0); /* successes form a prefix */
            ok++;
        } else {
            CHECK_EQ(r, -ENOSPC);
            nospc++;
        }
        weft_future_unref(fs[i]);
    }
    CHECK(ok > 0 && nospc > 0);
    CHECK_EQ(weft_file_close(f), 0);
    size_t len;
    char *b = slurp(p, &len);
    CHECK(len >= (size_t)ok * SZ);
    for (int i = 0; i < ok; i++) CHECK(memcmp(b + (size_t)i * SZ, data[i], SZ) == 0);
    free(b);
    umount(dir);
    rm_all();
}

/* ---- handlers ---------------------------------------------------------------------- */

static atomic_long handled, handled_bytes, handled_on_vthread;
static void on_done(ssize_t res, void *ctx) {
    (void)ctx;
    if (res > 0) atomic_fetch_add(&handled_bytes, res);
    if (weft_self()) atomic_fetch_add(&handled_on_vthread, 1);
    atomic_fetch_add(&handled, 1); /* last: the test reads the others once this is complete */
}

TEST(handlers_run_on_the_executor) {
    tmpdir();
    char p[128];
    path_of(p, sizeof p, "h");
    weft_executor *execs[2] = {NULL, NULL}; /* the default pool, then vthreads */
    CHECK_EQ(weft_executor_create_virtual(&execs[1]), 0);
    for (int k = 0; k < 2; k++) {
        atomic_store(&handled, 0);
        atomic_store(&handled_bytes, 0);
        atomic_store(&handled_on_vthread, 0);
        weft_file_opts o = {.executor = execs[k]};
        weft_file *f = file_new(p, WEFT_READ | WEFT_WRITE | WEFT_CREATE | WEFT_TRUNCATE, 0644, &o);
        int n = SCALE(10000);
        for (int i = 0; i < n; i++) {
            char rec[REC];
            rec_of(i, rec);
            weft_future_unref(weft_file_write_async(f, rec, REC, (off_t)i * REC, on_done, NULL));
        }
        CHECK_EQ(weft_file_force(f, 0), 0);
        char buf[REC];
        weft_future *u = weft_file_read_async(f, buf, REC, 5 * REC, on_done, NULL);
        void *v;
        CHECK_EQ(weft_future_get(u, &v, 0), 0);
        CHECK_EQ(I(v), REC);
        weft_future_unref(u);
        char want[REC];
        rec_of(5, want);
        CHECK(memcmp(buf, want, REC) == 0);
        CHECK_EQ(weft_file_close(f), 0);
        /* the handlers are called after the futures are filled: wait for the last */
        while (atomic_load(&handled) < n + 1) usleep(1000);
        CHECK_EQ(atomic_load(&handled_bytes), (long)(n + 1) * REC);
        if (k == 1) CHECK_EQ(atomic_load(&handled_on_vthread), n + 1);
    }
    CHECK_EQ(weft_executor_close(execs[1]), 0);
    rm_all();
}

/* ---- close_now and backpressure ------------------------------------------------------------ */

/* The flusher is held in the first operation's handler (a CALLER_RUNS
 * executor whose one thread and one queue slot are taken), so what comes
 * after stays queued. */
static weft_latch hold;
static void hold_handler(ssize_t res, void *ctx) {
    (void)res;
    atomic_fetch_add((atomic_int *)ctx, 1);
    CHECK_EQ(weft_latch_await(&hold), 0);
}
static void *hold_task(void *arg) {
    (void)arg;
    weft_latch_await(&hold);
    return NULL;
}

/* A caller-runs executor whose one thread and one queue slot are taken
 * until `hold` opens (busy: their futures): a handler submitted to it runs
 * on the submitter -- the file's flusher. */
static weft_executor *held_executor(weft_future *busy[2]) {
    weft_latch_init(&hold, 1);
    weft_executor *ex;
    CHECK_EQ(weft_executor_create_fixed(&ex, 1, 1, WEFT_REJECT_CALLER_RUNS), 0);
    busy[0] = weft_submit(ex, hold_task, NULL);
    busy[1] = weft_submit(ex, hold_task, NULL);
    return ex;
}

static void *submit_one(void *arg) {
    weft_file *f = arg;
    weft_future *u = weft_file_write_async(f, "z", 1, 0, NULL, NULL);
    int r = weft_future_get(u, NULL, 0);
    weft_future_unref(u);
    return (void *)(intptr_t)r;
}

static void *close_now_fn(void *arg) { return (void *)(intptr_t)weft_file_close_now(arg); }

TEST(close_now_cancels_what_has_not_started) {
    tmpdir();
    char p[128];
    path_of(p, sizeof p, "cn");
    weft_future *busy[2];
    weft_executor *ex = held_executor(busy);
    weft_file_opts o = {.executor = ex, .max_inflight = 64};
    weft_file *f = file_new(p, WEFT_WRITE | WEFT_CREATE, 0644, &o);
    atomic_int first = 0;
    weft_future *u0 = weft_file_write_async(f, "a", 1, 0, hold_handler, &first);
    while (!atomic_load(&first)) usleep(500); /* the flusher is in the handler */
    weft_future *us[10];
    for (int i = 0; i < 10; i++) us[i] = weft_file_write_async(f, "b", 1, 1 + i, NULL, NULL);
    /* past max_inflight, a submitter waits */
    int more = 64 - 11;
    for (int i = 0; i < more; i++) weft_future_unref(weft_file_write_async(f, "c", 1, 100 + i, NULL, NULL));
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, submit_one, f, NULL), 0);
    char *d = dump_showing(WEFT_DUMP_TEXT, "parked on executor", NULL);
    free(d);
    /* close_now from another thread while the flusher is held */
    pthread_t closer;
    CHECK_EQ(pthread_create(&closer, NULL, close_now_fn, f), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0); /* the waiting submitter: refused once the close began */
    CHECK_EQ(I(r), -EBADF);
    /* (the close took the queue in the same step that refused it) */
    weft_latch_count_down(&hold);
    CHECK_EQ(pthread_join(closer, &r), 0);
    CHECK_EQ(I(r), 10 + more);
    CHECK_EQ(weft_future_get(u0, NULL, 0), 0);
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(weft_future_get(us[i], NULL, 0), -ECANCELED);
        weft_future_unref(us[i]);
    }
    weft_future_unref(u0);
    for (int i = 0; i < 2; i++) weft_future_unref(busy[i]);
    CHECK_EQ(weft_executor_close(ex), 0);
    rm_all();
}

/* ---- locks -------------------------------------------------------------------------- */

static void *lock_waiter(void *arg) {
    weft_file *g = arg;
    return (void *)(intptr_t)weft_file_lock(g, 0, 10, 0, 0);
}

TEST(byte_range_locks) {
    tmpdir();
    char p[128];
    path_of(p, sizeof p, "locks");
    weft_file *a = file_new(p, WEFT_READ | WEFT_WRITE | WEFT_CREATE, 0644, NULL);
    weft_file *b = file_new(p, WEFT_READ | WEFT_WRITE, 0, NULL);
    CHECK_EQ(weft_file_lock(a, 0, 10, 0, 0), 0);
    CHECK_EQ(weft_file_try_lock(b, 5, 10, 0), -EAGAIN);
    CHECK_EQ(weft_file_try_lock(b, 5, 10, 1), -EAGAIN);
    CHECK_EQ(weft_file_try_lock(b, 10, 10, 0), 0); /* no overlap */
    CHECK_EQ(weft_file_lock(b, 0, 10, 0, weft_now() + 30 * MS), -ETIMEDOUT);
    /* a waiting vthread gets it once it is released; a cancelled one gives up */
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, lock_waiter, b, NULL), 0);
    usleep(10000);
    CHECK_EQ(weft_file_unlock(a, 0, 10), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ(I(r), 0);
    CHECK_EQ(weft_spawn(&t, lock_waiter, a, NULL), 0);
    usleep(10000);
    CHECK_EQ(weft_cancel(t), 0);
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ(I(r), -ECANCELED);
    /* shared with shared */
    CHECK_EQ(weft_file_unlock(b, 0, 0), 0);
    CHECK_EQ(weft_file_lock(a, 0, 0, 1, 0), 0);
    CHECK_EQ(weft_file_try_lock(b, 0, 0, 1), 0);
    CHECK_EQ(weft_file_try_lock(b, 0, 0, 0), -EAGAIN);
    CHECK_EQ(weft_file_close(a), 0); /* its locks go with it */
    CHECK_EQ(weft_file_try_lock(b, 0, 0, 0), 0);
    CHECK_EQ(weft_file_close(b), 0);
    rm_all();
}

/* ---- blocking-style: small calls direct, big ones through the ring ------------------------- */

static void *big_rw(void *arg) {
    weft_file *f = arg;
    size_t n = 3 << 20; /* over the direct limit: the ring (or the pool on epoll) */
    char *a = malloc(n), *b = malloc(n);
    for (size_t i = 0; i < n; i++) a[i] = (char)(i * 7 + i / 4099);
    CHECK_EQ(weft_file_write(f, a, n, 4096), (ssize_t)n);
    ssize_t got = 0;
    while ((size_t)got < n) {
        ssize_t r = weft_file_read(f, b + got, n - (size_t)got, 4096 + got);
        CHECK(r > 0);
        got += r;
    }
    CHECK(memcmp(a, b, n) == 0);
    /* small ones (direct on a vthread) */
    for (int i = 0; i < 1000; i++) {
        char rec[REC], back[REC];
        rec_of(i, rec);
        CHECK_EQ(weft_file_write(f, rec, REC, (off_t)i * REC), REC);
        CHECK_EQ(weft_file_read(f, back, REC, (off_t)i * REC), REC);
        CHECK(memcmp(rec, back, REC) == 0);
    }
    /* a cancelled caller gets -ECANCELED and writes nothing */
    weft_cancel(weft_self());
    CHECK_EQ(weft_file_write(f, "zzzz", 4, 0), -ECANCELED);
    free(a);
    free(b);
    return NULL;
}

TEST(blocking_style_small_and_large) {
    tmpdir();
    char p[128];
    path_of(p, sizeof p, "rw");
    weft_file *f = file_new(p, WEFT_READ | WEFT_WRITE | WEFT_CREATE, 0644, NULL);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, big_rw, f, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    char first[REC], want[REC];
    CHECK_EQ(weft_file_read(f, first, REC, 0), REC); /* from this platform thread */
    rec_of(0, want);
    CHECK(memcmp(first, want, REC) == 0); /* not overwritten by the cancelled write */

    CHECK_EQ(weft_file_close(f), 0);
    rm_all();
}

/* A handler on the flusher (caller-runs) that forces or closes its own
 * file gets -EDEADLK instead of waiting for itself. */
static weft_file *self_file;
static atomic_int self_force, self_close, self_calls;
static void self_closing_handler(ssize_t res, void *ctx) {
    (void)res;
    (void)ctx;
    atomic_store(&self_force, weft_file_force(self_file, 0));
    atomic_store(&self_close, weft_file_close(self_file));
    atomic_fetch_add(&self_calls, 1);
}

TEST(handler_on_flusher_cannot_close_its_file) {
    tmpdir();
    char p[128];
    path_of(p, sizeof p, "self");
    weft_future *busy[2];
    weft_executor *ex = held_executor(busy);
    weft_file_opts o = {.executor = ex};
    self_file = file_new(p, WEFT_WRITE | WEFT_CREATE, 0644, &o);
    weft_future *u = weft_file_write_async(self_file, "a", 1, 0, self_closing_handler, NULL);
    while (!atomic_load(&self_calls)) usleep(500);
    CHECK_EQ(atomic_load(&self_force), -EDEADLK);
    CHECK_EQ(atomic_load(&self_close), -EDEADLK);
    CHECK_EQ(weft_future_get(u, NULL, 0), 0);
    weft_future_unref(u);
    CHECK_EQ(weft_file_close(self_file), 0); /* from here it works */
    weft_latch_count_down(&hold);
    for (int i = 0; i < 2; i++) weft_future_unref(busy[i]);
    CHECK_EQ(weft_executor_close(ex), 0);
    rm_all();
}
