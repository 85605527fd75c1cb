#!/bin/sh
# The parent of every fetcher the agent starts: usage runWrapper.sh STATUS_FILE PROGRAM [ARGS...]
#
# Why it exists: the agent may die or restart while a fetcher runs, and only a process's parent can
# learn its exit status. This wrapper is that parent; it writes the status to STATUS_FILE, where the
# next agent finds it. It is a POSIX sh script, not node, because it runs once per fetcher and must
# cost next to nothing.
#
# fd 3 is the slot lock (a flock(2)ed descriptor the agent handed over): the wrapper and the fetcher
# both inherit it, so the slot stays taken exactly while the run's processes live.
status_file=$1
shift
# The agent cancels by signalling the whole process group. With a trap set, sh lets the fetcher finish
# first and then records its status; the fetcher itself gets default signal handling (POSIX resets
# caught signals on exec).
trap 'cancelled=1' TERM INT HUP
# The agent runs with umask 077 (its files are private); the fetcher gets the umask the agent was
# started with, for data that others may be meant to read.
[ -n "${QUANTILICA_FETCHER_UMASK:-}" ] && umask "$QUANTILICA_FETCHER_UMASK"
"$@"
code=$?
# The trailing newline marks a complete record: a reader ignores the file until it is there.
printf '%s\n' "$code" > "$status_file"
exit "$code"
