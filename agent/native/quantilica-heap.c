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
 *   reportExternalMemory(bytes)
 *                   napi_adjust_external_memory(+bytes) then (-bytes): above V8's soft limit for external
 *                   memory (64 MB over what it had after its last mark-compact) V8 starts incremental
 *                   marking, which goes on after the amount is taken back. True if both adjustments
 *                   were taken. Nothing is allocated.
 */
#define NAPI_VERSION 8
#include <node_api.h>
#include <stdint.h>

static napi_value report_external_memory(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int64_t bytes = 0;
  int64_t total;
  napi_value result;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 1 || napi_get_value_int64(env, argv[0], &bytes) != napi_ok) bytes = 0;
  int taken = bytes > 0 && napi_adjust_external_memory(env, bytes, &total) == napi_ok &&
              napi_adjust_external_memory(env, -bytes, &total) == napi_ok;
  return napi_get_boolean(env, taken, &result) == napi_ok ? result : NULL;
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  napi_value fn;
  if (napi_create_function(env, "reportExternalMemory", NAPI_AUTO_LENGTH, report_external_memory, NULL, &fn) != napi_ok ||
      napi_set_named_property(env, exports, "reportExternalMemory", fn) != napi_ok)
    return NULL;
  return exports;
}
