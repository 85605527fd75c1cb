#!/bin/bash -p
# The parent of every fetcher the agent starts: usage runWrapper.sh STATUS_FILE PROGRAM [ARGS...]
#
# Why it exists: the agent may die or restart while a fetcher runs, and only a process's parent can
# learn its exit status. The status is written to STATUS_FILE, where the next agent finds it. It is a
# shell script, not node, because it runs once per fetcher and must cost next to nothing. bash, not
# sh: dash cannot close a descriptor above 9 (below). -p: no BASH_ENV, no functions or shell options
# from the environment, which is the fetcher's.
#
# Two shells, so the status survives this wrapper being killed: this outer shell (the process group
# leader, the pid the agent records) waits for an inner subshell, and the subshell is the fetcher's
# parent and writes the status. A `kill -9` of the wrapper's pid leaves the subshell running: it still
# learns the fetcher's exit code and records it. (A foreground subshell, not `&`: a background job of
# a non-interactive sh would start the fetcher with SIGINT ignored.)
#
# fd 3 is the slot lock (a flock(2)ed descriptor the agent handed over): every process of the run
# inherits it, so the slot stays taken exactly while the run's processes live.
status_file=$1
shift
# Only 0-3 are the run's (the log twice, the slot): a descriptor the agent itself inherited without
# close-on-exec (from a shell, a cron daemon, a test) would reach the fetcher, as the native spawner's
# close_range(4, ~0) prevents. bash's own copy of this script (close-on-exec, at a high number) stays.
for fd in /proc/$$/fd/*; do
  n=${fd##*/}
  if [ "$n" -gt 3 ] && ! [ "$fd" -ef "$0" ]; then
    eval "exec $n>&-"
  fi
done
unset fd n
# memory ceilings: first thing, before anything of the fetcher runs, this process joins the
# run's cgroup(s) (QUANTILICA_CGROUP_PROCS, paths joined by ':'); every process it starts is born
# inside, so a ceiling holds for the whole run and cancel can reach processes that leave the group.
if [ -n "${QUANTILICA_CGROUP_PROCS:-}" ]; then
  IFS=:
  for procs in $QUANTILICA_CGROUP_PROCS; do
    if ! echo $$ > "$procs"; then
      echo "quantilica: could not join the run's cgroup $procs; the run is not started" >&2
      printf '125\n' > "$status_file"
      exit 125
    fi
  done
  unset IFS QUANTILICA_CGROUP_PROCS
fi
# The agent cancels by signalling the whole process group. With a trap set, sh lets its child finish
# first (and the fetcher, whose caught signals are reset to the default on exec, gets the signal too).
trap 'cancelled=1' TERM INT HUP
(
  trap 'cancelled=1' TERM INT HUP
  # The agent runs with umask 077 (its files are private); the fetcher gets the umask the agent was
  # started with, for data that others may be meant to read.
  [ -n "${QUANTILICA_FETCHER_UMASK:-}" ] && umask "$QUANTILICA_FETCHER_UMASK"
  "$@"
  code=$?
  umask 077
  # The trailing newline marks a complete record: a reader ignores the file until it is there.
  printf '%s\n' "$code" > "$status_file"
  exit "$code"
)
code=$?
# The subshell was killed before it could write: record how it ended rather than nothing.
[ -s "$status_file" ] || printf '%s\n' "$code" > "$status_file"
exit "$code"
