/*
 * weft-cni: the CNI plugin the container runtime executes (installed as /opt/cni/bin/weft and
 * /opt/cni/bin/flannel). Statically linked: it runs on the host, whose libc is not the image's.
 *
 * It does no networking itself. It sends the CNI_* environment and the network config to weftd's
 * CNI socket (`weft-cni.sock` beside the config's subnetFile, default /run/flannel/subnet.env),
 * prints weftd's answer and exits with its code. VERSION is answered here, without weftd.
 *
 * When nothing answers on the socket (weftd not running, restarting, an older weftd without it),
 * or weftd speaks another protocol version, or weftd asks for it, it executes the TypeScript
 * plugin (`weft-fallback` beside this binary, else ../bin/weft of a checkout) with the same
 * environment and stdin, which wires the pod from subnet.env alone. Once weftd has the request,
 * there is no fallback: a weftd that dies mid-request is reported as "try again later" (code 11),
 * and the runtime's DEL removes whatever it had made.
 *
 * Wire format (src/local/protocol.ts, src/cni/server.ts): one JSON object each way, each ended by
 * closing the sending side.
 *   request  {"protocol":1,"env":{"CNI_COMMAND":"ADD",...},"stdin":"<network config>"}
 *   answer   {"protocol":1,"ok":true,"result":{"exitCode":0,"stdout":"..."}}
 *            {"protocol":1,"ok":true,"result":{"fallback":true}}
 *            {"protocol":1,"ok":false,"error":{"code":"E...","message":"..."}}
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define PROTOCOL 1
#define MAX_STDIN (1 << 20) /* larger configs go to the fallback, which reads any size */
#define MAX_READ (256 << 20)
#define MAX_ANSWER (16 << 20)
#define ANSWER_TIMEOUT_S 100
#define DEFAULT_SUBNET_FILE "/run/flannel/subnet.env"
#define SOCKET_NAME "weft-cni.sock"
#define VERSION_REPLY \
  "{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.1.0\",\"0.2.0\",\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}"

extern char** environ;

/* ---- a growable buffer -------------------------------------------------------------------- */

struct buf {
  char* p;
  size_t len, cap;
};

