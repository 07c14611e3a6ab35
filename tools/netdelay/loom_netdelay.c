/* loom-netdelay: a fixed delay on a link, for kernels without tc netem (scripts/nodes.sh shape).
 *
 * Packets that an iptables rule sends to NFQUEUE queue N (`-j NFQUEUE --queue-num N
 * --queue-bypass`) are held here and let through, in the order they came, D after the kernel
 * handed them over: a link with D more latency in that direction, as netem's `delay D` gives.
 *
 * Invariants:
 * 1. Every packet the kernel queues gets exactly one verdict, ACCEPT, never before its arrival
 *    time + D (CLOCK_MONOTONIC) and in arrival order: the delay reorders nothing.
 * 2. The held packets never outnumber the ring: the kernel's queue is limited to the ring's
 *    capacity, and beyond it the kernel drops (a full queue on a real link drops too).
 * 3. On SIGTERM/SIGINT the queue is destroyed: the kernel drops what was held (a link going
 *    down) and, with --queue-bypass on the rule, lets the next packets through undelayed.
 * 4. The pid file appears (written to a temporary name, then renamed) only once the queue is
 *    bound: a caller that waits for it may add its rule without losing packets.
 *
 * usage: loom-netdelay --queue N --delay D [--pidfile FILE]   (D: 2ms, 500us, 0.1s; > 0)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef NF_ACCEPT /* <linux/netfilter.h>, whose <linux/in.h> clashes with <netinet/in.h> */
#define NF_ACCEPT 1
#endif

enum { RING = 16384 }; /* packets held at most (the kernel's queue length) */

typedef struct {
  uint32_t id[RING];   /* the kernel's packet ids, in arrival order */
  int64_t due[RING];   /* when each may go on, ns (CLOCK_MONOTONIC) */
  unsigned head, tail; /* held: [head, tail) modulo RING */
  int64_t delay_ns;
  int overflow; /* a packet arrived with the ring full (cannot happen by invariant 2) */
} held_packets;

static volatile sig_atomic_t stop_requested;
static void on_stop(int sig) { (void)sig; stop_requested = 1; }

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* "2ms", "500us", "0.1s", "3000ns" -> nanoseconds; -1 when not a positive duration. */
static int64_t parse_duration(const char *s) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v > 0)) return -1;
  double scale = !strcmp(end, "s") ? 1e9 : !strcmp(end, "ms") ? 1e6 : !strcmp(end, "us") ? 1e3
               : !strcmp(end, "ns") ? 1 : -1;
  if (scale < 0 || v * scale > 60e9) return -1; /* a unit is required; at most a minute */
  int64_t ns = (int64_t)(v * scale + 0.5);
  return ns > 0 ? ns : -1;
}

/* the kernel hands a packet over: note its id and when it may go on */
static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa,
                     void *data) {
  (void)msg;
  held_packets *h = data;
  struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
  if (!ph) return 0;
  uint32_t id = ntohl(ph->packet_id);
  if (h->tail - h->head == RING) { /* never (invariant 2): let it through rather than hold it */
    h->overflow = 1;
    return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL) < 0 ? -1 : 0;
  }
  h->id[h->tail % RING] = id;
  h->due[h->tail % RING] = now_ns() + h->delay_ns;
  h->tail++;
  return 0;
}

/* accept every held packet that is due; one batch verdict covers the ids up to the last due one
 * (ids grow in arrival order, and every earlier packet is due earlier: invariant 1) */
static int release_due(struct nfq_q_handle *qh, held_packets *h) {
  int64_t t = now_ns();
  unsigned n = 0;
  while (h->head + n != h->tail && h->due[(h->head + n) % RING] <= t) n++;
  if (!n) return 0;
  uint32_t last = h->id[(h->head + n - 1) % RING];
  if (nfq_set_verdict_batch(qh, last, NF_ACCEPT) < 0) return -1;
  h->head += n;
  return 0;
}

