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
 *     and the agent closed the request pipe); while the agent lives, the waiter also reads and removes
 *     the run's v1 cgroup when nothing of the run is left in it (cgroup_end);
 *   - the run's v1 cgroup folders are made by the waiter when the agent left them to it
 *     (cgroup_begin), so the fetcher is still born inside them;
 *   - a first try's log is made by the waiter, in the log folder the agent opened and checked
 *     (make_log), as a shell's redirection makes it: on a filesystem where making a file is dear,
 *     the run's own process pays for it, not the agent's main thread.
 *
 * Protocol (stdin: requests from the agent; stdout: one line per answer):
 *   request  = u32 little-endian length, then NUL-terminated strings:
 *              id, lockFd, logFd, logName, statusFile, cwd, argc, argv..., envc, env...
 *              (logName empty: logFd is the run's log; else logFd is the log folder, and the waiter
 *              makes logName in it)
 *   answers  = "S <id> <pid> <starttime>\n"  started (pid leads its own session and process group)
 *              "E <id> <code>\n"              ended: exit code, or 128+signal as sh reports it
 *              "F <id> <errno> <what>\n"      not started (the agent falls back to its own spawn);
 *                                             what = log: the log could not be made (nothing else was done)
 *   A run's S or F always comes before its E; the runs' answers come in any order (a run whose exec
 *   is slow is answered when it has exec'd, and the requests after it are not held up meanwhile).
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

/* This process's exit codes, read by the agent: agent/helperExitCodes.ts (SpawnerExit) has the same
 * names and values (test/unit/helperExitCodes.test.ts compares them). The first three end it before it
 * reads a request: nothing was forked, and the agent starts every run from its worker thread. */
#define SPAWNER_EXIT_NO_PARENT 69           /* EX_UNAVAILABLE: no pidfd of the parent, or reparented already */
#define SPAWNER_EXIT_NO_SIGNALFD 70         /* EX_SOFTWARE */
#define SPAWNER_EXIT_DESCRIPTORS_REFUSED 77 /* EX_NOPERM: pidfd_getfd on the parent refused (Yama, seccomp) */
#define SPAWNER_EXIT_POLL_FAILED 71         /* EX_OSERR */
/* A run that never reached its program ends as sh reports one (runPolicy.ts never retries 126, 127). */
#define RUN_EXIT_NO_CGROUP 125
#define RUN_EXIT_CANNOT_RUN 126
#define RUN_EXIT_NOT_FOUND 127

/* At most this many runs between their request and their exec at once; beyond, the next requests
 * wait in the pipe (each starting run is one descriptor in the poll set). */
#define MAX_STARTING 64

/* What W sends on its `ready` pipe: F's pid, or -errno and the step that failed. */
enum ready_step { READY_FORK, READY_LOG };
struct ready_note {
  int32_t fetcher;
  int32_t step; /* enum ready_step */
};

struct child {
  pid_t pid;              /* W, the run's waiter */
  char *id;               /* NULL once "F" was answered: reaped silently */
  char *status_file;
  int ready_fd;           /* W's pipe until "S" or "F" is answered, then -1 */
  struct ready_note note; /* what W sent on it */
  int ready_got;          /* bytes of `note` received */
  struct child *next;
};

static struct child *children = NULL;
static int starting = 0; /* children whose ready_fd is open */
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

/* The trailing newline marks a complete record (runProcess.ts readStatusFile); `more`, when not
 * NULL, is a second line (the run cgroup's end figures, see cgroup_end). */
static void write_status(const char *file, int code, const char *more) {
  char line[160];
  int n = snprintf(line, sizeof line, "%d\n%s", code, more == NULL ? "" : more);
  if (n < 0 || (size_t)n >= sizeof line) n = snprintf(line, sizeof line, "%d\n", code);
  int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  write_all(fd, line, (size_t)n);
  close(fd);
}

static const char *entry_end(const char *p);

/* `dir` (its first `dir_len` bytes), then "/name" unless `name` is NULL, into `path`; 0 when too long. */
static int dir_path(char *path, size_t size, const char *dir, size_t dir_len, const char *name) {
  size_t extra = name == NULL ? 0 : 1 + strlen(name);
  if (dir_len + extra >= size) return 0;
  memcpy(path, dir, dir_len);
  path[dir_len] = 0;
  if (name != NULL) {
    path[dir_len] = '/';
    strcpy(path + dir_len + 1, name);
  }
  return 1;
}

/* The first bytes of the regular file `dir`/`name`, NUL-terminated; -1 when it cannot be read (a
 * FIFO or a device is never waited on: cgroup files are regular). */
static ssize_t read_small(const char *dir, size_t dir_len, const char *name, char *buf, size_t size) {
  char path[4096];
  if (!dir_path(path, sizeof path, dir, dir_len, name)) return -1;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return -1;
  }
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = 0;
  return n;
}

