/*
 * quantilica-spawner: the long-lived parent of the fetchers the agent starts (the hot path).
 *
 * Why it exists: per run, the agent used to fork its whole ~70-130 MB address space to exec
 * runWrapper.sh, whose two shells forked again to keep the fetcher's exit status on disk. On this
 * project's 2-core stations that cost more CPU per run than everything else the agent does. This
 * process is small, so its fork is cheap, and it is the fetchers' parent, so it keeps the wrapper's
 * guarantees:
 *   - the slot descriptor is fd 3 of the fetcher (taken from the agent with pidfd_getfd(2): the same
 *     open file description, so the flock and the keeper's socket are the very ones the agent holds);
 *   - the exit status is written to the run's status file when the fetcher ends, also after the agent
 *     died (this process outlives it: its own session, and it exits only once its children are reaped
 *     and the agent closed the request pipe).
 *
 * Protocol (stdin: requests from the agent; stdout: one line per answer):
 *   request  = u32 little-endian length, then NUL-terminated strings:
 *              id, lockFd, logFd, statusFile, cwd, argc, argv..., envc, env...
 *   answers  = "S <id> <pid> <starttime>\n"  started (pid leads its own session and process group)
 *              "E <id> <code>\n"              ended: exit code, or 128+signal as sh reports it
 *              "F <id> <errno> <what>\n"      not started (the agent falls back to its own spawn)
 * Only the parent that started this process can send requests (the pipe is inherited, never named),
 * and descriptors are taken only from that parent.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define MAX_REQUEST (4 * 1024 * 1024)
#define MAX_ARGS 65536

struct child {
  pid_t pid;
  char *id;
  char *status_file;
  struct child *next;
};

static struct child *children = NULL;
static int parent_pidfd = -1;

static void write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return; /* the agent is gone (EPIPE): the status file is what counts */
    }
    buf += n;
    len -= (size_t)n;
  }
}

static void answer(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void answer(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n > 0) write_all(STDOUT_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* Field 22 of /proc/<pid>/stat: with the pid it names the process (shared/node/procInfo.ts). */
static unsigned long long start_time(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  if (p == NULL) return 0;
  p += 2; /* field 3 */
  for (int field = 3; field < 22 && p != NULL; field++) {
    p = strchr(p, ' ');
    if (p != NULL) p++;
  }
  return p == NULL ? 0 : strtoull(p, NULL, 10);
}

/* The trailing newline marks a complete record (runProcess.ts readStatusFile). */
static void write_status(const char *file, int code) {
  char line[16];
  int n = snprintf(line, sizeof line, "%d\n", code);
  int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  write_all(fd, line, (size_t)n);
  close(fd);
}

static const char *env_value(char **env, const char *name) {
  size_t len = strlen(name);
  for (char **e = env; *e != NULL; e++)
    if (strncmp(*e, name, len) == 0 && (*e)[len] == '=') return *e + len + 1;
  return NULL;
}

static __attribute__((noreturn)) void child_fail(const char *status_file, int code, const char *what, const char *arg, int err) {
  char msg[1024];
  int n = snprintf(msg, sizeof msg, "quantilica: %s %s: %s\n", what, arg, strerror(err));
  if (n > 0) write_all(STDERR_FILENO, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
  write_status(status_file, code);
  _exit(code);
}

/* execvpe with the run's own PATH, as Node's spawn (libuv) does. */
static void exec_program(char **argv, char **env) {
  const char *prog = argv[0];
  if (strchr(prog, '/') != NULL) {
    execve(prog, argv, env);
    return;
  }
  const char *path = env_value(env, "PATH");
  if (path == NULL) path = "/usr/local/bin:/usr/bin:/bin";
  int saved = ENOENT;
  char candidate[4096];
  while (*path != 0) {
    const char *end = strchrnul(path, ':');
    size_t dir = (size_t)(end - path);
    if (dir == 0) dir = 1, path = ".";
    if (dir + 1 + strlen(prog) < sizeof candidate) {
      memcpy(candidate, path, dir);
      candidate[dir] = '/';
      strcpy(candidate + dir + 1, prog);
      execve(candidate, argv, env);
      if (errno != ENOENT && errno != ENOTDIR) saved = errno;
    }
    path = *end == ':' ? end + 1 : end;
    if (path == end && *end == 0) break;
  }
  errno = saved;
}

/*
 * In the child, before exec: its own session (cancel signals the group), the run's cgroups joined
 * first (memory ceilings: every process of the run is born inside), the umask the agent was
 * started with, stdin /dev/null, stdout and stderr on the log, the slot on fd 3, nothing else open.
 */
static __attribute__((noreturn)) void child_main(int lock_fd, int log_fd, const char *status_file, const char *cwd, char **argv, char **env) {
  sigset_t none;
  sigemptyset(&none);
  /* The only disposition this process changed (libuv started it with all of them at their default). */
  signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, NULL);
  setsid();
  /* fds 0-3 are rebuilt from descriptors moved above 3 first, so no dup2 overwrites a source. */
  int log_high = fcntl(log_fd, F_DUPFD_CLOEXEC, 10);
  int lock_high = fcntl(lock_fd, F_DUPFD_CLOEXEC, 10);
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log_high < 0 || lock_high < 0 || null_fd < 0) _exit(126);
  dup2(null_fd, 0);
  dup2(log_high, 1);
  dup2(log_high, 2);
  dup2(lock_high, 3);
  /* The cgroups: QUANTILICA_CGROUP_PROCS, paths joined by ':' (runWrapper.sh did the same). No
   * malloc here: this runs in a vfork child, in its parent's memory. */
  const char *procs = env_value(env, "QUANTILICA_CGROUP_PROCS");
  if (procs != NULL && *procs != 0) {
    char self[32], one[4096];
    int n = snprintf(self, sizeof self, "%d\n", (int)getpid());
    for (const char *p = procs; *p != 0;) {
      const char *end = strchrnul(p, ':');
      size_t len = (size_t)(end - p);
      if (len > 0 && len < sizeof one) {
        memcpy(one, p, len);
        one[len] = 0;
        int fd = open(one, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, self, (size_t)n) != n) child_fail(status_file, 125, "could not join the run's cgroup", one, errno);
        close(fd);
      }
      p = *end == ':' ? end + 1 : end;
    }
    /* Not the fetcher's business. */
    for (char **e = env, **out = env;; e++) {
      if (*e == NULL || strncmp(*e, "QUANTILICA_CGROUP_PROCS=", 24) != 0) *out++ = *e;
      if (*e == NULL) break;
    }
  }
  const char *mask = env_value(env, "QUANTILICA_FETCHER_UMASK");
  if (mask != NULL && *mask != 0) umask((mode_t)strtoul(mask, NULL, 8));
  if (chdir(cwd) != 0) child_fail(status_file, 127, "cannot enter", cwd, errno);
  syscall(SYS_close_range, 4U, ~0U, 0U);
  exec_program(argv, env);
  int err = errno;
  /* As sh reports a command it cannot run. */
  child_fail(status_file, err == ENOENT ? 127 : 126, "cannot run", argv[0], err);
}