static int write_pidfile(const char *path) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return -1;
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  int bad = fprintf(f, "%ld\n", (long)getpid()) < 0;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path)) return unlink(tmp), -1;
  return 0;
}

static void usage(void) {
  fprintf(stderr, "usage: loom-netdelay --queue N --delay D [--pidfile FILE]\n"
                  "  holds the packets of NFQUEUE queue N for D (2ms, 500us, 0.1s) each\n");
}

int main(int argc, char **argv) {
  long queue = -1;
  int64_t delay = -1;
  const char *pidfile = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end;
    if (!strcmp(a, "--queue") && v) {
      queue = strtol(v, &end, 10);
      if (*end || end == v || queue < 0 || queue > 65535) {
        fprintf(stderr, "loom-netdelay: --queue '%s' is not a queue number 0-65535\n", v);
        return 2;
      }
      i++;
    } else if (!strcmp(a, "--delay") && v) {
      if ((delay = parse_duration(v)) < 0) {
        fprintf(stderr, "loom-netdelay: --delay '%s' is not a duration above 0 and up to 60s "
                        "with a unit (2ms, 500us, 0.1s)\n", v);
        return 2;
      }
      i++;
    } else if (!strcmp(a, "--pidfile") && v) {
      pidfile = argv[++i];
    } else {
      usage();
      return 2;
    }
  }
  if (queue < 0 || delay < 0) {
    usage();
    return 2;
  }

  static held_packets held;
  held.delay_ns = delay;
  struct nfq_handle *nh = nfq_open();
  if (!nh) {
    perror("loom-netdelay: nfq_open (needs CAP_NET_ADMIN and the kernel's nfnetlink_queue)");
    return 1;
  }
  struct nfq_q_handle *qh = nfq_create_queue(nh, (uint16_t)queue, on_packet, &held);
  if (!qh) {
    fprintf(stderr, "loom-netdelay: cannot bind queue %ld (another program holds it?)\n", queue);
    nfq_close(nh);
    return 1;
  }
  /* only the metadata (the id) comes up; large (GSO) packets come whole, not cut into MTUs */
  if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(qh, RING) < 0 ||
      nfq_set_queue_flags(qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO) < 0) {
    fprintf(stderr, "loom-netdelay: cannot configure queue %ld\n", queue);
    return 1;
  }
  int fd = nfq_fd(nh);
  int rcvbuf = 8 << 20, on = 1;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
  setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &on, sizeof on);

  prctl(PR_SET_TIMERSLACK, 1UL); /* wake when a packet is due, not up to 50 us later */
  struct sigaction sa = {.sa_handler = on_stop};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  if (pidfile && write_pidfile(pidfile)) {
    fprintf(stderr, "loom-netdelay: cannot write the pid file %s: %s\n", pidfile, strerror(errno));
    return 1;
  }

  static char buf[1 << 16];
  int rc = 0;
  while (!stop_requested) {
    /* sleep until the next packet arrives or the oldest held one is due */
    struct timespec wait = {1, 0};
    if (held.head != held.tail) {
      int64_t left = held.due[held.head % RING] - now_ns();
      if (left < 0) left = 0;
      wait.tv_sec = left / 1000000000;
      wait.tv_nsec = left % 1000000000;
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int ready = ppoll(&p, 1, &wait, NULL);
    if (ready < 0 && errno != EINTR) {
      perror("loom-netdelay: ppoll");
      rc = 1;
      break;
    }
    if (ready > 0) {
      ssize_t got;
      while ((got = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) nfq_handle_packet(nh, buf, (int)got);
      if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        perror("loom-netdelay: recv");
        rc = 1;
        break;
      }
    }
    if (release_due(qh, &held)) {
      perror("loom-netdelay: verdict");
      rc = 1;
      break;
    }
  }
  if (held.overflow) fprintf(stderr, "loom-netdelay: the ring overflowed (a bug: see invariant 2)\n");
  nfq_destroy_queue(qh);
  nfq_close(nh);
  if (pidfile) unlink(pidfile);
  return rc;
}