/* The number after "<key> " on a line of a flat-keyed file's text; -1 when absent. */
static long long keyed_value(const char *text, const char *key) {
  size_t len = strlen(key);
  for (const char *line = text; *line != 0;) {
    if (strncmp(line, key, len) == 0 && line[len] == ' ') return strtoll(line + len + 1, NULL, 10);
    const char *next = strchr(line, '\n');
    if (next == NULL) break;
    line = next + 1;
  }
  return -1;
}

/*
 * At the end of a run in v1 cgroups (QUANTILICA_CGROUP_PROCS: the memory folder's cgroup.procs, then
 * the cpuacct folder's, joined by ':'), while the agent that started this spawner lives (`agent`, its
 * pidfd, turns readable once it has exited): when no process is left in them, reads the figures the
 * agent records (peak memory, CPU, OOM kills), removes the folders, and only then puts the figures in
 * `out` as "cgroup <peak bytes> <cpu ns or -> <oom kills>\n", so the agent's main thread does neither
 * per run. With a process left (a lingering or escaped one), another layout, a file that cannot be
 * read, a folder that will not go, or no agent (the next one adopts the run's cgroup as it was left),
 * `out` stays empty: the agent then does the rest, as for a run whose waiter was killed.
 */
static void cgroup_end(const char *procs, int agent, char *out, size_t size) {
  out[0] = 0;
  if (procs == NULL || *procs == 0) return;
  struct pollfd gone = {agent, POLLIN, 0};
  if (agent < 0 || poll(&gone, 1, 0) != 0) return;
  const char *dirs[2] = {NULL, NULL};
  size_t lens[2] = {0, 0};
  int ndirs = 0;
  static const char tail[] = "/cgroup.procs";
  for (const char *p = procs; *p != 0 && ndirs < 2;) {
    const char *end = entry_end(p);
    size_t len = (size_t)(end - p);
    if (len <= sizeof tail - 1 || strncmp(end - (sizeof tail - 1), tail, sizeof tail - 1) != 0) return;
    dirs[ndirs] = p;
    lens[ndirs++] = len - (sizeof tail - 1);
    p = *end == ':' ? end + 1 : end;
  }
  /* Whether a process is left is not read from cgroup.procs (on v1 each read builds a pid list a
   * kernel worker frees later): the rmdirs below refuse a folder that still has one (EBUSY), and the
   * figures read before them are then dropped. */
  char buf[1024];
  if (read_small(dirs[0], lens[0], "memory.max_usage_in_bytes", buf, sizeof buf) <= 0) return;
  long long peak = strtoll(buf, NULL, 10);
  if (read_small(dirs[0], lens[0], "memory.oom_control", buf, sizeof buf) <= 0) return;
  long long oom = keyed_value(buf, "oom_kill");
  if (oom < 0) oom = 0;
  long long cpu = -1;
  if (ndirs > 1 && read_small(dirs[1], lens[1], "cpuacct.usage", buf, sizeof buf) > 0) cpu = strtoll(buf, NULL, 10);
  char cpu_text[24] = "-";
  if (cpu >= 0) snprintf(cpu_text, sizeof cpu_text, "%lld", cpu);
  /* The cpuacct folder first: if the memory folder will not go (a process joined it after all), the
   * agent still finds it, with its figures, and does the rest at the run's end. */
  for (int i = ndirs - 1; i >= 0; i--) {
    char path[4096];
    if (!dir_path(path, sizeof path, dirs[i], lens[i], NULL) || rmdir(path) != 0) return;
  }
  snprintf(out, size, "cgroup %lld %s %lld\n", peak, cpu_text, oom);
}

