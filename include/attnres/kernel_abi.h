/* The C ABI of attnres-check for out-of-tree AttnRes kernels (`--kernel so:PATH[:SYMBOL]`).
 *
 * A plugin is a shared library that exports two functions, by default
 *   const AttnResKernelInfo* attnres_kernel_info(void);
 *   int attnres_kernel(const AttnResKernelCall* call);
 * (with :SYMBOL, SYMBOL and SYMBOL_info). attnres-check calls the info function once after
 * loading and refuses a plugin built for a version it does not speak: it speaks 1 and 2 (version
 * 2 adds enable_pdl at the end of AttnResKernelCall; a version 1 plugin never reads it).
 *
 * Every operand is a DLPack DLTensor of bf16 (code kDLBfloat, 16 bits, 1 lane), with its
 * real shape and strides in elements, the device the plugin asked for (kDLCPU or kDLCUDA)
 * and byte_offset 0. Rows may be padded (stride(0) > H) exactly as the case says: a kernel
 * that cannot take a layout must refuse it, not assume it is dense.
 *
 * The contract (README "The contract"): p = bf16(prefix + delta) written back into prefix;
 * blocks[:, block_write_idx] = p when block_write_idx >= 0; softmax over the sources
 * blocks[:, 0..num_blocks) and p of RMS-normalised logits against norm_weight * qk_weight;
 * output = the weighted mix, RMS-normalised with output_norm_weight when it is given.
 */
#ifndef ATTNRES_KERNEL_ABI_H
#define ATTNRES_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNRES_KERNEL_ABI_VERSION 2u

/* Return values of the kernel function. */
#define ATTNRES_KERNEL_OK 0      /* it ran */
#define ATTNRES_KERNEL_REFUSED 1 /* it refused the call before touching any operand; message in `error` */
#define ATTNRES_KERNEL_FAILED 2  /* anything else went wrong; message in `error` */

typedef struct AttnResKernelInfo {
  uint32_t abi_version;    /* ATTNRES_KERNEL_ABI_VERSION the plugin was built against */
  int32_t device_type;     /* where it wants its operands: kDLCPU or kDLCUDA */
  const char* description; /* free text for reports, e.g. "my-kernel v3 (SM90)"; may be NULL */
} AttnResKernelInfo;

typedef struct AttnResKernelCall {
  uint32_t abi_version;               /* ATTNRES_KERNEL_ABI_VERSION of the caller */
  const DLTensor* prefix;             /* [T, H]; read, then overwritten with p */
  const DLTensor* delta;              /* [T, H], or NULL: p = prefix */
  const DLTensor* blocks;             /* [T, MAXB, H]; block block_write_idx overwritten with p */
  const DLTensor* norm_weight;        /* [H] */
  const DLTensor* qk_weight;          /* [H] */
  const DLTensor* output_norm_weight; /* [H], or NULL: no output norm */
  const DLTensor* output;             /* [T, H], written */
  int64_t num_blocks;                 /* blocks used as sources, 0..MAXB */
  int64_t block_write_idx;            /* -1: no block write */
  double eps;
  double output_norm_eps;
  void* stream; /* the cudaStream_t to launch on (kDLCUDA); NULL for kDLCPU */
  char* error;  /* a refusal or failure message, NUL-terminated, at most error_capacity bytes */
  size_t error_capacity;
  /* Version 2. Non-zero: the kernel may launch with programmatic dependent launch
   * (cudaLaunchAttributeProgrammaticStreamSerialization); the work before it on `stream` may then
   * still be running, so it must wait (griddepcontrol.wait, cudaGridDependencySynchronize) before
   * reading any operand. `run --check pdl` sets it behind a producer that writes the inputs late. */
  int32_t enable_pdl;
} AttnResKernelCall;

typedef const AttnResKernelInfo* (*AttnResKernelInfoFn)(void);
typedef int (*AttnResKernelFn)(const AttnResKernelCall* call);

#ifdef __cplusplus
}
#endif

#endif /* ATTNRES_KERNEL_ABI_H */
