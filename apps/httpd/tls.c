/*
 * weft-httpd's HTTPS (--tls-cert FILE --tls-key FILE [--tls-port N]): the
 * one OpenSSL context, and a connection's TLS -- its handshake, reads and
 * writes -- for the models that give a connection a thread (virtual,
 * thread, pool:N), and non-blocking for --model async's handlers (async.c
 * waits for readiness itself: "the async model's" below).
 *
 * Where the bytes go.  A connection's SSL reads and writes through
 * apps/common/weft_tls.h's BIO, whose calls are weft_recv_until and
 * weft_send_until: a vthread parks in weft's ring exactly where a plain
 * connection's recv would, and a pthread (thread, pool:N) makes the plain
 * system call -- the same BIO, no hooks, and the error that ended a read
 * (-ETIMEDOUT from a deadline, -ECONNRESET) comes back as itself.  Each
 * call carries its deadline in the BIO: the handshake must end within
 * --header-timeout of the accept (a client that stops mid-handshake is the
 * slowloris of TLS), a read has the deadline the plain path gives its
 * recv, and every record written has --send-timeout.
 *
 * The context, made once by tls_setup() before the runtime starts and only
 * read afterwards (OpenSSL's SSL_CTX is safe to share once set up):
 *   - TLS 1.2 and 1.3 (nothing older), OpenSSL's default ciphers;
 *   - SSL_OP_NO_RENEGOTIATION: a TLS 1.2 client asking to renegotiate is
 *     refused with an alert (no handshake's CPU spent on it), and OpenSSL's
 *     client then ends the connection; TLS 1.3 has no renegotiation (a
 *     second ClientHello is a fatal error).  Either way the read fails and
 *     the connection closes;
 *   - SSL_OP_IGNORE_UNEXPECTED_EOF: a client that closes without
 *     close_notify (most do, between requests) is a plain end, as in HTTP;
 *   - returning clients resume: session tickets (TLS 1.3: one per
 *     handshake; TLS 1.2 clients that offer the extension) and TLS 1.2's
 *     server session cache (20,000 sessions, the id context "weft-httpd")
 *     for those that do not.  A single process's ticket keys are
 *     OpenSSL's own.  With --workers, SO_REUSEPORT sends a returning
 *     client to any worker, so the supervisor makes one key for its life
 *     (tls_ticket_keys_make: 80 random bytes in a sealed memfd, passed to
 *     each worker it starts, SIGHUP's replacements too) and every worker
 *     seals and opens tickets with it (tls_ticket_keys_use; AES-256-CBC
 *     and HMAC-SHA256, as OpenSSL's own tickets): a client resumes with
 *     any worker, and across a rolling restart.  The key lives in the
 *     workers' static memory, never on a vthread's stack;
 *   - read-ahead: a read takes what the socket has, not a record's 5-byte
 *     header and then its body (two system calls a request): what it took
 *     beyond the record waits in OpenSSL's buffer, so "is there more" asks
 *     SSL_has_pending (bytes buffered, decrypted or not) before the socket;
 *   - SSL_MODE_RELEASE_BUFFERS: an idle keep-alive connection holds no
 *     record buffers (~34 KiB otherwise), as a plain one holds no stack
 *     pages beyond what it touched; and once a burst of connections has
 *     ended, tls_sweep gives the heap's free pages back (malloc_trim).
 * The private key is read by OpenSSL into its own heap and nowhere else:
 * not into a vthread's name, its stack beyond the load (main's, before
 * any vthread runs), the dump or the console.  The key file's path is
 * the only thing of it weft-httpd prints.
 *
 * Bodies.  A file's body goes by pread into a 16 KiB buffer and SSL_write
 * (each a record): sendfile cannot carry TLS unless the kernel encrypts
 * (kernel TLS, the "tls" module).  tls_setup says at start whether the
 * kernel has it; weft-httpd does not use it yet (this machine's kernel has
 * no "tls" module to test it against), and says that too.
 *
 * Errors.  A certificate or key that cannot be read or does not match is
 * a message naming the file and OpenSSL's reason, and exit 1 at start.  A
 * client's bad handshake (garbage instead of a ClientHello, a protocol
 * version we refuse, a handshake cut short) closes the connection quietly,
 * as a malformed request does: no line per failed handshake on stderr.
 */