/*
 * Before the fork of F, in v1 cgroups: makes the folders whose cgroup.procs QUANTILICA_CGROUP_PROCS
 * names, when the agent left them to this process (a v1 mkdir takes cgroup_mutex, which every waiter's
 * rmdir in cgroup_end takes too: on the agent's main thread it held up every run queued behind it in
 * a burst). A folder there already is the agent's (made with the run's own memory ceiling, or an
 * earlier one it reset). A folder that cannot be made is left to F's join, which then fails with the
 * run's cgroup named on its log.
 */
static void cgroup_begin(const char *procs) {
  if (procs == NULL) return;
  static const char tail[] = "/cgroup.procs";
  for (const char *p = procs; *p != 0;) {
    const char *end = entry_end(p);
    size_t len = (size_t)(end - p);
    char dir[4096];
    if (len > sizeof tail - 1 && strncmp(end - (sizeof tail - 1), tail, sizeof tail - 1) == 0 &&
        dir_path(dir, sizeof dir, p, len - (sizeof tail - 1), NULL))
      (void)mkdir(dir, 0777);
    p = *end == ':' ? end + 1 : end;
  }
}

/* Linear, with strlen and strncmp only: the vfork child uses it too. */
static const char *env_value(char **env, const char *name) {
  size_t len = strlen(name);
  for (char **e = env; *e != NULL; e++)
    if (strncmp(*e, name, len) == 0 && (*e)[len] == '=') return *e + len + 1;
  return NULL;
}

/* close_range(2) came in Linux 5.9, pidfd_getfd (which this program needs anyway) in 5.6: on the
 * kernels between, one by one. Everything this process opens is close-on-exec as well. */
static void close_from(unsigned first) {
  if (syscall(SYS_close_range, first, ~0U, 0U) == 0) return;
  for (unsigned fd = first; fd < 1024; fd++) close((int)fd);
}

/*
 * Between vfork and exec the fetcher F runs on the waiter's memory and stack while the waiter is
 * suspended: like a signal handler, it may call only what is async-signal-safe (system calls, close_range
 * through syscall(2) included, and the string functions POSIX.1-2016 lists as such: strlen, strncmp,
 * strchr, memcpy, strcpy), never malloc, stdio or strerror, which take locks and keep state the
 * waiter shares. So F formats nothing. When a step fails it writes a `struct failure` to a
 * close-on-exec pipe and _exits (write and _exit only); the waiter, an ordinary process again once
 * vfork returns, turns it into the message on the run's log.
 * The pipe's end closing at exec, with nothing written, says that the exec happened.
 */
enum step { STEP_DESCRIPTORS, STEP_CGROUP, STEP_CWD, STEP_EXEC };
struct failure {
  int32_t code;      /* the run's exit code: RUN_EXIT_* */
  int32_t step;      /* enum step */
  int32_t err;       /* errno */
  int32_t arg_start; /* STEP_CGROUP: the cgroup.procs path that failed, as an offset and a length */
  int32_t arg_len;   /*   inside QUANTILICA_CGROUP_PROCS */
};

static __attribute__((noreturn)) void child_fail(int report_fd, int code, int step, int err, int arg_start, int arg_len) {
  struct failure why = {code, step, err, arg_start, arg_len};
  /* If this write fails the waiter sees an exec and records the exit code alone. */
  if (write(report_fd, &why, sizeof why) != (ssize_t)sizeof why) {}
  _exit(code);
}

