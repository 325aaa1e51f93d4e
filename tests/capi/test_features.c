/* A second Triton backend for tritonrs's tests ("features"), written here against the documented
 * TRITONBACKEND / TRITONSERVER APIs (declarations from the API documentation; no Triton header). Where
 * test_backend.c covers the lifecycle, batching, decoupled models and failures, this one uses the rest
 * of what a backend may import:
 *   - identity (OUTPUT0 = INPUT0, FP32 [4]) through a scratch buffer from the backend memory manager,
 *     with input and output buffer attributes checked;
 *   - a custom metric (counter "features_requests_total{model,version}", one per request);
 *   - implicit state: with inputs INPUT and STATE_IN (INT32 [1]), OUTPUT = STATE_OUT = STATE_IN + INPUT;
 *   - auto-complete: a model whose configuration names no inputs gets INPUT0/OUTPUT0 through
 *     TRITONBACKEND_ModelSetConfig;
 *   - BLS: a request with the string parameter "bls" = <model> sends INPUT0 to that model through the
 *     in-process API and answers with its OUTPUT0 (multiplied by 2, to show the round trip);
 *   - host policy, the model's server, model readiness and transaction properties;
 *   - a request with the string parameter "sweep" calls every other exported function, as a backend
 *     may, and checks what each answers (null and foreign objects included), then answers as identity;
 *   - cancellation: a request with the string parameter "wait_cancel" = <seconds> waits that long for
 *     TRITONBACKEND_RequestIsCancelled (and its response factory's) to say it was cancelled, counts it
 *     in "features_cancelled_total" and fails CANCELLED; one with "bls_cancel" = <model> sends a
 *     "wait_cancel" request to that model in-process, cancels it with TRITONSERVER_InferenceRequestCancel
 *     and fails with the in-process response's error, which must be CANCELLED;
 *   - iterative sequences: a decoupled model with input COUNTDOWN (INT32 [1]) and output OUT counts down
 *     per sequence (its START execution takes COUNTDOWN's value), one response per execution, and
 *     releases the request with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE until it reaches 0 (as Triton's
 *     iterative_sequence test backend does); a refused reschedule ends it with the refusal.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_Message TRITONSERVER_Message;
typedef struct TRITONSERVER_Server TRITONSERVER_Server;
typedef struct TRITONSERVER_Parameter TRITONSERVER_Parameter;
typedef struct TRITONSERVER_MetricFamily TRITONSERVER_MetricFamily;
typedef struct TRITONSERVER_Metric TRITONSERVER_Metric;
typedef struct TRITONSERVER_BufferAttributes TRITONSERVER_BufferAttributes;
typedef struct TRITONSERVER_InferenceRequest TRITONSERVER_InferenceRequest;
typedef struct TRITONSERVER_InferenceResponse TRITONSERVER_InferenceResponse;
typedef struct TRITONSERVER_ResponseAllocator TRITONSERVER_ResponseAllocator;
typedef struct TRITONSERVER_InferenceTrace TRITONSERVER_InferenceTrace;
typedef struct TRITONBACKEND_Backend TRITONBACKEND_Backend;
typedef struct TRITONBACKEND_MemoryManager TRITONBACKEND_MemoryManager;
typedef struct TRITONBACKEND_Model TRITONBACKEND_Model;
typedef struct TRITONBACKEND_ModelInstance TRITONBACKEND_ModelInstance;
typedef struct TRITONBACKEND_Request TRITONBACKEND_Request;
typedef struct TRITONBACKEND_Input TRITONBACKEND_Input;
typedef struct TRITONBACKEND_Response TRITONBACKEND_Response;
typedef struct TRITONBACKEND_Output TRITONBACKEND_Output;
typedef struct TRITONBACKEND_State TRITONBACKEND_State;

enum { ERROR_INTERNAL = 1, ERROR_INVALID_ARG = 3 };
enum { TYPE_INT32 = 8, TYPE_FP32 = 11 };
enum { MEMORY_CPU = 0 };
enum { PARAM_STRING = 0 };
enum { METRIC_COUNTER = 0 };
enum { RESPONSE_COMPLETE_FINAL = 1, REQUEST_RELEASE_ALL = 1 };
enum { TXN_ONE_TO_ONE = 1 };

TRITONSERVER_Error* TRITONSERVER_ErrorNew(int code, const char* msg);
void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* e);
const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* e);
TRITONSERVER_Error* TRITONSERVER_MessageNewFromSerializedJson(TRITONSERVER_Message** m, const char* base, size_t size);
TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message* m, const char** base, size_t* size);
TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* m);
TRITONSERVER_Parameter* TRITONSERVER_ParameterNew(const char* name, int type, const void* value);
void TRITONSERVER_ParameterDelete(TRITONSERVER_Parameter* p);
TRITONSERVER_Error* TRITONSERVER_MetricFamilyNew(TRITONSERVER_MetricFamily** f, int kind, const char* name, const char* desc);
TRITONSERVER_Error* TRITONSERVER_MetricFamilyDelete(TRITONSERVER_MetricFamily* f);
TRITONSERVER_Error* TRITONSERVER_MetricNew(TRITONSERVER_Metric** m, TRITONSERVER_MetricFamily* f,
                                           const TRITONSERVER_Parameter** labels, uint64_t count);
TRITONSERVER_Error* TRITONSERVER_MetricDelete(TRITONSERVER_Metric* m);
TRITONSERVER_Error* TRITONSERVER_MetricIncrement(TRITONSERVER_Metric* m, double v);
TRITONSERVER_Error* TRITONSERVER_MetricValue(TRITONSERVER_Metric* m, double* v);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesByteSize(TRITONSERVER_BufferAttributes* a, size_t* size);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesMemoryType(TRITONSERVER_BufferAttributes* a, int* type);
TRITONSERVER_Error* TRITONSERVER_ServerModelIsReady(TRITONSERVER_Server* s, const char* name, int64_t version, bool* ready);
TRITONSERVER_Error* TRITONSERVER_ServerModelTransactionProperties(TRITONSERVER_Server* s, const char* name,
                                                                  int64_t version, uint32_t* flags, void** voidp);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestNew(TRITONSERVER_InferenceRequest** r, TRITONSERVER_Server* s,
                                                     const char* model, int64_t version);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestDelete(TRITONSERVER_InferenceRequest* r);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetId(TRITONSERVER_InferenceRequest* r, const char* id);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestAddInput(TRITONSERVER_InferenceRequest* r, const char* name, int dt,
                                                          const int64_t* shape, uint64_t dims);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestAppendInputData(TRITONSERVER_InferenceRequest* r, const char* name,
                                                                 const void* base, size_t size, int type, int64_t id);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestAddRequestedOutput(TRITONSERVER_InferenceRequest* r, const char* name);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetReleaseCallback(
    TRITONSERVER_InferenceRequest* r, void (*fn)(TRITONSERVER_InferenceRequest*, uint32_t, void*), void* userp);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetResponseCallback(
    TRITONSERVER_InferenceRequest* r, TRITONSERVER_ResponseAllocator* a, void* alloc_userp,
    void (*fn)(TRITONSERVER_InferenceResponse*, uint32_t, void*), void* userp);
TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorNew(
    TRITONSERVER_ResponseAllocator** a,
    TRITONSERVER_Error* (*alloc)(TRITONSERVER_ResponseAllocator*, const char*, size_t, int, int64_t, void*, void**,
                                 void**, int*, int64_t*),
    TRITONSERVER_Error* (*release)(TRITONSERVER_ResponseAllocator*, void*, void*, size_t, int, int64_t),
    TRITONSERVER_Error* (*start)(TRITONSERVER_ResponseAllocator*, void*));
TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorDelete(TRITONSERVER_ResponseAllocator* a);
TRITONSERVER_Error* TRITONSERVER_ServerInferAsync(TRITONSERVER_Server* s, TRITONSERVER_InferenceRequest* r,
                                                  TRITONSERVER_InferenceTrace* t);
TRITONSERVER_Error* TRITONSERVER_InferenceResponseError(TRITONSERVER_InferenceResponse* r);
TRITONSERVER_Error* TRITONSERVER_InferenceResponseDelete(TRITONSERVER_InferenceResponse* r);
TRITONSERVER_Error* TRITONSERVER_InferenceResponseModel(TRITONSERVER_InferenceResponse* r, const char** name,
                                                        int64_t* version);
TRITONSERVER_Error* TRITONSERVER_InferenceResponseId(TRITONSERVER_InferenceResponse* r, const char** id);
TRITONSERVER_Error* TRITONSERVER_InferenceResponseParameterCount(TRITONSERVER_InferenceResponse* r, uint32_t* n);
TRITONSERVER_Error* TRITONSERVER_InferenceResponseParameter(TRITONSERVER_InferenceResponse* r, uint32_t i,
                                                            const char** name, int* type, const void** value);
TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutputCount(TRITONSERVER_InferenceResponse* r, uint32_t* n);
TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutput(TRITONSERVER_InferenceResponse* r, uint32_t i,
                                                         const char** name, int* dt, const int64_t** shape,
                                                         uint64_t* dims, const void** base, size_t* size, int* type,
                                                         int64_t* id, void** userp);

TRITONSERVER_Error* TRITONBACKEND_BackendMemoryManager(TRITONBACKEND_Backend* b, TRITONBACKEND_MemoryManager** m);
TRITONSERVER_Error* TRITONBACKEND_MemoryManagerAllocate(TRITONBACKEND_MemoryManager* m, void** buffer, int type,
                                                        int64_t id, uint64_t size);
TRITONSERVER_Error* TRITONBACKEND_MemoryManagerFree(TRITONBACKEND_MemoryManager* m, void* buffer, int type, int64_t id);
TRITONSERVER_Error* TRITONBACKEND_ModelName(TRITONBACKEND_Model* m, const char** name);
TRITONSERVER_Error* TRITONBACKEND_ModelVersion(TRITONBACKEND_Model* m, uint64_t* version);
TRITONSERVER_Error* TRITONBACKEND_ModelBackend(TRITONBACKEND_Model* m, TRITONBACKEND_Backend** b);
TRITONSERVER_Error* TRITONBACKEND_ModelServer(TRITONBACKEND_Model* m, TRITONSERVER_Server** s);
TRITONSERVER_Error* TRITONBACKEND_ModelConfig(TRITONBACKEND_Model* m, uint32_t version, TRITONSERVER_Message** c);
TRITONSERVER_Error* TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model* m, bool* on);
TRITONSERVER_Error* TRITONBACKEND_ModelSetConfig(TRITONBACKEND_Model* m, uint32_t version, TRITONSERVER_Message* c);
TRITONSERVER_Error* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* m, void* state);
TRITONSERVER_Error* TRITONBACKEND_ModelState(TRITONBACKEND_Model* m, void** state);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance* i, TRITONBACKEND_Model** m);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceHostPolicy(TRITONBACKEND_ModelInstance* i, TRITONSERVER_Message** p);
TRITONSERVER_Error* TRITONBACKEND_RequestInput(TRITONBACKEND_Request* r, const char* name, TRITONBACKEND_Input** in);
TRITONSERVER_Error* TRITONBACKEND_RequestParameterCount(TRITONBACKEND_Request* r, uint32_t* n);
TRITONSERVER_Error* TRITONBACKEND_RequestParameter(TRITONBACKEND_Request* r, uint32_t i, const char** key, int* type,
                                                   const void** value);
TRITONSERVER_Error* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* r, uint32_t flags);
TRITONSERVER_Error* TRITONBACKEND_InputProperties(TRITONBACKEND_Input* in, const char** name, int* dt,
                                                  const int64_t** shape, uint32_t* dims, uint64_t* size,
                                                  uint32_t* buffers);
TRITONSERVER_Error* TRITONBACKEND_InputBufferAttributes(TRITONBACKEND_Input* in, uint32_t index, const void** buffer,
                                                        TRITONSERVER_BufferAttributes** attrs);
TRITONSERVER_Error* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** r, TRITONBACKEND_Request* req);
TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response* r, TRITONBACKEND_Output** o, const char* name,
                                                 int dt, const int64_t* shape, uint32_t dims);
TRITONSERVER_Error* TRITONBACKEND_InferenceResponseOutputByName(TRITONBACKEND_Response* r, const char* name, int* dt,
                                                                const int64_t** shape, uint64_t* dims);
TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output* o, void** buffer, uint64_t size, int* type,
                                               int64_t* id);
TRITONSERVER_Error* TRITONBACKEND_OutputBufferAttributes(TRITONBACKEND_Output* o, TRITONSERVER_BufferAttributes** a);
TRITONSERVER_Error* TRITONBACKEND_ResponseSend(TRITONBACKEND_Response* r, uint32_t flags, TRITONSERVER_Error* e);
TRITONSERVER_Error* TRITONBACKEND_StateNew(TRITONBACKEND_State** s, TRITONBACKEND_Request* r, const char* name, int dt,
                                           const int64_t* shape, uint32_t dims);
TRITONSERVER_Error* TRITONBACKEND_StateBuffer(TRITONBACKEND_State* s, void** buffer, uint64_t size, int* type,
                                              int64_t* id);
TRITONSERVER_Error* TRITONBACKEND_StateBufferAttributes(TRITONBACKEND_State* s, TRITONSERVER_BufferAttributes** a);
TRITONSERVER_Error* TRITONBACKEND_StateUpdate(TRITONBACKEND_State* s);

#define EXPORT __attribute__((visibility("default")))
#define CHECK(call)                      \
  do {                                   \
    TRITONSERVER_Error* err__ = (call);  \
    if (err__ != NULL) return err__;     \
  } while (0)

static TRITONSERVER_Error* fail(const char* why) { return TRITONSERVER_ErrorNew(ERROR_INTERNAL, why); }

struct model {
  TRITONSERVER_Server* server;
  TRITONBACKEND_MemoryManager* memory;
  TRITONSERVER_MetricFamily* family;
  TRITONSERVER_Metric* requests;
  TRITONSERVER_MetricFamily* cancelled_family;
  TRITONSERVER_Metric* cancelled;
};

static TRITONSERVER_Error* report_model_memory(TRITONBACKEND_Model* model);

EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  const char* name = NULL;
  uint64_t version = 0;
  CHECK(TRITONBACKEND_ModelName(model, &name));
  CHECK(TRITONBACKEND_ModelVersion(model, &version));
  bool auto_complete = false;
  CHECK(TRITONBACKEND_ModelAutoCompleteConfig(model, &auto_complete));
  TRITONSERVER_Message* config = NULL;
  CHECK(TRITONBACKEND_ModelConfig(model, 1, &config));
  const char* json = NULL;
  size_t size = 0;
  CHECK(TRITONSERVER_MessageSerializeToJson(config, &json, &size));
  bool has_inputs = strstr(json, "\"input\":[{") != NULL || strstr(json, "\"input\": [{") != NULL;
  CHECK(TRITONSERVER_MessageDelete(config));
  if (auto_complete && !has_inputs) {
    /* What this backend knows of its models: FP32 [4] in and out, batching up to 8. */
    char completed[1024];
    snprintf(completed, sizeof completed,
             "{\"name\":\"%s\",\"backend\":\"features\",\"max_batch_size\":8,"
             "\"input\":[{\"name\":\"INPUT0\",\"data_type\":\"TYPE_FP32\",\"dims\":[4]}],"
             "\"output\":[{\"name\":\"OUTPUT0\",\"data_type\":\"TYPE_FP32\",\"dims\":[4]}],"
             "\"dynamic_batching\":{}}",
             name);
    TRITONSERVER_Message* message = NULL;
    CHECK(TRITONSERVER_MessageNewFromSerializedJson(&message, completed, strlen(completed)));
    TRITONSERVER_Error* err = TRITONBACKEND_ModelSetConfig(model, 1, message);
    TRITONSERVER_MessageDelete(message);
    if (err != NULL) return err;
  }
  struct model* m = calloc(1, sizeof *m);
  if (m == NULL) return fail("out of memory");
  CHECK(TRITONBACKEND_ModelServer(model, &m->server));
  TRITONBACKEND_Backend* backend = NULL;
  CHECK(TRITONBACKEND_ModelBackend(model, &backend));
  CHECK(TRITONBACKEND_BackendMemoryManager(backend, &m->memory));
  CHECK(TRITONSERVER_MetricFamilyNew(&m->family, METRIC_COUNTER, "features_requests_total",
                                     "Requests the features test backend answered"));
  char v[32];
  snprintf(v, sizeof v, "%llu", (unsigned long long)version);
  const TRITONSERVER_Parameter* labels[2] = {TRITONSERVER_ParameterNew("model", PARAM_STRING, name),
                                             TRITONSERVER_ParameterNew("version", PARAM_STRING, v)};
  CHECK(TRITONSERVER_MetricFamilyNew(&m->cancelled_family, METRIC_COUNTER, "features_cancelled_total",
                                     "Requests the features test backend saw cancelled"));
  TRITONSERVER_Error* err = TRITONSERVER_MetricNew(&m->requests, m->family, labels, 2);
  if (err == NULL) err = TRITONSERVER_MetricNew(&m->cancelled, m->cancelled_family, labels, 2);
  TRITONSERVER_ParameterDelete((TRITONSERVER_Parameter*)labels[0]);
  TRITONSERVER_ParameterDelete((TRITONSERVER_Parameter*)labels[1]);
  if (err != NULL) return err;
  CHECK(report_model_memory(model));
  return TRITONBACKEND_ModelSetState(model, m);
}

EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  struct model* m = NULL;
  CHECK(TRITONBACKEND_ModelState(model, (void**)&m));
  if (m != NULL) {
    TRITONSERVER_MetricDelete(m->requests);
    TRITONSERVER_MetricFamilyDelete(m->family);
    TRITONSERVER_MetricDelete(m->cancelled);
    TRITONSERVER_MetricFamilyDelete(m->cancelled_family);
    free(m);
  }
  return NULL;
}

EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  TRITONSERVER_Message* policy = NULL;
  CHECK(TRITONBACKEND_ModelInstanceHostPolicy(instance, &policy));
  const char* json = NULL;
  size_t size = 0;
  CHECK(TRITONSERVER_MessageSerializeToJson(policy, &json, &size));
  bool named = strstr(json, "\"cpu\"") != NULL;
  CHECK(TRITONSERVER_MessageDelete(policy));
  return named ? NULL : fail("the host policy does not name the instance's policy");
}

/* ---- BLS: one in-process request, waited for ---- */

struct call {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  TRITONSERVER_InferenceResponse* response;
  bool responded, released;
};

static TRITONSERVER_Error* bls_alloc(TRITONSERVER_ResponseAllocator* a, const char* name, size_t size, int type,
                                     int64_t id, void* userp, void** buffer, void** buffer_userp, int* actual_type,
                                     int64_t* actual_id) {
  (void)a; (void)name; (void)type; (void)id; (void)userp;
  *buffer = size > 0 ? malloc(size) : NULL;
  *buffer_userp = (void*)0x5a5a;
  *actual_type = MEMORY_CPU;
  *actual_id = 0;
  return (size > 0 && *buffer == NULL) ? fail("out of memory") : NULL;
}

