/* Adversarial timing: the runtime's answers when the moment is the worst one.
 *
 *  - an fd number closed by weft_close and reused at once, while another
 *    carrier is busy and has not yet acted on the close (io_uring: a cancel
 *    keyed on the number must not land on the new file);
 *  - an fd closed with close(2) behind weft's back and its number reused by
 *    a file of another kind: nothing weft remembered of the old file may
 *    block a carrier or lose a deadline;
 *  - work that only one carrier would run -- a due timer in its heap, the
 *    vthread it just woke (its LIFO slot), the vthread that just yielded --
 *    while that carrier runs a vthread that never blocks and other carriers
 *    are idle: they must take it;
 *  - two blocking-pool jobs that need each other, submitted back to back;
 *  - readiness fetched for an fd before it was closed and reused must not
 *    reach a waiter on the new file.
 *
 * The carriers are WEFT_CARRIERS' (run with 1, 2 and 4).  The stranding
 * checks assert no latency: a "hog" computes until its victim is back, or
 * for hog_ms() at most (default 10 s, WEFT_TEST_HOG_MS), and the check is
 * that the victim came back while the hog still held the carrier.  Without
 * a rescue the victim can run only after the hog gives up; with one, it is
 * back whenever the rescuers get a CPU, however loaded the machine (how
 * late it was is printed with WEFT_TEST_VERBOSE; the monitor's latency is
 * the benchmark's to measure; WEFT_TEST_VERBOSE also prints each test's
 * worst, and WEFT_TEST_TRIALS sets the trials).  With one carrier the
 * monitor runs a spare carrier in the hog's place once it has held the
 * carrier for the stall threshold, and the spare takes the victim: the
 * same check holds.  Only without a monitor or spares (one carrier with
 * WEFT_PIN_THRESHOLD_MS or WEFT_MAX_COMPENSATE negative) can nobody else
 * run the victim: the hog computes 5 ms and only completion counts.
 */
#include "harness.h"

#include "sched/sched.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define MS (1000 * 1000LL)

static int ncarriers(void) {
    weft_stats s;
    int r = weft_init(NULL);
    CHECK(r == 0 || r == -EALREADY);
    weft_stats_get(&s);
    return (int)s.carriers;
}

static int64_t hog_ms(void) {
    const char *v = getenv("WEFT_TEST_HOG_MS");
    int64_t ms = v && atoi(v) > 0 ? atoi(v) : 10000;
    return ms;
}

/* Can another carrier run what a computing vthread strands?  Several
 * carriers, or one and the monitor's spares (weft.h, "The monitor"). */
static int rescuable(void) {
    if (ncarriers() > 1) return 1;
    const char *thr = getenv("WEFT_PIN_THRESHOLD_MS"), *mc = getenv("WEFT_MAX_COMPENSATE");
    return !(thr && atol(thr) < 0) && !(mc && *mc && atol(mc) <= 0);
}

/* A test's own repetitions, or WEFT_TEST_TRIALS' (scripts/stress.sh runs
 * each test many times with few repetitions inside). */
static int trials(int def) {
    const char *v = getenv("WEFT_TEST_TRIALS");
    return v && atoi(v) > 0 ? atoi(v) : def;
}

/* Computes until t without blocking or yielding: the carrier is held. */
static void hog_until(int64_t t) {
    while (weft_now() < t) __asm__ volatile("" ::: "memory");
}

static int here(void) { return weft__carrier_index(weft__carrier_self()); }

/* Until t is parked in an I/O wait (so its call is past every check of the
 * fd and waits on it), or has finished.  Reads the park word as weft's
 * wakers do. */
static void wait_parked_io(weft_thread *h) {
    weft_thread *t = weft__thread_of(h); /* (a handle carries a generation: sched.h) */
    for (;;) {
        if (atomic_load(&t->rstate) == WEFT__RS_DONE) return; /* (its read ended early: the test says so) */
        uint64_t w = atomic_load(&t->parker.word);
        if (WEFT__PW_STATE(w) == WEFT__PS_WAIT_PARKED && __atomic_load_n(&t->why, __ATOMIC_RELAXED) == WEFT__WHY_IO)
            return;
        if (weft_self()) weft_sleep(20 * 1000);
        else usleep(20);
    }
}

/* Waits (platform thread) until *flag (never: the harness's timeout). */
static void wait_flag(atomic_int *flag) {
    while (!atomic_load(flag)) usleep(100);
}

/* Of a fresh pair, the end that took number `want` (-1 if neither did);
 * *peer gets the other end. */