#define _GNU_SOURCE
#include "httpd_int.h"

#if WEFT_HTTPD_TLS

#include "weft_tls.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/mman.h>
#include <sys/random.h>

static SSL_CTX *ctx;
/* live TLS connections, and their most since the last trim (tls_sweep) */
static atomic_int live, peak;

int tls_on(void) { return ctx != NULL; }

/* Once a second: when a burst of TLS connections has ended, malloc_trim
 * gives their heap's free pages back -- what OpenSSL allocated for them,
 * freed into the carriers' malloc arenas, which glibc does not return by
 * itself (the thread models' stacks go back by weft's own idle release).
 * A burst has ended when 256 fewer are live than the most since the last
 * look, or, for its tail, half as many (of 16 or more): a trim taken while
 * the last 200 of 3,000 were closing leaves their allocations pinning
 * pages all through the heap, and the next look must trim again once they
 * are gone.  A trickle of one or two connections never trims. */
static void tls_sweep(ssize_t res, void *arg) {
    int now = atomic_load(&live), most = atomic_exchange(&peak, now);
    if (most - now >= 256 || (most >= 16 && now <= most / 2)) malloc_trim(0);
    if (weft_timer_async(weft_now() + NS, tls_sweep, NULL, NULL) < 0) { /* no memory: no more sweeps */
    }
}

int tls_start(void) { return ctx ? (int)weft_timer_async(weft_now() + NS, tls_sweep, NULL, NULL) : 0; }

/* Says why the file could not be used, with OpenSSL's reason; -1. */
static int setup_error(const char *opt, const char *file, const char *what) {
    char why[256];
    weft_tls_error(why, sizeof why, "no reason given");
    fprintf(stderr, "weft-httpd: %s %s: %s (%s)\n", opt, file, what, why);
    return -1;
}

/* Whether the kernel can encrypt for sendfile (the "tls" upper-layer
 * protocol): asked on an unconnected TCP socket, which refuses with
 * ENOTCONN when the module is there and ENOENT when it is not. */
static const char *ktls_state(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return "unknown (no socket to ask with)";
    int r = setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof "tls");
    int e = errno;
    close(fd);
    if (r == 0 || e == ENOTCONN || e == EEXIST) return "the kernel has it, weft-httpd does not use it yet";
    if (e == ENOENT) return "not in this kernel (no \"tls\" module)";
    return strerror(e);
}

int tls_setup(void) {
    if (!O.tls_cert && !O.tls_key) return 0;
    if (!O.tls_cert || !O.tls_key) {
        fprintf(stderr, "weft-httpd: --tls-cert and --tls-key go together (one of them is missing)\n");
        return -1;
    }
    /* say plainly what is wrong with the path before OpenSSL's words */
    const char *files[2][2] = {{"--tls-cert", O.tls_cert}, {"--tls-key", O.tls_key}};
    for (int i = 0; i < 2; i++) {
        if (access(files[i][1], R_OK) < 0) {
            fprintf(stderr, "weft-httpd: %s %s: %s\n", files[i][0], files[i][1], strerror(errno));
            return -1;
        }
    }
    /* no OpenSSL clean-up at exit: the thread models' connection threads
     * are detached, and one still ending (its last unlock of an OpenSSL
     * lock) raced with exit's destruction of those locks -- TSan saw it in
     * pool:N; the process's end frees the memory anyway */
    OPENSSL_init_ssl(OPENSSL_INIT_NO_ATEXIT, NULL);
    ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) return setup_error("--tls-cert", O.tls_cert, "cannot make an OpenSSL context");
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_COMPRESSION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_read_ahead(ctx, 1);
    if (SSL_CTX_use_certificate_chain_file(ctx, O.tls_cert) != 1) {
        SSL_CTX_free(ctx);
        ctx = NULL;
        return setup_error("--tls-cert", O.tls_cert, "not a certificate (chain) in PEM");
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, O.tls_key, SSL_FILETYPE_PEM) != 1) {
        /* OpenSSL checks the pair as it takes the key */
        int mismatch = ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
        SSL_CTX_free(ctx);
        ctx = NULL;
        return setup_error("--tls-key", O.tls_key,
                           mismatch ? "does not match the certificate of --tls-cert" : "not a private key in PEM");
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        SSL_CTX_free(ctx);
        ctx = NULL;
        return setup_error("--tls-key", O.tls_key, "does not match the certificate of --tls-cert");
    }
    static const unsigned char sid[] = "weft-httpd";
    SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    SSL_CTX_sess_set_cache_size(ctx, 20000);
    SSL_CTX_set_num_tickets(ctx, 1);
    if (!O.quiet && O.worker_slot < 0) /* (a worker's supervisor said it) */
        fprintf(stderr, "weft-httpd: https: TLS 1.2 and 1.3; kernel TLS: %s; file bodies go by SSL_write\n",
                ktls_state());
    return 0;
}

