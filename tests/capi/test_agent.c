/* A Triton repository agent for tritonrs's tests, written here against the documented
 * TRITONREPOAGENT API 0.1 (declarations below are from the API documentation; no Triton header is
 * used). Built by tests/python/test_capi_agents.py with the system C compiler, once per variant:
 *
 *   -DAGENT_NAME='"pass"'      its name in the action log;
 *   -DFAIL_ON=<action>         ModelAction fails for that action (0 LOAD ... 4 UNLOAD_COMPLETE);
 *   -DRELOCATE                 on LOAD, writes a new repository for the model in a folder it acquires
 *                              (config.pbtxt copied, version 1 with a marker file) and hands it back.
 *
 * Every action is appended to the file named by the model's agent parameter "log", one line each:
 * "<agent> <action> <model location basename-or-'acquired'> <parameter count>".
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_Message TRITONSERVER_Message;
typedef struct TRITONREPOAGENT_Agent TRITONREPOAGENT_Agent;
typedef struct TRITONREPOAGENT_AgentModel TRITONREPOAGENT_AgentModel;

TRITONSERVER_Error* TRITONSERVER_ErrorNew(uint32_t code, const char* msg);
TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message* m, const char** base, size_t* size);
TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* m);
TRITONSERVER_Error* TRITONREPOAGENT_ApiVersion(uint32_t* major, uint32_t* minor);
TRITONSERVER_Error* TRITONREPOAGENT_ModelRepositoryLocation(
    TRITONREPOAGENT_Agent*, TRITONREPOAGENT_AgentModel*, uint32_t* artifact_type, const char** location);
TRITONSERVER_Error* TRITONREPOAGENT_ModelRepositoryLocationAcquire(
    TRITONREPOAGENT_Agent*, TRITONREPOAGENT_AgentModel*, uint32_t artifact_type, const char** location);
TRITONSERVER_Error* TRITONREPOAGENT_ModelRepositoryLocationRelease(
    TRITONREPOAGENT_Agent*, TRITONREPOAGENT_AgentModel*, const char* location);
TRITONSERVER_Error* TRITONREPOAGENT_ModelRepositoryUpdate(
    TRITONREPOAGENT_Agent*, TRITONREPOAGENT_AgentModel*, uint32_t artifact_type, const char* location);
TRITONSERVER_Error* TRITONREPOAGENT_ModelParameterCount(TRITONREPOAGENT_Agent*, TRITONREPOAGENT_AgentModel*, uint32_t*);
TRITONSERVER_Error* TRITONREPOAGENT_ModelParameter(
    TRITONREPOAGENT_Agent*, TRITONREPOAGENT_AgentModel*, uint32_t index, const char** name, const char** value);
TRITONSERVER_Error* TRITONREPOAGENT_ModelConfig(
    TRITONREPOAGENT_Agent*, TRITONREPOAGENT_AgentModel*, uint32_t version, TRITONSERVER_Message** config);
TRITONSERVER_Error* TRITONREPOAGENT_ModelState(TRITONREPOAGENT_AgentModel*, void** state);
TRITONSERVER_Error* TRITONREPOAGENT_ModelSetState(TRITONREPOAGENT_AgentModel*, void* state);
TRITONSERVER_Error* TRITONREPOAGENT_State(TRITONREPOAGENT_Agent*, void** state);
TRITONSERVER_Error* TRITONREPOAGENT_SetState(TRITONREPOAGENT_Agent*, void* state);

#define ERROR_INTERNAL 1
#ifndef AGENT_NAME
#define AGENT_NAME "agent"
#endif

static const char* ACTIONS[] = {"LOAD", "LOAD_COMPLETE", "LOAD_FAIL", "UNLOAD", "UNLOAD_COMPLETE"};

#define TRY(x)                                   \
  do {                                           \
    TRITONSERVER_Error* e_ = (x);                \
    if (e_ != NULL) return e_;                   \
  } while (0)

/* The model's parameter `key`, or NULL. */
static const char*
param(TRITONREPOAGENT_Agent* a, TRITONREPOAGENT_AgentModel* m, const char* key)
{
  uint32_t n = 0;
  if (TRITONREPOAGENT_ModelParameterCount(a, m, &n) != NULL) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    const char *k, *v;
    if (TRITONREPOAGENT_ModelParameter(a, m, i, &k, &v) == NULL && strcmp(k, key) == 0) return v;
  }
  return NULL;
}

TRITONSERVER_Error*
TRITONREPOAGENT_Initialize(TRITONREPOAGENT_Agent* agent)
{
  uint32_t major, minor;
  TRY(TRITONREPOAGENT_ApiVersion(&major, &minor));
  if (major != 0 || minor < 1) return TRITONSERVER_ErrorNew(ERROR_INTERNAL, "unsupported agent API");
  static int calls = 0;
  TRY(TRITONREPOAGENT_SetState(agent, &calls));
  return NULL;
}