static int reused_end(const int sv[2], int want, int *peer) {
    if (sv[0] == want) { *peer = sv[1]; return sv[0]; }
    if (sv[1] == want) { *peer = sv[0]; return sv[1]; }
    return -1;
}

/* ---- 1. a close's cancellation and the next file on the number ----------- */

static atomic_int fc_hog_up, fc_release, fc_reuse_fd;
static weft_thread *_Atomic fc_reader_t;

static void *fc_hog(void *arg) {
    int hold = (int)(intptr_t)arg; /* more than one carrier: really hold this one */
    atomic_store(&fc_hog_up, 1);
    while (!atomic_load(&fc_release))
        if (!hold) weft_sleep(100 * 1000);
    /* the first I/O this carrier's ring sees after the close elsewhere */
    char c = 0;
    int64_t old = weft_deadline_set(weft_now() + 10000 * MS);
    ssize_t r = weft_read(atomic_load(&fc_reuse_fd), &c, 1);
    weft_deadline_set(old);
    if (r != 1) fprintf(stderr, "read on the reused number: %zd (%s)\n", r, r < 0 ? strerror((int)-r) : "");
    return (void *)(intptr_t)(r == 1 && c == 'x');
}

static void *fc_reader(void *arg) {
    char c;
    return (void *)(intptr_t)weft_read((int)(intptr_t)arg, &c, 1);
}

static void *fc_closer(void *arg) {
    wait_parked_io(atomic_load(&fc_reader_t));
    return (void *)(intptr_t)weft_close((int)(intptr_t)arg);
}

/* A reader blocked on fd N is ended by weft_close(N) on one carrier while
 * another carrier computes; N goes to a new socket with data waiting, and
 * the busy carrier's next read is on N. */
TEST(close_cancel_never_reaches_reused_number) {
    DET_SKIP("a read's virtual deadline races a real peer");
    int n = ncarriers();
    int ntrials = trials(TEST_SANITIZED ? 10 : 40), meaningful = 0;
    for (int i = 0; i < ntrials; i++) {
        atomic_store(&fc_hog_up, 0);
        atomic_store(&fc_release, 0);
        weft_thread *h, *r, *c;
        CHECK_EQ(weft_spawn(&h, fc_hog, (void *)(intptr_t)(n > 1), NULL), 0);
        wait_flag(&fc_hog_up);
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        int num = sv[0];
        CHECK_EQ(weft_spawn(&r, fc_reader, (void *)(intptr_t)num, NULL), 0);
        atomic_store(&fc_reader_t, r);
        CHECK_EQ(weft_spawn(&c, fc_closer, (void *)(intptr_t)num, NULL), 0);
        void *res;
        CHECK_EQ(weft_join(c, &res), 0);
        CHECK_EQ((intptr_t)res, 0);
        CHECK_EQ(weft_join(r, &res), 0);
        CHECK_EQ((intptr_t)res, -EBADF);
        int nv[2], peer;
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, nv), 0);
        int fd = reused_end(nv, num, &peer);
        if (fd < 0) { fd = nv[0]; peer = nv[1]; } else meaningful++;
        atomic_store(&fc_reuse_fd, fd);
        atomic_store(&fc_release, 1);
        /* the data comes once the hog's read waits in its ring (data that
         * is there already completes a read before any cancel can run) */
        wait_parked_io(h);
        usleep(1000);
        CHECK_EQ(write(peer, "x", 1), 1);
        CHECK_EQ(weft_join(h, &res), 0);
        CHECK_EQ((intptr_t)res, 1);
        close(nv[0]);
        close(nv[1]);
        close(sv[1]);
    }
    CHECK(meaningful > 0);
}

/* The same without a hog: vthreads on every carrier end blocked readers
 * with weft_close and reuse the numbers at once for sockets whose data is
 * there; every read of a live socket succeeds. */
static atomic_int churn_bad;

typedef struct churn_fd {
    int fd;
    atomic_int closing; /* set just before weft_close */
} churn_fd;

static void *churn_block(void *arg) {
    churn_fd *cf = arg;
    char c;
    ssize_t r = weft_read(cf->fd, &c, 1);
    if (r != -EBADF || !atomic_load(&cf->closing)) {
        fprintf(stderr, "read of an open, empty socket: %zd%s\n", r,
                atomic_load(&cf->closing) ? "" : " before any close");
        atomic_fetch_add(&churn_bad, 1);
    }
    return NULL;
}