static TRITONSERVER_Error* bls_release(TRITONSERVER_ResponseAllocator* a, void* buffer, void* buffer_userp, size_t size,
                                       int type, int64_t id) {
  (void)a; (void)size; (void)type; (void)id;
  if (buffer_userp != (void*)0x5a5a) return fail("the release function got another buffer_userp");
  free(buffer);
  return NULL;
}

static void bls_response(TRITONSERVER_InferenceResponse* response, uint32_t flags, void* userp) {
  struct call* c = userp;
  pthread_mutex_lock(&c->lock);
  if (response != NULL && c->response == NULL) {
    c->response = response;
  } else if (response != NULL) {
    TRITONSERVER_InferenceResponseDelete(response);
  }
  if (flags & RESPONSE_COMPLETE_FINAL) c->responded = true;
  pthread_cond_broadcast(&c->changed);
  pthread_mutex_unlock(&c->lock);
}

static void bls_released(TRITONSERVER_InferenceRequest* request, uint32_t flags, void* userp) {
  struct call* c = userp;
  (void)request; (void)flags;
  pthread_mutex_lock(&c->lock);
  c->released = true;
  pthread_cond_broadcast(&c->changed);
  pthread_mutex_unlock(&c->lock);
}

/* Sends `in` (FP32 [batch, 4] or [4]) to `target`'s INPUT0 and copies its OUTPUT0 into `out`. */
static TRITONSERVER_Error* bls(struct model* m, const char* target, const float* in, const int64_t* shape,
                               uint32_t dims, uint64_t size, float* out) {
  bool ready = false;
  CHECK(TRITONSERVER_ServerModelIsReady(m->server, target, -1, &ready));
  if (!ready) return TRITONSERVER_ErrorNew(ERROR_INVALID_ARG, "the BLS target model is not ready");
  uint32_t txn = 0;
  void* voidp = NULL;
  CHECK(TRITONSERVER_ServerModelTransactionProperties(m->server, target, -1, &txn, &voidp));
  if (txn != TXN_ONE_TO_ONE) return TRITONSERVER_ErrorNew(ERROR_INVALID_ARG, "the BLS target is decoupled");
  TRITONSERVER_ResponseAllocator* allocator = NULL;
  CHECK(TRITONSERVER_ResponseAllocatorNew(&allocator, bls_alloc, bls_release, NULL));
  TRITONSERVER_InferenceRequest* request = NULL;
  CHECK(TRITONSERVER_InferenceRequestNew(&request, m->server, target, -1));
  struct call c = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, false, false};
  TRITONSERVER_Error* err = TRITONSERVER_InferenceRequestSetId(request, "features-bls");
  if (err == NULL) err = TRITONSERVER_InferenceRequestAddInput(request, "INPUT0", TYPE_FP32, shape, dims);
  if (err == NULL) err = TRITONSERVER_InferenceRequestAppendInputData(request, "INPUT0", in, size, MEMORY_CPU, 0);
  if (err == NULL) err = TRITONSERVER_InferenceRequestAddRequestedOutput(request, "OUTPUT0");
  if (err == NULL) err = TRITONSERVER_InferenceRequestSetReleaseCallback(request, bls_released, &c);
  if (err == NULL) err = TRITONSERVER_InferenceRequestSetResponseCallback(request, allocator, NULL, bls_response, &c);
  if (err == NULL) err = TRITONSERVER_ServerInferAsync(m->server, request, NULL);
  if (err == NULL) {
    pthread_mutex_lock(&c.lock);
    while (!c.responded || !c.released) pthread_cond_wait(&c.changed, &c.lock);
    pthread_mutex_unlock(&c.lock);
    if (c.response == NULL) {
      err = fail("the BLS request ended without a response");
    } else {
      err = TRITONSERVER_InferenceResponseError(c.response);
      const char* rmodel = NULL;
      const char* rid = NULL;
      int64_t rversion = -1;
      uint32_t nparams = 9;
      if (err == NULL) err = TRITONSERVER_InferenceResponseModel(c.response, &rmodel, &rversion);
      if (err == NULL) err = TRITONSERVER_InferenceResponseId(c.response, &rid);
      if (err == NULL) err = TRITONSERVER_InferenceResponseParameterCount(c.response, &nparams);
      if (err == NULL && (strcmp(rmodel, target) != 0 || rversion != 1 || strcmp(rid, "features-bls") != 0))
        err = fail("the BLS response names another model, version or id");
      for (uint32_t i = 0; err == NULL && i < nparams; i++) {
        const char* key;
        int ptype;
        const void* pvalue;
        err = TRITONSERVER_InferenceResponseParameter(c.response, i, &key, &ptype, &pvalue);
      }
      uint32_t n = 0;
      if (err == NULL) err = TRITONSERVER_InferenceResponseOutputCount(c.response, &n);
      for (uint32_t i = 0; err == NULL && i < n; i++) {
        const char* name;
        int dt, type;
        const int64_t* oshape;
        uint64_t odims;
        const void* base;
        size_t bytes;
        int64_t id;
        void* userp;
        err = TRITONSERVER_InferenceResponseOutput(c.response, i, &name, &dt, &oshape, &odims, &base, &bytes, &type,
                                                   &id, &userp);
        if (err == NULL && strcmp(name, "OUTPUT0") == 0) {
          if (bytes != size || dt != TYPE_FP32 || userp != (void*)0x5a5a) {
            err = fail("the BLS response's OUTPUT0 is not what was asked for");
          } else {
            memcpy(out, base, bytes);
          }
        }
      }
      TRITONSERVER_InferenceResponseDelete(c.response);
    }
  }
  TRITONSERVER_InferenceRequestDelete(request);
  TRITONSERVER_ResponseAllocatorDelete(allocator);
  return err;
}


/* ---- the sweep: every other exported function, called as a backend may, checked ---- */

typedef struct TRITONBACKEND_ResponseFactory TRITONBACKEND_ResponseFactory;
typedef struct TRITONBACKEND_ModelInstanceResponseStatistics TRITONBACKEND_ModelInstanceResponseStatistics;
typedef struct TRITONBACKEND_BackendAttribute TRITONBACKEND_BackendAttribute;
enum { ERROR_UNSUPPORTED = 5, ERROR_NOT_FOUND = 2 };
enum { PARAM_INT = 1, PARAM_BOOL = 2, PARAM_DOUBLE = 3 };
enum { METRIC_GAUGE = 1, METRIC_HISTOGRAM = 2 };

int TRITONSERVER_ErrorCode(TRITONSERVER_Error* e);
const char* TRITONSERVER_ErrorCodeString(TRITONSERVER_Error* e);
TRITONSERVER_Error* TRITONSERVER_ApiVersion(uint32_t* major, uint32_t* minor);
const char* TRITONSERVER_DataTypeString(int dt);
uint32_t TRITONSERVER_DataTypeByteSize(int dt);
const char* TRITONSERVER_MemoryTypeString(int t);
const char* TRITONSERVER_ParameterTypeString(int t);
const char* TRITONSERVER_InstanceGroupKindString(int k);
bool TRITONSERVER_LogIsEnabled(int level);
TRITONSERVER_Parameter* TRITONSERVER_ParameterBytesNew(const char* name, const void* bytes, uint64_t size);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesNew(TRITONSERVER_BufferAttributes** a);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesDelete(TRITONSERVER_BufferAttributes* a);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryTypeId(TRITONSERVER_BufferAttributes* a, int64_t id);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryType(TRITONSERVER_BufferAttributes* a, int t);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetCudaIpcHandle(TRITONSERVER_BufferAttributes* a, void* h);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetByteSize(TRITONSERVER_BufferAttributes* a, size_t size);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesMemoryTypeId(TRITONSERVER_BufferAttributes* a, int64_t* id);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesCudaIpcHandle(TRITONSERVER_BufferAttributes* a, void** h);
typedef struct TRITONSERVER_MetricArgs TRITONSERVER_MetricArgs;
TRITONSERVER_Error* TRITONSERVER_MetricArgsNew(TRITONSERVER_MetricArgs** a);
TRITONSERVER_Error* TRITONSERVER_MetricArgsSetHistogram(TRITONSERVER_MetricArgs* a, const double* b, uint64_t n);
TRITONSERVER_Error* TRITONSERVER_MetricArgsDelete(TRITONSERVER_MetricArgs* a);
TRITONSERVER_Error* TRITONSERVER_MetricNewWithArgs(TRITONSERVER_Metric** m, TRITONSERVER_MetricFamily* f,
                                                   const TRITONSERVER_Parameter** labels, uint64_t n,
                                                   const TRITONSERVER_MetricArgs* args);
