/* A Triton backend written against the TRITONBACKEND C API, for tritonrs's tests: every output
 * OUTPUT<n> is a copy of input INPUT<n> (any datatype, any shape), one response per request.
 * It declares the few API functions it calls itself (from the documented API; no Triton header is
 * used), so the test builds it with nothing but the system C compiler:
 *
 *   cc -shared -fPIC -o libtriton_<name>.so test_backend.c [-DVARIANT]
 *
 * Variants, each a way a backend can go wrong:
 *   -DFAIL_INIT        TRITONBACKEND_Initialize returns an error
 *   -DWANT_API_MAJOR=2 the backend insists on API 2.x, as a backend built for a future Triton would
 *   -DFAIL_EXECUTE     every request gets an error response
 *   -DNO_EXECUTE       the library lacks TRITONBACKEND_ModelInstanceExecute
 *   -DNEVER_RELEASE    requests are neither answered nor released
 *   -DMISBEHAVE        what each request gets depends on the first value of its INPUT0:
 *                        -1  Execute never returns
 *                         1  OUTPUT0 is FP32 [1,1048576] with a 4-byte buffer
 *                         2  OUTPUT0 is FP32 [2^40,2^40] without a buffer (the shape overflows)
 *                         3  OUTPUT0 is FP32 [1,4] without a buffer
 *                         4  OUTPUT0 is BYTES [1,2] holding one element
 *                         5  OUTPUT0 is BYTES [1,1] whose length prefix claims more than the buffer
 *                         6  two final responses, each the identity
 *                      any other value: the identity
 * and one for decoupled models:
 *   -DDECOUPLED        three responses per request from a response factory (each the identity, with
 *                      an "index" parameter), the request released, then the final flag alone
 * The backend also records what it was asked in its log lines (TRITONSERVER_LogMessage), so the
 * tests can check the lifecycle order. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_Message TRITONSERVER_Message;
typedef struct TRITONBACKEND_Backend TRITONBACKEND_Backend;
typedef struct TRITONBACKEND_Model TRITONBACKEND_Model;
typedef struct TRITONBACKEND_ModelInstance TRITONBACKEND_ModelInstance;
typedef struct TRITONBACKEND_Request TRITONBACKEND_Request;
typedef struct TRITONBACKEND_Input TRITONBACKEND_Input;
typedef struct TRITONBACKEND_Response TRITONBACKEND_Response;
typedef struct TRITONBACKEND_Output TRITONBACKEND_Output;
typedef struct TRITONBACKEND_ResponseFactory TRITONBACKEND_ResponseFactory;
typedef int TRITONSERVER_DataType;   /* enums are ints in the C ABI */
typedef int TRITONSERVER_MemoryType;
typedef int TRITONSERVER_LogLevel;
typedef int TRITONSERVER_Error_Code;

enum { ERROR_INTERNAL = 1, ERROR_INVALID_ARG = 3, ERROR_UNSUPPORTED = 5 };
enum { LOG_INFO = 0, LOG_ERROR = 2 };
enum { MEMORY_CPU = 0 };
enum { TYPE_BYTES = 13, TYPE_FP32 = 11 };
enum { RESPONSE_COMPLETE_FINAL = 1, REQUEST_RELEASE_ALL = 1 };