static void *churn_loop(void *arg) {
    int rounds = (int)(intptr_t)arg;
    for (int i = 0; i < rounds; i++) {
        int a[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a), 0);
        weft_thread *b;
        churn_fd cf = {.fd = a[0]};
        CHECK_EQ(weft_spawn(&b, churn_block, &cf, NULL), 0);
        /* b must be in its read: a read that began after the close could
         * find the number already another vthread's socket */
        wait_parked_io(b);
        if (i % 3 == 0) weft_yield();
        atomic_store(&cf.closing, 1);
        CHECK_EQ(weft_close(a[0]), 0);
        CHECK_EQ(weft_join(b, NULL), 0);
        CHECK_EQ(weft_close(a[1]), 0);
        int s[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s), 0);
        CHECK_EQ(write(s[1], "y", 1), 1);
        char c = 0;
        int64_t old = weft_deadline_set(weft_now() + 10000 * MS);
        ssize_t r = weft_read(s[0], &c, 1);
        weft_deadline_set(old);
        if (r != 1 || c != 'y') {
            fprintf(stderr, "read of a live socket after a close: %zd\n", r);
            atomic_fetch_add(&churn_bad, 1);
        }
        CHECK_EQ(weft_close(s[0]), 0);
        CHECK_EQ(weft_close(s[1]), 0);
    }
    return NULL;
}

TEST(close_reopen_churn_reads_live_sockets) {
    enum { V = 16 };
    int rounds = trials(TEST_SANITIZED ? 40 : 400); /* 6,400 reads */
    atomic_store(&churn_bad, 0);
    weft_thread *t[V];
    for (int i = 0; i < V; i++) CHECK_EQ(weft_spawn(&t[i], churn_loop, (void *)(intptr_t)rounds, NULL), 0);
    for (int i = 0; i < V; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(atomic_load(&churn_bad), 0);
}

/* ---- 2. close(2) behind weft's back, the number reused ------------------- */

enum { BB_SOCKET, BB_PIPE, BB_ACCEPT, BB_FILE_THEN_SOCKET, BB_SOCKET_THEN_PIPE, BB_CASES };
static atomic_int bb_done;
static atomic_long bb_result;

static int listen_blocking(struct sockaddr_in *sa) {
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(l >= 0);
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(bind(l, (struct sockaddr *)sa, sizeof *sa), 0);
    CHECK_EQ(listen(l, 8), 0);
    socklen_t len = sizeof *sa;
    CHECK_EQ(getsockname(l, (struct sockaddr *)sa, &len), 0);
    return l;
}

/* Makes weft learn fd `old` (an operation on it), closes it with close(2),
 * then gives the number to a new, blocking file of another or the same kind
 * and makes a call on it that can only end by its 20 ms deadline. */
static void *bb_case(void *arg) {
    int kind = (int)(intptr_t)arg;
    char c;
    long res = 0;
    int keep[2] = {-1, -1};
    if (kind == BB_SOCKET || kind == BB_SOCKET_THEN_PIPE) {
        int a[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a), 0);
        CHECK_EQ(write(a[1], "s", 1), 1);
        CHECK_EQ(weft_read(a[0], &c, 1), 1);
        int num = a[0];
        close(a[0]); /* behind weft's back */
        close(a[1]);
        int fd, peer;
        if (kind == BB_SOCKET) {
            CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, keep), 0);
            fd = reused_end(keep, num, &peer);
        } else {
            CHECK_EQ(pipe2(keep, O_CLOEXEC), 0);
            fd = keep[0] == num ? keep[0] : -1;
        }
        CHECK(fd >= 0);
        CHECK_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
        int64_t old = weft_deadline_set(weft_now() + 20 * MS);
        res = weft_read(fd, &c, 1);
        weft_deadline_set(old);
    } else if (kind == BB_PIPE) {
        int p[2];
        CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
        CHECK_EQ(write(p[1], "p", 1), 1);
        CHECK_EQ(weft_read(p[0], &c, 1), 1);
        int num = p[0];
        close(p[0]);
        close(p[1]);
        CHECK_EQ(pipe2(keep, O_CLOEXEC), 0);
        CHECK_EQ(keep[0], num);
        int64_t old = weft_deadline_set(weft_now() + 20 * MS);
        res = weft_read(keep[0], &c, 1);
        weft_deadline_set(old);
    } else if (kind == BB_ACCEPT) {
        struct sockaddr_in sa;
        int l = listen_blocking(&sa);
        int cl = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        CHECK_EQ(connect(cl, (struct sockaddr *)&sa, sizeof sa), 0);
        int s = weft_accept(l, NULL, NULL, SOCK_CLOEXEC);
        CHECK(s >= 0);
        close(s);
        close(cl);
        int num = l;
        close(l);
        keep[0] = listen_blocking(&sa);
        CHECK_EQ(keep[0], num);
        CHECK_EQ(fcntl(keep[0], F_GETFL) & O_NONBLOCK, 0);
        int64_t old = weft_deadline_set(weft_now() + 20 * MS);
        res = weft_accept(keep[0], NULL, NULL, SOCK_CLOEXEC);
        weft_deadline_set(old);
        if (res >= 0) close((int)res);
    } else { /* BB_FILE_THEN_SOCKET */
        char path[] = "/tmp/weft-races-XXXXXX";
        int f = mkstemp(path);
        CHECK(f >= 0);
        unlink(path);
        CHECK_EQ(write(f, "f", 1), 1);
        CHECK_EQ(weft_pread(f, &c, 1, 0), 1);
        CHECK_EQ(weft_read(f, &c, 1), 0); /* at the end */
        int num = f;
        close(f);
        int peer;
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, keep), 0);
        int fd = reused_end(keep, num, &peer);
        CHECK(fd >= 0);
        int64_t old = weft_deadline_set(weft_now() + 20 * MS);
        res = weft_read(fd, &c, 1);
        weft_deadline_set(old);
    }
    atomic_store(&bb_result, res);
    atomic_store(&bb_done, 1);
    if (keep[0] >= 0) close(keep[0]);
    if (keep[1] >= 0) close(keep[1]);
    return NULL;
}