/* The pid in decimal for cgroup.procs, without snprintf (not async-signal-safe). */
static size_t format_decimal(char *out, unsigned long v) {
  char rev[24];
  size_t n = 0;
  do {
    rev[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; i++) out[i] = rev[n - 1 - i];
  return n;
}

/* The end of one ':'-separated entry (strchrnul is a GNU extension, not on the safe list). */
static const char *entry_end(const char *p) {
  while (*p != 0 && *p != ':') p++;
  return p;
}

/* execvpe with the run's own PATH, as Node's spawn (libuv) does. Async-signal-safe: F calls it. */
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
    const char *end = entry_end(path);
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
 * F, in the vfork child, before exec: its own session (cancel signals the group), the run's cgroups
 * joined first (memory ceilings: every process of the run is born inside), the umask the agent was
 * started with, stdin /dev/null, stdout and stderr on the log, the slot on fd 3, nothing else open
 * (fd 4, the report pipe, is close-on-exec). `procs` is QUANTILICA_CGROUP_PROCS, found by the waiter.
 */
static __attribute__((noreturn)) void child_main(int report_fd, int lock_fd, int log_fd, const char *cwd, char **argv, char **env, const char *procs) {
  sigset_t none;
  sigemptyset(&none);
  /* The only disposition this process changed (libuv started it with all of them at their default). */
  signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, NULL);
  setsid();
  /* fds 0-4 are rebuilt from descriptors moved above 4 first, so no dup2 overwrites a source. */
  int log_high = fcntl(log_fd, F_DUPFD_CLOEXEC, 10);
  int lock_high = fcntl(lock_fd, F_DUPFD_CLOEXEC, 10);
  int report_high = fcntl(report_fd, F_DUPFD_CLOEXEC, 10);
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log_high < 0 || lock_high < 0 || report_high < 0 || null_fd < 0) child_fail(report_fd, RUN_EXIT_CANNOT_RUN, STEP_DESCRIPTORS, errno, 0, 0);
  /* dup2 clears close-on-exec on 0-3, the fetcher's; dup3 keeps it on the report pipe. */
  if (dup2(null_fd, 0) < 0 || dup2(log_high, 1) < 0 || dup2(log_high, 2) < 0 || dup2(lock_high, 3) < 0 || dup3(report_high, 4, O_CLOEXEC) < 0)
    child_fail(report_high, RUN_EXIT_CANNOT_RUN, STEP_DESCRIPTORS, errno, 0, 0);
  report_fd = 4;
  close_from(5);
  /* The cgroups: paths joined by ':' (runWrapper.sh did the same). No malloc here. */
  if (procs != NULL && *procs != 0) {
    char self[32], one[4096];
    size_t n = format_decimal(self, (unsigned long)getpid());
    self[n++] = '\n';
    for (const char *p = procs; *p != 0;) {
      const char *end = entry_end(p);
      size_t len = (size_t)(end - p);
      if (len > 0 && len < sizeof one) {
        memcpy(one, p, len);
        one[len] = 0;
        int fd = open(one, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, self, n) != (ssize_t)n) child_fail(report_fd, RUN_EXIT_NO_CGROUP, STEP_CGROUP, errno, (int)(p - procs), (int)len);
        close(fd);
      }
      p = *end == ':' ? end + 1 : end;
    }
    /* Not the fetcher's business. (This rewrites the waiter's array, which it no longer reads.) */
    for (char **e = env, **out = env;; e++) {
      if (*e == NULL || strncmp(*e, "QUANTILICA_CGROUP_PROCS=", 24) != 0) *out++ = *e;
      if (*e == NULL) break;
    }
  }
  const char *mask = env_value(env, "QUANTILICA_FETCHER_UMASK");
  if (mask != NULL && *mask != 0) {
    /* Octal, as the agent writes it (strtoul is not on the safe list). */
    mode_t m = 0;
    for (const char *c = mask; *c >= '0' && *c <= '7'; c++) m = (mode_t)(m * 8 + (mode_t)(*c - '0'));
    umask(m & 0777);
  }
  if (chdir(cwd) != 0) child_fail(report_fd, RUN_EXIT_NOT_FOUND, STEP_CWD, errno, 0, 0);
  exec_program(argv, env);
  int err = errno;
  /* As sh reports a command it cannot run. */
  child_fail(report_fd, err == ENOENT ? RUN_EXIT_NOT_FOUND : RUN_EXIT_CANNOT_RUN, STEP_EXEC, err, 0, 0);
}

