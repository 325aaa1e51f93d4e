/* The C ABI between tritonrs (Rust) and its TensorRT shim (trt_shim.cpp).
 *
 * TensorRT's C++ API is virtual calls declared in its headers; libnvinfer exports only a few C entry
 * points. This shim wraps the ~25 calls the server needs in plain C functions. It links nothing from
 * TensorRT: the caller dlopens libnvinfer and passes `createInferRuntime_INTERNAL` in.
 *
 * The same source builds two ways:
 *   - against TensorRT 10 headers, linked into the tritonrs binary (build.rs);
 *   - against a device's TensorRT 8.2-8.6 headers, as libtritonrs_trt8.so, dlopened at run time
 *     (jetson/build-trt8-shim.sh).
 * Both export exactly these functions, so Rust holds them in one table.
 *
 * No STL, no exceptions, no RTTI; strings returned are owned by the engine and live as long as it.
 * Tensors are addressed by their I/O index (0 .. trs_engine_num_io-1), the engine's own order.
 */
#ifndef TRITONRS_TRT_SHIM_H
#define TRITONRS_TRT_SHIM_H

#include <stddef.h>
#include <stdint.h>

/* Exported from libtritonrs_trt8.so even when built with -fvisibility=hidden. */
#if defined(__GNUC__)
#define TRS_API __attribute__((visibility("default")))
#else
#define TRS_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any change to these signatures; Rust refuses a shim with another value. */
#define TRS_ABI_VERSION 1
#define TRS_MAX_DIMS 8

/* trs_engine_io_flags bits */
#define TRS_IO_INPUT 1        /* an input (else an output) */
#define TRS_IO_SHAPE_TENSOR 2 /* a shape tensor (its values, not its size, set shapes) */
#define TRS_IO_HOST 4         /* lives in host memory */
#define TRS_IO_NOT_LINEAR 8   /* a vectorized format, not plain row-major */

typedef struct trs_runtime trs_runtime;
typedef struct trs_engine trs_engine;
typedef struct trs_context trs_context;

/* Receives every TensorRT log message: severity is nvinfer1::ILogger::Severity
 * (0 internal error, 1 error, 2 warning, 3 info, 4 verbose). */
typedef void (*trs_log_fn)(int32_t severity, const char* msg);
/* libnvinfer's `createInferRuntime_INTERNAL(void* logger, int32_t version)`. */
typedef void* (*trs_create_runtime_fn)(void* logger, int32_t version);

TRS_API int32_t trs_abi_version(void);
/* NV_TENSORRT_VERSION of the headers the shim was compiled against. */
TRS_API int32_t trs_header_version(void);
/* The logger TensorRT calls (also for initLibNvInferPlugins); set its callback first. */
TRS_API void* trs_logger(trs_log_fn log);

TRS_API trs_runtime* trs_runtime_create(trs_create_runtime_fn create, int32_t lib_version);
TRS_API void trs_runtime_destroy(trs_runtime* rt);
/* IRuntime::setDLACore: the DLA core engines deserialized next run on. 0 when set; -1 when the device
 * has no such core (getNbDLACores). Optional for the Rust side: older shims lack it. */
TRS_API int32_t trs_runtime_set_dla_core(trs_runtime* rt, int32_t core);

/* NULL on failure; TensorRT logs the reason as an error first. */
TRS_API trs_engine* trs_engine_deserialize(trs_runtime* rt, const void* blob, size_t len);
TRS_API void trs_engine_destroy(trs_engine* e);
TRS_API int32_t trs_engine_num_io(const trs_engine* e);
TRS_API const char* trs_engine_io_name(const trs_engine* e, int32_t io);
TRS_API int32_t trs_engine_io_flags(const trs_engine* e, int32_t io);
/* nvinfer1::DataType value. */
TRS_API int32_t trs_engine_io_dtype(const trs_engine* e, int32_t io);
/* Writes up to TRS_MAX_DIMS dims (-1 for dynamic) and returns their count, or -1. */
TRS_API int32_t trs_engine_io_shape(const trs_engine* e, int32_t io, int64_t* dims);
TRS_API int32_t trs_engine_num_profiles(const trs_engine* e);
/* which: 0 min, 1 opt, 2 max. Returns the rank, or -1 (a tensor with no profile shapes). */
TRS_API int32_t trs_engine_profile_shape(const trs_engine* e, int32_t io, int32_t profile, int32_t which, int64_t* dims);
/* 1 for an implicit-batch engine (TensorRT < 10), else 0. */
TRS_API int32_t trs_engine_implicit_batch(const trs_engine* e);

/* NULL on failure. */
TRS_API trs_context* trs_context_create(trs_engine* e);
TRS_API void trs_context_destroy(trs_context* c);
/* These return 1 on success, 0 on failure. stream is a cudaStream_t (CUstream). */
TRS_API int32_t trs_context_set_profile(trs_context* c, int32_t profile, void* stream);
TRS_API int32_t trs_context_set_input_shape(trs_context* c, int32_t io, const int64_t* dims, int32_t nb_dims);
/* The shape of a tensor under the current input shapes; returns the rank or -1. */
TRS_API int32_t trs_context_tensor_shape(trs_context* c, int32_t io, int64_t* dims);
TRS_API int32_t trs_context_set_address(trs_context* c, int32_t io, void* device_ptr);
TRS_API int32_t trs_context_enqueue(trs_context* c, void* stream);

#ifdef __cplusplus
}
#endif

#endif
