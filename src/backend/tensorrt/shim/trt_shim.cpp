// The TensorRT shim: plain C functions over TensorRT's C++ runtime API (see trt_shim.h).
//
// Built with -fno-exceptions -fno-rtti and without the C++ standard library: nothing here allocates
// with `new`, and the few runtime hooks the compiler may reference (vtables' deleting destructors and
// pure-virtual slots) are defined at the bottom, so the object file adds no
// libstdc++ (GLIBCXX) requirement to the binary. libnvinfer brings its own libstdc++ when it is loaded.
//
// Versions:
//   TensorRT >= 10    named I/O tensors, int64 dims, enqueueV3 (linked into tritonrs; built against
//                     TensorRT 10 headers). Only methods present since 10.0 are called, so a binary
//                     built against newer 10.x headers runs on JetPack 6's 10.3: TensorRT only appends
//                     to its interfaces' virtual tables within a major version. (Checked on
//                     2026-11-24: built against the 10.0, 10.3 and 10.16 headers, the shim's
//                     machine code is the same instruction for instruction; the source also
//                     compiles against the 8.0, 8.2, 8.4, 8.5 and 8.6 headers.)
//   TensorRT 8.5-8.6  named I/O tensors with int32 dims, enqueueV3 (libtritonrs_trt8.so).
//   TensorRT 8.2-8.4  bindings: one binding per tensor and profile, enqueueV2 (libtritonrs_trt8.so).

#include "trt_shim.h"

#include <string.h>
#include <stdlib.h>

#include "NvInferRuntime.h"

#ifndef NV_TENSORRT_VERSION
#define NV_TENSORRT_VERSION (NV_TENSORRT_MAJOR * 1000 + NV_TENSORRT_MINOR * 100 + NV_TENSORRT_PATCH)
#endif

#if NV_TENSORRT_MAJOR > 8 || (NV_TENSORRT_MAJOR == 8 && NV_TENSORRT_MINOR >= 5)
#define TRS_NAMED_TENSORS 1
#else
#define TRS_NAMED_TENSORS 0
#endif

#if NV_TENSORRT_MAJOR < 8
#error "the TensorRT shim needs TensorRT 8.2 or later"
#endif

namespace nv = nvinfer1;

namespace {

class Logger final : public nv::ILogger {
public:
    trs_log_fn fn = nullptr;
    void log(Severity severity, const char* msg) noexcept override {
        if (fn != nullptr) {
            fn(static_cast<int32_t>(severity), msg);
        }
    }
};

Logger g_logger;

int32_t copy_dims(const nv::Dims& d, int64_t* out) {
    if (d.nbDims < 0 || d.nbDims > TRS_MAX_DIMS) {
        return -1;
    }
    for (int32_t i = 0; i < d.nbDims; ++i) {
        out[i] = static_cast<int64_t>(d.d[i]);
    }
    return d.nbDims;
}

bool make_dims(const int64_t* dims, int32_t nb, nv::Dims* out) {
    if (nb < 0 || nb > nv::Dims::MAX_DIMS) {
        return false;
    }
    memset(out, 0, sizeof(*out));
    out->nbDims = nb;
    for (int32_t i = 0; i < nb; ++i) {
        out->d[i] = static_cast<decltype(+out->d[0])>(dims[i]);
    }
    return true;
}

}  // namespace

struct trs_runtime {
    nv::IRuntime* rt;
};

struct trs_engine {
    nv::ICudaEngine* engine;
    int32_t num_io;       // I/O tensors (per profile, for bindings)
    int32_t num_profiles;
};

struct trs_context {
    trs_engine* engine;
    nv::IExecutionContext* ctx;
    int32_t profile;
#if !TRS_NAMED_TENSORS
    // Bindings: every tensor of every profile; enqueueV2 takes them all.
    void** bindings;
    int32_t num_bindings;
#endif
};