TEST(close_behind_back_then_reuse_never_blocks) {
    static const char *names[] = {"socket", "pipe", "accept", "file then socket", "socket then pipe"};
    int rounds = trials(TEST_SANITIZED ? 1 : 2);
    for (int i = 0; i < rounds; i++) {
        for (int k = 0; k < BB_CASES; k++) {
            atomic_store(&bb_done, 0);
            weft_thread *t;
            CHECK_EQ(weft_spawn(&t, bb_case, (void *)(intptr_t)k, NULL), 0);
            /* a carrier blocked in read(2) never comes back: give it 20 s */
            for (int w = 0; w < 200000 && !atomic_load(&bb_done); w++) usleep(100);
            if (!atomic_load(&bb_done)) {
                fprintf(stderr, "%s: the call on the reused number never returned\n", names[k]);
                CHECK(0);
            }
            CHECK_EQ(weft_join(t, NULL), 0);
            if (atomic_load(&bb_result) != -ETIMEDOUT)
                fprintf(stderr, "%s: %ld\n", names[k], (long)atomic_load(&bb_result));
            CHECK_EQ(atomic_load(&bb_result), -ETIMEDOUT);
        }
    }
}

/* ---- 3. a due timer in a busy carrier's heap ---------------------------- */

/* The victims of 3 and of 4's yield: a vthread queues a hog on its own
 * carrier, then sleeps 10 ms (its timer in this carrier's heap) or yields
 * (itself behind the hog, in the yield FIFO), and returns how late it was
 * back while the hog computed, STRANDED if it was back only after the hog
 * gave up, or -1 when the hog ran elsewhere (nothing to strand). */
static atomic_int hog_car, victim_back;

/* Computes until the victim is back or `limit` ns have passed, without
 * blocking or yielding; returns 1 if the victim came first.  A victim
 * stuck behind the hog cannot set victim_back before the hog returns. */
static int hog_until_back(int64_t limit) {
    int64_t end = weft_now() + limit;
    while (!atomic_load(&victim_back))
        if (weft_now() >= end) return 0;
    return 1;
}

static void *hog_fn(void *arg) {
    atomic_store(&hog_car, here());
    return (void *)(intptr_t)hog_until_back((int64_t)(intptr_t)arg);
}

enum { STRANDED = -2 };

enum { BY_SLEEP, BY_YIELD };
typedef struct strand_arg {
    int64_t hog;
    int how;
} strand_arg;