/* A waiter whose fetcher never started ("F" was answered): reaped silently. */
static void ch_forget(pid_t waiter) {
  for (struct child *ch = children; ch != NULL; ch = ch->next)
    if (ch->pid == waiter) {
      free(ch->id);
      ch->id = NULL;
    }
}

/* W, the run's waiter: F's parent, which writes F's status and exits with F's code. */
static __attribute__((noinline, noreturn)) void waiter_main(int ready[2], int lock_fd, int log_fd, const char *status_file, const char *cwd, char **argv, char **env) {
  close(ready[0]);
  /* vfork: W is suspended until F has exec'd (or failed), so F has its session by the time W
   * answers, and no page table is copied for a child that execs at once. */
  pid_t f = vfork();
  if (f == 0) child_main(lock_fd, log_fd, status_file, cwd, argv, env);
  int32_t sent = f < 0 ? -errno : (int32_t)f;
  write_all(ready[1], (const char *)&sent, sizeof sent);
  /* Nothing of the agent's stays open here: not the slot, not the log, not the protocol pipes. */
  syscall(SYS_close_range, 0U, ~0U, 0U);
  if (f < 0) _exit(126);
  int status;
  while (waitpid(f, &status, 0) < 0 && errno == EINTR) {}
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  write_status(status_file, code);
  _exit(code);
}

static char *next_field(char **p, char *end) {
  if (*p >= end) return NULL;
  char *s = *p;
  char *z = memchr(s, 0, (size_t)(end - s));
  if (z == NULL) return NULL;
  *p = z + 1;
  return s;
}

static int parse_count(const char *s, long max) {
  char *e;
  long v = s == NULL ? -1 : strtol(s, &e, 10);
  if (s == NULL || *s == 0 || *e != 0 || v < 0 || v > max) return -1;
  return (int)v;
}

