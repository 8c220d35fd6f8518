/*
 * uds_transport.c: an hvd transport plugin written from the installed
 * headers alone (hvd_transport.h and hvd.h), as a third party would. It is
 * point-to-point only: the core runs every collective over it.
 *
 *   cc -std=c99 -pedantic -Wall -Wextra -Werror -fPIC -shared \
 *      -I<prefix>/include -o libhvd_transport_uds.so uds_transport.c
 *
 * Transport: one Unix-domain stream socket per pair of ranks (so every rank
 * must be on one host). Set-up: each rank listens on an abstract socket name
 * (a file under $TMPDIR off Linux) that it publishes in the core's key-value
 * store as "uds/addr/<rank>" (the sockaddr bytes); the core's host table
 * (env.hosts) names every rank's host, so ranks on several hosts are
 * refused before anything connects, and messages name a peer's host;
 * each rank connects to every lower rank, then accepts every higher one, so
 * no rank waits for one that waits for it. Messages are framed (tag, flags,
 * length) on the byte streams; each peer has a send queue written without
 * blocking; incoming frames match posted receives by (peer, tag) in posting
 * order, and frames that arrive first are held (copied) until a receive
 * takes them. Every wait is a poll() loop bounded by its deadline and woken
 * by abort() through a pipe.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "hvd_transport.h"

#define UDS_EXPORT __attribute__((visibility("default")))
#define UDS_MAX_TAG 0x7fffffffu
#define UDS_MAGIC 0x68766475u /* "hvdu": the hello a connecting rank sends */
#define UDS_FLAG_BYE 1u        /* frame flag: the sender finalized cleanly  */
#define HDR_BYTES 16           /* tag u32, flags u32, length u64            */

enum { REQ_SEND, REQ_RECV };
enum { ST_QUEUED, ST_POSTED, ST_ACTIVE, ST_ADOPTED, ST_DONE };
enum { RX_HEADER, RX_REQ, RX_MSG, RX_DISCARD };

typedef struct uds_msg uds_msg;

struct hvd_transport_request {
    int kind, state, status, orphan;
    int32_t peer;
    uint32_t tag;
    char *data;
    size_t bytes, done;        /* send: header + payload bytes written */
    unsigned char hdr[HDR_BYTES];
    uds_msg *msg;              /* ST_ADOPTED: the held frame it takes   */
    hvd_transport_request_t *next;             /* in its peer's queue     */
    hvd_transport_request_t *all_prev, *all_next; /* every live request */
    char err[224];
};
typedef hvd_transport_request_t uds_req;

struct uds_msg { /* a frame that arrived before its receive was posted */
    uint32_t tag;
    size_t bytes, got;
    char *data;
    int consumed;   /* a receive took it (or took it and was released) */
    uds_req *waiter;
    uds_msg *next;
};

typedef struct uds_peer {
    int fd, bye, status;
    char host[64], err[224];
    uds_req *sq_head, *sq_tail;         /* sends, in order */
    uds_req *posted_head, *posted_tail; /* receives waiting for a frame */
    uds_msg *held_head, *held_tail;     /* frames waiting for a receive */
    unsigned char hdr[HDR_BYTES];
    size_t hdr_got, rx_left;
    int rx_mode;
    uds_req *rx_req;
    uds_msg *rx_msg;
} uds_peer;

