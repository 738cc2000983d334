/* rank_probe: a torch-free worker for the launcher tests. It reports what `acc launch` gave it and misbehaves
 * on request.
 *   --out DIR           write DIR/pid.<RANK> (its pid) and DIR/env.<RANK> (its environment, one NAME=value a line)
 *   --sleep S           stay alive S seconds, then exit 0 (default 0)
 *   --fail-rank R       on rank R, after --fail-after seconds (default 0.2):
 *     --code C            exit with status C (default 1), or
 *     --signal N          kill itself with signal N
 *   --ignore-term       ignore SIGTERM and SIGINT
 *   --grandchild        start a child process that sleeps; its pid goes to DIR/gpid.<RANK>
 *   --bind-master       rank 0 binds 127.0.0.1:MASTER_PORT (proves the port was free) and writes DIR/bound.0
 *   --say TEXT          print "TEXT out K" to stdout and "TEXT err K" to stderr for K = 1..30, then
 *                       "TEXT final words" without a newline
 *   --fail-attempts N   fail as --fail-rank says only while TORCHELASTIC_RESTART_COUNT < N
 * Files are written to a temporary name and renamed, so a reader never sees half a file. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

static const char* out_dir = NULL;
static int rank = -1;

static void sleep_s(double s) {
  struct timespec ts;
  if (s <= 0) return;
  ts.tv_sec = (time_t)s;
  ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void write_file(const char* kind, const char* text) {
  char path[4096], tmp[4200];
  FILE* f;
  if (!out_dir) return;
  snprintf(path, sizeof path, "%s/%s.%d", out_dir, kind, rank);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  f = fopen(tmp, "w");
  if (!f) {
    perror(tmp);
    exit(90);
  }
  fputs(text, f);
  fclose(f);
  if (rename(tmp, path) != 0) {
    perror(path);
    exit(91);
  }
}

int main(int argc, char** argv) {
  double sleep_for = 0, fail_after = 0.2;
  int fail_rank = -1, code = 1, sig = 0, ignore_term = 0, grandchild = 0, bind_master = 0, fail_attempts = -1, i;
  const char* say = NULL;
  const char* r = getenv("RANK");
  char buf[64];
  rank = r ? atoi(r) : -1;
  for (i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--out") && v) out_dir = argv[++i];
    else if (!strcmp(a, "--sleep") && v) sleep_for = atof(argv[++i]);
    else if (!strcmp(a, "--fail-rank") && v) fail_rank = atoi(argv[++i]);
    else if (!strcmp(a, "--fail-after") && v) fail_after = atof(argv[++i]);
    else if (!strcmp(a, "--code") && v) code = atoi(argv[++i]);
    else if (!strcmp(a, "--signal") && v) sig = atoi(argv[++i]);
    else if (!strcmp(a, "--ignore-term")) ignore_term = 1;
    else if (!strcmp(a, "--grandchild")) grandchild = 1;
    else if (!strcmp(a, "--bind-master")) bind_master = 1;
    else if (!strcmp(a, "--say") && v) say = argv[++i];
    else if (!strcmp(a, "--fail-attempts") && v) fail_attempts = atoi(argv[++i]);
    else {
      fprintf(stderr, "rank_probe: unknown argument %s\n", a);
      return 64;
    }
  }
  if (ignore_term) {
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
  }
  if (out_dir) {
    size_t n = 0, k;
    char* text;
    for (k = 0; environ[k]; ++k) n += strlen(environ[k]) + 1;
    text = malloc(n + 1);
    if (!text) return 92;
    text[0] = '\0';
    for (k = 0; environ[k]; ++k) {
      strcat(text, environ[k]);
      strcat(text, "\n");
    }
    write_file("env", text);
    free(text);
  }
  if (bind_master && rank == 0) {
    const char* p = getenv("MASTER_PORT");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)(p ? atoi(p) : 0));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr*)&addr, sizeof addr) != 0 || listen(fd, 1) != 0) {
      perror("rank_probe: bind MASTER_PORT");
      return 93;
    }
    write_file("bound", p ? p : "");
  }
  if (grandchild) {
    pid_t g = fork();
    if (g == 0) {
      if (ignore_term) signal(SIGTERM, SIG_IGN);
      sleep_s(120);
      _exit(0);
    }
    snprintf(buf, sizeof buf, "%ld\n", (long)g);
    write_file("gpid", buf);
  }
  if (say) { /* numbered lines on both streams, the last without a newline */
    int k;
    for (k = 1; k <= 30; ++k) {
      printf("%s out %d\n", say, k);
      fprintf(stderr, "%s err %d\n", say, k);
    }
    printf("%s final words", say);
    fflush(stdout);
  }
  snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
  write_file("pid", buf); /* last: the tests take it as "ready" */
  /* --fail-attempts N: fail (as --fail-rank says) only in the first N attempts of a restarted group */
  if (fail_attempts >= 0) {
    const char* rc = getenv("TORCHELASTIC_RESTART_COUNT");
    if ((rc ? atoi(rc) : 0) >= fail_attempts) fail_rank = -1;
  }
  if (rank == fail_rank) {
    sleep_s(fail_after);
    if (sig) {
      signal(sig, SIG_DFL);
      raise(sig);
    }
    return code;
  }
  sleep_s(sleep_for);
  return 0;
}
