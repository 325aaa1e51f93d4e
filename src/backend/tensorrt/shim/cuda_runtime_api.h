/* Stand-in for the CUDA runtime header that TensorRT's headers include: the shim only passes streams
 * and events through as opaque pointers, so two typedefs are all it needs, and no CUDA toolkit is
 * required to build it. */
#ifndef TRITONRS_CUDA_RUNTIME_API_STANDIN_H
#define TRITONRS_CUDA_RUNTIME_API_STANDIN_H
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
#endif