extern "C" {

int32_t trs_abi_version(void) { return TRS_ABI_VERSION; }

int32_t trs_header_version(void) { return NV_TENSORRT_VERSION; }

void* trs_logger(trs_log_fn log) {
    g_logger.fn = log;
    return static_cast<nv::ILogger*>(&g_logger);
}

trs_runtime* trs_runtime_create(trs_create_runtime_fn create, int32_t lib_version) {
    if (create == nullptr) {
        return nullptr;
    }
    nv::ILogger* logger = &g_logger;
    auto* rt = static_cast<nv::IRuntime*>(create(logger, lib_version));
    if (rt == nullptr) {
        return nullptr;
    }
    auto* out = static_cast<trs_runtime*>(calloc(1, sizeof(trs_runtime)));
    if (out == nullptr) {
        delete rt;
        return nullptr;
    }
    out->rt = rt;
    return out;
}

void trs_runtime_destroy(trs_runtime* rt) {
    if (rt != nullptr) {
        delete rt->rt;
        free(rt);
    }
}

int32_t trs_runtime_set_dla_core(trs_runtime* rt, int32_t core) {
    if (rt == nullptr || core < 0 || core >= rt->rt->getNbDLACores()) {
        return -1;
    }
    rt->rt->setDLACore(core);
    return 0;
}

trs_engine* trs_engine_deserialize(trs_runtime* rt, const void* blob, size_t len) {
    if (rt == nullptr || blob == nullptr || len == 0) {
        return nullptr;
    }
    // The two-argument form exists in every supported version (8.0 deprecated the plugin-factory one).
    nv::ICudaEngine* engine = rt->rt->deserializeCudaEngine(blob, len);
    if (engine == nullptr) {
        return nullptr;
    }
    auto* out = static_cast<trs_engine*>(calloc(1, sizeof(trs_engine)));
    if (out == nullptr) {
        delete engine;
        return nullptr;
    }
    out->engine = engine;
    out->num_profiles = engine->getNbOptimizationProfiles();
    if (out->num_profiles < 1) {
        out->num_profiles = 1;
    }
#if TRS_NAMED_TENSORS
    out->num_io = engine->getNbIOTensors();
#else
    out->num_io = engine->getNbBindings() / out->num_profiles;
#endif
    return out;
}

void trs_engine_destroy(trs_engine* e) {
    if (e != nullptr) {
        delete e->engine;
        free(e);
    }
}

int32_t trs_engine_num_io(const trs_engine* e) { return e == nullptr ? 0 : e->num_io; }

int32_t trs_engine_num_profiles(const trs_engine* e) { return e == nullptr ? 0 : e->num_profiles; }

static bool valid_io(const trs_engine* e, int32_t io) { return e != nullptr && io >= 0 && io < e->num_io; }

const char* trs_engine_io_name(const trs_engine* e, int32_t io) {
    if (!valid_io(e, io)) {
        return nullptr;
    }
#if TRS_NAMED_TENSORS
    return e->engine->getIOTensorName(io);
#else
    return e->engine->getBindingName(io);
#endif
}

int32_t trs_engine_io_flags(const trs_engine* e, int32_t io) {
    if (!valid_io(e, io)) {
        return 0;
    }
    int32_t flags = 0;
#if TRS_NAMED_TENSORS
    const char* name = e->engine->getIOTensorName(io);
    if (e->engine->getTensorIOMode(name) == nv::TensorIOMode::kINPUT) {
        flags |= TRS_IO_INPUT;
    }
    if (e->engine->isShapeInferenceIO(name)) {
        flags |= TRS_IO_SHAPE_TENSOR;
    }
    if (e->engine->getTensorLocation(name) == nv::TensorLocation::kHOST) {
        flags |= TRS_IO_HOST;
    }
    if (e->engine->getTensorFormat(name) != nv::TensorFormat::kLINEAR) {
        flags |= TRS_IO_NOT_LINEAR;
    }
#else
    if (e->engine->bindingIsInput(io)) {
        flags |= TRS_IO_INPUT;
    }
    if (e->engine->isShapeBinding(io)) {
        flags |= TRS_IO_SHAPE_TENSOR;
    }
    if (e->engine->getLocation(io) == nv::TensorLocation::kHOST) {
        flags |= TRS_IO_HOST;
    }
    if (e->engine->getBindingFormat(io) != nv::TensorFormat::kLINEAR) {
        flags |= TRS_IO_NOT_LINEAR;
    }
#endif
    return flags;
}

int32_t trs_engine_io_dtype(const trs_engine* e, int32_t io) {
    if (!valid_io(e, io)) {
        return -1;
    }
#if TRS_NAMED_TENSORS
    return static_cast<int32_t>(e->engine->getTensorDataType(e->engine->getIOTensorName(io)));
#else
    return static_cast<int32_t>(e->engine->getBindingDataType(io));
#endif
}

int32_t trs_engine_io_shape(const trs_engine* e, int32_t io, int64_t* dims) {
    if (!valid_io(e, io) || dims == nullptr) {
        return -1;
    }
#if TRS_NAMED_TENSORS
    return copy_dims(e->engine->getTensorShape(e->engine->getIOTensorName(io)), dims);
#else
    return copy_dims(e->engine->getBindingDimensions(io), dims);
#endif
}

int32_t trs_engine_profile_shape(const trs_engine* e, int32_t io, int32_t profile, int32_t which, int64_t* dims) {
    if (!valid_io(e, io) || dims == nullptr || profile < 0 || profile >= e->num_profiles || which < 0 || which > 2) {
        return -1;
    }
    nv::OptProfileSelector sel = which == 0 ? nv::OptProfileSelector::kMIN
                                 : which == 1 ? nv::OptProfileSelector::kOPT
                                              : nv::OptProfileSelector::kMAX;
#if TRS_NAMED_TENSORS
    return copy_dims(e->engine->getProfileShape(e->engine->getIOTensorName(io), profile, sel), dims);
#else
    return copy_dims(e->engine->getProfileDimensions(io + profile * e->num_io, profile, sel), dims);
#endif
}

int32_t trs_engine_implicit_batch(const trs_engine* e) {
#if NV_TENSORRT_MAJOR >= 10
    (void)e;
    return 0;
#else
    return e != nullptr && e->engine->hasImplicitBatchDimension() ? 1 : 0;
#endif
}

trs_context* trs_context_create(trs_engine* e) {
    if (e == nullptr) {
        return nullptr;
    }
    nv::IExecutionContext* ctx = e->engine->createExecutionContext();
    if (ctx == nullptr) {
        return nullptr;
    }
    auto* out = static_cast<trs_context*>(calloc(1, sizeof(trs_context)));
    if (out == nullptr) {
        delete ctx;
        return nullptr;
    }
    out->engine = e;
    out->ctx = ctx;
    out->profile = 0;
#if !TRS_NAMED_TENSORS
    out->num_bindings = e->engine->getNbBindings();
    out->bindings = static_cast<void**>(calloc(static_cast<size_t>(out->num_bindings > 0 ? out->num_bindings : 1), sizeof(void*)));
    if (out->bindings == nullptr) {
        delete ctx;
        free(out);
        return nullptr;
    }
#endif
    return out;
}

void trs_context_destroy(trs_context* c) {
    if (c != nullptr) {
        delete c->ctx;
#if !TRS_NAMED_TENSORS
        free(c->bindings);
#endif
        free(c);
    }
}

int32_t trs_context_set_profile(trs_context* c, int32_t profile, void* stream) {
    if (c == nullptr || profile < 0 || profile >= c->engine->num_profiles) {
        return 0;
    }
    if (c->engine->engine->getNbOptimizationProfiles() < 1) {
        c->profile = 0;
        return 1;
    }
    if (!c->ctx->setOptimizationProfileAsync(profile, static_cast<cudaStream_t>(stream))) {
        return 0;
    }
    c->profile = profile;
    return 1;
}

int32_t trs_context_set_input_shape(trs_context* c, int32_t io, const int64_t* dims, int32_t nb_dims) {
    nv::Dims d;
    if (c == nullptr || !valid_io(c->engine, io) || dims == nullptr || !make_dims(dims, nb_dims, &d)) {
        return 0;
    }
#if TRS_NAMED_TENSORS
    return c->ctx->setInputShape(c->engine->engine->getIOTensorName(io), d) ? 1 : 0;
#else
    return c->ctx->setBindingDimensions(io + c->profile * c->engine->num_io, d) ? 1 : 0;
#endif
}

int32_t trs_context_tensor_shape(trs_context* c, int32_t io, int64_t* dims) {
    if (c == nullptr || !valid_io(c->engine, io) || dims == nullptr) {
        return -1;
    }
#if TRS_NAMED_TENSORS
    return copy_dims(c->ctx->getTensorShape(c->engine->engine->getIOTensorName(io)), dims);
#else
    return copy_dims(c->ctx->getBindingDimensions(io + c->profile * c->engine->num_io), dims);
#endif
}

int32_t trs_context_set_address(trs_context* c, int32_t io, void* device_ptr) {
    if (c == nullptr || !valid_io(c->engine, io)) {
        return 0;
    }
#if TRS_NAMED_TENSORS
    return c->ctx->setTensorAddress(c->engine->engine->getIOTensorName(io), device_ptr) ? 1 : 0;
#else
    int32_t b = io + c->profile * c->engine->num_io;
    if (b < 0 || b >= c->num_bindings) {
        return 0;
    }
    c->bindings[b] = device_ptr;
    return 1;
#endif
}

int32_t trs_context_enqueue(trs_context* c, void* stream) {
    if (c == nullptr) {
        return 0;
    }
#if TRS_NAMED_TENSORS
    return c->ctx->enqueueV3(static_cast<cudaStream_t>(stream)) ? 1 : 0;
#else
    return c->ctx->enqueueV2(c->bindings, static_cast<cudaStream_t>(stream), nullptr) ? 1 : 0;
#endif
}

}  // extern "C"

// Runtime hooks the compiler references from vtables, defined here so that no C++ standard library
// is linked (see the top of the file). Nothing in the shim allocates with `new`, so the deleting
// destructors that would call these are never run on our objects; TensorRT's objects are deleted
// through their own virtual destructors, inside libnvinfer. In the tritonrs executable these stay
// local: an executable exports symbols only to the shared libraries it links, and it links no
// libstdc++ (the two definitions behave as libstdc++'s anyway: free).
void operator delete(void* p) noexcept { free(p); }
void operator delete(void* p, size_t) noexcept { free(p); }
extern "C" void __cxa_pure_virtual() { abort(); }