void tls_fini(void) {
    SSL_CTX_free(ctx);
    ctx = NULL;
}

/* --workers' shared ticket key: its name (16 bytes), HMAC key (32) and
 * AES key (32), in that order */
enum { TK_NAME = 0, TK_HMAC = 16, TK_AES = 48, TK_LEN = 80 };
static unsigned char tk[TK_LEN];

int tls_ticket_keys_make(void) {
    unsigned char k[TK_LEN];
    size_t got = 0;
    while (got < sizeof k) {
        ssize_t r = getrandom(k + got, sizeof k - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -errno;
        got += (size_t)r;
    }
    int fd = memfd_create("weft-httpd ticket key", MFD_CLOEXEC | MFD_ALLOW_SEALING), e = 0;
    if (fd < 0) return -errno;
    if (write(fd, k, sizeof k) != (ssize_t)sizeof k ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
        e = errno ? -errno : -EIO;
    OPENSSL_cleanse(k, sizeof k);
    if (e) {
        close(fd);
        return e;
    }
    return fd;
}

/* OpenSSL's ticket callback with the shared key: 1 sealed or opened, 0 a
 * ticket under another key (a full handshake), -1 an error */
static int ticket_cb(SSL *s, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *cctx, EVP_MAC_CTX *hctx,
                     int enc) {
    (void)s;
    static char sha256[] = "SHA256";
    OSSL_PARAM ps[3] = {OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, tk + TK_HMAC, 32),
                        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, sha256, 0), OSSL_PARAM_construct_end()};
    if (enc) {
        memcpy(name, tk + TK_NAME, 16);
        if (RAND_bytes(iv, 16) != 1 || EVP_EncryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, tk + TK_AES, iv) != 1)
            return -1;
    } else {
        if (memcmp(name, tk + TK_NAME, 16) != 0) return 0;
        if (EVP_DecryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, tk + TK_AES, iv) != 1) return -1;
    }
    return EVP_MAC_CTX_set_params(hctx, ps) == 1 ? 1 : -1;
}

int tls_ticket_keys_use(int fd) {
    ssize_t r = pread(fd, tk, sizeof tk, 0);
    int e = r < 0 ? errno : 0;
    close(fd);
    if (r != (ssize_t)sizeof tk) {
        fprintf(stderr, "weft-httpd: --worker: the supervisor's ticket key: %s\n", e ? strerror(e) : "short");
        return -1;
    }
    if (!ctx || SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_cb) != 1) {
        fprintf(stderr, "weft-httpd: --worker: OpenSSL refused the ticket key callback\n");
        return -1;
    }
    return 0;
}

/* -errno for what ended an SSL call that returned r (<= 0): the BIO's own
 * error (-ETIMEDOUT, -ECONNRESET, -ECANCELED), 0 for the peer's end,
 * -EPROTO for a TLS error (a bad record, an alert, a refused handshake). */
static int tls_err(SSL *s, int r) {
    int e = SSL_get_error(s, r), be = weft_tls_bio_error(SSL_get_rbio(s));
    if (!be) be = weft_tls_bio_error(SSL_get_wbio(s));
    ERR_clear_error();
    switch (e) {
    case SSL_ERROR_ZERO_RETURN: return 0;
    case SSL_ERROR_SYSCALL: return be ? be : 0; /* no error: EOF */
    default: return be ? be : -EPROTO;
    }
}