TRITONSERVER_Error* TRITONSERVER_MetricSet(TRITONSERVER_Metric* m, double v);
TRITONSERVER_Error* TRITONSERVER_MetricObserve(TRITONSERVER_Metric* m, double v);
TRITONSERVER_Error* TRITONSERVER_GetMetricFamilyKind(TRITONSERVER_MetricFamily* f, int* kind);
TRITONSERVER_Error* TRITONSERVER_InferenceTraceContext(TRITONSERVER_InferenceTrace* t, const char** ctx);
TRITONSERVER_Error* TRITONSERVER_InferenceTraceSpawnChildTrace(TRITONSERVER_InferenceTrace* t, TRITONSERVER_InferenceTrace** c);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetCorrelationId(TRITONSERVER_InferenceRequest* r, uint64_t id);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetCorrelationIdString(TRITONSERVER_InferenceRequest* r, const char* id);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetFlags(TRITONSERVER_InferenceRequest* r, uint32_t flags);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(TRITONSERVER_InferenceRequest* r, uint64_t us);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetPriority(TRITONSERVER_InferenceRequest* r, uint32_t p);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetPriorityUInt64(TRITONSERVER_InferenceRequest* r, uint64_t p);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetBoolParameter(TRITONSERVER_InferenceRequest* r, const char* k, bool v);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetIntParameter(TRITONSERVER_InferenceRequest* r, const char* k, int64_t v);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetDoubleParameter(TRITONSERVER_InferenceRequest* r, const char* k, double v);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetStringParameter(TRITONSERVER_InferenceRequest* r, const char* k,
                                                                     const char* v);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveAllInputs(TRITONSERVER_InferenceRequest* r);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveAllInputData(TRITONSERVER_InferenceRequest* r, const char* name);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs(TRITONSERVER_InferenceRequest* r);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestAddRawInput(TRITONSERVER_InferenceRequest* r, const char* name);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(
    TRITONSERVER_InferenceRequest* r, const char* name, const void* base, TRITONSERVER_BufferAttributes* a);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestIsCancelled(TRITONSERVER_InferenceRequest* r, bool* c);
TRITONSERVER_Error* TRITONSERVER_InferenceRequestCancel(TRITONSERVER_InferenceRequest* r);
TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorSetQueryFunction(
    TRITONSERVER_ResponseAllocator* a,
    TRITONSERVER_Error* (*q)(TRITONSERVER_ResponseAllocator*, void*, const char*, size_t*, int*, int64_t*));
TRITONSERVER_Error* TRITONSERVER_ServerLoadModel(TRITONSERVER_Server* s, const char* name);
TRITONSERVER_Error* TRITONSERVER_ServerLoadModelWithParameters(TRITONSERVER_Server* s, const char* name,
                                                               const TRITONSERVER_Parameter** p, uint64_t n);
TRITONSERVER_Error* TRITONSERVER_ServerUnloadModel(TRITONSERVER_Server* s, const char* name);
TRITONSERVER_Error* TRITONSERVER_ServerUnloadModelAndDependents(TRITONSERVER_Server* s, const char* name);
TRITONSERVER_Error* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor);
TRITONSERVER_Error* TRITONBACKEND_BackendName(TRITONBACKEND_Backend* b, const char** name);
TRITONSERVER_Error* TRITONBACKEND_BackendArtifacts(TRITONBACKEND_Backend* b, int* type, const char** location);
TRITONSERVER_Error* TRITONBACKEND_BackendExecutionPolicy(TRITONBACKEND_Backend* b, int* policy);
TRITONSERVER_Error* TRITONBACKEND_BackendSetExecutionPolicy(TRITONBACKEND_Backend* b, int policy);
TRITONSERVER_Error* TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(TRITONBACKEND_BackendAttribute* a, int kind,
                                                                           uint64_t count, const uint64_t* ids,
                                                                           uint64_t n);
TRITONSERVER_Error* TRITONBACKEND_ModelRepository(TRITONBACKEND_Model* m, int* type, const char** location);
TRITONSERVER_Error* TRITONBACKEND_ModelReportMemoryUsage(TRITONBACKEND_Model* m, TRITONSERVER_BufferAttributes** u,
                                                         uint32_t n);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance* i, int* kind);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance* i, int32_t* id);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceIsPassive(TRITONBACKEND_ModelInstance* i, bool* passive);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceProfileCount(TRITONBACKEND_ModelInstance* i, uint32_t* n);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceProfileName(TRITONBACKEND_ModelInstance* i, uint32_t index,
                                                          const char** name);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSecondaryDeviceCount(TRITONBACKEND_ModelInstance* i, uint32_t* n);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSecondaryDeviceProperties(TRITONBACKEND_ModelInstance* i, uint32_t index,
                                                                        const char** kind, int64_t* id);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportMemoryUsage(TRITONBACKEND_ModelInstance* i,
                                                                 TRITONSERVER_BufferAttributes** u, uint32_t n);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsNew(TRITONBACKEND_ModelInstanceResponseStatistics** s);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsDelete(TRITONBACKEND_ModelInstanceResponseStatistics* s);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(
    TRITONBACKEND_ModelInstanceResponseStatistics* s, TRITONBACKEND_ModelInstance* i);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(
    TRITONBACKEND_ModelInstanceResponseStatistics* s, TRITONBACKEND_ResponseFactory* f);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(
    TRITONBACKEND_ModelInstanceResponseStatistics* s, uint64_t ns);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(
    TRITONBACKEND_ModelInstanceResponseStatistics* s, uint64_t ns);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(
    TRITONBACKEND_ModelInstanceResponseStatistics* s, uint64_t ns);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetError(
    TRITONBACKEND_ModelInstanceResponseStatistics* s, TRITONSERVER_Error* e);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportResponseStatistics(TRITONBACKEND_ModelInstanceResponseStatistics* s);
TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryNew(TRITONBACKEND_ResponseFactory** f, TRITONBACKEND_Request* r);
TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryDelete(TRITONBACKEND_ResponseFactory* f);
TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryIsCancelled(TRITONBACKEND_ResponseFactory* f, bool* c);
TRITONSERVER_Error* TRITONBACKEND_RequestCorrelationId(TRITONBACKEND_Request* r, uint64_t* id);
TRITONSERVER_Error* TRITONBACKEND_RequestCorrelationIdString(TRITONBACKEND_Request* r, const char** id);
TRITONSERVER_Error* TRITONBACKEND_RequestFlags(TRITONBACKEND_Request* r, uint32_t* flags);
TRITONSERVER_Error* TRITONBACKEND_RequestIsCancelled(TRITONBACKEND_Request* r, bool* c);
TRITONSERVER_Error* TRITONBACKEND_InferenceRequestTimeoutMicroseconds(TRITONBACKEND_Request* r, uint64_t* us);
TRITONSERVER_Error* TRITONBACKEND_RequestOutputBufferProperties(TRITONBACKEND_Request* r, const char* name, size_t* size,
                                                                int* type, int64_t* id);
TRITONSERVER_Error* TRITONBACKEND_RequestTrace(TRITONBACKEND_Request* r, TRITONSERVER_InferenceTrace** t);
TRITONSERVER_Error* TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request* r, uint32_t* n);
TRITONSERVER_Error* TRITONBACKEND_RequestInputName(TRITONBACKEND_Request* r, uint32_t i, const char** name);
TRITONSERVER_Error* TRITONBACKEND_RequestInputByIndex(TRITONBACKEND_Request* r, uint32_t i, TRITONBACKEND_Input** in);
TRITONSERVER_Error* TRITONBACKEND_InputPropertiesForHostPolicy(TRITONBACKEND_Input* in, const char* policy,
                                                               const char** name, int* dt, const int64_t** shape,
                                                               uint32_t* dims, uint64_t* size, uint32_t* buffers);
TRITONSERVER_Error* TRITONBACKEND_InputBufferForHostPolicy(TRITONBACKEND_Input* in, const char* policy, uint32_t index,
                                                           const void** buffer, uint64_t* size, int* type,
                                                           int64_t* id);
TRITONSERVER_Error* TRITONBACKEND_ResponseSetBoolParameter(TRITONBACKEND_Response* r, const char* k, bool v);
TRITONSERVER_Error* TRITONBACKEND_ResponseSetDoubleParameter(TRITONBACKEND_Response* r, const char* k, double v);
TRITONSERVER_Error* TRITONBACKEND_InferenceResponseOutput(TRITONBACKEND_Response* r, uint32_t i, const char** name,
                                                          int* dt, const int64_t** shape, uint64_t* dims);
TRITONSERVER_Error* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* r);
TRITONSERVER_Error* TRITONBACKEND_ModelName(TRITONBACKEND_Model* m, const char** name);

/* Each check names its line on failure. */
static char sweep_failure[256];
#define EXPECT(cond)                                                                       \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      snprintf(sweep_failure, sizeof sweep_failure, "sweep line %d: %s", __LINE__, #cond); \
      return TRITONSERVER_ErrorNew(ERROR_INTERNAL, sweep_failure);                         \
    }                                                                                      \
  } while (0)