static void *strand_victim(void *arg) {
    const strand_arg *a = arg;
    weft_thread *h;
    atomic_store(&hog_car, -1);
    atomic_store(&victim_back, 0);
    CHECK_EQ(weft_spawn(&h, hog_fn, (void *)(intptr_t)a->hog, NULL), 0);
    int car = here();
    int64_t due;
    if (a->how == BY_SLEEP) {
        due = weft_now() + 10 * MS;
        CHECK_EQ(weft_sleep_until(due), 0); /* the carrier switches to the hog */
    } else {
        due = weft_now();
        weft_yield(); /* the carrier runs the hog, queued before us */
    }
    int64_t late = weft_now() - due;
    atomic_store(&victim_back, 1);
    int same = atomic_load(&hog_car) == car;
    void *released;
    CHECK_EQ(weft_join(h, &released), 0);
    if (!same) return (void *)(intptr_t)-1;
    return (void *)(intptr_t)(released ? late : STRANDED);
}

/* The worst lateness a test saw, printed with WEFT_TEST_VERBOSE. */
static void tell_worst(const char *what, int64_t worst, int n) {
    if (getenv("WEFT_TEST_VERBOSE") && n > 0)
        fprintf(stderr, "%s: %d trials, worst late %.2f ms\n", what, n, worst / 1e6);
}

/* Runs the victims; returns how many shared the hog's carrier (-1: nobody
 * could have rescued them, nothing was checked). */
static int strand_trials(int how, const char *what) {
    int can = rescuable(), meaningful = 0;
    int64_t worst = 0;
    strand_arg a = {.hog = (can ? hog_ms() : 5) * MS, .how = how};
    for (int i = 0; i < trials(3); i++) {
        weft_thread *t;
        void *res;
        CHECK_EQ(weft_spawn(&t, strand_victim, &a, NULL), 0);
        CHECK_EQ(weft_join(t, &res), 0);
        int64_t late = (int64_t)(intptr_t)res;
        if (late == -1 || !can) continue;
        meaningful++;
        if (late == STRANDED)
            fprintf(stderr, "%s: the victim was back only after the hog's %lld ms: nobody else ran it\n", what,
                    (long long)(a.hog / MS));
        else if (getenv("WEFT_TEST_VERBOSE"))
            fprintf(stderr, "%s late %.2f ms\n", what, late / 1e6);
        CHECK(late != STRANDED);
        if (late > worst) worst = late;
    }
    tell_worst(what, worst, meaningful);
    return can ? meaningful : -1;
}

TEST(due_timer_of_busy_carrier_fires) {
    DET_SKIP("needs the monitor");
    if (strand_trials(BY_SLEEP, "timer") == 0) fprintf(stderr, "note: the hog never shared the sleeper's carrier\n");
}

/* ---- 4. the LIFO slot and the yield queue of a busy carrier -------------- */

static atomic_int lf_parked, lf_woken;
static _Atomic int64_t lf_woke_at;

static void *lf_sleeper(void *arg) {
    atomic_store(&lf_parked, 1);
    while (!atomic_load(&lf_woken)) weft_park(0);
    atomic_store(&lf_woke_at, weft_now());
    atomic_store(&victim_back, 1);
    return NULL;
}

static _Atomic int64_t lf_t0;

static void *lf_waker(void *arg) {
    weft_thread *b = arg;
    while (!atomic_load(&lf_parked)) weft_sleep(100 * 1000);
    weft_sleep(2 * MS); /* b is parked by now (if not, it is back by itself) */
    int64_t hog = (rescuable() ? hog_ms() : 5) * MS;
    /* long enough that a carrier woken with our timer has stopped spinning
     * (a spinner would take the slot: that case passes by itself) */
    hog_until(weft_now() + 2 * MS);
    atomic_store(&lf_t0, weft_now());
    atomic_store(&lf_woken, 1);
    weft_unpark(b); /* b goes to this carrier's LIFO slot */
    return (void *)(intptr_t)hog_until_back(hog);
}

TEST(woken_vthread_not_stranded_behind_busy_waker) {
    DET_SKIP("needs the monitor");
    int can = rescuable(), checked = 0;
    int64_t worst = 0;
    for (int i = 0; i < trials(3); i++) {
        atomic_store(&lf_parked, 0);
        atomic_store(&lf_woken, 0);
        atomic_store(&victim_back, 0);
        weft_thread *b, *a;
        void *released;
        CHECK_EQ(weft_spawn(&b, lf_sleeper, NULL, NULL), 0);
        CHECK_EQ(weft_spawn(&a, lf_waker, b, NULL), 0);
        CHECK_EQ(weft_join(a, &released), 0);
        CHECK_EQ(weft_join(b, NULL), 0);
        if (!can) continue;
        int64_t late = atomic_load(&lf_woke_at) - atomic_load(&lf_t0);
        if (!released)
            fprintf(stderr, "the woken vthread ran only after its waker's %lld ms: nobody took the slot\n",
                    (long long)hog_ms());
        else if (getenv("WEFT_TEST_VERBOSE"))
            fprintf(stderr, "lifo late %.2f ms\n", late / 1e6);
        CHECK(released);
        checked++;
        if (late > worst) worst = late;
    }
    tell_worst("lifo", worst, checked);
}