/* c->ssl, a server's, over the BIO; counted live.  0 or -ENOMEM. */
static int tls_new(conn *c) {
    SSL *s = SSL_new(ctx);
    BIO *b = s ? weft_tls_bio_new(c->fd) : NULL;
    if (!b) {
        SSL_free(s);
        return -ENOMEM;
    }
    SSL_set_bio(s, b, b);
    SSL_set_accept_state(s);
    c->ssl = s;
    int n = atomic_fetch_add(&live, 1) + 1, p = atomic_load(&peak);
    while (n > p && !atomic_compare_exchange_weak(&peak, &p, n)) {
    }
    return 0;
}

int tls_accept(conn *c, int64_t deadline) {
    if (tls_new(c) < 0) return -ENOMEM;
    SSL *s = c->ssl;
    weft_tls_bio_set_deadline(SSL_get_rbio(s), deadline);
    int r = SSL_accept(s);
    if (r == 1) return 0;
    r = tls_err(s, r);
    return r ? r : -ECONNRESET;
}

ssize_t tls_recv(conn *c, void *buf, size_t n, int64_t deadline) {
    SSL *s = c->ssl;
    weft_tls_bio_set_deadline(SSL_get_rbio(s), deadline);
    size_t got = 0;
    int r = SSL_read_ex(s, buf, n, &got);
    if (r == 1) return (ssize_t)got;
    return tls_err(s, r);
}

/* What is there to read now, without waiting long: bytes OpenSSL holds
 * (read ahead), or a record the socket has (the rest of a record begun is
 * given a moment: its sender is writing it); nothing there: 0, as for the
 * plain path's MSG_DONTWAIT (a weft deadline already past would not look). */
ssize_t tls_recv_now(conn *c, void *buf, size_t n) {
    if (!SSL_has_pending(c->ssl)) {
        struct pollfd pf = {.fd = c->fd, .events = POLLIN};
        if (poll(&pf, 1, 0) != 1) return 0;
    }
    ssize_t r = tls_recv(c, buf, n, weft_now() + NS / 10);
    return r == -ETIMEDOUT ? 0 : r;
}

int tls_send(conn *c, const void *buf, size_t n, int more) {
    SSL *s = c->ssl;
    BIO *b = SSL_get_wbio(s);
    while (n) {
        /* a record at a time, each with --send-timeout to go out, and
         * MSG_MORE on all but the last unless more follows */
        size_t k = n < 16384 ? n : 16384, done = 0;
        weft_tls_bio_set_more(b, more || k < n);
        weft_tls_bio_set_deadline(b, weft_now() + O.send_timeout);
        int r = SSL_write_ex(s, buf, k, &done);
        if (r != 1) {
            weft_tls_bio_set_more(b, 0);
            r = tls_err(s, r);
            return r ? r : -EPIPE;
        }
        buf = (const char *)buf + done;
        n -= done;
    }
    weft_tls_bio_set_more(b, 0);
    return 0;
}

long long tls_send_file(conn *c, int fd, off_t *off, long long n) {
    enum { CHUNK = 16384 };
    char *chunk = malloc(CHUNK);
    if (!chunk) return -ENOMEM;
    long long sent = 0;
    int err = 0;
    while (sent < n) {
        size_t want = n - sent < CHUNK ? (size_t)(n - sent) : CHUNK;
        ssize_t got = weft_pread(fd, chunk, want, *off);
        if (got <= 0) { /* 0: the file shrank under us */
            err = got < 0 ? (int)got : 0;
            break;
        }
        if ((err = tls_send(c, chunk, (size_t)got, sent + got < n)) < 0) break;
        *off += got;
        sent += got;
    }
    free(chunk);
    return err < 0 ? err : sent;
}