/* The call succeeds. */
#define OK(call) CHECK(call)
/* The call fails with `code`. */
#define FAILS(call, code)                                                                   \
  do {                                                                                      \
    TRITONSERVER_Error* e__ = (call);                                                       \
    int c__ = e__ ? TRITONSERVER_ErrorCode(e__) : -1;                                       \
    if (e__) TRITONSERVER_ErrorDelete(e__);                                                 \
    if (c__ != (code)) {                                                                    \
      snprintf(sweep_failure, sizeof sweep_failure, "sweep line %d: %s gave code %d", __LINE__, #call, c__); \
      return TRITONSERVER_ErrorNew(ERROR_INTERNAL, sweep_failure);                          \
    }                                                                                       \
  } while (0)

/* What the model says it holds: 1 MiB on GPU 0 and 512 bytes of pinned memory, in statistics'
   memory_usage beside what each instance reports in sweep(). */
static TRITONSERVER_Error* report_model_memory(TRITONBACKEND_Model* model) {
  TRITONSERVER_BufferAttributes* attrs[2] = {NULL, NULL};
  const int types[2] = {2, 1};
  const size_t sizes[2] = {1 << 20, 512};
  for (int i = 0; i < 2; i++) {
    CHECK(TRITONSERVER_BufferAttributesNew(&attrs[i]));
    CHECK(TRITONSERVER_BufferAttributesSetMemoryType(attrs[i], types[i]));
    CHECK(TRITONSERVER_BufferAttributesSetMemoryTypeId(attrs[i], 0));
    CHECK(TRITONSERVER_BufferAttributesSetByteSize(attrs[i], sizes[i]));
  }
  TRITONSERVER_Error* err = TRITONBACKEND_ModelReportMemoryUsage(model, attrs, 2);
  TRITONSERVER_BufferAttributesDelete(attrs[0]);
  TRITONSERVER_BufferAttributesDelete(attrs[1]);
  return err;
}

static TRITONSERVER_Error* sweep_query(TRITONSERVER_ResponseAllocator* a, void* userp, const char* name, size_t* size,
                                       int* type, int64_t* id) {
  (void)a; (void)userp; (void)name; (void)size;
  *type = MEMORY_CPU;
  *id = 0;
  return NULL;
}

static TRITONSERVER_Error* sweep(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Model* model, struct model* m,
                                 TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  uint32_t major = 0, minor = 0;
  OK(TRITONSERVER_ApiVersion(&major, &minor));
  EXPECT(major == 1 && minor >= 34);
  OK(TRITONBACKEND_ApiVersion(&major, &minor));
  EXPECT(major == 1 && minor == 19);
  EXPECT(strcmp(TRITONSERVER_DataTypeString(TYPE_FP32), "FP32") == 0 && TRITONSERVER_DataTypeByteSize(TYPE_FP32) == 4);
  EXPECT(strcmp(TRITONSERVER_DataTypeString(999), "<invalid>") == 0 && TRITONSERVER_DataTypeByteSize(13) == 0);
  EXPECT(strcmp(TRITONSERVER_MemoryTypeString(MEMORY_CPU), "CPU") == 0);
  EXPECT(strcmp(TRITONSERVER_ParameterTypeString(PARAM_DOUBLE), "DOUBLE") == 0);
  EXPECT(strcmp(TRITONSERVER_InstanceGroupKindString(1), "CPU") == 0);
  (void)TRITONSERVER_LogIsEnabled(0);
  TRITONSERVER_Error* e = TRITONSERVER_ErrorNew(ERROR_NOT_FOUND, "gone");
  EXPECT(TRITONSERVER_ErrorCode(e) == ERROR_NOT_FOUND && strcmp(TRITONSERVER_ErrorCodeString(e), "Not found") == 0 &&
         strcmp(TRITONSERVER_ErrorMessage(e), "gone") == 0);
  TRITONSERVER_ErrorDelete(e);
  TRITONSERVER_Message* msg = NULL;
  FAILS(TRITONSERVER_MessageNewFromSerializedJson(&msg, "{not json", 9), ERROR_INVALID_ARG);

  /* Null and foreign objects are refused, never dereferenced; deleting nothing is fine. */
  const char* name = NULL;
  int local = 0;
  FAILS(TRITONBACKEND_ModelName(NULL, &name), ERROR_INVALID_ARG);
  FAILS(TRITONBACKEND_ModelName((TRITONBACKEND_Model*)&local, &name), ERROR_INVALID_ARG);
  FAILS(TRITONBACKEND_RequestFlags((TRITONBACKEND_Request*)model, NULL), ERROR_INVALID_ARG);
  FAILS(TRITONSERVER_MetricIncrement((TRITONSERVER_Metric*)request, 1), ERROR_INVALID_ARG);
  OK(TRITONSERVER_MetricDelete(NULL));
  OK(TRITONSERVER_InferenceRequestDelete(NULL));

  /* The backend, model and instance. */
  TRITONBACKEND_Backend* backend = NULL;
  OK(TRITONBACKEND_ModelBackend(model, &backend));
  OK(TRITONBACKEND_BackendName(backend, &name));
  EXPECT(strcmp(name, "features") == 0);
  int type = -1, policy = -1;
  const char* location = NULL;
  OK(TRITONBACKEND_BackendArtifacts(backend, &type, &location));
  EXPECT(type == 0 && strstr(location, "features") != NULL);
  OK(TRITONBACKEND_BackendExecutionPolicy(backend, &policy));
  OK(TRITONBACKEND_BackendSetExecutionPolicy(backend, 1));
  FAILS(TRITONBACKEND_BackendSetExecutionPolicy(backend, 7), ERROR_INVALID_ARG);
  FAILS(TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(NULL, 1, 1, NULL, 0), ERROR_INVALID_ARG);
  OK(TRITONBACKEND_ModelRepository(model, &type, &location));
  EXPECT(strstr(location, "feat") != NULL);
  FAILS(TRITONBACKEND_ModelReportMemoryUsage(model, NULL, 1), ERROR_INVALID_ARG);
  int kind = 0;
  int32_t device = -1;
  bool passive = true;
  uint32_t count = 9;
  OK(TRITONBACKEND_ModelInstanceKind(instance, &kind));
  OK(TRITONBACKEND_ModelInstanceDeviceId(instance, &device));
  OK(TRITONBACKEND_ModelInstanceIsPassive(instance, &passive));
  EXPECT(kind == 1 && device == 0 && !passive);
  OK(TRITONBACKEND_ModelInstanceProfileCount(instance, &count));
  EXPECT(count == 0);
  FAILS(TRITONBACKEND_ModelInstanceProfileName(instance, 0, &name), ERROR_INVALID_ARG);
  OK(TRITONBACKEND_ModelInstanceSecondaryDeviceCount(instance, &count));
  int64_t id64 = 0;
  FAILS(TRITONBACKEND_ModelInstanceSecondaryDeviceProperties(instance, 0, &name, &id64), ERROR_INVALID_ARG);

  /* Buffer attributes of its own, and memory usage reported with them. */
  TRITONSERVER_BufferAttributes* attrs = NULL;
  OK(TRITONSERVER_BufferAttributesNew(&attrs));
  OK(TRITONSERVER_BufferAttributesSetMemoryType(attrs, 0));
  OK(TRITONSERVER_BufferAttributesSetMemoryTypeId(attrs, 3));
  OK(TRITONSERVER_BufferAttributesSetByteSize(attrs, 4096));
  OK(TRITONSERVER_BufferAttributesSetCudaIpcHandle(attrs, NULL));
  size_t size = 0;
  void* handle = (void*)1;
  OK(TRITONSERVER_BufferAttributesMemoryTypeId(attrs, &id64));
  OK(TRITONSERVER_BufferAttributesByteSize(attrs, &size));
  OK(TRITONSERVER_BufferAttributesCudaIpcHandle(attrs, &handle));
  EXPECT(id64 == 3 && size == 4096 && handle == NULL);
  FAILS(TRITONSERVER_BufferAttributesSetMemoryType(attrs, 9), ERROR_INVALID_ARG);
  OK(TRITONBACKEND_ModelInstanceReportMemoryUsage(instance, &attrs, 1));
  OK(TRITONSERVER_BufferAttributesDelete(attrs));

  /* The request. */
  uint64_t corr = 1;
  uint32_t flags = 9;
  bool cancelled = true;
  OK(TRITONBACKEND_RequestCorrelationId(request, &corr));
  OK(TRITONBACKEND_RequestCorrelationIdString(request, &name));
  OK(TRITONBACKEND_RequestFlags(request, &flags));
  OK(TRITONBACKEND_RequestIsCancelled(request, &cancelled));
  EXPECT(corr == 0 && flags == 0 && !cancelled);
  OK(TRITONBACKEND_InferenceRequestTimeoutMicroseconds(request, &corr));
  int mt = -1;
  OK(TRITONBACKEND_RequestOutputBufferProperties(request, "OUTPUT0", &size, &mt, &id64));
  EXPECT(mt == MEMORY_CPU);
  TRITONSERVER_InferenceTrace* trace = (TRITONSERVER_InferenceTrace*)1;
  OK(TRITONBACKEND_RequestTrace(request, &trace));
  EXPECT(trace == NULL);
  FAILS(TRITONSERVER_InferenceTraceContext(NULL, &name), ERROR_INVALID_ARG);
  FAILS(TRITONSERVER_InferenceTraceSpawnChildTrace(NULL, &trace), ERROR_INVALID_ARG);
  OK(TRITONBACKEND_RequestInputCount(request, &count));
  EXPECT(count == 1);
  OK(TRITONBACKEND_RequestInputName(request, 0, &name));
  EXPECT(strcmp(name, "INPUT0") == 0);
  FAILS(TRITONBACKEND_RequestInputName(request, 5, &name), ERROR_INVALID_ARG);
  TRITONBACKEND_Input* input = NULL;
  OK(TRITONBACKEND_RequestInputByIndex(request, 0, &input));
  int dt = 0;
  const int64_t* shape = NULL;
  uint32_t dims = 0, buffers = 0;
  uint64_t bytes = 0;
  OK(TRITONBACKEND_InputPropertiesForHostPolicy(input, "cpu", &name, &dt, &shape, &dims, &bytes, &buffers));
  const void* buffer = NULL;
  OK(TRITONBACKEND_InputBufferForHostPolicy(input, "cpu", 0, &buffer, &bytes, &mt, &id64));
  FAILS(TRITONBACKEND_InputBufferForHostPolicy(input, "cpu", 1, &buffer, &bytes, &mt, &id64), ERROR_INVALID_ARG);
  /* An input's attributes belong to the server. */
  OK(TRITONBACKEND_InputBufferAttributes(input, 0, &buffer, &attrs));
  FAILS(TRITONSERVER_BufferAttributesDelete(attrs), ERROR_INVALID_ARG);

  /* Response statistics, with a factory. */
  TRITONBACKEND_ResponseFactory* factory = NULL;
  OK(TRITONBACKEND_ResponseFactoryNew(&factory, request));
  OK(TRITONBACKEND_ResponseFactoryIsCancelled(factory, &cancelled));
  TRITONBACKEND_ModelInstanceResponseStatistics* stats = NULL;
  OK(TRITONBACKEND_ModelInstanceResponseStatisticsNew(&stats));
  FAILS(TRITONBACKEND_ModelInstanceReportResponseStatistics(stats), ERROR_INVALID_ARG);
  OK(TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(stats, instance));
  OK(TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(stats, factory));
  OK(TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(stats, 10));
  OK(TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(stats, 20));
  OK(TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(stats, 30));
  OK(TRITONBACKEND_ModelInstanceResponseStatisticsSetError(stats, NULL));
  OK(TRITONBACKEND_ModelInstanceReportResponseStatistics(stats));
  OK(TRITONBACKEND_ModelInstanceResponseStatisticsDelete(stats));
  OK(TRITONBACKEND_ResponseFactoryDelete(factory));

  /* Response parameters and a look at the response being built. */
  OK(TRITONBACKEND_ResponseSetBoolParameter(response, "sweep_bool", true));
  OK(TRITONBACKEND_ResponseSetDoubleParameter(response, "sweep_double", 0.5));
  FAILS(TRITONBACKEND_InferenceResponseOutput(response, 0, &name, &dt, &shape, &bytes), ERROR_INVALID_ARG);

  /* Parameters and metrics: a gauge and a histogram. */
  int64_t iv = 7;
  bool bv = true;
  double dv = 1.5;
  TRITONSERVER_Parameter* params[5] = {
      TRITONSERVER_ParameterNew("i", PARAM_INT, &iv), TRITONSERVER_ParameterNew("b", PARAM_BOOL, &bv),
      TRITONSERVER_ParameterNew("d", PARAM_DOUBLE, &dv), TRITONSERVER_ParameterBytesNew("file:1/x", "abc", 3),
      TRITONSERVER_ParameterNew("kind", PARAM_STRING, "sweep")};
  for (int i = 0; i < 5; i++) EXPECT(params[i] != NULL);
  EXPECT(TRITONSERVER_ParameterNew("x", 4, "nope") == NULL);
  TRITONSERVER_MetricFamily* gauge_family = NULL;
  OK(TRITONSERVER_MetricFamilyNew(&gauge_family, METRIC_GAUGE, "features_sweep_gauge", "sweep"));
  OK(TRITONSERVER_GetMetricFamilyKind(gauge_family, &kind));
  EXPECT(kind == METRIC_GAUGE);
  TRITONSERVER_Metric* gauge = NULL;
  OK(TRITONSERVER_MetricNew(&gauge, gauge_family, (const TRITONSERVER_Parameter**)&params[4], 1));
  OK(TRITONSERVER_MetricSet(gauge, 5));
  OK(TRITONSERVER_MetricIncrement(gauge, -2));
  OK(TRITONSERVER_MetricValue(gauge, &dv));
  EXPECT(dv == 3);
  FAILS(TRITONSERVER_MetricObserve(gauge, 1), ERROR_UNSUPPORTED);
  FAILS(TRITONSERVER_MetricNew(&gauge, gauge_family, (const TRITONSERVER_Parameter**)&params[0], 1), ERROR_INVALID_ARG);
  FAILS(TRITONSERVER_MetricIncrement(m->requests, -1), ERROR_INVALID_ARG);
  TRITONSERVER_MetricFamily* hist_family = NULL;
  OK(TRITONSERVER_MetricFamilyNew(&hist_family, METRIC_HISTOGRAM, "features_sweep_seconds", "sweep"));
  TRITONSERVER_MetricArgs* args = NULL;
  const double edges[3] = {0.1, 1, 10};
  OK(TRITONSERVER_MetricArgsNew(&args));
  OK(TRITONSERVER_MetricArgsSetHistogram(args, edges, 3));
  TRITONSERVER_Metric* hist = NULL;
  FAILS(TRITONSERVER_MetricNew(&hist, hist_family, NULL, 0), ERROR_INVALID_ARG);
  OK(TRITONSERVER_MetricNewWithArgs(&hist, hist_family, NULL, 0, args));
  OK(TRITONSERVER_MetricObserve(hist, 0.5));
  FAILS(TRITONSERVER_MetricValue(hist, &dv), ERROR_UNSUPPORTED);
  FAILS(TRITONSERVER_MetricSet(hist, 1), ERROR_UNSUPPORTED);
  OK(TRITONSERVER_MetricArgsDelete(args));
  OK(TRITONSERVER_MetricDelete(hist));
  OK(TRITONSERVER_MetricFamilyDelete(hist_family));
  OK(TRITONSERVER_MetricDelete(gauge));
  OK(TRITONSERVER_MetricFamilyDelete(gauge_family));

  /* Model control: a bad parameter is refused; in this server's mode loading is not allowed. */
  FAILS(TRITONSERVER_ServerLoadModelWithParameters(m->server, "feat", (const TRITONSERVER_Parameter**)params, 1),
        ERROR_INVALID_ARG);
  FAILS(TRITONSERVER_ServerLoadModelWithParameters(m->server, "feat", (const TRITONSERVER_Parameter**)&params[3], 1),
        ERROR_INVALID_ARG);
  TRITONSERVER_Error* load = TRITONSERVER_ServerLoadModel(m->server, "feat");
  EXPECT(load != NULL);
  TRITONSERVER_ErrorDelete(load);
  TRITONSERVER_Error* unload = TRITONSERVER_ServerUnloadModel(m->server, "nowhere");
  EXPECT(unload != NULL);
  TRITONSERVER_ErrorDelete(unload);
  unload = TRITONSERVER_ServerUnloadModelAndDependents(m->server, "nowhere");
  EXPECT(unload != NULL);
  TRITONSERVER_ErrorDelete(unload);
  for (int i = 0; i < 5; i++) TRITONSERVER_ParameterDelete(params[i]);

  /* An in-process request built and changed every way, then one that cannot be sent. */
  TRITONSERVER_InferenceRequest* r = NULL;
  OK(TRITONSERVER_InferenceRequestNew(&r, m->server, "feat", 1));
  OK(TRITONSERVER_InferenceRequestSetCorrelationId(r, 5));
  OK(TRITONSERVER_InferenceRequestSetCorrelationIdString(r, "five"));
  OK(TRITONSERVER_InferenceRequestSetFlags(r, 0));
  OK(TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(r, 1000000));
  OK(TRITONSERVER_InferenceRequestSetPriority(r, 1));
  OK(TRITONSERVER_InferenceRequestSetPriorityUInt64(r, 2));
  OK(TRITONSERVER_InferenceRequestSetBoolParameter(r, "b", true));
  OK(TRITONSERVER_InferenceRequestSetIntParameter(r, "i", 3));
  OK(TRITONSERVER_InferenceRequestSetDoubleParameter(r, "d", 0.25));
  OK(TRITONSERVER_InferenceRequestSetStringParameter(r, "s", "x"));
  const int64_t four[2] = {1, 4};
  const float data[4] = {1, 2, 3, 4};
  OK(TRITONSERVER_InferenceRequestAddInput(r, "INPUT0", TYPE_FP32, four, 2));
  FAILS(TRITONSERVER_InferenceRequestAddInput(r, "INPUT0", TYPE_FP32, four, 2), 6 /* ALREADY_EXISTS */);
  OK(TRITONSERVER_BufferAttributesNew(&attrs));
  OK(TRITONSERVER_BufferAttributesSetByteSize(attrs, sizeof data));
  OK(TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(r, "INPUT0", data, attrs));
  OK(TRITONSERVER_BufferAttributesDelete(attrs));
  OK(TRITONSERVER_InferenceRequestRemoveAllInputData(r, "INPUT0"));
  FAILS(TRITONSERVER_InferenceRequestAppendInputData(r, "INPUT9", data, 16, MEMORY_CPU, 0), ERROR_INVALID_ARG);
  FAILS(TRITONSERVER_InferenceRequestAppendInputData(r, "INPUT0", data, 16, 2 /* GPU */, 0), ERROR_UNSUPPORTED);
  OK(TRITONSERVER_InferenceRequestRemoveAllInputs(r));
  FAILS(TRITONSERVER_InferenceRequestAddRawInput(r, "INPUT0"), ERROR_UNSUPPORTED);
  OK(TRITONSERVER_InferenceRequestAddRequestedOutput(r, "OUTPUT0"));
  OK(TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs(r));
  OK(TRITONSERVER_InferenceRequestIsCancelled(r, &cancelled));
  EXPECT(!cancelled);
  OK(TRITONSERVER_InferenceRequestCancel(r));
  OK(TRITONSERVER_InferenceRequestIsCancelled(r, &cancelled));
  EXPECT(cancelled);
  FAILS(TRITONSERVER_ServerInferAsync(m->server, r, NULL), ERROR_INVALID_ARG); /* no callbacks */
  TRITONSERVER_ResponseAllocator* allocator = NULL;
  OK(TRITONSERVER_ResponseAllocatorNew(&allocator, bls_alloc, bls_release, NULL));
  OK(TRITONSERVER_ResponseAllocatorSetQueryFunction(allocator, sweep_query));
  OK(TRITONSERVER_ResponseAllocatorDelete(allocator));
  OK(TRITONSERVER_InferenceRequestDelete(r));
  FAILS(TRITONSERVER_InferenceRequestDelete(r), ERROR_INVALID_ARG); /* twice: refused, not a double free */
  return NULL;
}

/* ---- execution ---- */

static const char* string_parameter(TRITONBACKEND_Request* request, const char* key) {
  uint32_t n = 0;
  if (TRITONBACKEND_RequestParameterCount(request, &n) != NULL) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    const char* k;
    int type;
    const void* value;
    if (TRITONBACKEND_RequestParameter(request, i, &k, &type, &value) == NULL && type == PARAM_STRING &&
        strcmp(k, key) == 0)
      return value;
  }
  return NULL;
}