/* In the waiter, after vfork returned: what F could not do, said on the run's log as sh would. */
static void report_failure(int log_fd, const struct failure *why, const char *cwd, const char *prog, const char *procs) {
  char msg[1024];
  const char *reason = strerror(why->err);
  int n;
  size_t procs_len = procs == NULL ? 0 : strlen(procs);
  if (why->step == STEP_CGROUP && why->arg_start >= 0 && why->arg_len >= 0 && (size_t)why->arg_start + (size_t)why->arg_len <= procs_len)
    n = snprintf(msg, sizeof msg, "quantilica: could not join the run's cgroup %.*s: %s\n", (int)why->arg_len, procs + why->arg_start, reason);
  else if (why->step == STEP_CWD)
    n = snprintf(msg, sizeof msg, "quantilica: cannot enter %s: %s\n", cwd, reason);
  else if (why->step == STEP_EXEC)
    n = snprintf(msg, sizeof msg, "quantilica: cannot run %s: %s\n", prog, reason);
  else
    n = snprintf(msg, sizeof msg, "quantilica: cannot set up the run's descriptors: %s\n", reason);
  if (n > 0) write_all(log_fd, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
}

/*
 * In W, before anything else of the run: makes the run's log `name` in the log folder `dir_fd` the
 * agent opened and checked, as the agent itself would (never an existing file, never through a link,
 * 0600 whatever the umask). Returns its descriptor, or -errno with nothing left behind: the agent then
 * starts the run itself, and its own attempt says why (a file planted under the name, a full disk).
 */
static int make_log(int dir_fd, const char *name) {
  int fd = openat(dir_fd, name, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) return -errno;
  if (fchmod(fd, 0600) != 0) {
    int err = errno;
    close(fd);
    unlinkat(dir_fd, name, 0);
    return -err;
  }
  return fd;
}

static __attribute__((noinline, noreturn)) void waiter_run(int ready[2], int lock_fd, int log_fd, int dir_fd, const char *log_name, const char *status_file, const char *cwd, char **argv, char **env);

/* W, the run's waiter: F's parent, which writes F's status and exits with F's code. */
static __attribute__((noinline, noreturn)) void waiter_main(int ready[2], int lock_fd, int log_fd, const char *log_name, const char *status_file, const char *cwd, char **argv, char **env) {
  close(ready[0]);
  if (*log_name == 0) waiter_run(ready, lock_fd, log_fd, -1, log_name, status_file, cwd, argv, env);
  int made = make_log(log_fd, log_name);
  if (made < 0) {
    struct ready_note note = {made, READY_LOG};
    write_all(ready[1], (const char *)&note, sizeof note);
    _exit(RUN_EXIT_CANNOT_RUN);
  }
  waiter_run(ready, lock_fd, made, log_fd, log_name, status_file, cwd, argv, env);
}

/* The rest of W, with the run's log open on `log_fd`; `dir_fd` (or -1) is the folder W made it in. */
static void waiter_run(int ready[2], int lock_fd, int log_fd, int dir_fd, const char *log_name, const char *status_file, const char *cwd, char **argv, char **env) {
  /* Found here: F takes the variable out of env before its exec. */
  const char *procs = env_value(env, "QUANTILICA_CGROUP_PROCS");
  cgroup_begin(procs);
  int report[2];
  pid_t f = -1;
  if (pipe2(report, O_CLOEXEC) == 0) {
    /* vfork: W is suspended until F has exec'd (or failed), so F has its session by the time W
     * answers, and no page table is copied for a child that execs at once. */
    f = vfork();
    if (f == 0) child_main(report[1], lock_fd, log_fd, cwd, argv, env, procs);
  }
  struct ready_note sent = {f < 0 ? -errno : (int32_t)f, READY_FORK};
  /* Nothing started: the agent starts the run itself, and makes the log anew. */
  if (f < 0 && dir_fd >= 0) unlinkat(dir_fd, log_name, 0);
  if (f > 0) {
    close(report[1]);
    /* F has exec'd (its end of the pipe closed with it) or _exited: this read never waits. */
    struct failure why;
    ssize_t n;
    while ((n = read(report[0], &why, sizeof why)) < 0 && errno == EINTR) {}
    if (n == (ssize_t)sizeof why) report_failure(log_fd, &why, cwd, argv[0], procs);
  }
  write_all(ready[1], (const char *)&sent, sizeof sent);
  /* Nothing of the agent's stays open here: not the slot, not the log, not the protocol pipes. Only
   * the spawner's pidfd of the agent, moved to fd 0, which tells whether the agent still lives. */
  int agent = dup2(parent_pidfd, 0) == 0 ? 0 : -1;
  close_from(1);
  if (f < 0) _exit(RUN_EXIT_CANNOT_RUN);
  int status;
  while (waitpid(f, &status, 0) < 0 && errno == EINTR) {}
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  char figures[128];
  cgroup_end(procs, agent, figures, sizeof figures);
  write_status(status_file, code, figures[0] == 0 ? NULL : figures);
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
  char *log_name = next_field(&p, end);
  char *status_file = next_field(&p, end);
  char *cwd = next_field(&p, end);
  int argc = parse_count(next_field(&p, end), MAX_ARGS);
  if (id == NULL || lock_no < 0 || log_no < 0 || log_name == NULL || strchr(log_name, '/') != NULL || status_file == NULL || cwd == NULL || argc < 1) {
    answer("F %s %d malformed-request\n", id == NULL ? "?" : id, EINVAL);
    return;
  }
  /* Everything below is freed at `done`; free(NULL) does nothing. An allocation that fails is
   * answered "F … no-memory" before anything is forked, and the agent starts that run itself. */
  char **env = NULL;
  struct child *ch = NULL;
  int lock_fd = -1, log_fd = -1;
  char **argv = calloc((size_t)argc + 1, sizeof *argv);
  if (argv == NULL) goto no_memory;
  for (int i = 0; i < argc; i++) argv[i] = next_field(&p, end);
  int envc = parse_count(next_field(&p, end), MAX_ARGS);
  if (envc < 0 || argv[argc - 1] == NULL) goto malformed;
  env = calloc((size_t)envc + 1, sizeof *env);
  if (env == NULL) goto no_memory;
  for (int i = 0; i < envc; i++) env[i] = next_field(&p, end);
  if (envc > 0 && env[envc - 1] == NULL) goto malformed;
  /* The reaper's record, made before the fork: a waiter forked but not followed would be worse. */
  ch = calloc(1, sizeof *ch);
  if (ch == NULL || (ch->id = strdup(id)) == NULL || (ch->status_file = strdup(status_file)) == NULL) goto no_memory;
  ch->ready_fd = -1;
  /* The agent's own descriptors, the same open file descriptions (the flock goes with them). */
  lock_fd = (int)syscall(SYS_pidfd_getfd, parent_pidfd, lock_no, 0);
  int lock_err = errno;
  log_fd = lock_fd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, parent_pidfd, log_no, 0);
  if (lock_fd < 0 || log_fd < 0) {
    answer("F %s %d pidfd-getfd\n", id, lock_fd < 0 ? lock_err : errno);
    goto done;
  }
  /*
   * Two processes per run, as runWrapper.sh had two shells: a waiter W (a fork of this small process,
   * no exec) is the fetcher's parent and writes its status file, so the status survives this spawner
   * being killed; the fetcher F leads its own session and group, the pid the agent records and signals.
   * W sends F's pid on `ready` once F has exec'd (vfork), then closes everything it holds of the
   * agent's: at that EOF, the group the agent signals exists and only the run holds the slot, and
   * "S" is answered (started, below). This loop does not wait for it: an exec that takes long (a
   * program on a hung network mount, a cgroup write that stalls) holds up that run alone.
   */
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) {
    answer("F %s %d pipe\n", id, errno);
    goto done;
  }
  pid_t waiter = fork();
  if (waiter == 0) waiter_main(ready, lock_fd, log_fd, log_name, status_file, cwd, argv, env);
  int fork_err = errno;
  close(ready[1]);
  if (waiter < 0) {
    close(ready[0]);
    answer("F %s %d fork\n", id, fork_err);
    goto done;
  }
  /* Only this end is non-blocking (W's write of 4 bytes to an empty pipe never waits anyway). */
  fcntl(ready[0], F_SETFL, O_NONBLOCK);
  /* Reaped like any run, also when F never started: W's exit says how. */
  ch->pid = waiter;
  ch->ready_fd = ready[0];
  ch->next = children;
  children = ch;
  starting++;
  ch = NULL;
  goto done;
