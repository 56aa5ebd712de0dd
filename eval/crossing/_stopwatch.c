/* The parent's stopwatch for timed requests (eval/crossing/_stopwatch.py loads it with ctypes, which releases the GIL for
 * the length of each call).
 *
 * A timed block's wall time runs from the request's first byte written to the reply's last byte read. The write,
 * the read and both instants are one call, so the parent's other threads (evaluations in flight beside this one)
 * cannot add to the wall time by holding the GIL: a wait for the GIL comes after the interval, never inside it (with
 * the write and the read as two calls, a thread that took the GIL between them added its hold to the interval).
 * Frames are the wire's (eval/crossing/wire.py): a 12-byte prefix (header length, big-endian u32; bytes of tensors in the
 * frame, big-endian u64), then both. */

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PREFIX 12

typedef struct {
    uint64_t sent;        /* bytes of the request written so far */
    int64_t started_ns;   /* CLOCK_MONOTONIC just before the request's first byte was written */
    uint8_t prefix[PREFIX];
    uint64_t have;        /* bytes of the frame read so far, prefix included */
    uint64_t body_len;    /* header + tensor bytes, once the prefix is in */
    uint8_t *body;        /* malloc'd once the prefix is in; freed by kh_free */
    int64_t finished_ns;  /* CLOCK_MONOTONIC when the last byte was read */
} kh_frame;

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Write the request (len bytes of buf) to wfd, then read one reply frame from rfd into f, going on from where an
 * earlier call stopped. Returns 1 when the frame is whole (f->started_ns and f->finished_ns set), 0 when the other
 * side closed, -ETIMEDOUT past deadline_ns, -EINTR on a signal (the caller lets its handlers run, then calls again),
 * -EMSGSIZE when the prefix announces more than the limits, or -errno. */
int kh_exchange(int wfd, const uint8_t *buf, uint64_t len, int rfd, kh_frame *f, int64_t deadline_ns,
                uint64_t max_header, uint64_t max_tensors) {
    if (f->sent == 0 && len > 0) f->started_ns = now_ns();
    while (f->sent < len) {
        ssize_t n = write(wfd, buf + f->sent, len - f->sent);
        if (n < 0) {
            if (errno == EINTR) return -EINTR;
            if (errno == EPIPE) return 0;
            return -errno;
        }
        f->sent += (uint64_t)n;
    }
    for (;;) {
        uint64_t want = f->have < PREFIX ? PREFIX - f->have : PREFIX + f->body_len - f->have;
        if (f->have >= PREFIX && want == 0) {
            f->finished_ns = now_ns();
            return 1;
        }
        int64_t left = deadline_ns - now_ns();
        if (left <= 0) return -ETIMEDOUT;
        struct pollfd p = {.fd = rfd, .events = POLLIN};
        int64_t ms = (left + 999999) / 1000000;
        int ready = poll(&p, 1, ms > 86400000 ? 86400000 : (int)ms);
        if (ready < 0) return -errno;
        if (ready == 0) continue;
        if (want > (1u << 24)) want = 1u << 24;
        uint8_t *into = f->have < PREFIX ? f->prefix + f->have : f->body + (f->have - PREFIX);
        ssize_t n = read(rfd, into, want);
        if (n < 0) {
            if (errno == EINTR) return -EINTR;
            if (errno == EAGAIN) continue;
            return -errno;
        }
        if (n == 0) return 0;
        f->have += (uint64_t)n;
        if (f->have == PREFIX && f->body == NULL) {
            uint64_t header = 0, tensors = 0;
            for (int i = 0; i < 4; i++) header = (header << 8) | f->prefix[i];
            for (int i = 4; i < PREFIX; i++) tensors = (tensors << 8) | f->prefix[i];
            if (header > max_header || tensors > max_tensors) return -EMSGSIZE;
            f->body_len = header + tensors;
            f->body = malloc(f->body_len ? f->body_len : 1);
            if (f->body == NULL) return -ENOMEM;
        }
    }
}

void kh_free(kh_frame *f) {
    free(f->body);
    f->body = NULL;
}