/* OUTPUT = STATE_OUT = STATE_IN + INPUT (INT32 [1]). */
static TRITONSERVER_Error* accumulate(TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  int32_t values[2];
  const char* names[2] = {"INPUT", "STATE_IN"};
  for (int k = 0; k < 2; k++) {
    TRITONBACKEND_Input* input = NULL;
    CHECK(TRITONBACKEND_RequestInput(request, names[k], &input));
    const void* buffer = NULL;
    TRITONSERVER_BufferAttributes* attrs = NULL;
    CHECK(TRITONBACKEND_InputBufferAttributes(input, 0, &buffer, &attrs));
    size_t size = 0;
    CHECK(TRITONSERVER_BufferAttributesByteSize(attrs, &size));
    if (size != 4) return fail("the accumulator takes INT32 [1]");
    memcpy(&values[k], buffer, 4);
  }
  int32_t sum = values[0] + values[1];
  const int64_t shape[1] = {1};
  TRITONBACKEND_Output* output = NULL;
  CHECK(TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT", TYPE_INT32, shape, 1));
  void* dst = NULL;
  int type;
  int64_t id;
  CHECK(TRITONBACKEND_OutputBuffer(output, &dst, 4, &type, &id));
  memcpy(dst, &sum, 4);
  TRITONBACKEND_State* state = NULL;
  CHECK(TRITONBACKEND_StateNew(&state, request, "STATE_OUT", TYPE_INT32, shape, 1));
  CHECK(TRITONBACKEND_StateBuffer(state, &dst, 4, &type, &id));
  TRITONSERVER_BufferAttributes* attrs = NULL;
  CHECK(TRITONBACKEND_StateBufferAttributes(state, &attrs));
  size_t size = 0;
  CHECK(TRITONSERVER_BufferAttributesByteSize(attrs, &size));
  if (size != 4) return fail("the state buffer's attributes are wrong");
  memcpy(dst, &sum, 4);
  return TRITONBACKEND_StateUpdate(state);
}

/* ---- cancellation ---- */

enum { ERROR_CANCELLED = 7 };

static double seconds_since(const struct timespec* t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void sleep_ms(long ms) {
  struct timespec d = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&d, NULL);
}

/* Waits up to `secs` seconds for the request to be cancelled; NULL if it never was. */
static TRITONSERVER_Error* wait_cancel(struct model* m, TRITONBACKEND_Request* request, const char* secs) {
  TRITONBACKEND_ResponseFactory* factory = NULL;
  CHECK(TRITONBACKEND_ResponseFactoryNew(&factory, request));
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  bool cancelled = false, factory_cancelled = false;
  TRITONSERVER_Error* err = NULL;
  while (err == NULL && !cancelled && seconds_since(&t0) < atof(secs)) {
    err = TRITONBACKEND_RequestIsCancelled(request, &cancelled);
    if (err == NULL && !cancelled) sleep_ms(10);
  }
  if (err == NULL) err = TRITONBACKEND_ResponseFactoryIsCancelled(factory, &factory_cancelled);
  TRITONBACKEND_ResponseFactoryDelete(factory);
  if (err != NULL || !cancelled) return err;
  if (!factory_cancelled) return fail("the request is cancelled but its response factory is not");
  CHECK(TRITONSERVER_MetricIncrement(m->cancelled, 1));
  return TRITONSERVER_ErrorNew(ERROR_CANCELLED, "the features backend saw the request cancelled");
}

/* Sends `in` to `target` with "wait_cancel" = "10", cancels it after 0.3 s, and returns the in-process
   response's error (CANCELLED, or a failure saying what came instead). */
static TRITONSERVER_Error* bls_cancel(struct model* m, const char* target, const float* in, const int64_t* shape,
                                      uint32_t dims, uint64_t size) {
  TRITONSERVER_ResponseAllocator* allocator = NULL;
  CHECK(TRITONSERVER_ResponseAllocatorNew(&allocator, bls_alloc, bls_release, NULL));
  TRITONSERVER_InferenceRequest* request = NULL;
  CHECK(TRITONSERVER_InferenceRequestNew(&request, m->server, target, -1));
  struct call c = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, false, false};
  TRITONSERVER_Error* err = TRITONSERVER_InferenceRequestAddInput(request, "INPUT0", TYPE_FP32, shape, dims);
  if (err == NULL) err = TRITONSERVER_InferenceRequestAppendInputData(request, "INPUT0", in, size, MEMORY_CPU, 0);
  if (err == NULL) err = TRITONSERVER_InferenceRequestSetStringParameter(request, "wait_cancel", "10");
  if (err == NULL) err = TRITONSERVER_InferenceRequestSetReleaseCallback(request, bls_released, &c);
  if (err == NULL) err = TRITONSERVER_InferenceRequestSetResponseCallback(request, allocator, NULL, bls_response, &c);
  if (err == NULL) err = TRITONSERVER_ServerInferAsync(m->server, request, NULL);
  bool cancelled = false;
  if (err == NULL) {
    sleep_ms(300);
    err = TRITONSERVER_InferenceRequestCancel(request);
    if (err == NULL) err = TRITONSERVER_InferenceRequestIsCancelled(request, &cancelled);
    if (err == NULL && !cancelled) err = fail("TRITONSERVER_InferenceRequestIsCancelled says it was not cancelled");
    pthread_mutex_lock(&c.lock);
    while (!c.responded || !c.released) pthread_cond_wait(&c.changed, &c.lock);
    pthread_mutex_unlock(&c.lock);
  }
  if (err == NULL) {
    TRITONSERVER_Error* answer = c.response == NULL ? NULL : TRITONSERVER_InferenceResponseError(c.response);
    if (answer == NULL) {
      err = fail("the cancelled in-process request was answered without an error");
    } else if (TRITONSERVER_ErrorCode(answer) != ERROR_CANCELLED) {
      err = fail("the cancelled in-process request's error is not CANCELLED");
      TRITONSERVER_ErrorDelete(answer);
    } else {
      err = answer;
    }
  }
  if (c.response != NULL) TRITONSERVER_InferenceResponseDelete(c.response);
  TRITONSERVER_InferenceRequestDelete(request);
  TRITONSERVER_ResponseAllocatorDelete(allocator);
  return err;
}