malformed:
  answer("F %s %d malformed-request\n", id, EINVAL);
  goto done;
no_memory:
  answer("F %s %d no-memory\n", id, ENOMEM);
done:
  if (lock_fd >= 0) close(lock_fd);
  if (log_fd >= 0) close(log_fd);
  if (ch != NULL) {
    free(ch->id);
    free(ch->status_file);
    free(ch);
  }
  free(argv);
  free(env);
}

/* Reads what W sent on `ready`; 1 once it is complete (EOF, or an error), 0 while W has yet to close it. */
static int read_ready(struct child *ch) {
  for (;;) {
    char got[8];
    ssize_t n = read(ch->ready_fd, got, sizeof got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return 0;
    if (n <= 0) return 1;
    for (ssize_t i = 0; i < n && ch->ready_got < (int)sizeof ch->note; i++) ((char *)&ch->note)[ch->ready_got++] = got[i];
  }
}

/* The run's "S", or "F" when F was never forked (the agent then starts the run itself). */
static void started(struct child *ch) {
  close(ch->ready_fd);
  ch->ready_fd = -1;
  starting--;
  int complete = ch->ready_got == (int)sizeof ch->note;
  if (complete && ch->note.fetcher > 0) {
    answer("S %s %d %llu\n", ch->id, (int)ch->note.fetcher, start_time(ch->note.fetcher));
  } else {
    answer("F %s %d %s\n", ch->id, complete ? -ch->note.fetcher : ECHILD, complete && ch->note.step == READY_LOG ? "log" : "fork");
    free(ch->id);
    ch->id = NULL;
  }
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
      /* W is gone, so its end of `ready` is closed: its answer is complete, and goes before the "E". */
      if (ch->ready_fd >= 0) {
        read_ready(ch);
        started(ch);
      }
      /* W wrote the fetcher's status; if W itself was killed, record how it ended rather than nothing. */
      struct stat st;
      if (!WIFEXITED(status) && (stat(ch->status_file, &st) != 0 || st.st_size == 0)) write_status(ch->status_file, code, NULL);
      if (ch->id != NULL) answer("E %s %d\n", ch->id, code);
      *pp = ch->next;
      free(ch->id);
      free(ch->status_file);
      free(ch);
      break;
    }
  }
}

