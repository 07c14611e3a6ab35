/* The HTTP side of `loom runs serve`: binds the listening socket itself (so "port in use" and
 * "not an address" are clear errors, and port 0 picks a free one that is printed), hands it to
 * libmicrohttpd (one internal polling thread, so requests are answered one at a time), serves
 * GET of the embedded page assets and of /api/ (loom_serve_api) to requests whose Host is an
 * address or localhost (no DNS rebinding), and stops on SIGINT/SIGTERM. The replies the
 * endpoint files build (a JSON document or an error) are made here too. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loom/core.h"
#include "loom/serve.h"
#include "runs/serve_internal.h"

/* ---- replies: what an /api/ endpoint (serve_*.c) answers, sent by on_request ---- */

void serve_reply_json(loom_serve_reply *out, int status, json_t *j) {
  out->status = status;
  out->content_type = "application/json";
  out->body = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  out->len = out->body ? strlen(out->body) : 0;
  json_decref(j);
}

void serve_reply_error(loom_serve_reply *out, int status, const char *msg) {
  serve_reply_json(out, status, json_pack("{s:s}", "error", msg));
}

void loom_serve_reply_free(loom_serve_reply *r) {
  free(r->body);
  free(r->filename);
  memset(r, 0, sizeof *r);
}

typedef struct {
  struct MHD_Connection *conn;
} query_ctx;

static const char *query_arg(void *ctx, const char *key) {
  return MHD_lookup_connection_value(((query_ctx *)ctx)->conn, MHD_GET_ARGUMENT_KIND, key);
}

static enum MHD_Result send_buffer(struct MHD_Connection *conn, int status, const char *type,
                                   void *data, size_t len, enum MHD_ResponseMemoryMode mode,
                                   const char *filename, bool cacheable) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, data, mode);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", type);
  MHD_add_response_header(r, "Cache-Control", cacheable ? "max-age=60" : "no-store");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  if (filename) {
    char *cd = loom_sprintf("attachment; filename=\"%s\"", filename);
    MHD_add_response_header(r, "Content-Disposition", cd);
    free(cd);
  }
  enum MHD_Result ok = MHD_queue_response(conn, (unsigned)status, r);
  MHD_destroy_response(r);
  return ok;
}

/* Host header of a request to this server: an address literal or localhost (with any port).
 * A page on another site that rebinds its own name to 127.0.0.1 sends its name here and is
 * refused, so only pages opened from this server's address read the registry. */
static bool host_ok(const char *host) {
  if (!host) return true; /* HTTP/1.0 clients send none */
  char name[256];
  size_t n = strlen(host);
  if (n >= sizeof name) return false;
  memcpy(name, host, n + 1);
  if (name[0] == '[') { /* [v6]:port */
    char *end = strchr(name, ']');
    if (!end) return false;
    *end = 0;
    struct in6_addr a6;
    return inet_pton(AF_INET6, name + 1, &a6) == 1;
  }
  char *colon = strrchr(name, ':');
  if (colon) *colon = 0;
  struct in_addr a4;
  return !strcmp(name, "localhost") || inet_pton(AF_INET, name, &a4) == 1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **state) {
  const loom_serve_opts *o = cls;
  if (!*state) { /* first call of a request: headers only */
    static int seen;
    *state = &seen;
    return MHD_YES;
  }
  if (!host_ok(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host"))) {
    static char msg[] = "{\"error\":\"this server answers requests to its address only (Host header)\"}";
    return send_buffer(conn, 403, "application/json", msg, strlen(msg), MHD_RESPMEM_PERSISTENT,
                       NULL, false);
  }
  if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
    static char msg[] = "{\"error\":\"only GET is served\"}";
    return send_buffer(conn, 405, "application/json", msg, strlen(msg), MHD_RESPMEM_PERSISTENT,
                       NULL, false);
  }
  if (!strncmp(url, "/api/", 5)) {
    query_ctx q = {conn};
    loom_serve_reply rep;
    loom_serve_api(o, url, query_arg, &q, &rep);
    enum MHD_Result ok = send_buffer(conn, rep.status, rep.content_type, rep.body, rep.len,
                                     MHD_RESPMEM_MUST_FREE, rep.filename, false);
    rep.body = NULL; /* libmicrohttpd frees it */
    loom_serve_reply_free(&rep);
    return ok;
  }
  const loom_serve_asset *a = loom_serve_find_asset(url);
  if (!a) {
    static char msg[] = "not found (the dashboard is at /)\n";
    return send_buffer(conn, 404, "text/plain; charset=utf-8", msg, strlen(msg),
                       MHD_RESPMEM_PERSISTENT, NULL, false);
  }
  return send_buffer(conn, 200, a->content_type, (void *)a->data, a->len, MHD_RESPMEM_PERSISTENT,
                     NULL, false);
}

/* 127.0.0.0/8, ::1 or localhost: only this machine reaches it. */
static bool is_loopback(const char *host) {
  struct in_addr a4;
  struct in6_addr a6;
  if (!strcmp(host, "localhost")) return true;
  if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

/* A listening TCP socket on host:port (IPv4 or IPv6 literal); *bound gets the port. */
static int listen_on(const char *host, int port, int *bound) {
  if (!strcmp(host, "localhost")) host = "127.0.0.1";
  struct sockaddr_storage ss = {0};
  socklen_t sl;
  struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
  if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((uint16_t)port);
    sl = sizeof *v4;
  } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((uint16_t)port);
    sl = sizeof *v6;
  } else {
    return loom_err("--host '%s' is not an IPv4 or IPv6 address (e.g. 127.0.0.1, ::1, localhost)", host);
  }
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (fd < 0) return loom_err("cannot create a socket: %s", strerror(errno));
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&ss, sl) || listen(fd, 64)) {
    int e = errno;
    close(fd);
    if (e == EADDRINUSE)
      return loom_err("port %d on %s is already in use (another 'loom runs serve'?); pick another "
                      "with --port N, or --port 0 for any free one", port, host);
    return loom_err("cannot listen on %s port %d: %s", host, port, strerror(e));
  }
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  *bound = ntohs(ss.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
  return fd;
}

int loom_serve_run(const loom_serve_opts *o) {
  int port = 0, fd = listen_on(o->host, o->port, &port);
  if (fd < 0) return -1;
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, NULL); /* the server thread inherits the mask */
  signal(SIGPIPE, SIG_IGN);
  struct MHD_Daemon *d =
      MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, 0, NULL, NULL, on_request,
                       (void *)o, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT,
                       (unsigned)30, MHD_OPTION_END);
  if (!d) {
    close(fd);
    pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
    return loom_err("libmicrohttpd could not start on %s port %d", o->host, port);
  }
  bool v6 = strchr(o->host, ':') != NULL;
  printf("loom runs serve: http://%s%s%s:%d/  (registry %s; Ctrl-C stops)\n", v6 ? "[" : "",
         o->host, v6 ? "]" : "", port, o->db_path);
  if (!is_loopback(o->host))
    fprintf(stderr, "loom runs serve: warning: listening on %s exposes the registry (every run's "
            "config, metrics and paths, without authentication) to whoever can reach this "
            "address; the default --host 127.0.0.1 keeps it on this machine\n", o->host);
  if (o->view)
    printf("  the view of this command line: http://%s%s%s:%d/#%s\n", v6 ? "[" : "", o->host,
           v6 ? "]" : "", port, o->view);
  fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  MHD_stop_daemon(d); /* closes the listening socket too */
  pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
  printf("loom runs serve: stopped (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  return 0;
}