extern TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg);
extern void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error);
extern const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error);
extern TRITONSERVER_Error* TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char* file, int line, const char* msg);
extern TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message* m, const char** base, size_t* size);
extern TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* m);
extern TRITONSERVER_Error* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor);
extern TRITONSERVER_Error* TRITONBACKEND_BackendName(TRITONBACKEND_Backend* b, const char** name);
extern TRITONSERVER_Error* TRITONBACKEND_BackendConfig(TRITONBACKEND_Backend* b, TRITONSERVER_Message** config);
extern TRITONSERVER_Error* TRITONBACKEND_BackendSetState(TRITONBACKEND_Backend* b, void* state);
extern TRITONSERVER_Error* TRITONBACKEND_BackendState(TRITONBACKEND_Backend* b, void** state);
extern TRITONSERVER_Error* TRITONBACKEND_ModelName(TRITONBACKEND_Model* m, const char** name);
extern TRITONSERVER_Error* TRITONBACKEND_ModelVersion(TRITONBACKEND_Model* m, uint64_t* version);
extern TRITONSERVER_Error* TRITONBACKEND_ModelConfig(TRITONBACKEND_Model* m, uint32_t version, TRITONSERVER_Message** config);
extern TRITONSERVER_Error* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* m, void* state);
extern TRITONSERVER_Error* TRITONBACKEND_ModelState(TRITONBACKEND_Model* m, void** state);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance* i, const char** name);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance* i, TRITONBACKEND_Model** m);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance* i, void* state);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance* i, void** state);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance* i,
    TRITONBACKEND_Request* r, bool success, uint64_t exec_start, uint64_t compute_start, uint64_t compute_end,
    uint64_t exec_end);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance* i,
    uint64_t batch_size, uint64_t exec_start, uint64_t compute_start, uint64_t compute_end, uint64_t exec_end);
extern TRITONSERVER_Error* TRITONBACKEND_RequestId(TRITONBACKEND_Request* r, const char** id);
extern TRITONSERVER_Error* TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request* r, uint32_t* count);
extern TRITONSERVER_Error* TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request* r, uint32_t index, const char** name);
extern TRITONSERVER_Error* TRITONBACKEND_RequestInput(TRITONBACKEND_Request* r, const char* name, TRITONBACKEND_Input** in);
extern TRITONSERVER_Error* TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request* r, uint32_t* count);
extern TRITONSERVER_Error* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* r, uint32_t flags);
extern TRITONSERVER_Error* TRITONBACKEND_InputProperties(TRITONBACKEND_Input* in, const char** name,
    TRITONSERVER_DataType* datatype, const int64_t** shape, uint32_t* dims, uint64_t* byte_size, uint32_t* buffers);
extern TRITONSERVER_Error* TRITONBACKEND_InputBuffer(TRITONBACKEND_Input* in, uint32_t index, const void** buffer,
    uint64_t* size, TRITONSERVER_MemoryType* type, int64_t* type_id);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** resp, TRITONBACKEND_Request* r);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response* resp, TRITONBACKEND_Output** out,
    const char* name, TRITONSERVER_DataType datatype, const int64_t* shape, uint32_t dims);
extern TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output* out, void** buffer, uint64_t size,
    TRITONSERVER_MemoryType* type, int64_t* type_id);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseSend(TRITONBACKEND_Response* resp, uint32_t flags, TRITONSERVER_Error* err);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseSetStringParameter(TRITONBACKEND_Response* resp, const char* k, const char* v);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseSetIntParameter(TRITONBACKEND_Response* resp, const char* k, int64_t v);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryNew(TRITONBACKEND_ResponseFactory** f, TRITONBACKEND_Request* r);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryDelete(TRITONBACKEND_ResponseFactory* f);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseFactorySendFlags(TRITONBACKEND_ResponseFactory* f, uint32_t flags);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseNewFromFactory(TRITONBACKEND_Response** resp, TRITONBACKEND_ResponseFactory* f);

#define EXPORT __attribute__((visibility("default")))
#define CHECK(call)                                  \
  do {                                               \
    TRITONSERVER_Error* err__ = (call);              \
    if (err__ != NULL) return err__;                 \
  } while (0)

static void say(const char* what, const char* name) {
  char line[512];
  snprintf(line, sizeof line, "test_backend: %s %s", what, name ? name : "");
  TRITONSERVER_Error* err = TRITONSERVER_LogMessage(LOG_INFO, __FILE__, __LINE__, line);
  if (err != NULL) TRITONSERVER_ErrorDelete(err);
}

static int backend_state = 42;