TRITONSERVER_Error*
TRITONREPOAGENT_ModelInitialize(TRITONREPOAGENT_Agent* agent, TRITONREPOAGENT_AgentModel* model)
{
  int* count = calloc(1, sizeof(int));
  (void)agent;
  return TRITONREPOAGENT_ModelSetState(model, count);
}

TRITONSERVER_Error*
TRITONREPOAGENT_ModelFinalize(TRITONREPOAGENT_Agent* agent, TRITONREPOAGENT_AgentModel* model)
{
  void* state = NULL;
  (void)agent;
  TRY(TRITONREPOAGENT_ModelState(model, &state));
  free(state);
  return NULL;
}

#ifdef RELOCATE
static TRITONSERVER_Error*
copy_file(const char* from, const char* to)
{
  FILE* in = fopen(from, "rb");
  if (in == NULL) return TRITONSERVER_ErrorNew(ERROR_INTERNAL, "cannot read config.pbtxt");
  FILE* out = fopen(to, "wb");
  if (out == NULL) {
    fclose(in);
    return TRITONSERVER_ErrorNew(ERROR_INTERNAL, "cannot write config.pbtxt");
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), in)) > 0) fwrite(buf, 1, n, out);
  fclose(in);
  fclose(out);
  return NULL;
}

/* Writes a new repository for the model: its config.pbtxt and a version 1 holding a marker. */
static TRITONSERVER_Error*
relocate(TRITONREPOAGENT_Agent* agent, TRITONREPOAGENT_AgentModel* model, const char* from)
{
  const char* to = NULL;
  TRY(TRITONREPOAGENT_ModelRepositoryLocationAcquire(agent, model, 0, &to));
  /* A second folder, acquired and released, must be gone afterwards. */
  const char* spare = NULL;
  TRY(TRITONREPOAGENT_ModelRepositoryLocationAcquire(agent, model, 0, &spare));
  char spare_copy[4096];
  snprintf(spare_copy, sizeof(spare_copy), "%s", spare);
  TRY(TRITONREPOAGENT_ModelRepositoryLocationRelease(agent, model, spare_copy));
  struct stat st;
  if (stat(spare_copy, &st) == 0) return TRITONSERVER_ErrorNew(ERROR_INTERNAL, "a released folder is still there");
  char src[4096], dst[4096];
  snprintf(src, sizeof(src), "%s/config.pbtxt", from);
  snprintf(dst, sizeof(dst), "%s/config.pbtxt", to);
  TRY(copy_file(src, dst));
  snprintf(dst, sizeof(dst), "%s/1", to);
  if (mkdir(dst, 0755) != 0) return TRITONSERVER_ErrorNew(ERROR_INTERNAL, "cannot create the version folder");
  snprintf(dst, sizeof(dst), "%s/1/relocated_by_agent", to);
  FILE* f = fopen(dst, "w");
  if (f != NULL) fclose(f);
  return TRITONREPOAGENT_ModelRepositoryUpdate(agent, model, 0, to);
}
#endif

TRITONSERVER_Error*
TRITONREPOAGENT_ModelAction(TRITONREPOAGENT_Agent* agent, TRITONREPOAGENT_AgentModel* model, uint32_t action)
{
  if (action > 4) return TRITONSERVER_ErrorNew(ERROR_INTERNAL, "unknown action");
  int* count = NULL;
  TRY(TRITONREPOAGENT_ModelState(model, (void**)&count));
  (*count)++;
  uint32_t kind = 99;
  const char* location = NULL;
  TRY(TRITONREPOAGENT_ModelRepositoryLocation(agent, model, &kind, &location));
  uint32_t n = 0;
  TRY(TRITONREPOAGENT_ModelParameterCount(agent, model, &n));
  TRITONSERVER_Message* config = NULL;
  TRY(TRITONREPOAGENT_ModelConfig(agent, model, 1, &config));
  const char* json = NULL;
  size_t json_size = 0;
  TRY(TRITONSERVER_MessageSerializeToJson(config, &json, &json_size));
  bool has_agents = strstr(json, "model_repository_agents") != NULL;
  TRY(TRITONSERVER_MessageDelete(config));

  const char* log = param(agent, model, "log");
  if (log != NULL) {
    FILE* f = fopen(log, "a");
    if (f != NULL) {
      const char* base = strrchr(location, '/');
      bool acquired = strstr(location, "tritonrs-agent-") != NULL;
      fprintf(f, "%s %s %s %u %s\n", AGENT_NAME, ACTIONS[action], acquired ? "acquired" : (base ? base + 1 : location),
              n, has_agents ? "config" : "no-config");
      fclose(f);
    }
  }
#ifdef FAIL_ON
  if (action == FAIL_ON) return TRITONSERVER_ErrorNew(ERROR_INTERNAL, AGENT_NAME " fails on purpose");
#endif
#ifdef RELOCATE
  if (action == 0) return relocate(agent, model, location);
#endif
  return NULL;
}
