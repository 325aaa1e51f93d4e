/* A Triton response-cache library for tritonrs's tests, written here against the documented
 * TRITONCACHE API 0.1 (the declarations below are from the API documentation; no Triton header is
 * used). It keeps entries in memory, follows the protocol tritonserver runs (insert: read the sizes,
 * set buffers of its own, TRITONCACHE_Copy; look-up: add its buffers, TRITONCACHE_Copy) and counts
 * what it is asked. Built by tests/python/test_capi_cache.py with the system C compiler:
 *
 *   -DWANT_MAJOR=<n>   the API major version it was "built for" (default 0): Initialize fails with
 *                      UNSUPPORTED when the server's differs, as a real cache checks;
 *   -DOMIT_INSERT      leaves TRITONCACHE_CacheInsert out (a library the server must refuse).
 *
 * Its settings come as tritonserver passes them, a JSON object of strings; "counters" names a file
 * rewritten after every call: "lookups=<n> hits=<n> misses=<n> inserts=<n> entries=<n> config=<json>";
 * "dump" names a file that gets one line per stored entry, its buffers in hex (the key left out, so
 * two servers' dumps compare).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_BufferAttributes TRITONSERVER_BufferAttributes;
typedef struct TRITONCACHE_Cache TRITONCACHE_Cache;
typedef struct TRITONCACHE_CacheEntry TRITONCACHE_CacheEntry;
typedef struct TRITONCACHE_Allocator TRITONCACHE_Allocator;

TRITONSERVER_Error* TRITONSERVER_ErrorNew(uint32_t code, const char* msg);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesNew(TRITONSERVER_BufferAttributes** a);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesDelete(TRITONSERVER_BufferAttributes* a);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetByteSize(TRITONSERVER_BufferAttributes* a, size_t size);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryType(TRITONSERVER_BufferAttributes* a, uint32_t type);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesByteSize(TRITONSERVER_BufferAttributes* a, size_t* size);
TRITONSERVER_Error* TRITONCACHE_ApiVersion(uint32_t* major, uint32_t* minor);
TRITONSERVER_Error* TRITONCACHE_CacheEntryBufferCount(TRITONCACHE_CacheEntry* e, size_t* count);
TRITONSERVER_Error* TRITONCACHE_CacheEntryAddBuffer(TRITONCACHE_CacheEntry* e, void* base, TRITONSERVER_BufferAttributes* a);
TRITONSERVER_Error* TRITONCACHE_CacheEntryGetBuffer(
    TRITONCACHE_CacheEntry* e, size_t index, void** base, TRITONSERVER_BufferAttributes* a);
TRITONSERVER_Error* TRITONCACHE_CacheEntrySetBuffer(
    TRITONCACHE_CacheEntry* e, size_t index, void* base, TRITONSERVER_BufferAttributes* a);
TRITONSERVER_Error* TRITONCACHE_Copy(TRITONCACHE_Allocator* alloc, TRITONCACHE_CacheEntry* e);

#define ERROR_INTERNAL 1
#define ERROR_NOT_FOUND 2
#define ERROR_INVALID_ARG 3
#define ERROR_UNSUPPORTED 5
#define ERROR_ALREADY_EXISTS 6
#define MEMORY_CPU 0
#define MAX_BUFFERS 8
#ifndef WANT_MAJOR
#define WANT_MAJOR 0
#endif

#define TRY(x)                    \
  do {                            \
    TRITONSERVER_Error* e_ = (x); \
    if (e_ != NULL) return e_;    \
  } while (0)

typedef struct Entry {
  char* key;
  size_t count;
  void* base[MAX_BUFFERS];
  size_t size[MAX_BUFFERS];
  struct Entry* next;
} Entry;

typedef struct {
  pthread_mutex_t mu;
  Entry* entries;
  char counters[1024];
  char dump[1024];
  char config[1024];
  unsigned lookups, hits, misses, inserts, entry_count;
} Cache;

/* The string value of `"name":"..."` in the settings, copied into out (empty when absent). */
static void setting(const char* json, const char* name, char* out, size_t cap) {
  char pattern[128];
  snprintf(pattern, sizeof pattern, "\"%s\":\"", name);
  out[0] = '\0';
  const char* p = strstr(json, pattern);
  if (p == NULL) return;
  p += strlen(pattern);
  size_t n = 0;
  while (p[n] != '\0' && p[n] != '"' && n + 1 < cap) n++;
  memcpy(out, p, n);
  out[n] = '\0';
}