EXPORT TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  const char* name = NULL;
  CHECK(TRITONBACKEND_BackendName(backend, &name));
  say("initialize", name);
  uint32_t major = 0, minor = 0;
  CHECK(TRITONBACKEND_ApiVersion(&major, &minor));
#ifdef WANT_API_MAJOR
  if (major != WANT_API_MAJOR) {
    char msg[128];
    snprintf(msg, sizeof msg, "triton backend API version %u.%u does not support this backend (needs %d.x)",
             major, minor, WANT_API_MAJOR);
    return TRITONSERVER_ErrorNew(ERROR_UNSUPPORTED, msg);
  }
#endif
#ifdef FAIL_INIT
  return TRITONSERVER_ErrorNew(ERROR_INTERNAL, "test_backend refuses to initialize");
#endif
  /* The backend configuration (--backend-config) reaches us as JSON. */
  TRITONSERVER_Message* config = NULL;
  CHECK(TRITONBACKEND_BackendConfig(backend, &config));
  const char* json = NULL;
  size_t size = 0;
  CHECK(TRITONSERVER_MessageSerializeToJson(config, &json, &size));
  say("backend config", json);
  CHECK(TRITONSERVER_MessageDelete(config));
  return TRITONBACKEND_BackendSetState(backend, &backend_state);
}

EXPORT TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  void* state = NULL;
  CHECK(TRITONBACKEND_BackendState(backend, &state));
  say("finalize", state == &backend_state ? "with its state" : "WITHOUT its state");
  return NULL;
}

struct model_state { char name[128]; uint64_t version; };

EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  static struct model_state states[16];
  static int used = 0;
  const char* name = NULL;
  uint64_t version = 0;
  CHECK(TRITONBACKEND_ModelName(model, &name));
  CHECK(TRITONBACKEND_ModelVersion(model, &version));
  TRITONSERVER_Message* config = NULL;
  CHECK(TRITONBACKEND_ModelConfig(model, 1, &config));
  const char* json = NULL;
  size_t size = 0;
  CHECK(TRITONSERVER_MessageSerializeToJson(config, &json, &size));
  if (size == 0 || json[0] != '{' || strstr(json, "\"name\"") == NULL) {
    TRITONSERVER_MessageDelete(config);
    return TRITONSERVER_ErrorNew(ERROR_INVALID_ARG, "the model configuration is not JSON");
  }
  CHECK(TRITONSERVER_MessageDelete(config));
  say("model initialize", name);
  struct model_state* s = &states[used++ % 16];
  snprintf(s->name, sizeof s->name, "%s", name);
  s->version = version;
  return TRITONBACKEND_ModelSetState(model, s);
}

EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state = NULL;
  CHECK(TRITONBACKEND_ModelState(model, &state));
  say("model finalize", state ? ((struct model_state*)state)->name : "WITHOUT its state");
  return NULL;
}

EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  const char* name = NULL;
  CHECK(TRITONBACKEND_ModelInstanceName(instance, &name));
  TRITONBACKEND_Model* model = NULL;
  CHECK(TRITONBACKEND_ModelInstanceModel(instance, &model));
  void* model_state = NULL;
  CHECK(TRITONBACKEND_ModelState(model, &model_state));
  if (model_state == NULL) return TRITONSERVER_ErrorNew(ERROR_INTERNAL, "the model lost its state");
  say("instance initialize", name);
  return TRITONBACKEND_ModelInstanceSetState(instance, model_state);
}

EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  const char* name = NULL;
  CHECK(TRITONBACKEND_ModelInstanceName(instance, &name));
  say("instance finalize", name);
  return NULL;
}