typedef struct uds_comm {
    int32_t rank, size;
    char host[64];
    double timeout_s, limit_s;
    int limit_kind, has_limit;
    uds_peer *peers;
    uds_req *all;       /* every request not yet released (finalize frees) */
    struct pollfd *pfds;
    int wake[2];
    void *logger;
    void (*log)(void *, int, const char *);
    pthread_mutex_t mu; /* guards abort_status/async_status and their texts */
    int abort_status, async_status;
    char abort_reason[256], async_msg[256];
    char err[512];
} uds_comm;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(uds_comm *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(uds_comm *c, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    return status;
}

static void logf_(uds_comm *c, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void logf_(uds_comm *c, int level, const char *fmt, ...) {
    char line[300];
    va_list ap;
    if (c->log == NULL) return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    c->log(c->logger, level, line);
}

/* The status every call fails with once aborted (HVD_OK while not). */
static int aborted(uds_comm *c) {
    int s;
    pthread_mutex_lock(&c->mu);
    s = c->abort_status;
    if (s != HVD_OK) snprintf(c->err, sizeof(c->err), "%s", c->abort_reason);
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* ---- requests ------------------------------------------------------------ */

static void finish(uds_req *r, int status, const char *msg) {
    r->state = ST_DONE;
    r->status = status;
    if (msg != NULL) snprintf(r->err, sizeof(r->err), "%s", msg);
}

static uds_req *new_req(uds_comm *c) {
    uds_req *r = (uds_req *)calloc(1, sizeof(*r));
    if (r == NULL) return NULL;
    r->all_next = c->all;
    if (c->all != NULL) c->all->all_prev = r;
    c->all = r;
    return r;
}

static void free_req(uds_comm *c, uds_req *r) {
    if (r->all_prev != NULL) r->all_prev->all_next = r->all_next; else c->all = r->all_next;
    if (r->all_next != NULL) r->all_next->all_prev = r->all_prev;
    if (r->orphan) free(r->data);
    free(r);
}

static void unlink_req(uds_req **head, uds_req **tail, uds_req *r) {
    uds_req *p = NULL, *q = *head;
    while (q != NULL && q != r) { p = q; q = q->next; }
    if (q == NULL) return;
    if (p == NULL) *head = r->next; else p->next = r->next;
    if (*tail == r) *tail = p;
    r->next = NULL;
}

static void drop_msg(uds_peer *p, uds_msg *m) {
    uds_msg *prev = NULL, *q = p->held_head;
    while (q != NULL && q != m) { prev = q; q = q->next; }
    if (q != NULL) {
        if (prev == NULL) p->held_head = m->next; else prev->next = m->next;
        if (p->held_tail == m) p->held_tail = prev;
    }
    free(m->data);
    free(m);
}

/* A peer is lost (I/O error, or closed without saying goodbye): every
 * request with it fails, and so does every later one. */
static void break_peer(uds_comm *c, int32_t rank, int status, int clean, const char *why) {
    uds_peer *p = &c->peers[rank];
    uds_req *r, *next;
    if (p->status != HVD_OK) return;
    p->status = status;
    snprintf(p->err, sizeof(p->err), "uds: rank %d (host %s): connection to rank %d (host %s) %s",
             (int)c->rank, c->host, (int)rank, p->host, why);
    for (r = p->sq_head; r != NULL; r = next) {
        next = r->next;
        r->next = NULL;
        if (r->orphan) free_req(c, r); else finish(r, status, p->err);
    }
    p->sq_head = p->sq_tail = NULL;
    for (r = p->posted_head; r != NULL; r = next) { next = r->next; r->next = NULL; finish(r, status, p->err); }
    p->posted_head = p->posted_tail = NULL;
    if (p->rx_req != NULL) finish(p->rx_req, status, p->err);
    p->rx_req = NULL;
    while (p->held_head != NULL) {
        if (p->held_head->waiter != NULL) finish(p->held_head->waiter, status, p->err);
        drop_msg(p, p->held_head);
    }
    p->rx_msg = NULL;
    if (p->fd >= 0) close(p->fd);
    p->fd = -1;
    if (!clean) {
        pthread_mutex_lock(&c->mu);
        if (c->async_status == HVD_OK) {
            c->async_status = status;
            snprintf(c->async_msg, sizeof(c->async_msg), "%s", p->err);
        }
        pthread_mutex_unlock(&c->mu);
    }
    logf_(c, clean ? HVD_LOG_DEBUG : HVD_LOG_WARNING, "%s", p->err);
}

/* A held frame is complete, or a receive adopted a complete one. */
static void deliver(uds_peer *p, uds_msg *m) {
    uds_req *r = m->waiter;
    if (r != NULL) {
        if (m->bytes > 0) memcpy(r->data, m->data, m->bytes);
        finish(r, HVD_OK, NULL);
    }
    if (m->consumed) drop_msg(p, m);
}

/* ---- progress ------------------------------------------------------------ */

static void write_peer(uds_comm *c, int32_t rank) {
    uds_peer *p = &c->peers[rank];
    while (p->sq_head != NULL && p->fd >= 0) {
        uds_req *r = p->sq_head;
        struct iovec iov[2];
        struct msghdr mh;
        ssize_t n;
        int k = 0;
        if (r->done < HDR_BYTES) {
            iov[k].iov_base = r->hdr + r->done;
            iov[k++].iov_len = HDR_BYTES - r->done;
        }
        if (r->bytes > 0) {
            size_t off = r->done > HDR_BYTES ? r->done - HDR_BYTES : 0;
            iov[k].iov_base = r->data + off;
            iov[k++].iov_len = r->bytes - off;
        }
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = iov;
        mh.msg_iovlen = (size_t)k;
        n = sendmsg(p->fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            break_peer(c, rank, HVD_ERR_TRANSPORT, 0, strerror(errno));
            return;
        }
        r->done += (size_t)n;
        if (r->done < HDR_BYTES + r->bytes) continue;
        p->sq_head = r->next;
        if (p->sq_head == NULL) p->sq_tail = NULL;
        r->next = NULL;
        if (r->orphan) free_req(c, r); else finish(r, HVD_OK, NULL);
    }
}

/* A whole header arrived: find where its payload goes. */
static void route_frame(uds_comm *c, int32_t rank) {
    uds_peer *p = &c->peers[rank];
    uint32_t tag, flags;
    uint64_t len;
    uds_req *r;
    memcpy(&tag, p->hdr, 4);
    memcpy(&flags, p->hdr + 4, 4);
    memcpy(&len, p->hdr + 8, 8);
    p->hdr_got = 0;
    p->rx_left = (size_t)len;
    if (flags & UDS_FLAG_BYE) { p->bye = 1; p->rx_mode = RX_HEADER; return; }
    for (r = p->posted_head; r != NULL && r->tag != tag; r = r->next) {}
    if (r != NULL) {
        unlink_req(&p->posted_head, &p->posted_tail, r);
        if (r->bytes != len) {
            char m[224];
            snprintf(m, sizeof(m), "uds: rank %d: message from rank %d tag %u has %llu bytes, "
                     "the receive posted for it %llu", (int)c->rank, (int)rank, (unsigned)tag,
                     (unsigned long long)len, (unsigned long long)r->bytes);
            finish(r, HVD_ERR_TRANSPORT, m);
            p->rx_mode = RX_DISCARD;
        } else {
            r->state = ST_ACTIVE;
            p->rx_req = r;
            p->rx_mode = RX_REQ;
        }
    } else {
        uds_msg *m = (uds_msg *)calloc(1, sizeof(*m));
        if (m != NULL && len > 0) m->data = (char *)malloc((size_t)len);
        if (m == NULL || (len > 0 && m->data == NULL)) {
            free(m);
            break_peer(c, rank, HVD_ERR_NO_MEMORY, 0, "lost a message: out of memory");
            return;
        }
        m->tag = tag;
        m->bytes = (size_t)len;
        if (p->held_tail != NULL) p->held_tail->next = m; else p->held_head = m;
        p->held_tail = m;
        p->rx_msg = m;
        p->rx_mode = RX_MSG;
    }
    if (len == 0) { /* nothing more to read: complete now */
        if (p->rx_mode == RX_REQ) finish(p->rx_req, HVD_OK, NULL);
        if (p->rx_mode == RX_MSG) deliver(p, p->rx_msg);
        p->rx_req = NULL;
        p->rx_msg = NULL;
        p->rx_mode = RX_HEADER;
    }
}

static void read_peer(uds_comm *c, int32_t rank) {
    uds_peer *p = &c->peers[rank];
    char sink[4096];
    while (p->fd >= 0) {
        char *dst;
        size_t want;
        ssize_t n;
        switch (p->rx_mode) {
        case RX_HEADER: dst = (char *)p->hdr + p->hdr_got; want = HDR_BYTES - p->hdr_got; break;
        case RX_REQ: dst = p->rx_req->data + (p->rx_req->bytes - p->rx_left); want = p->rx_left; break;
        case RX_MSG: dst = p->rx_msg->data + p->rx_msg->got; want = p->rx_left; break;
        default: dst = sink; want = p->rx_left < sizeof(sink) ? p->rx_left : sizeof(sink); break;
        }
        n = read(p->fd, dst, want);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) {
            int clean = n == 0 && p->bye && p->rx_mode == RX_HEADER && p->hdr_got == 0;
            break_peer(c, rank, HVD_ERR_TRANSPORT, clean,
                       clean ? "was closed: that rank finalized"
                       : n == 0 ? "was closed without a goodbye (the process exited or crashed?)"
                                : strerror(errno));
            return;
        }
        if (p->rx_mode == RX_HEADER) {
            p->hdr_got += (size_t)n;
            if (p->hdr_got == HDR_BYTES) route_frame(c, rank);
            continue;
        }
        p->rx_left -= (size_t)n;
        if (p->rx_mode == RX_MSG) p->rx_msg->got += (size_t)n;
        if (p->rx_left > 0) continue;
        if (p->rx_mode == RX_REQ) finish(p->rx_req, HVD_OK, NULL);
        if (p->rx_mode == RX_MSG) deliver(p, p->rx_msg);
        p->rx_req = NULL;
        p->rx_msg = NULL;
        p->rx_mode = RX_HEADER;
    }
}

/* One pass over every peer, without blocking. */
static void progress_all(uds_comm *c) {
    int32_t r;
    for (r = 0; r < c->size; ++r) {
        if (r == c->rank || c->peers[r].fd < 0) continue;
        write_peer(c, r);
        read_peer(c, r);
    }
}

/* Blocks in poll() until a peer is ready, abort() writes the pipe, or ms. */
static void poll_once(uds_comm *c, int ms) {
    nfds_t n = 0;
    int32_t r;
    char drain[16];
    c->pfds[n].fd = c->wake[0];
    c->pfds[n++].events = POLLIN;
    for (r = 0; r < c->size; ++r) {
        uds_peer *p = &c->peers[r];
        if (r == c->rank || p->fd < 0) continue;
        c->pfds[n].fd = p->fd;
        c->pfds[n++].events = (short)(POLLIN | (p->sq_head != NULL ? POLLOUT : 0));
    }
    if (poll(c->pfds, n, ms) > 0 && (c->pfds[0].revents & POLLIN)) {
        while (read(c->wake[0], drain, sizeof(drain)) > 0) {}
    }
}

/* ---- the table's entries ------------------------------------------------- */

static void release(uds_comm *c, uds_req *r) {
    uds_peer *p = &c->peers[r->peer];
    if (r->state == ST_QUEUED && r->done > 0 && p->status == HVD_OK) {
        /* Half written: the rest must still go out, or the stream breaks.
         * Keep it, with a copy of the payload the caller may now reuse. */
        char *copy = r->bytes > 0 ? (char *)malloc(r->bytes) : NULL;
        if (r->bytes > 0 && copy == NULL) {
            break_peer(c, r->peer, HVD_ERR_NO_MEMORY, 0, "lost a message: out of memory");
            free_req(c, r);
            return;
        }
        if (r->bytes > 0) memcpy(copy, r->data, r->bytes);
        r->data = copy;
        r->orphan = 1;
        return;
    }
    if (r->state == ST_QUEUED) unlink_req(&p->sq_head, &p->sq_tail, r);
    if (r->state == ST_POSTED) unlink_req(&p->posted_head, &p->posted_tail, r);
    if (r->state == ST_ACTIVE) { p->rx_req = NULL; p->rx_mode = RX_DISCARD; }
    if (r->state == ST_ADOPTED) r->msg->waiter = NULL; /* dropped once complete */
    free_req(c, r);
}

static int post(uds_comm *c, int kind, int32_t peer, uint32_t tag,
                const hvd_transport_buffer_t *buf, hvd_transport_request_t **out) {
    uds_peer *p;
    uds_req *r;
    int s = aborted(c);
    if (out != NULL) *out = NULL;
    if (s != HVD_OK) return s;
    if (out == NULL || buf == NULL || peer < 0 || peer >= c->size || peer == c->rank ||
        tag > UDS_MAX_TAG || (buf->data == NULL && buf->bytes > 0)) {
        return fail(c, HVD_ERR_INVALID_ARGUMENT, "uds: rank %d: bad %s (peer %d, tag %u)",
                    (int)c->rank, kind == REQ_SEND ? "isend" : "irecv", (int)peer, (unsigned)tag);
    }
    if (buf->memory_type != HVD_MEMORY_HOST) {
        return fail(c, HVD_ERR_UNSUPPORTED, "uds: host memory only (memory type %d)",
                    (int)buf->memory_type);
    }
    p = &c->peers[peer];
    if (p->status != HVD_OK) return fail(c, p->status, "%s", p->err);
    r = new_req(c);
    if (r == NULL) return fail(c, HVD_ERR_NO_MEMORY, "uds: out of memory");
    r->kind = kind;
    r->peer = peer;
    r->tag = tag;
    r->data = (char *)buf->data;
    r->bytes = buf->bytes;
    *out = r;
    if (kind == REQ_SEND) {
        uint32_t flags = 0;
        uint64_t len = (uint64_t)buf->bytes;
        memcpy(r->hdr, &tag, 4);
        memcpy(r->hdr + 4, &flags, 4);
        memcpy(r->hdr + 8, &len, 8);
        r->state = ST_QUEUED;
        if (p->sq_tail != NULL) p->sq_tail->next = r; else p->sq_head = r;
        p->sq_tail = r;
        write_peer(c, peer); /* most small messages leave right here */
        return HVD_OK;
    }
    {
        uds_msg *m;
        for (m = p->held_head; m != NULL && (m->consumed || m->tag != tag); m = m->next) {}
        if (m == NULL) {
            r->state = ST_POSTED;
            if (p->posted_tail != NULL) p->posted_tail->next = r; else p->posted_head = r;
            p->posted_tail = r;
        } else if (m->bytes != r->bytes) {
            m->consumed = 1;
            snprintf(r->err, sizeof(r->err), "uds: rank %d: message from rank %d tag %u has %llu "
                     "bytes, the receive posted for it %llu", (int)c->rank, (int)peer,
                     (unsigned)tag, (unsigned long long)m->bytes, (unsigned long long)r->bytes);
            finish(r, HVD_ERR_TRANSPORT, NULL);
            if (m->got == m->bytes) drop_msg(p, m);
        } else {
            m->consumed = 1;
            m->waiter = r;
            r->msg = m;
            r->state = ST_ADOPTED;
            if (m->got == m->bytes) deliver(p, m);
        }
    }
    return HVD_OK;
}

static int uds_isend(void *comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t *buf,
                     hvd_transport_request_t **req) {
    return post((uds_comm *)comm, REQ_SEND, peer, tag, buf, req);
}

static int uds_irecv(void *comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t *buf,
                     hvd_transport_request_t **req) {
    return post((uds_comm *)comm, REQ_RECV, peer, tag, buf, req);
}

/* Completes a done request: its status, its message into last_error. */
static int complete(uds_comm *c, uds_req *r) {
    int s = r->status;
    if (s != HVD_OK) fail(c, s, "%s", r->err);
    free_req(c, r);
    return s;
}

static int uds_wait(void *comm, hvd_transport_request_t *req, double timeout_s) {
    uds_comm *c = (uds_comm *)comm;
    double limit = timeout_s >= 0 ? timeout_s : (c->has_limit ? c->limit_s : c->timeout_s);
    int bounded = limit > 0;
    double start = now_s();
    int s;
    if (req == NULL) return fail(c, HVD_ERR_INVALID_ARGUMENT, "uds: wait on a NULL request");
    for (;;) {
        double left;
        if ((s = aborted(c)) != HVD_OK) { release(c, req); return s; }
        progress_all(c);
        if (req->state == ST_DONE) return complete(c, req);
        left = bounded ? start + limit - now_s() : 1.0;
        if (left <= 0) break;
        poll_once(c, left > 1.0 ? 1000 : (int)(left * 1000.0) + 1);
    }
    {
        uds_peer *p = &c->peers[req->peer];
        int peer_kind = timeout_s < 0 && c->has_limit && c->limit_kind == HVD_TRANSPORT_LIMIT_PEER;
        fail(c, HVD_ERR_TIMEOUT, "uds: rank %d (host %s): rank %d (host %s) has not answered for "
             "%g s (%s rank %d, tag %u, %llu bytes)%s", (int)c->rank, c->host, (int)req->peer,
             p->host, limit, req->kind == REQ_SEND ? "send to" : "receive from",
             (int)req->peer, (unsigned)req->tag,
             (unsigned long long)req->bytes,
             peer_kind ? " (stopped or cut off?; peer timeout)" : " (transport timeout)");
    }
    release(c, req);
    return HVD_ERR_TIMEOUT;
}

static int uds_test(void *comm, hvd_transport_request_t *req, int *done) {
    uds_comm *c = (uds_comm *)comm;
    int s;
    if (done != NULL) *done = 0;
    if (req == NULL || done == NULL) return fail(c, HVD_ERR_INVALID_ARGUMENT, "uds: bad test");
    if ((s = aborted(c)) != HVD_OK) { release(c, req); *done = 1; return s; }
    progress_all(c);
    if (req->state != ST_DONE) return HVD_OK;
    *done = 1;
    return complete(c, req);
}

static int uds_progress(void *comm) {
    uds_comm *c = (uds_comm *)comm;
    int s = aborted(c);
    if (s == HVD_OK) progress_all(c);
    return s;
}

static int uds_abort(void *comm, int status, const char *reason) {
    uds_comm *c = (uds_comm *)comm;
    char one = 1;
    pthread_mutex_lock(&c->mu);
    if (c->abort_status == HVD_OK) {
        c->abort_status = status != HVD_OK ? status : HVD_ERR_ABORTED;
        snprintf(c->abort_reason, sizeof(c->abort_reason), "uds: rank %d: aborted: %s",
                 (int)c->rank, reason != NULL ? reason : "(no reason given)");
        if (c->async_status == HVD_OK) {
            c->async_status = c->abort_status;
            snprintf(c->async_msg, sizeof(c->async_msg), "%s", c->abort_reason);
        }
        if (write(c->wake[1], &one, 1) < 0) { /* the pipe is full: already awake */ }
    }
    pthread_mutex_unlock(&c->mu);
    return HVD_OK;
}

static int uds_async_error(void *comm) {
    uds_comm *c = (uds_comm *)comm;
    int s;
    pthread_mutex_lock(&c->mu);
    s = c->async_status;
    pthread_mutex_unlock(&c->mu);
    return s;
}

static int uds_set_timeout(void *comm, double timeout_s, int32_t kind) {
    uds_comm *c = (uds_comm *)comm;
    c->has_limit = 1;
    c->limit_s = timeout_s; /* <= 0: none */
    c->limit_kind = kind;
    return HVD_OK;
}

static const char *uds_last_error(void *comm) {
    uds_comm *c = (uds_comm *)comm;
    return c != NULL ? c->err : "uds: no communicator";
}

static void uds_finalize(void *comm) {
    uds_comm *c = (uds_comm *)comm;
    int32_t r;
    if (c == NULL) return;
    for (r = 0; c->peers != NULL && r < c->size; ++r) {
        uds_peer *p = &c->peers[r];
        if (p->fd >= 0) {
            if (p->sq_head == NULL || p->sq_head->done == 0) { /* goodbye, if it leaves now */
                unsigned char bye[HDR_BYTES];
                uint32_t flags = UDS_FLAG_BYE;
                memset(bye, 0, sizeof(bye));
                memcpy(bye + 4, &flags, 4);
                if (send(p->fd, bye, sizeof(bye), MSG_NOSIGNAL) < 0) { /* the peer is gone */ }
            }
            close(p->fd);
        }
        while (p->held_head != NULL) drop_msg(p, p->held_head);
    }
    while (c->all != NULL) free_req(c, c->all); /* pending, orphaned, never waited */
    free(c->peers);
    free(c->pfds);
    if (c->wake[0] >= 0) close(c->wake[0]);
    if (c->wake[1] >= 0) close(c->wake[1]);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* ---- set-up -------------------------------------------------------------- */

typedef struct uds_hello {
    uint32_t magic;
    int32_t rank, size;
} uds_hello;

/* Reads or writes exactly len bytes of a blocking-mode socket by deadline. */
static int io_all(int fd, void *buf, size_t len, int out, double deadline) {
    size_t got = 0;
    while (got < len) {
        struct pollfd pf;
        ssize_t n;
        double left = deadline - now_s();
        pf.fd = fd;
        pf.events = out ? POLLOUT : POLLIN;
        if (left <= 0) return HVD_ERR_TIMEOUT;
        if (poll(&pf, 1, left > 1.0 ? 1000 : (int)(left * 1000.0) + 1) <= 0) continue;
        n = out ? send(fd, (char *)buf + got, len - got, MSG_NOSIGNAL)
                : recv(fd, (char *)buf + got, len - got, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (n <= 0) return HVD_ERR_TRANSPORT;
        got += (size_t)n;
    }
    return HVD_OK;
}

static int set_nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL, 0);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Listens on a fresh address; writes it to *addr / *len. */
static int listen_on(uds_comm *c, struct sockaddr_un *addr, socklen_t *len) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct timespec ts;
    if (fd < 0) return -1;
    clock_gettime(CLOCK_REALTIME, &ts);
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
#ifdef __linux__ /* abstract namespace: nothing left in the file system */
    char name[96];
    /* pid, rank, this communicator's address, the clock: unique per process
     * without a shared counter (contexts may start on several threads) */
    snprintf(name, sizeof(name), "hvd-uds-%ld-%d-%lx-%lx", (long)getpid(), (int)c->rank,
             (unsigned long)(uintptr_t)c, (unsigned long)ts.tv_nsec);
    memcpy(addr->sun_path + 1, name, strlen(name));
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
#else
    {
        const char *tmp = getenv("TMPDIR");
        int n = snprintf(addr->sun_path, sizeof(addr->sun_path), "%s/hvd-uds-%ld-%d-%lx.sock",
                         tmp && *tmp ? tmp : "/tmp", (long)getpid(), (int)c->rank,
                         (unsigned long)(uintptr_t)c);
        if (n < 0 || (size_t)n >= sizeof(addr->sun_path)) { /* $TMPDIR too long */
            close(fd);
            errno = ENAMETOOLONG;
            return -1;
        }
        unlink(addr->sun_path);
        *len = (socklen_t)sizeof(*addr);
    }
#endif
    if (bind(fd, (struct sockaddr *)addr, *len) != 0 || listen(fd, c->size) != 0 ||
        set_nonblocking(fd) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Rank r connects to every lower rank, whose addresses it reads from the
 * store, then accepts every higher one. */
static int connect_all(uds_comm *c, const hvd_transport_env_t *env, int lfd, double deadline) {
    int32_t r;
    int accepted = 0;
    for (r = 0; r < c->rank; ++r) {
        char key[48];
        void *v = NULL;
        size_t n = 0;
        struct sockaddr_un a;
        uds_hello h;
        int fd, st;
        double left = deadline - now_s();
        snprintf(key, sizeof(key), "uds/addr/%d", (int)r);
        st = env->kv_get(env->kv, key, &v, &n, left > 0 ? left : 0);
        if (st != HVD_OK) {
            return fail(c, st == HVD_ERR_TIMEOUT ? HVD_ERR_TIMEOUT : HVD_ERR_RENDEZVOUS,
                        "uds: rank %d (host %s): rank %d never published its address (key %s) "
                        "within the start timeout of %g s (not started, or failed earlier?; "
                        "status %d)", (int)c->rank, c->host, (int)r, key, env->start_timeout_s, st);
        }
        memset(&a, 0, sizeof(a));
        if (n == 0 || n > sizeof(a)) {
            env->kv_free(v);
            return fail(c, HVD_ERR_RENDEZVOUS, "uds: rank %d: rank %d published a bad address",
                        (int)c->rank, (int)r);
        }
        memcpy(&a, v, n);
        env->kv_free(v);
        for (;;) { /* the listener exists once published; retry a full backlog */
            fd = socket(AF_UNIX, SOCK_STREAM, 0);
            if (fd >= 0 && connect(fd, (struct sockaddr *)&a, (socklen_t)n) == 0) break;
            st = errno;
            if (fd >= 0) close(fd);
            if (now_s() >= deadline || (st != EAGAIN && st != ECONNREFUSED && st != EINTR)) {
                return fail(c, HVD_ERR_RENDEZVOUS, "uds: rank %d (host %s): cannot connect to "
                            "rank %d (host %s): %s", (int)c->rank, c->host, (int)r,
                            c->peers[r].host, strerror(st));
            }
            {
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
            }
        }
        memset(&h, 0, sizeof(h));
        h.magic = UDS_MAGIC;
        h.rank = c->rank;
        h.size = c->size;
        c->peers[r].fd = fd;
        if (io_all(fd, &h, sizeof(h), 1, deadline) != HVD_OK) {
            return fail(c, HVD_ERR_RENDEZVOUS, "uds: rank %d: rank %d (host %s) closed the "
                        "connection during set-up", (int)c->rank, (int)r, c->peers[r].host);
        }
    }
    while (accepted < c->size - 1 - c->rank) {
        struct pollfd pf;
        uds_hello h;
        int fd;
        double left = deadline - now_s();
        if (left <= 0) {
            char missing[160] = "";
            size_t off = 0;
            for (r = c->rank + 1; r < c->size && off + 12 < sizeof(missing); ++r) {
                if (c->peers[r].fd < 0) {
                    off += (size_t)snprintf(missing + off, sizeof(missing) - off, "%s%d",
                                            off ? ", " : "", (int)r);
                }
            }
            return fail(c, HVD_ERR_TIMEOUT, "uds: rank %d (host %s): rank(s) %s did not connect "
                        "within the start timeout of %g s (not started, or failed earlier?)",
                        (int)c->rank, c->host, missing, env->start_timeout_s);
        }
        pf.fd = lfd;
        pf.events = POLLIN;
        if (poll(&pf, 1, left > 1.0 ? 1000 : (int)(left * 1000.0) + 1) <= 0) continue;
        fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue;
        if (io_all(fd, &h, sizeof(h), 0, deadline) != HVD_OK || h.magic != UDS_MAGIC ||
            h.size != c->size || h.rank <= c->rank || h.rank >= c->size ||
            c->peers[h.rank].fd >= 0) {
            close(fd); /* a stray or broken connection: not one of ours */
            continue;
        }
        c->peers[h.rank].fd = fd;
        ++accepted;
    }
    for (r = 0; r < c->size; ++r) {
        if (r != c->rank && set_nonblocking(c->peers[r].fd) != 0) {
            return fail(c, HVD_ERR_TRANSPORT, "uds: rank %d: fcntl: %s", (int)c->rank,
                        strerror(errno));
        }
    }
    return HVD_OK;
}

/* Every rank's host from the core's host table ("?" where it names none);
 * ranks on another host than this one's are refused: a Unix-domain socket
 * does not leave its host. */
static int learn_hosts(uds_comm *c, const hvd_transport_env_t *env) {
    int32_t r;
    for (r = 0; r < c->size; ++r) {
        c->peers[r].fd = -1;
        snprintf(c->peers[r].host, sizeof(c->peers[r].host), "%s",
                 env->hosts[r].name != NULL ? env->hosts[r].name : "?");
    }
    snprintf(c->host, sizeof(c->host), "%s", c->peers[c->rank].host);
    for (r = 0; r < c->size; ++r) {
        if (env->hosts[r].name != NULL && strcmp(c->peers[r].host, c->host) != 0) {
            return fail(c, HVD_ERR_UNSUPPORTED, "uds: rank %d is on host %s and rank %d on host "
                        "%s: the uds transport joins the ranks of one host only", (int)r,
                        c->peers[r].host, (int)c->rank, c->host);
        }
    }
    return HVD_OK;
}

static int uds_init(const hvd_transport_env_t *env, hvd_transport_info_t *info, void **comm,
                    char *err, size_t err_len) {
    uds_comm *c;
    struct sockaddr_un addr;
    socklen_t alen = 0;
    int st = HVD_OK, lfd = -1;
    double deadline;
    if (comm != NULL) *comm = NULL;
    if (env == NULL || comm == NULL || env->size < 1 || env->rank < 0 || env->rank >= env->size ||
        env->hosts == NULL ||
        (env->size > 1 && (env->kv_get == NULL || env->kv_set == NULL || env->kv_free == NULL))) {
        if (err != NULL && err_len > 0) {
            snprintf(err, err_len, "uds: init needs an environment with a rank, a size, the host "
                     "table and (for more than one rank) a key-value store");
        }
        return HVD_ERR_INVALID_ARGUMENT;
    }
    c = (uds_comm *)calloc(1, sizeof(*c));
    if (c == NULL) {
        if (err != NULL && err_len > 0) snprintf(err, err_len, "uds: out of memory");
        return HVD_ERR_NO_MEMORY;
    }
    c->rank = env->rank;
    c->size = env->size;
    c->timeout_s = env->timeout_s;
    c->logger = env->logger;
    c->log = env->log;
    c->wake[0] = c->wake[1] = -1;
    pthread_mutex_init(&c->mu, NULL);
    c->peers = (uds_peer *)calloc((size_t)c->size, sizeof(uds_peer));
    c->pfds = (struct pollfd *)calloc((size_t)c->size + 1, sizeof(struct pollfd));
    if (c->peers == NULL || c->pfds == NULL) {
        st = fail(c, HVD_ERR_NO_MEMORY, "uds: out of memory");
        goto out;
    }
    st = learn_hosts(c, env);
    if (st != HVD_OK) goto out;
    if (pipe(c->wake) != 0 || set_nonblocking(c->wake[0]) != 0 || set_nonblocking(c->wake[1]) != 0) {
        st = fail(c, HVD_ERR_TRANSPORT, "uds: rank %d: pipe: %s", (int)c->rank, strerror(errno));
        goto out;
    }
    deadline = now_s() + (env->start_timeout_s > 0 ? env->start_timeout_s : 1e9);
    if (c->size > 1) {
        char key[48];
        lfd = listen_on(c, &addr, &alen);
        if (lfd < 0) {
            st = fail(c, HVD_ERR_TRANSPORT, "uds: rank %d (host %s): cannot listen: %s",
                      (int)c->rank, c->host, strerror(errno));
            goto out;
        }
        snprintf(key, sizeof(key), "uds/addr/%d", (int)c->rank);
        st = env->kv_set(env->kv, key, &addr, (size_t)alen);
        if (st != HVD_OK) {
            st = fail(c, HVD_ERR_RENDEZVOUS, "uds: rank %d: cannot publish %s (status %d)",
                      (int)c->rank, key, st);
            goto out;
        }
        st = connect_all(c, env, lfd, deadline);
        if (st != HVD_OK) goto out;
    }
    if (info != NULL) {
        if (info->struct_size >= offsetof(hvd_transport_info_t, max_tag) + sizeof(uint32_t)) {
            info->max_tag = UDS_MAX_TAG;
        }
        if (info->struct_size >= offsetof(hvd_transport_info_t, mpi_thread_level) + sizeof(int32_t)) {
            info->mpi_thread_level = -1;
        }
        if (info->struct_size >= offsetof(hvd_transport_info_t, native_max_bytes) +
                                     sizeof(info->native_max_bytes)) {
            memset(info->native_max_bytes, 0, sizeof(info->native_max_bytes)); /* none */
        }
    }
    logf_(c, HVD_LOG_DEBUG, "uds: rank %d of %d connected on host %s", (int)c->rank,
          (int)c->size, c->host);
out:
    if (lfd >= 0) {
        close(lfd);
#ifndef __linux__
        unlink(addr.sun_path);
#endif
    }
    if (st != HVD_OK) {
        if (err != NULL && err_len > 0) snprintf(err, err_len, "%s", c->err);
        uds_finalize(c);
        return st;
    }
    *comm = c;
    return HVD_OK;
}

static const hvd_transport_t uds_table = {
    HVD_TRANSPORT_ABI,
    (uint32_t)sizeof(hvd_transport_t),
    "uds",
    HVD_TRANSPORT_CAP_P2P | HVD_TRANSPORT_CAP_P2P_TEST | HVD_TRANSPORT_CAP_ABORT |
        HVD_TRANSPORT_CAP_PEER_TIMEOUT,
    uds_init,
    uds_finalize,
    uds_last_error,
    uds_isend,
    uds_irecv,
    uds_wait,
    uds_test,
    uds_progress,
    NULL, /* register_memory */
    NULL, /* deregister_memory */
    NULL, NULL, NULL, NULL, NULL, NULL, /* no native collectives */
    uds_abort,
    uds_async_error,
    uds_set_timeout,
    0, /* reduce_dtypes: every dtype (it has no native reductions) */
};

UDS_EXPORT const hvd_transport_t *hvd_transport_plugin(void) { return &uds_table; }