/* Rewrites the counters file; called with the lock held. */
static void report(Cache* c) {
  if (c->counters[0] == '\0') return;
  FILE* f = fopen(c->counters, "w");
  if (f == NULL) return;
  fprintf(f, "lookups=%u hits=%u misses=%u inserts=%u entries=%u config=%s\n", c->lookups, c->hits, c->misses,
          c->inserts, c->entry_count, c->config);
  fclose(f);
}

static Entry* find(Cache* c, const char* key) {
  for (Entry* e = c->entries; e != NULL; e = e->next)
    if (strcmp(e->key, key) == 0) return e;
  return NULL;
}

TRITONSERVER_Error* TRITONCACHE_CacheInitialize(TRITONCACHE_Cache** cache, const char* config) {
  uint32_t major = 0, minor = 0;
  TRY(TRITONCACHE_ApiVersion(&major, &minor));
  if (major != WANT_MAJOR) {
    char msg[128];
    snprintf(msg, sizeof msg, "the test cache was built for TRITONCACHE API %d.x; this server has %u.%u",
             WANT_MAJOR, major, minor);
    return TRITONSERVER_ErrorNew(ERROR_UNSUPPORTED, msg);
  }
  if (cache == NULL || config == NULL) return TRITONSERVER_ErrorNew(ERROR_INVALID_ARG, "cache or config is null");
  Cache* c = calloc(1, sizeof(Cache));
  if (c == NULL) return TRITONSERVER_ErrorNew(ERROR_INTERNAL, "out of memory");
  pthread_mutex_init(&c->mu, NULL);
  setting(config, "counters", c->counters, sizeof c->counters);
  setting(config, "dump", c->dump, sizeof c->dump);
  snprintf(c->config, sizeof c->config, "%s", config);
  report(c);
  *cache = (TRITONCACHE_Cache*)c;
  return NULL;
}

TRITONSERVER_Error* TRITONCACHE_CacheFinalize(TRITONCACHE_Cache* cache) {
  Cache* c = (Cache*)cache;
  if (c == NULL) return TRITONSERVER_ErrorNew(ERROR_INVALID_ARG, "cache is null");
  while (c->entries != NULL) {
    Entry* e = c->entries;
    c->entries = e->next;
    for (size_t i = 0; i < e->count; i++) free(e->base[i]);
    free(e->key);
    free(e);
  }
  pthread_mutex_destroy(&c->mu);
  free(c);
  return NULL;
}

/* Hands the stored buffers to the server and has it copy them out, under the lock. */
static TRITONSERVER_Error* lookup_locked(Cache* c, const char* key, TRITONCACHE_CacheEntry* entry,
                                         TRITONCACHE_Allocator* allocator) {
  c->lookups++;
  Entry* e = find(c, key);
  if (e == NULL) {
    c->misses++;
    return TRITONSERVER_ErrorNew(ERROR_NOT_FOUND, "key not found");
  }
  c->hits++;
  for (size_t i = 0; i < e->count; i++) {
    TRITONSERVER_BufferAttributes* a = NULL;
    TRY(TRITONSERVER_BufferAttributesNew(&a));
    TRY(TRITONSERVER_BufferAttributesSetByteSize(a, e->size[i]));
    TRY(TRITONSERVER_BufferAttributesSetMemoryType(a, MEMORY_CPU));
    TRITONSERVER_Error* err = TRITONCACHE_CacheEntryAddBuffer(entry, e->base[i], a);
    TRY(TRITONSERVER_BufferAttributesDelete(a));
    if (err != NULL) return err;
  }
  return TRITONCACHE_Copy(allocator, entry);
}

