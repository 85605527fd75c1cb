/*
 * What the agent's Node-API modules (quantilica-malloc.c, quantilica-heap.c) share: reading a call's
 * integer argument, answering a boolean, exporting a function. Static inline, so a module that uses
 * only some of them still builds under -Werror.
 */
#ifndef QUANTILICA_NAPI_H
#define QUANTILICA_NAPI_H

#define NAPI_VERSION 8
#include <node_api.h>
#include <stdint.h>

static inline napi_value boolean(napi_env env, int value) {
  napi_value result;
  return napi_get_boolean(env, value, &result) == napi_ok ? result : NULL;
}

/* The call's first argument as an int32; 0 when it is absent or not a number. 0 if the call cannot be read. */
static inline int int32_argument(napi_env env, napi_callback_info info, int32_t *value) {
  size_t argc = 1;
  napi_value argv[1];
  *value = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return 0;
  if (argc < 1 || napi_get_value_int32(env, argv[0], value) != napi_ok) *value = 0;
  return 1;
}

static inline int export_function(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value fn;
  return napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, NULL, &fn) == napi_ok &&
         napi_set_named_property(env, exports, name, fn) == napi_ok;
}

#endif
