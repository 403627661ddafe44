/* The interface between attnres-check and its bridges: libraries built with the tool that adapt
 * a kernel from elsewhere (a torch custom op, a Python function) to the kernel C ABI's operands.
 * attnres-check loads a bridge with dlopen only when --kernel names one, so neither libtorch nor
 * libpython is linked into the tool itself. C only: a bridge may be built with another C++
 * standard library setting (libtorch's) than the tool. */
#ifndef ATTNRES_BRIDGE_ABI_H
#define ATTNRES_BRIDGE_ABI_H

#include <attnres/kernel_abi.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNRES_BRIDGE_ABI_VERSION 4u

/* launch's result besides ATTNRES_KERNEL_OK, _REFUSED and _FAILED: the kernel ran, but what it
 * returned is not the output ([T, H] bf16 on the operands' device); the case is failed. */
#define ATTNRES_BRIDGE_WRONG_RESULT 3

/* cannot_implement's answers besides 0. */
#define ATTNRES_BRIDGE_UNUSABLE 1
#define ATTNRES_BRIDGE_INEXPRESSIBLE 2

/* Texts a bridge fills, each NUL-terminated within its capacity. */
typedef struct AttnResBridgeReport {
  char* message; /* a refusal's own text (compared with expect.message) or a failure's */
  size_t message_capacity;
  char* kind; /* the error's type, e.g. "ValueError" or "c10::Error" */
  size_t kind_capacity;
  char* detail; /* a traceback or other context, for the report's detail */
  size_t detail_capacity;
} AttnResBridgeReport;

typedef struct AttnResBridge {
  uint32_t abi_version; /* ATTNRES_BRIDGE_ABI_VERSION */
  /* Opens `target` ("NAMESPACE::OP" or "MODULE:FUNCTION"); `library` ("" for none) is loaded
   * first, `signature` says how a Python function is called ("auto", "vllm" or "flashinfer", then
   * ";CONTRACT=PARAMETER" for each --arg), operands will live on `device_type` (kDLCPU or
   * kDLCUDA). Returns a handle, or NULL with why in report->message (the kernel cannot be used at
   * all). */
  void* (*open)(const char* target, const char* library, const char* signature, int32_t device_type,
                AttnResBridgeReport* report);
  /* Why the kernel cannot take `call` (its operands' data pointers are NULL: only shapes, strides
   * and scalars count), with the reason in `reason`: ATTNRES_BRIDGE_UNUSABLE (the kernel cannot
   * run here at all), ATTNRES_BRIDGE_INEXPRESSIBLE (its signature cannot express the problem), or
   * 0 when it can take it. */
  int (*cannot_implement)(void* handle, const AttnResKernelCall* call, char* reason, size_t capacity);
  /* Runs the kernel: ATTNRES_KERNEL_OK, ATTNRES_KERNEL_REFUSED (the kernel's own refusal),
   * ATTNRES_KERNEL_FAILED or ATTNRES_BRIDGE_WRONG_RESULT, with texts in `report`. */
  int (*launch)(void* handle, const AttnResKernelCall* call, AttnResBridgeReport* report);
  /* Records the `count` calls, in order, into one CUDA graph on calls[0].stream the way the
   * kernel's framework captures (torch.cuda.graph): ATTNRES_KERNEL_OK with *graph set, or
   * ATTNRES_KERNEL_FAILED with why they cannot be captured in `report`. NULL: the tool captures
   * the stream around the launches. */
  int (*capture)(void* handle, const AttnResKernelCall* calls, size_t count, void** graph,
                 AttnResBridgeReport* report);
  /* Replays a captured graph on `stream`: ATTNRES_KERNEL_OK or ATTNRES_KERNEL_FAILED. */
  int (*replay)(void* handle, void* graph, void* stream, AttnResBridgeReport* report);
  void (*release)(void* handle, void* graph);
} AttnResBridge;

/* Every bridge library exports this. */
typedef const AttnResBridge* (*AttnResBridgeFn)(void);
#define ATTNRES_BRIDGE_SYMBOL "attnres_bridge"

#ifdef __cplusplus
}
#endif

#endif /* ATTNRES_BRIDGE_ABI_H */