/* ---- the async model's: non-blocking (async.c) ----
 *
 * The same SSL over the same BIO, turned non-blocking: a call that would
 * wait returns -EAGAIN with *wait the poll event to wait for (POLLIN, or
 * POLLOUT: a TLS read may have to write, and a write to read), and the
 * handler waits with weft_poll_async and calls again with the same
 * arguments.  Writes may be partial (a record or more went out), so that
 * a large body does not sit whole in OpenSSL's buffers. */

/* -EAGAIN and *wait for a call that would block; else as tls_err */
static int tls_err_nb(SSL *s, int r, short *wait) {
    int e = SSL_get_error(s, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        ERR_clear_error();
        *wait = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        return -EAGAIN;
    }
    return tls_err(s, r);
}

int tls_open_nb(conn *c) {
    if (tls_new(c) < 0) return -ENOMEM;
    weft_tls_bio_set_nonblock(SSL_get_rbio(c->ssl), 1);
    SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    return 0;
}

int tls_handshake_nb(conn *c, short *wait) {
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) return 0;
    r = tls_err_nb(c->ssl, r, wait);
    return r ? r : -ECONNRESET;
}

ssize_t tls_read_nb(conn *c, void *buf, size_t n, short *wait) {
    size_t got = 0;
    int r = SSL_read_ex(c->ssl, buf, n, &got);
    return r == 1 ? (ssize_t)got : tls_err_nb(c->ssl, r, wait);
}

ssize_t tls_write_nb(conn *c, const void *buf, size_t n, int more, short *wait) {
    size_t done = 0;
    BIO *b = SSL_get_wbio(c->ssl);
    weft_tls_bio_set_more(b, more);
    int r = SSL_write_ex(c->ssl, buf, n, &done);
    weft_tls_bio_set_more(b, 0);
    if (r == 1) return (ssize_t)done;
    r = tls_err_nb(c->ssl, r, wait);
    return r ? r : -EPIPE;
}

int tls_pending(conn *c) { return SSL_has_pending(c->ssl); }

void tls_close(conn *c) {
    if (!c->ssl) return;
    /* close_notify, without waiting for the client's: a short deadline,
     * and only on a connection that did not fail */
    if (SSL_is_init_finished(c->ssl) && !(SSL_get_shutdown(c->ssl) & SSL_SENT_SHUTDOWN)) {
        weft_tls_bio_set_deadline(SSL_get_wbio(c->ssl), weft_now() + NS / 10);
        SSL_shutdown(c->ssl);
    }
    ERR_clear_error();
    SSL_free(c->ssl);
    c->ssl = NULL;
    atomic_fetch_sub(&live, 1);
}

#else /* built without OpenSSL 3 */

int tls_on(void) { return 0; }

int tls_setup(void) {
    if (!O.tls_cert && !O.tls_key) return 0;
    fprintf(stderr, "weft-httpd: --tls-cert/--tls-key: this weft-httpd was built without OpenSSL 3 "
                    "(apt-get install libssl-dev, then build again)\n");
    return -1;
}

void tls_fini(void) {}
int tls_start(void) { return 0; }
int tls_ticket_keys_make(void) { return -ENOTSUP; }
int tls_ticket_keys_use(int fd) {
    close(fd);
    return -1;
}

/* never called: no connection has an SSL without a context */
int tls_accept(conn *c, int64_t deadline) { return -ENOTSUP; }
ssize_t tls_recv(conn *c, void *buf, size_t n, int64_t deadline) { return -ENOTSUP; }
ssize_t tls_recv_now(conn *c, void *buf, size_t n) { return -ENOTSUP; }
int tls_send(conn *c, const void *buf, size_t n, int more) { return -ENOTSUP; }
long long tls_send_file(conn *c, int fd, off_t *off, long long n) { return -ENOTSUP; }
void tls_close(conn *c) {}
int tls_open_nb(conn *c) { return -ENOTSUP; }
int tls_handshake_nb(conn *c, short *wait) { return -ENOTSUP; }
ssize_t tls_read_nb(conn *c, void *buf, size_t n, short *wait) { return -ENOTSUP; }
ssize_t tls_write_nb(conn *c, const void *buf, size_t n, int more, short *wait) { return -ENOTSUP; }
int tls_pending(conn *c) { return 0; }

#endif