/* Answers one request: OUTPUT<n> is a copy of INPUT<n>. */
__attribute__((unused)) static TRITONSERVER_Error* answer(TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  uint32_t outputs = 0;
  CHECK(TRITONBACKEND_RequestOutputCount(request, &outputs));
  for (uint32_t i = 0; i < outputs; i++) {
    const char* out_name = NULL;
    CHECK(TRITONBACKEND_RequestOutputName(request, i, &out_name));
    if (strncmp(out_name, "OUTPUT", 6) != 0)
      return TRITONSERVER_ErrorNew(ERROR_INVALID_ARG, "test_backend only makes OUTPUT<n>");
    char in_name[64];
    snprintf(in_name, sizeof in_name, "INPUT%s", out_name + 6);
    TRITONBACKEND_Input* input = NULL;
    CHECK(TRITONBACKEND_RequestInput(request, in_name, &input));
    TRITONSERVER_DataType datatype;
    const int64_t* shape = NULL;
    uint32_t dims = 0, buffers = 0;
    uint64_t byte_size = 0;
    CHECK(TRITONBACKEND_InputProperties(input, NULL, &datatype, &shape, &dims, &byte_size, &buffers));
    TRITONBACKEND_Output* output = NULL;
    CHECK(TRITONBACKEND_ResponseOutput(response, &output, out_name, datatype, shape, dims));
    void* dst = NULL;
    TRITONSERVER_MemoryType type = MEMORY_CPU;
    int64_t type_id = 0;
    CHECK(TRITONBACKEND_OutputBuffer(output, &dst, byte_size, &type, &type_id));
    uint64_t at = 0;
    for (uint32_t b = 0; b < buffers; b++) {
      const void* src = NULL;
      uint64_t size = 0;
      TRITONSERVER_MemoryType src_type = MEMORY_CPU;
      int64_t src_id = 0;
      CHECK(TRITONBACKEND_InputBuffer(input, b, &src, &size, &src_type, &src_id));
      if (at + size > byte_size) return TRITONSERVER_ErrorNew(ERROR_INTERNAL, "input buffers overrun byte_size");
      memcpy((char*)dst + at, src, size);
      at += size;
    }
  }
  const char* id = NULL;
  CHECK(TRITONBACKEND_RequestId(request, &id));
  return TRITONBACKEND_ResponseSetStringParameter(response, "test_backend_request_id", id);
}

#ifdef MISBEHAVE
/* The first value of the request's INPUT0 (0 when there is none). */
static float first_value(TRITONBACKEND_Request* request) {
  TRITONBACKEND_Input* input = NULL;
  const void* buffer = NULL;
  uint64_t size = 0;
  TRITONSERVER_MemoryType type = MEMORY_CPU;
  int64_t type_id = 0;
  float v = 0;
  TRITONSERVER_Error* err = TRITONBACKEND_RequestInput(request, "INPUT0", &input);
  if (err == NULL) err = TRITONBACKEND_InputBuffer(input, 0, &buffer, &size, &type, &type_id);
  if (err != NULL) {
    TRITONSERVER_ErrorDelete(err);
    return 0;
  }
  if (size >= sizeof v) memcpy(&v, buffer, sizeof v);
  return v;
}