/* ---- iterative sequences ---- */

enum { REQUEST_RELEASE_RESCHEDULE = 2, REQUEST_FLAG_SEQUENCE_START = 1 };

struct remaining {
  uint64_t corr;
  int32_t left;
  bool used;
};

static struct remaining countdowns[64];
static pthread_mutex_t countdown_lock = PTHREAD_MUTEX_INITIALIZER;

/* The iterations left for sequence `corr` after this one: `start` (re)starts it at `value`. */
static int32_t count_down(uint64_t corr, bool start, int32_t value) {
  pthread_mutex_lock(&countdown_lock);
  struct remaining* r = NULL;
  for (int i = 0; i < 64 && r == NULL; i++)
    if (countdowns[i].used && countdowns[i].corr == corr) r = &countdowns[i];
  for (int i = 0; i < 64 && r == NULL; i++)
    if (!countdowns[i].used) {
      r = &countdowns[i];
      r->used = true;
      r->corr = corr;
      r->left = value;
    }
  int32_t left = 0;
  if (r != NULL) {
    if (start) r->left = value;
    left = --r->left;
    if (left <= 0) r->used = false;
  }
  pthread_mutex_unlock(&countdown_lock);
  return left;
}

/* One execution of a COUNTDOWN request: its response is sent after the request is released, as
   Triton's iterative_sequence backend does. */