static void handle(char *buf, uint32_t len) {
  char *p = buf, *end = buf + len;
  char *id = next_field(&p, end);
  int lock_no = parse_count(next_field(&p, end), 1 << 30);
  int log_no = parse_count(next_field(&p, end), 1 << 30);
  char *status_file = next_field(&p, end);
  char *cwd = next_field(&p, end);
  int argc = parse_count(next_field(&p, end), MAX_ARGS);
  if (id == NULL || lock_no < 0 || log_no < 0 || status_file == NULL || cwd == NULL || argc < 1) {
    answer("F %s %d malformed-request\n", id == NULL ? "?" : id, EINVAL);
    return;
  }
  char **argv = calloc((size_t)argc + 1, sizeof *argv);
  for (int i = 0; i < argc; i++) argv[i] = next_field(&p, end);
  int envc = parse_count(next_field(&p, end), MAX_ARGS);
  char **env = envc < 0 ? NULL : calloc((size_t)envc + 1, sizeof *env);
  for (int i = 0; env != NULL && i < envc; i++) env[i] = next_field(&p, end);
  int bad = env == NULL || argv[argc - 1] == NULL || (envc > 0 && env[envc - 1] == NULL);
  if (bad) {
    answer("F %s %d malformed-request\n", id, EINVAL);
    free(argv);
    free(env);
    return;
  }
  /* The agent's own descriptors, the same open file descriptions (the flock goes with them). */
  int lock_fd = (int)syscall(SYS_pidfd_getfd, parent_pidfd, lock_no, 0);
  int lock_err = errno;
  int log_fd = lock_fd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, parent_pidfd, log_no, 0);
  if (lock_fd < 0 || log_fd < 0) {
    answer("F %s %d pidfd-getfd\n", id, lock_fd < 0 ? lock_err : errno);
    if (lock_fd >= 0) close(lock_fd);
    free(argv);
    free(env);
    return;
  }
  /*
   * Two processes per run, as runWrapper.sh had two shells: a waiter W (a fork of this small process,
   * no exec) is the fetcher's parent and writes its status file, so the status survives this spawner
   * being killed; the fetcher F leads its own session and group, the pid the agent records and signals.
   * W sends F's pid on `ready` once F has exec'd (vfork), so the group the agent signals exists
   * before "S"; the pipe then reaches EOF as W closes it.
   */
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) {
    answer("F %s %d pipe\n", id, errno);
    close(lock_fd);
    close(log_fd);
    free(argv);
    free(env);
    return;
  }
  pid_t waiter = fork();
  if (waiter == 0) waiter_main(ready, lock_fd, log_fd, status_file, cwd, argv, env);
  int fork_err = errno;
  close(ready[1]);
  close(lock_fd);
  close(log_fd);
  int32_t fetcher = -fork_err;
  if (waiter > 0) {
    ssize_t n;
    while ((n = read(ready[0], &fetcher, sizeof fetcher)) < 0 && errno == EINTR) {}
    if (n != (ssize_t)sizeof fetcher) fetcher = -ECHILD;
    char rest;
    while (read(ready[0], &rest, 1) < 0 && errno == EINTR) {}
  }
  close(ready[0]);
  if (waiter > 0) {
    /* Reaped like any run, also when F never started: W's exit says how. */
    struct child *ch = malloc(sizeof *ch);
    ch->pid = waiter;
    ch->id = strdup(id);
    ch->status_file = strdup(status_file);
    ch->next = children;
    children = ch;
  }
  if (fetcher <= 0) {
    if (waiter > 0) ch_forget(waiter);
    answer("F %s %d fork\n", id, -fetcher);
  } else {
    answer("S %s %d %llu\n", id, (int)fetcher, start_time(fetcher));
  }
  free(argv);
  free(env);
}

static void reap(void) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    for (struct child **pp = &children; *pp != NULL; pp = &(*pp)->next) {
      struct child *ch = *pp;
      if (ch->pid != pid) continue;
      /* W wrote the fetcher's status; if W itself was killed, record how it ended rather than nothing. */
      struct stat st;
      if (!WIFEXITED(status) && (stat(ch->status_file, &st) != 0 || st.st_size == 0)) write_status(ch->status_file, code);
      if (ch->id != NULL) answer("E %s %d\n", ch->id, code);
      *pp = ch->next;
      free(ch->id);
      free(ch->status_file);
      free(ch);
      break;
    }
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  umask(077);
  pid_t parent = getppid();
  parent_pidfd = (int)syscall(SYS_pidfd_open, parent, 0);
  /* Reparented already (the agent died at once): nothing to take descriptors from. */
  if (parent_pidfd < 0 || getppid() != parent) return 69;
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) return 70;
  static char head[4];
  char *buf = NULL;
  uint32_t want = 0, have = 0;
  int head_have = 0, input_open = 1;
  while (input_open || children != NULL) {
    struct pollfd fds[2] = {{sfd, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    if (poll(fds, input_open ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      return 71;
    }
    if (fds[0].revents & POLLIN) {
      struct signalfd_siginfo info;
      while (read(sfd, &info, sizeof info) > 0) {}
      reap();
    }
    if (!input_open || !(fds[1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    /* One read per wake-up keeps reaping prompt while a long request arrives. */
    ssize_t n;
    if (head_have < 4) {
      n = read(STDIN_FILENO, head + head_have, (size_t)(4 - head_have));
    } else {
      n = read(STDIN_FILENO, buf + have, want - have);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      /* The agent closed the pipe or died: finish the children still running, then exit. */
      input_open = 0;
      close(STDIN_FILENO);
      continue;
    }
    if (head_have < 4) {
      head_have += (int)n;
      if (head_have < 4) continue;
      want = (uint32_t)(unsigned char)head[0] | (uint32_t)(unsigned char)head[1] << 8 |
             (uint32_t)(unsigned char)head[2] << 16 | (uint32_t)(unsigned char)head[3] << 24;
      if (want == 0 || want > MAX_REQUEST) {
        /* Not the agent's framing: take no more requests, but still see the children to their end. */
        input_open = 0;
        close(STDIN_FILENO);
        continue;
      }
      buf = malloc(want);
      have = 0;
      continue;
    }
    have += (uint32_t)n;
    if (have < want) continue;
    handle(buf, want);
    free(buf);
    buf = NULL;
    head_have = 0;
  }
  return 0;
}