/*
 * Whether the kernel lets this process take its parent's descriptors at all. pidfd_getfd needs leave
 * to ptrace the parent: the same user, and under Yama (kernel.yama.ptrace_scope >= 1, Ubuntu's
 * default) a process may not ptrace its own ancestor without CAP_SYS_PTRACE, so an agent under an
 * ordinary account is refused; a seccomp filter or a kernel before 5.6 refuses it too. Then every
 * request would fail, so it is found out here, once, before any request: the exit code tells the agent,
 * which logs it once and starts fetchers from its worker thread. The probe takes one of the parent's
 * standard descriptors (Node keeps 0-2 open) and closes its copy at once: no lock of the parent's is
 * touched. Any other error (EBADF, the parent closed them) leaves the answer to the first request.
 */
static int descriptors_refused(void) {
  for (int fd = 0; fd <= 2; fd++) {
    int got = (int)syscall(SYS_pidfd_getfd, parent_pidfd, fd, 0);
    if (got >= 0) {
      close(got);
      return 0;
    }
    if (errno == EPERM || errno == EACCES || errno == ENOSYS) return 1;
  }
  return 0;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  umask(077);
  pid_t parent = getppid();
  parent_pidfd = (int)syscall(SYS_pidfd_open, parent, 0);
  /* Reparented already (the agent died at once): nothing to take descriptors from. */
  if (parent_pidfd < 0 || getppid() != parent) return SPAWNER_EXIT_NO_PARENT;
  if (descriptors_refused()) return SPAWNER_EXIT_DESCRIPTORS_REFUSED;
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) return SPAWNER_EXIT_NO_SIGNALFD;
  static char head[4];
  /* A request whose buffer cannot be allocated is read into `scratch` and dropped; its first bytes,
   * kept in `id_head`, name it in the "F … no-memory" answer, so the agent starts that run itself. */
  static char scratch[4096], id_head[64];
  char *buf = NULL;
  uint32_t want = 0, have = 0;
  int head_have = 0, input_open = 1;
  static struct pollfd fds[2 + MAX_STARTING];
  static struct child *waiting_on[2 + MAX_STARTING];
  while (input_open || children != NULL) {
    /* SIGCHLD, the requests (unless MAX_STARTING runs are starting), and each starting run's pipe. */
    int nfds = 0, requests_at = -1;
    fds[nfds++] = (struct pollfd){sfd, POLLIN, 0};
    if (input_open && starting < MAX_STARTING) {
      requests_at = nfds;
      fds[nfds++] = (struct pollfd){STDIN_FILENO, POLLIN, 0};
    }
    int first_run = nfds;
    for (struct child *ch = children; ch != NULL && nfds < 2 + MAX_STARTING; ch = ch->next)
      if (ch->ready_fd >= 0) {
        waiting_on[nfds] = ch;
        fds[nfds++] = (struct pollfd){ch->ready_fd, POLLIN, 0};
      }
    if (poll(fds, (nfds_t)nfds, -1) < 0) {
      if (errno == EINTR) continue;
      return SPAWNER_EXIT_POLL_FAILED;
    }
    /* Before the reaping, which frees the children `waiting_on` points to. */
    for (int i = first_run; i < nfds; i++)
      if (fds[i].revents != 0 && read_ready(waiting_on[i])) started(waiting_on[i]);
    if (fds[0].revents & POLLIN) {
      struct signalfd_siginfo info;
      while (read(sfd, &info, sizeof info) > 0) {}
      reap();
    }
    if (requests_at < 0 || !(fds[requests_at].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    /* One read per wake-up keeps reaping prompt while a long request arrives. */
    ssize_t n;
    if (head_have < 4) {
      n = read(STDIN_FILENO, head + head_have, (size_t)(4 - head_have));
    } else if (buf != NULL) {
      n = read(STDIN_FILENO, buf + have, want - have);
    } else {
      n = read(STDIN_FILENO, scratch, want - have < sizeof scratch ? want - have : sizeof scratch);
      if (n > 0 && have < sizeof id_head)
        memcpy(id_head + have, scratch, (size_t)n < sizeof id_head - have ? (size_t)n : sizeof id_head - have);
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
      memset(id_head, 0, sizeof id_head);
      have = 0;
      continue;
    }
    have += (uint32_t)n;
    if (have < want) continue;
    if (buf != NULL) {
      handle(buf, want);
    } else {
      int named = memchr(id_head, 0, sizeof id_head) != NULL && id_head[0] != 0;
      answer("F %s %d no-memory\n", named ? id_head : "?", ENOMEM);
    }
    free(buf);
    buf = NULL;
    head_have = 0;
  }
  return 0;
}