static void put(struct buf* b, const char* s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char* p = realloc(b->p, cap);
    if (!p) {
      fputs("{\"cniVersion\":\"1.1.0\",\"code\":999,\"msg\":\"weft: out of memory\"}\n", stdout);
      exit(1);
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void puts_(struct buf* b, const char* s) { put(b, s, strlen(s)); }

/* A JSON string literal of bytes `s` (UTF-8 passes through; controls, quote and backslash escaped). */
static void put_json_string(struct buf* b, const char* s, size_t n) {
  put(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      put(b, esc, 2);
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      put(b, esc, 6);
    } else {
      put(b, (const char*)&s[i], 1);
    }
  }
  put(b, "\"", 1);
}

/* ---- a minimal JSON reader: enough to find top-level keys and decode strings ---------------- */

static const char* ws(const char* p, const char* end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

/* The end of the JSON value starting at p, or NULL when it is not one. */
static const char* skip_value(const char* p, const char* end, int depth) {
  p = ws(p, end);
  if (p >= end || depth > 64) return NULL;
  if (*p == '"') {
    for (p++; p < end; p++) {
      if (*p == '\\') p++;
      else if (*p == '"') return p + 1;
    }
    return NULL;
  }
  if (*p == '{' || *p == '[') {
    char close = *p == '{' ? '}' : ']';
    p = ws(p + 1, end);
    if (p < end && *p == close) return p + 1;
    for (;;) {
      if (close == '}') {
        p = skip_value(p, end, depth + 1); /* the key */
        if (!p) return NULL;
        p = ws(p, end);
        if (p >= end || *p != ':') return NULL;
        p++;
      }
      p = skip_value(p, end, depth + 1);
      if (!p) return NULL;
      p = ws(p, end);
      if (p < end && *p == ',') {
        p++;
        continue;
      }
      return p < end && *p == close ? p + 1 : NULL;
    }
  }
  const char* start = p;
  while (p < end && (strchr("+-.0123456789eEtruefalsn", *p) != NULL)) p++;
  return p > start ? p : NULL;
}

static void put_utf8(struct buf* b, unsigned long cp) {
  char u[4];
  if (cp < 0x80) {
    u[0] = (char)cp;
    put(b, u, 1);
  } else if (cp < 0x800) {
    u[0] = (char)(0xc0 | (cp >> 6));
    u[1] = (char)(0x80 | (cp & 0x3f));
    put(b, u, 2);
  } else if (cp < 0x10000) {
    u[0] = (char)(0xe0 | (cp >> 12));
    u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    u[2] = (char)(0x80 | (cp & 0x3f));
    put(b, u, 3);
  } else {
    u[0] = (char)(0xf0 | (cp >> 18));
    u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    u[3] = (char)(0x80 | (cp & 0x3f));
    put(b, u, 4);
  }
}

static int hex4(const char* p, const char* end, unsigned long* out) {
  if (end - p < 4) return 0;
  char h[5] = {p[0], p[1], p[2], p[3], 0};
  char* e;
  *out = strtoul(h, &e, 16);
  return e == h + 4;
}

/* Decodes the JSON string at p (p at its quote) into out; 0 when it is not a string. */
static int decode_string(const char* p, const char* end, struct buf* out) {
  out->len = 0;
  put(out, "", 0);
  p = ws(p, end);
  if (p >= end || *p != '"') return 0;
  for (p++; p < end; p++) {
    if (*p == '"') return 1;
    if (*p != '\\') {
      put(out, p, 1);
      continue;
    }
    if (++p >= end) return 0;
    unsigned long cp, lo;
    switch (*p) {
      case 'n': put(out, "\n", 1); break;
      case 't': put(out, "\t", 1); break;
      case 'r': put(out, "\r", 1); break;
      case 'b': put(out, "\b", 1); break;
      case 'f': put(out, "\f", 1); break;
      case 'u':
        if (!hex4(p + 1, end, &cp)) return 0;
        p += 4;
        // A high surrogate followed by an escaped low one: the pair is one code point.
        if (cp >= 0xd800 && cp < 0xdc00 && end - p > 6 && p[1] == '\\' && p[2] == 'u' &&
            hex4(p + 3, end, &lo) && lo >= 0xdc00 && lo < 0xe000) {
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          p += 6;
        }
        put_utf8(out, cp);
        break;
      default: put(out, p, 1); break;
    }
  }
  return 0;
}

/*
 * The value of top-level key `key` of the JSON object in [p, end): the last one that matches,
 * case-insensitively when `fold` (as Go's encoding/json matches struct fields). NULL when absent
 * or when the text is not an object.
 */
static const char* find_key(const char* p, const char* end, const char* key, int fold) {
  struct buf k = {0};
  const char* found = NULL;
  p = ws(p, end);
  if (p >= end || *p != '{') return NULL;
  p = ws(p + 1, end);
  if (p < end && *p == '}') return NULL;
  for (;;) {
    if (!decode_string(p, end, &k)) break;
    p = skip_value(p, end, 0);
    p = p ? ws(p, end) : NULL;
    if (!p || p >= end || *p != ':') break;
    const char* value = ws(p + 1, end);
    if (fold ? strcasecmp(k.p, key) == 0 : strcmp(k.p, key) == 0) found = value;
    p = skip_value(value, end, 0);
    p = p ? ws(p, end) : NULL;
    if (!p || p >= end) break;
    if (*p == '}') {
      free(k.p);
      return found;
    }
    if (*p != ',') break;
    p = ws(p + 1, end);
  }
  free(k.p);
  return NULL;
}

/* ---- the plugin ---------------------------------------------------------------------------- */

static struct buf conf; /* stdin */

/* The config's cniVersion for error replies (as the TypeScript plugin would answer). */
static const char* conf_version(void) {
  static struct buf v;
  const char* at = find_key(conf.p, conf.p + conf.len, "cniVersion", 1);
  if (at && decode_string(at, conf.p + conf.len, &v) && v.len > 0 && v.len < 16 && strspn(v.p, "0123456789.") == v.len) return v.p;
  return "1.1.0";
}

static int fail(int code, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  struct buf out = {0};
  puts_(&out, "{\"cniVersion\":\"");
  puts_(&out, conf_version());
  char head[64];
  snprintf(head, sizeof head, "\",\"code\":%d,\"msg\":", code);
  puts_(&out, head);
  put_json_string(&out, msg, strlen(msg));
  puts_(&out, "}\n");
  fwrite(out.p, 1, out.len, stdout);
  return 1;
}

/* Executes the TypeScript plugin with our environment and the same stdin; returns only on failure. */
static int fallback(void) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return fail(50, "weft: cannot find this plugin's own path: %s", strerror(errno));
  self[n] = 0;
  char* slash = strrchr(self, '/');
  if (slash) *slash = 0;
  char candidates[2][PATH_MAX + 32];
  snprintf(candidates[0], sizeof candidates[0], "%s/weft-fallback", self);
  snprintf(candidates[1], sizeof candidates[1], "%s/../bin/weft", self);
  int fd = memfd_create("weft-stdin", MFD_CLOEXEC);
  if (fd < 0) return fail(5, "weft: cannot hold stdin for the fallback plugin: %s", strerror(errno));
  for (size_t off = 0; off < conf.len;) {
    ssize_t w = write(fd, conf.p + off, conf.len - off);
    if (w < 0) return fail(5, "weft: cannot hold stdin for the fallback plugin: %s", strerror(errno));
    off += (size_t)w;
  }
  if (lseek(fd, 0, SEEK_SET) < 0 || dup2(fd, 0) < 0) return fail(5, "weft: cannot pass stdin to the fallback plugin: %s", strerror(errno));
  for (int i = 0; i < 2; i++) {
    if (access(candidates[i], X_OK) != 0) continue;
    char* argv[] = {candidates[i], NULL};
    execve(candidates[i], argv, environ);
  }
  return fail(50, "weft: weftd is not answering and no fallback plugin was found (%s, %s)", candidates[0], candidates[1]);
}

/* The socket beside the config's subnetFile; 0 when the config cannot be read here. */
static int socket_path(char* out, size_t size) {
  static struct buf file;
  const char* at = find_key(conf.p, conf.p + conf.len, "subnetFile", 1);
  if (!at && !skip_value(conf.p, conf.p + conf.len, 0)) return 0;
  const char* path = DEFAULT_SUBNET_FILE;
  if (at) {
    if (strncmp(at, "null", 4) != 0) {
      if (!decode_string(at, conf.p + conf.len, &file)) return 0;
      if (file.len > 0) path = file.p;
    }
  }
  if (path == file.p && strlen(file.p) != file.len) return 0; /* a NUL inside: not a path */
  const char* slash = strrchr(path, '/');
  int len = slash ? snprintf(out, size, "%.*s/%s", (int)(slash - path), path, SOCKET_NAME) : snprintf(out, size, "%s", SOCKET_NAME);
  if (slash == path) len = snprintf(out, size, "/%s", SOCKET_NAME);
  return len > 0 && (size_t)len < size;
}

static int read_all(int fd, struct buf* b, size_t max) {
  char chunk[65536];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return 0;
    if (b->len + (size_t)n > max) return 1;
    put(b, chunk, (size_t)n);
  }
}