static TRITONSERVER_Error* countdown(TRITONBACKEND_Request* request, TRITONBACKEND_Input* input) {
  uint64_t corr = 0;
  uint32_t flags = 0;
  CHECK(TRITONBACKEND_RequestCorrelationId(request, &corr));
  CHECK(TRITONBACKEND_RequestFlags(request, &flags));
  int dt;
  const int64_t* shape = NULL;
  uint32_t dims = 0, buffers = 0;
  uint64_t size = 0;
  CHECK(TRITONBACKEND_InputProperties(input, NULL, &dt, &shape, &dims, &size, &buffers));
  const void* buffer = NULL;
  TRITONSERVER_BufferAttributes* attrs = NULL;
  CHECK(TRITONBACKEND_InputBufferAttributes(input, 0, &buffer, &attrs));
  if (size < 4) return fail("COUNTDOWN takes INT32 [1]");
  int32_t value;
  memcpy(&value, buffer, 4);
  int32_t left = count_down(corr, (flags & REQUEST_FLAG_SEQUENCE_START) != 0, value);
  TRITONBACKEND_Response* response = NULL;
  CHECK(TRITONBACKEND_ResponseNew(&response, request));
  TRITONBACKEND_Output* output = NULL;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseOutput(response, &output, "OUT", TYPE_INT32, shape, dims);
  void* dst = NULL;
  int type;
  int64_t id;
  if (err == NULL) err = TRITONBACKEND_OutputBuffer(output, &dst, 4, &type, &id);
  if (err == NULL) memcpy(dst, &left, 4);
  bool last = left <= 0 || err != NULL;
  TRITONSERVER_Error* released = TRITONBACKEND_RequestRelease(request, last ? REQUEST_RELEASE_ALL : REQUEST_RELEASE_RESCHEDULE);
  if (released != NULL) {
    /* Refused (the model is not an iterative sequence): released with ALL, and the refusal is the answer. */
    TRITONSERVER_Error* all = TRITONBACKEND_RequestRelease(request, REQUEST_RELEASE_ALL);
    if (all != NULL) TRITONSERVER_ErrorDelete(all);
    last = true;
    if (err == NULL) err = released;
    else TRITONSERVER_ErrorDelete(released);
  }
  TRITONSERVER_Error* sent = TRITONBACKEND_ResponseSend(response, last ? RESPONSE_COMPLETE_FINAL : 0, err);
  if (err != NULL) TRITONSERVER_ErrorDelete(err);
  return sent;
}

/* OUTPUT0 = INPUT0 through a memory-manager scratch buffer, or the BLS target's OUTPUT0 doubled. */
static TRITONSERVER_Error* identity(struct model* m, TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  TRITONBACKEND_Input* input = NULL;
  CHECK(TRITONBACKEND_RequestInput(request, "INPUT0", &input));
  int dt;
  const int64_t* shape = NULL;
  uint32_t dims = 0, buffers = 0;
  uint64_t size = 0;
  CHECK(TRITONBACKEND_InputProperties(input, NULL, &dt, &shape, &dims, &size, &buffers));
  const void* src = NULL;
  TRITONSERVER_BufferAttributes* attrs = NULL;
  CHECK(TRITONBACKEND_InputBufferAttributes(input, 0, &src, &attrs));
  size_t attr_size = 0;
  int attr_type = -1;
  CHECK(TRITONSERVER_BufferAttributesByteSize(attrs, &attr_size));
  CHECK(TRITONSERVER_BufferAttributesMemoryType(attrs, &attr_type));
  if (buffers != 1 || attr_size != size || attr_type != MEMORY_CPU) return fail("input buffer attributes disagree");
  void* scratch = NULL;
  CHECK(TRITONBACKEND_MemoryManagerAllocate(m->memory, &scratch, MEMORY_CPU, 0, size));
  TRITONSERVER_Error* err = NULL;
  const char* target = string_parameter(request, "bls");
  const char* cancel_target = string_parameter(request, "bls_cancel");
  const char* wait = string_parameter(request, "wait_cancel");
  if (wait != NULL) err = wait_cancel(m, request, wait);
  if (err != NULL) {
  } else if (cancel_target != NULL) {
    err = bls_cancel(m, cancel_target, src, shape, dims, size);
    if (err == NULL) err = fail("bls_cancel gave no error");
  } else if (target != NULL) {
    err = bls(m, target, src, shape, dims, size, scratch);
    for (uint64_t i = 0; err == NULL && i < size / 4; i++) ((float*)scratch)[i] *= 2;
  } else {
    memcpy(scratch, src, size);
  }
  TRITONBACKEND_Output* output = NULL;
  if (err == NULL) err = TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", TYPE_FP32, shape, dims);
  uint64_t odims = 0;
  const int64_t* oshape = NULL;
  int odt = 0;
  if (err == NULL) err = TRITONBACKEND_InferenceResponseOutputByName(response, "OUTPUT0", &odt, &oshape, &odims);
  if (err == NULL && (odims != dims || odt != TYPE_FP32)) err = fail("the response does not show its output");
  void* dst = NULL;
  int type;
  int64_t id;
  if (err == NULL) err = TRITONBACKEND_OutputBuffer(output, &dst, size, &type, &id);
  if (err == NULL) {
    TRITONSERVER_BufferAttributes* out_attrs = NULL;
    err = TRITONBACKEND_OutputBufferAttributes(output, &out_attrs);
    size_t out_size = 0;
    if (err == NULL) err = TRITONSERVER_BufferAttributesByteSize(out_attrs, &out_size);
    if (err == NULL && out_size != size) err = fail("output buffer attributes disagree");
  }
  if (err == NULL) memcpy(dst, scratch, size);
  TRITONSERVER_Error* freed = TRITONBACKEND_MemoryManagerFree(m->memory, scratch, MEMORY_CPU, 0);
  if (err == NULL) err = freed;
  else if (freed != NULL) TRITONSERVER_ErrorDelete(freed);
  return err;
}

EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                              TRITONBACKEND_Request** requests, const uint32_t count) {
  TRITONBACKEND_Model* model = NULL;
  CHECK(TRITONBACKEND_ModelInstanceModel(instance, &model));
  struct model* m = NULL;
  CHECK(TRITONBACKEND_ModelState(model, (void**)&m));
  for (uint32_t r = 0; r < count; r++) {
    TRITONBACKEND_Input* countdown_input = NULL;
    TRITONSERVER_Error* not_countdown = TRITONBACKEND_RequestInput(requests[r], "COUNTDOWN", &countdown_input);
    if (not_countdown == NULL) {
      TRITONSERVER_Error* e = countdown(requests[r], countdown_input);
      if (e != NULL) TRITONSERVER_ErrorDelete(e);
      continue;
    }
    TRITONSERVER_ErrorDelete(not_countdown);
    TRITONBACKEND_Response* response = NULL;
    CHECK(TRITONBACKEND_ResponseNew(&response, requests[r]));
    TRITONBACKEND_Input* probe = NULL;
    TRITONSERVER_Error* failed = NULL;
    TRITONSERVER_Error* absent = TRITONBACKEND_RequestInput(requests[r], "STATE_IN", &probe);
    if (absent == NULL) {
      failed = accumulate(requests[r], response);
    } else if (string_parameter(requests[r], "sweep") != NULL) {
      TRITONSERVER_ErrorDelete(absent);
      failed = sweep(instance, model, m, requests[r], response);
      if (failed == NULL) failed = identity(m, requests[r], response);
    } else {
      TRITONSERVER_ErrorDelete(absent);
      failed = identity(m, requests[r], response);
    }
    if (failed == NULL) failed = TRITONSERVER_MetricIncrement(m->requests, 1);
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseSend(response, RESPONSE_COMPLETE_FINAL, failed);
    if (failed != NULL) TRITONSERVER_ErrorDelete(failed);
    if (err != NULL) TRITONSERVER_ErrorDelete(err);
    err = TRITONBACKEND_RequestRelease(requests[r], REQUEST_RELEASE_ALL);
    if (err != NULL) TRITONSERVER_ErrorDelete(err);
  }
  double total = 0;
  return TRITONSERVER_MetricValue(m->requests, &total);
}
