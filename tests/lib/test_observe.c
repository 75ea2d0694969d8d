/* observe: counters and the thread dump. */
#include "harness.h"
#include "json.h"

#include <stdatomic.h>

static void *noop(void *a) { return a; }

TEST(stats_count_activity) {
    weft_stats s0, s1;
    weft_stats_get(&s0);
    weft_thread *t[100];
    for (int i = 0; i < 100; i++) CHECK_EQ(weft_spawn(&t[i], noop, NULL, NULL), 0);
    for (int i = 0; i < 100; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    weft_stats_get(&s1);
    CHECK_EQ(s1.started - s0.started, 100);
    CHECK_EQ(s1.live, 0);
    CHECK(s1.switches >= s0.switches + 100);
    CHECK(s1.carriers >= 1);
    CHECK(s1.stacks >= 1);
}

static atomic_int up;
enum { PARK_SLEEP_LINE = __LINE__ + 3 }; /* the weft_sleep below */
static void *park_sleep(void *a) {
    atomic_fetch_add(&up, 1);
    weft_sleep(3600LL * 1000000000); /* the macro records this line; cancelled long before the end */
    return NULL;
}

TEST(stats_peak_and_parks) {
    DET_SKIP("a platform thread counts sleepers after real time; virtual sleeps are over by then");
    enum { N = 500 };
    weft_thread *t[N];
    for (int i = 0; i < N; i++) CHECK_EQ(weft_spawn(&t[i], park_sleep, NULL, NULL), 0);
    while (atomic_load(&up) < N) usleep(500);
    /* each has counted itself just before parking: wait for the parks (the
     * counters are per carrier and read without synchronising) */
    weft_stats s;
    weft_stats_get(&s);
    while (s.parks < N) { /* (never: the harness's timeout) */
        usleep(1000);
        weft_stats_get(&s);
    }
    CHECK(s.live >= N);
    CHECK(s.peak >= N);
    CHECK(s.parks >= N);
    for (int i = 0; i < N; i++) weft_cancel(t[i]);
    for (int i = 0; i < N; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    weft_stats_get(&s);
    CHECK_EQ(s.live, 0);
    CHECK(s.peak >= N);
}

static char *dump_to_string(int fmt) {
    char path[] = "/tmp/weft-dump-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    CHECK_EQ(weft_dump(fd, fmt), 0);
    off_t len = lseek(fd, 0, SEEK_END);
    char *buf = malloc((size_t)len + 1);
    CHECK(pread(fd, buf, (size_t)len, 0) == len);
    buf[len] = 0;
    close(fd);
    return buf;
}

static void *joins_other(void *a) {
    weft_join((weft_thread *)a, NULL);
    return NULL;
}

static atomic_int spin_go;
static void *spinner(void *a) {
    atomic_fetch_add(&up, 1);
    while (!atomic_load(&spin_go)) {} /* holds its carrier: shows as running */
    return NULL;
}

TEST(dump_text_lists_states_and_sites) {
    DET_SKIP("waits in real time to see sleepers that virtual time has ended");
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread_opts sa = {.name = "sleepy"}, ja = {.name = "waiter"}, ra = {.name = "busy"};
    weft_thread *s, *j, *r;
    CHECK_EQ(weft_spawn(&s, park_sleep, NULL, &sa), 0);
    CHECK_EQ(weft_spawn(&j, joins_other, s, &ja), 0);
    CHECK_EQ(weft_spawn(&r, spinner, NULL, &ra), 0);
    /* each in its state once it gets there, however loaded the machine:
     * the dump is taken again until it shows all three */
    char *d = dump_showing(WEFT_DUMP_TEXT, "\"sleepy\" sleeping for", "test_observe.c:" /* the call's site */,
                           "\"waiter\" parked on join", "\"busy\" running on carrier", "resident",
                           "      at " /* a backtrace */, NULL);
    printf("%s", d);
    free(d);
    d = dump_showing(WEFT_DUMP_JSON, "\"weft_dump\"", "\"name\":\"sleepy\"", "\"waiting_on\":\"join\"",
                     "\"state\":\"running\"", NULL);
    free(d);
    atomic_store(&spin_go, 1);
    weft_cancel(s);
    CHECK_EQ(weft_join(j, NULL), 0);
    CHECK_EQ(weft_join(r, NULL), 0);
    CHECK_EQ(weft_dump(-1, WEFT_DUMP_TEXT), -EBADF);
    CHECK_EQ(weft_dump(1, 99), -EINVAL);
}

TEST(observing_does_not_start_the_runtime) {
    weft_stats s;
    weft_stats_get(&s);
    CHECK_EQ(s.carriers, 0);
    CHECK_EQ(s.started, 0);
    char *d = dump_to_string(WEFT_DUMP_TEXT);
    CHECK(strstr(d, "0 live vthreads") != NULL);
    free(d);
    weft_stats_get(&s);
    CHECK_EQ(s.carriers, 0); /* still not running */
}

/* SIGQUIT writes a dump (from a thread of its own, not the handler). */
static void *sleepy(void *arg) {
    weft_sleep(3600 * 1000000000LL); /* until cancelled */
    return NULL;
}

TEST(dump_on_sigquit) {
    weft_thread *t;
    weft_thread_opts a = {.name = "sleepy-one"};
    CHECK_EQ(weft_spawn(&t, sleepy, NULL, &a), 0);
    char path[] = "/tmp/weft-sigquit-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK_EQ(weft_dump_on_signal(SIGQUIT, fd, WEFT_DUMP_JSON), 0);
    weft_sleep(10 * 1000000);
    CHECK_EQ(kill(getpid(), SIGQUIT), 0);
    char buf[65536];
    int found = 0;
    while (!found) { /* the dump's thread writes it when it runs (never: the harness's timeout) */
        weft_sleep(10 * 1000000);
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        if (n > 0) {
            buf[n] = 0;
            found = strstr(buf, "sleepy-one") && strstr(buf, "]}}");
        }
    }
    CHECK(found);
    CHECK_EQ(weft_dump_on_signal(0, fd, WEFT_DUMP_JSON), 0);
    CHECK_EQ(weft_dump_on_signal(SIGKILL, fd, WEFT_DUMP_JSON), -EINVAL);
    CHECK_EQ(weft_dump_on_signal(SIGQUIT, fd, 9), -EINVAL);
    close(fd);
    unlink(path);
    weft_cancel(t);
    CHECK_EQ(weft_join(t, NULL), 0);
}

/* A dump taken on a vthread (its stack has no room for libdw: the dump is
 * written by a thread of its own while the vthread parks) names frames as
 * one taken on a platform thread does, and groups identical stacks. */
static void *dumps_json(void *out) {
    *(char **)out = dump_to_string(WEFT_DUMP_JSON);
    return NULL;
}

TEST(dump_from_a_vthread_names_frames) {
    DET_SKIP("waits in real time for the sleepers to park");
    enum { N = 5 };
    weft_thread *t[N], *d;
    weft_thread_opts sa = {.name = "sleeper"};
    atomic_store(&up, 0);
    for (int i = 0; i < N; i++) CHECK_EQ(weft_spawn(&t[i], park_sleep, NULL, &sa), 0);
    while (atomic_load(&up) < N) usleep(1000);
    char *js = NULL;
    for (int tries = 0; tries < 2000; tries++) { /* until all N show parked at the site */
        free(js);
        CHECK_EQ(weft_spawn(&d, dumps_json, &js, NULL), 0);
        CHECK_EQ(weft_join(d, NULL), 0);
        if (strstr(js, "{\"count\":5,\"state\":\"parked\",\"waiting_on\":\"sleep\"")) break;
        usleep(2000);
    }
    printf("%.2000s\n", js);
    CHECK(strstr(js, "{\"count\":5,\"state\":\"parked\",\"waiting_on\":\"sleep\",\"call\":\"weft_sleep_until\"") != NULL);
    char site[64];
    snprintf(site, sizeof site, "test_observe.c:%d\",\"site_function\":\"park_sleep\"", PARK_SLEEP_LINE);
    CHECK(strstr(js, site) != NULL);
    CHECK(strstr(js, "\"function\":\"park_sleep\",\"offset\":\"0x") != NULL);
    CHECK(strstr(js, "\"unwinder\":\"libdw\"") != NULL);
    free(js);
    char *tx = dump_to_string(WEFT_DUMP_TEXT);
    CHECK(strstr(tx, "5 vthreads parked on sleep in weft_sleep_until at ") != NULL);
    CHECK(strstr(tx, "      at park_sleep+0x") != NULL);
    free(tx);
    for (int i = 0; i < N; i++) weft_cancel(t[i]);
    for (int i = 0; i < N; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
}

/* A fork child's dump names its own vthreads' frames: the parent's libdw
 * state (made by a dump before the fork) is not the child's to use. */
TEST(dump_in_fork_child_names_frames) {
    DET_SKIP("the child waits in real time for its sleeper to park");
    char *d = dump_to_string(WEFT_DUMP_TEXT); /* the parent's symbolizer is set up */
    free(d);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        weft_thread *t;
        weft_thread_opts a = {.name = "child-sleeper"};
        atomic_store(&up, 0);
        if (weft_spawn(&t, park_sleep, NULL, &a) != 0) _exit(2);
        while (atomic_load(&up) < 1) usleep(1000);
        for (int tries = 0; tries < 2000; tries++) {
            char *tx = dump_to_string(WEFT_DUMP_TEXT);
            int ok = strstr(tx, "\"child-sleeper\" sleeping") && strstr(tx, "      at park_sleep+0x") &&
                     strstr(tx, "test_observe.c:");
            free(tx);
            if (ok) _exit(0);
            usleep(2000);
        }
        _exit(1);
    }
    int st = 0;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
}

/* The JSON checker the dump tests rely on (apps/common/json.h) refuses
 * what is not JSON, and reads what is; then the whole dump parses with it. */
TEST(json_checker_and_the_dump) {
    static const char *bad[] = {"", "{", "{\"a\":}", "{\"a\" 1}", "[1,]", "[1 2]", "\"abc", "\"a\\x\"", "01",
                                "1.", "-", "tru", "{\"a\":1,}", "\"\\ud800\"", "\"tab\there\"", "[[[[", "{1:2}"};
    char err[128];
    const json *j;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *rest;
        json_doc *doc = json_parse_prefix(bad[i], strlen(bad[i]), &j, &rest, err, sizeof err);
        int whole = doc && rest == bad[i] + strlen(bad[i]);
        if (whole) printf("accepted '%s'\n", bad[i]);
        CHECK(!whole);
        json_free(doc);
    }
    const char *good = " {\"a\":[1,-2.5e3,true,false,null,\"x\\u00e9\\ud83d\\ude00\\n\"],\"b\":{}} ";
    const char *rest;
    json_doc *doc = json_parse_prefix(good, strlen(good), &j, &rest, err, sizeof err);
    CHECK(doc != NULL);
    CHECK(rest == good + strlen(good));
    const json *a = json_get(j, "a");
    CHECK(a && a->type == JSON_ARR && a->first && a->first->num == 1 && a->first->next->num == -2500);
    CHECK(!strcmp(a->first->next->next->next->next->next->str, "x\xc3\xa9\xf0\x9f\x98\x80\n"));
    json_free(doc);
    /* a dump with vthreads in it */
    weft_thread *t;
    weft_thread_opts sa = {.name = "quote\"and\\slash"};
    atomic_store(&up, 0);
    CHECK_EQ(weft_spawn(&t, park_sleep, NULL, &sa), 0);
    while (atomic_load(&up) < 1) usleep(1000);
    char *d = dump_to_string(WEFT_DUMP_JSON);
    doc = json_parse_prefix(d, strlen(d), &j, &rest, err, sizeof err);
    if (!doc) printf("%s\n", err);
    CHECK(doc != NULL);
    CHECK(*rest == 0);
    const json *vs = json_get(json_get(j, "weft_dump"), "vthreads");
    CHECK(vs && vs->first);
    int named = 0;
    for (const json *v = vs->first; v; v = v->next)
        named += !strcmp(json_str(json_get(v, "name"), NULL), "quote\"and\\slash");
    CHECK_EQ(named, 1);
    json_free(doc);
    free(d);
    weft_cancel(t);
    CHECK_EQ(weft_join(t, NULL), 0);
}

/* Vthreads that park and wake all the time, while dumps are taken: each
 * one's "since" is later than the time the dump started at. */
static atomic_int churn_stop;
static void *churn(void *a) {
    unsigned x = (unsigned)(uintptr_t)a * 2654435761u + 1;
    while (!atomic_load(&churn_stop)) {
        x = x * 1103515245u + 12345u;
        weft_sleep((int64_t)(x >> 16) % 200000); /* up to 0.2 ms */
    }
    return NULL;
}

/* A dump never shows a negative age: "parked on io since -0.047 s" came
 * from reading the clock once, at the dump's start, while vthreads kept
 * parking as the walk went on. */
TEST(dump_ages_never_negative) {
    DET_SKIP("vthreads churn in real time while platform-thread dumps read them");
    if (TEST_TSAN && !getenv("WEFT_TEST_DUMP_UNDER_TSAN"))
        SKIP("the dump's reads of vthreads parking as it walks are racy by design (see test_future)");
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    enum { N = 400, DUMPS = 40 };
    weft_thread *t[N];
    atomic_store(&churn_stop, 0);
    for (int i = 0; i < N; i++) CHECK_EQ(weft_spawn(&t[i], churn, (void *)(uintptr_t)i, NULL), 0);
    int parked_seen = 0;
    for (int k = 0; k < DUMPS; k++) {
        int json = k & 1;
        char *d = dump_to_string(json ? WEFT_DUMP_JSON : WEFT_DUMP_TEXT);
        const char *bad = json ? "\"since_ns\":-" : "for -"; /* ("parked on io for -0.047 s") */
        const char *p = strstr(d, bad);
        if (p) {
            const char *from = p - d > 200 ? p - 200 : d;
            printf("dump %d (%s) shows a negative age:\n%.400s\n", k, json ? "JSON" : "text", from);
        }
        CHECK(p == NULL);
        CHECK(strstr(d, json ? "\"until_ns\":-" : "for -") == NULL);
        if (strstr(d, json ? "\"since_ns\":" : "(asleep for ")) parked_seen++;
        free(d);
    }
    printf("%d of %d dumps showed sleepers\n", parked_seen, DUMPS);
    CHECK(parked_seen > 0);
    atomic_store(&churn_stop, 1);
    for (int i = 0; i < N; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
}