TRITONSERVER_Error* TRITONCACHE_CacheLookup(TRITONCACHE_Cache* cache, const char* key, TRITONCACHE_CacheEntry* entry,
                                            TRITONCACHE_Allocator* allocator) {
  Cache* c = (Cache*)cache;
  if (c == NULL || key == NULL) return TRITONSERVER_ErrorNew(ERROR_INVALID_ARG, "cache or key is null");
  pthread_mutex_lock(&c->mu);
  TRITONSERVER_Error* err = lookup_locked(c, key, entry, allocator);
  report(c);
  pthread_mutex_unlock(&c->mu);
  return err;
}

#ifndef OMIT_INSERT
/* Appends the entry's buffers in hex to the dump file; called with the lock held. */
static void dump(Cache* c, const Entry* e) {
  if (c->dump[0] == '\0') return;
  FILE* f = fopen(c->dump, "a");
  if (f == NULL) return;
  for (size_t i = 0; i < e->count; i++) {
    const unsigned char* b = e->base[i];
    fputs(i == 0 ? "" : " ", f);
    for (size_t j = 0; j < e->size[i]; j++) fprintf(f, "%02x", b[j]);
  }
  fputc('\n', f);
  fclose(f);
}

/* Allocates a buffer of each placeholder's size, sets it in the entry and has the server copy into it. */
static TRITONSERVER_Error* fill(TRITONCACHE_CacheEntry* entry, TRITONCACHE_Allocator* allocator, Entry* e) {
  TRY(TRITONCACHE_CacheEntryBufferCount(entry, &e->count));
  if (e->count == 0 || e->count > MAX_BUFFERS) return TRITONSERVER_ErrorNew(ERROR_INVALID_ARG, "bad buffer count");
  for (size_t i = 0; i < e->count; i++) {
    TRITONSERVER_BufferAttributes* a = NULL;
    void* placeholder = NULL;
    TRY(TRITONSERVER_BufferAttributesNew(&a));
    TRITONSERVER_Error* err = TRITONCACHE_CacheEntryGetBuffer(entry, i, &placeholder, a);
    if (err == NULL) err = TRITONSERVER_BufferAttributesByteSize(a, &e->size[i]);
    TRY(TRITONSERVER_BufferAttributesDelete(a));
    if (err != NULL) return err;
    e->base[i] = malloc(e->size[i]);
    if (e->base[i] == NULL) return TRITONSERVER_ErrorNew(ERROR_INTERNAL, "out of memory");
    TRY(TRITONCACHE_CacheEntrySetBuffer(entry, i, e->base[i], NULL));
  }
  return TRITONCACHE_Copy(allocator, entry);
}

TRITONSERVER_Error* TRITONCACHE_CacheInsert(TRITONCACHE_Cache* cache, const char* key, TRITONCACHE_CacheEntry* entry,
                                            TRITONCACHE_Allocator* allocator) {
  Cache* c = (Cache*)cache;
  if (c == NULL || key == NULL) return TRITONSERVER_ErrorNew(ERROR_INVALID_ARG, "cache or key is null");
  pthread_mutex_lock(&c->mu);
  c->inserts++;
  TRITONSERVER_Error* err = NULL;
  if (find(c, key) != NULL) {
    err = TRITONSERVER_ErrorNew(ERROR_ALREADY_EXISTS, "key already exists");
  } else {
    Entry* e = calloc(1, sizeof(Entry));
    err = e == NULL ? TRITONSERVER_ErrorNew(ERROR_INTERNAL, "out of memory") : fill(entry, allocator, e);
    if (err == NULL) {
      e->key = strdup(key);
      e->next = c->entries;
      c->entries = e;
      c->entry_count++;
      dump(c, e);
    } else if (e != NULL) {
      for (size_t i = 0; i < e->count && i < MAX_BUFFERS; i++) free(e->base[i]);
      free(e);
    }
  }
  report(c);
  pthread_mutex_unlock(&c->mu);
  return err;
}
#endif