int main(void) {
  const char* command = getenv("CNI_COMMAND");
  if (command && strcmp(command, "VERSION") == 0) {
    puts(VERSION_REPLY);
    return 0;
  }
  int r = read_all(0, &conf, MAX_READ);
  if (r != 0) return fail(5, "weft: cannot read the network config from stdin: %s", r < 0 ? strerror(errno) : "larger than 256 MiB");
  if (!conf.p) put(&conf, "", 0);
  if (conf.len > MAX_STDIN) return fallback();

  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  char path[PATH_MAX];
  if (!socket_path(path, sizeof path) || strlen(path) >= sizeof addr.sun_path) return fallback();
  strcpy(addr.sun_path, path);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr*)&addr, sizeof addr) != 0) {
    if (s >= 0) close(s);
    return fallback();
  }
  struct timeval tv = {.tv_sec = ANSWER_TIMEOUT_S};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);

  struct buf req = {0};
  char head[32];
  snprintf(head, sizeof head, "{\"protocol\":%d,\"env\":{", PROTOCOL);
  puts_(&req, head);
  int first = 1;
  for (char** e = environ; *e; e++) {
    const char* eq = strchr(*e, '=');
    if (strncmp(*e, "CNI_", 4) != 0 || !eq) continue;
    if (!first) put(&req, ",", 1);
    first = 0;
    put_json_string(&req, *e, (size_t)(eq - *e));
    put(&req, ":", 1);
    put_json_string(&req, eq + 1, strlen(eq + 1));
  }
  puts_(&req, "},\"stdin\":");
  put_json_string(&req, conf.p, conf.len);
  puts_(&req, "}");
  /* A weftd that closes before reading (EPIPE) has not acted: that is "nothing answers". */
  signal(SIGPIPE, SIG_IGN);
  for (size_t off = 0; off < req.len;) {
    ssize_t w = write(s, req.p + off, req.len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return fallback();
    off += (size_t)w;
  }
  shutdown(s, SHUT_WR);

  struct buf ans = {0};
  r = read_all(s, &ans, MAX_ANSWER);
  close(s);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return fail(11, "weft: weftd did not answer within %d s", ANSWER_TIMEOUT_S);
  if (r != 0 || ans.len == 0) return fail(11, "weft: weftd went away without answering; try again");
  const char* end = ans.p + ans.len;
  const char* proto = find_key(ans.p, end, "protocol", 0);
  if (!proto || strtol(proto, NULL, 10) != PROTOCOL || (proto[0] < '0' || proto[0] > '9')) return fallback();
  const char* ok = find_key(ans.p, end, "ok", 0);
  if (ok && strncmp(ok, "false", 5) == 0) {
    const char* err = find_key(ans.p, end, "error", 0);
    struct buf code = {0}, msg = {0};
    const char* c = err ? find_key(err, end, "code", 0) : NULL;
    const char* m = err ? find_key(err, end, "message", 0) : NULL;
    if (c) decode_string(c, end, &code);
    if (m) decode_string(m, end, &msg);
    if (code.p && strcmp(code.p, "EPROTOCOL") == 0) return fallback();
    int again = code.p && (strcmp(code.p, "ETIMEDOUT") == 0 || strcmp(code.p, "EBUSY") == 0);
    return fail(again ? 11 : 999, "weft: weftd: %s", msg.p ? msg.p : "failed");
  }
  const char* result = ok && strncmp(ok, "true", 4) == 0 ? find_key(ans.p, end, "result", 0) : NULL;
  if (!result) return fail(999, "weft: weftd's answer is not one");
  const char* fb = find_key(result, end, "fallback", 0);
  if (fb && strncmp(fb, "true", 4) == 0) return fallback();
  const char* exit_code = find_key(result, end, "exitCode", 0);
  const char* out = find_key(result, end, "stdout", 0);
  struct buf text = {0};
  if (!exit_code || *exit_code < '0' || *exit_code > '9' || !out || !decode_string(out, end, &text)) {
    return fail(999, "weft: weftd's answer is not one");
  }
  if (text.len > 0) {
    fwrite(text.p, 1, text.len, stdout);
    fputc('\n', stdout);
  }
  return (int)strtol(exit_code, NULL, 10);
}
