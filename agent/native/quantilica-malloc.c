/*
 * The agent's hold on glibc's allocator, as a Node-API module (dist/quantilica-malloc.node).
 *
 * After a burst of runs, V8 gives its own pages back, but memory the C++ side (libuv, V8's worker
 * threads, SQLite) freed stays in glibc's arenas: one per thread that allocated, each keeping what it
 * once held. Nothing in Node hands it back, and glibc's environment settings for it (MALLOC_ARENA_MAX,
 * MALLOC_TRIM_THRESHOLD_) are read at the process's start, from an environment that belongs to
 * whoever launches the agent (systemd, the extension, a terminal). So the agent asks itself:
 *   limitArenas(n)  mallopt(M_ARENA_MAX, n): threads that allocate for the first time from now on
 *                   share n arenas instead of taking one each;
 *   trim()          malloc_trim(0): every arena's free pages back to the kernel (true if any were);
 *   holdThresholds(bytes)
 *                   mallopt(M_MMAP_THRESHOLD and M_TRIM_THRESHOLD, bytes): glibc raises both each time a
 *                   large block is freed (up to 32 and 64 MB), and below the raised trim threshold the
 *                   arenas of V8's worker threads kept ~9 MB they freed during a burst, which the trim
 *                   after it did not give back (docs/benchmarks.md, "Idle RSS after a burst, now").
 *                   Unlike the arena limit, both apply at once to every arena, also those of threads
 *                   that exist already, and glibc no longer moves them.
 * All are glibc's; on another C library the build fails and the agent goes without (nativeMalloc.ts).
 */
#include <malloc.h>
#include "quantilica-napi.h"

static napi_value trim(napi_env env, napi_callback_info info) {
  (void)info;
  return boolean(env, malloc_trim(0) != 0);
}

static napi_value limit_arenas(napi_env env, napi_callback_info info) {
  int32_t n;
  if (!int32_argument(env, info, &n)) return NULL;
  return boolean(env, n > 0 && mallopt(M_ARENA_MAX, n) == 1);
}

static napi_value hold_thresholds(napi_env env, napi_callback_info info) {
  int32_t bytes;
  if (!int32_argument(env, info, &bytes)) return NULL;
  return boolean(env, bytes > 0 && mallopt(M_MMAP_THRESHOLD, bytes) == 1 && mallopt(M_TRIM_THRESHOLD, bytes) == 1);
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  if (!export_function(env, exports, "trim", trim) || !export_function(env, exports, "limitArenas", limit_arenas) ||
      !export_function(env, exports, "holdThresholds", hold_thresholds))
    return NULL;
  return exports;
}