/* Fills `response` with an OUTPUT0 that does not match its shape, as `how` says (see the variants). */
static TRITONSERVER_Error* bad_output(TRITONBACKEND_Response* response, int how) {
  TRITONBACKEND_Output* output = NULL;
  void* dst = NULL;
  TRITONSERVER_MemoryType type = MEMORY_CPU;
  int64_t type_id = 0;
  switch (how) {
    case 1: {
      const int64_t shape[2] = {1, 1048576};
      CHECK(TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", TYPE_FP32, shape, 2));
      CHECK(TRITONBACKEND_OutputBuffer(output, &dst, 4, &type, &type_id));
      memset(dst, 0, 4);
      return NULL;
    }
    case 2: {
      const int64_t shape[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
      return TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", TYPE_FP32, shape, 2);
    }
    case 3: {
      const int64_t shape[2] = {1, 4};
      return TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", TYPE_FP32, shape, 2);
    }
    default: {
      /* 4: one element where the shape says two; 5: a prefix claiming 100 bytes before 3. */
      const int64_t shape[2] = {1, how == 4 ? 2 : 1};
      const unsigned char element[7] = {how == 4 ? 3 : 100, 0, 0, 0, 'a', 'b', 'c'};
      CHECK(TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", TYPE_BYTES, shape, 2));
      CHECK(TRITONBACKEND_OutputBuffer(output, &dst, sizeof element, &type, &type_id));
      memcpy(dst, element, sizeof element);
      return NULL;
    }
  }
}
#endif

#ifndef NO_EXECUTE
EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count) {
#ifdef NEVER_RELEASE
  (void)instance; (void)requests; (void)request_count;
  return NULL;
#elif defined(DECOUPLED)
  (void)instance;
  for (uint32_t r = 0; r < request_count; r++) {
    TRITONBACKEND_ResponseFactory* factory = NULL;
    CHECK(TRITONBACKEND_ResponseFactoryNew(&factory, requests[r]));
    for (int k = 0; k < 3; k++) {
      TRITONBACKEND_Response* response = NULL;
      CHECK(TRITONBACKEND_ResponseNewFromFactory(&response, factory));
      TRITONSERVER_Error* failed = answer(requests[r], response);
      if (failed == NULL) failed = TRITONBACKEND_ResponseSetIntParameter(response, "index", k);
      TRITONSERVER_Error* err = TRITONBACKEND_ResponseSend(response, 0, failed);
      if (failed != NULL) TRITONSERVER_ErrorDelete(failed);
      if (err != NULL) TRITONSERVER_ErrorDelete(err);
    }
    /* The factory outlives the request. */
    TRITONSERVER_Error* err = TRITONBACKEND_RequestRelease(requests[r], REQUEST_RELEASE_ALL);
    if (err != NULL) TRITONSERVER_ErrorDelete(err);
#ifndef NO_FINAL
    CHECK(TRITONBACKEND_ResponseFactorySendFlags(factory, RESPONSE_COMPLETE_FINAL));
#endif
    CHECK(TRITONBACKEND_ResponseFactoryDelete(factory));
  }
  return NULL;
#else
  for (uint32_t r = 0; r < request_count; r++) {
    TRITONBACKEND_Response* response = NULL;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, requests[r]);
    if (err != NULL) return err; /* the server then fails the requests itself */
#ifdef FAIL_EXECUTE
    TRITONSERVER_Error* failed = TRITONSERVER_ErrorNew(ERROR_INTERNAL, "test_backend fails every request");
#elif defined(MISBEHAVE)
    float v = first_value(requests[r]);
    if (v == -1) {
      say("execute never returns for", "a request");
      for (;;) sleep(3600);
    }
    TRITONSERVER_Error* failed =
        (v >= 1 && v <= 5) ? bad_output(response, (int)v) : answer(requests[r], response);
#else
    TRITONSERVER_Error* failed = answer(requests[r], response);
#endif
    err = TRITONBACKEND_ResponseSend(response, RESPONSE_COMPLETE_FINAL, failed);
    if (err != NULL) TRITONSERVER_ErrorDelete(err);
#ifdef MISBEHAVE
    if (v == 6 && failed == NULL) {
      /* A second response with the final flag, for a request already finished. */
      TRITONBACKEND_Response* again = NULL;
      err = TRITONBACKEND_ResponseNew(&again, requests[r]);
      if (err == NULL) err = answer(requests[r], again);
      if (err == NULL) err = TRITONBACKEND_ResponseSend(again, RESPONSE_COMPLETE_FINAL, NULL);
      if (err != NULL) TRITONSERVER_ErrorDelete(err);
    }
#endif
    TRITONBACKEND_ModelInstanceReportStatistics(instance, requests[r], failed == NULL, 1, 2, 3, 4);
    if (failed != NULL) TRITONSERVER_ErrorDelete(failed);
    err = TRITONBACKEND_RequestRelease(requests[r], REQUEST_RELEASE_ALL);
    if (err != NULL) TRITONSERVER_ErrorDelete(err);
  }
  TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, request_count, 1, 2, 3, 4);
  return NULL;
#endif
}
#endif