TEST(yielded_vthread_not_stranded_behind_busy_carrier) {
    DET_SKIP("needs the monitor");
    strand_trials(BY_YIELD, "yield");
}

/* ---- 5. blocking jobs that need each other ------------------------------- */

static int bj_pipe[2];

static void *bj_read(void *arg) {
    /* waits for the other job's byte (3 s at most: a failure, not a hang) */
    struct pollfd pf = {.fd = bj_pipe[0], .events = POLLIN};
    if (poll(&pf, 1, 3000) != 1) return (void *)0;
    char c;
    return (void *)(intptr_t)(read(bj_pipe[0], &c, 1) == 1);
}

static void *bj_write(void *arg) { return (void *)(intptr_t)(write(bj_pipe[1], "w", 1) == 1); }
static void *bj_noop(void *arg) { return arg; }

static void *bj_submit(void *fn) {
    void *res = NULL;
    CHECK_EQ(weft_blocking((void *(*)(void *))fn, NULL, &res), 0);
    return res;
}

TEST(blocking_jobs_that_need_each_other) {
    int ntrials = trials(TEST_SANITIZED ? 5 : 20);
    for (int i = 0; i < ntrials; i++) {
        CHECK_EQ(weft_init(NULL), 0);
        CHECK_EQ(pipe2(bj_pipe, O_CLOEXEC), 0);
        weft_thread *w, *a, *b;
        /* one pool thread, idle */
        CHECK_EQ(weft_spawn(&w, bj_submit, (void *)bj_noop, NULL), 0);
        CHECK_EQ(weft_join(w, NULL), 0);
        usleep(1000);
        CHECK_EQ(weft_spawn(&a, bj_submit, (void *)bj_read, NULL), 0);
        CHECK_EQ(weft_spawn(&b, bj_submit, (void *)bj_write, NULL), 0);
        void *ra, *rb;
        CHECK_EQ(weft_join(a, &ra), 0);
        CHECK_EQ(weft_join(b, &rb), 0);
        CHECK_EQ((intptr_t)rb, 1);
        CHECK_EQ((intptr_t)ra, 1);
        close(bj_pipe[0]);
        close(bj_pipe[1]);
        weft_shutdown(); /* the pool starts from no thread again */
    }
}

/* ---- 6. readiness of a closed file, reported for the new one ------------- */

static atomic_int stale_bad;

static void *sr_poll(void *arg) {
    int r = weft_poll((int)(intptr_t)arg, POLLIN, weft_now() + 1000 * MS);
    (void)r; /* POLLIN, or -EBADF if the close came first */
    return NULL;
}

static void *sr_loop(void *arg) {
    int rounds = (int)(intptr_t)arg;
    for (int i = 0; i < rounds; i++) {
        int a[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a), 0);
        weft_thread *p;
        CHECK_EQ(weft_spawn(&p, sr_poll, (void *)(intptr_t)a[0], NULL), 0);
        wait_parked_io(p);
        CHECK_EQ(write(a[1], "r", 1), 1); /* readiness on its way */
        CHECK_EQ(weft_close(a[0]), 0);
        CHECK_EQ(weft_close(a[1]), 0);
        CHECK_EQ(weft_join(p, NULL), 0);
        int b[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b), 0);
        int r = weft_poll(b[0], POLLIN, weft_now() + 2 * MS); /* nothing to read */
        if (r != -ETIMEDOUT) {
            fprintf(stderr, "poll of an empty new socket: %d\n", r);
            atomic_fetch_add(&stale_bad, 1);
        }
        CHECK_EQ(weft_close(b[0]), 0);
        CHECK_EQ(weft_close(b[1]), 0);
    }
    return NULL;
}

TEST(poll_reports_no_readiness_of_a_closed_file) {
    enum { V = 8 };
    int rounds = trials(TEST_SANITIZED ? 10 : 100);
    atomic_store(&stale_bad, 0);
    weft_thread *t[V];
    for (int i = 0; i < V; i++) CHECK_EQ(weft_spawn(&t[i], sr_loop, (void *)(intptr_t)rounds, NULL), 0);
    for (int i = 0; i < V; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(atomic_load(&stale_bad), 0);
}
