/*
 * The agent's way to have V8 collect its heap the way V8 collects it by itself, as a Node-API module
 * (dist/quantilica-heap.node).
 *
 * After a burst of runs the agent collects its heap to give the burst's memory back. A collection
 * asked for through gc() is an atomic one that does not retain maps: the maps of the burst's objects
 * die with them, and every optimized function that embedded one is thrown away ("weak objects"), so
 * the next burst compiles them all again (docs/benchmarks.md, "The collection after a burst and the
 * compiled code"). A collection V8 starts itself goes through incremental marking, which keeps such
 * maps for a few collections. Memory reported as allocated outside the heap starts one:
 *   reportExternalMemory(bytes)   (an int32: up to 2 GiB)
 *                   napi_adjust_external_memory(+bytes) then (-bytes): above V8's soft limit for external
 *                   memory (64 MB over what it had after its last mark-compact) V8 starts incremental
 *                   marking, which goes on after the amount is taken back. True if both adjustments
 *                   were taken. Nothing is allocated.
 */
#include "quantilica-napi.h"

static napi_value report_external_memory(napi_env env, napi_callback_info info) {
  int32_t bytes;
  int64_t total;
  if (!int32_argument(env, info, &bytes)) return NULL;
  return boolean(env, bytes > 0 && napi_adjust_external_memory(env, bytes, &total) == napi_ok &&
                          napi_adjust_external_memory(env, -(int64_t)bytes, &total) == napi_ok);
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  if (!export_function(env, exports, "reportExternalMemory", report_external_memory)) return NULL;
  return exports;
}
