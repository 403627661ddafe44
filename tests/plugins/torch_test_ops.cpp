// Test ops for the torch-op bridge, written with ATen ops apart from the tool's kernels:
//   attnres_test::kimi_k3_attn_res            vLLM's schema, the fixed kernel: refuses rows that are
//                                             not densely packed with the exact message
//   attnres_test::kimi_k3_attn_res_hardcoded  vLLM's schema with the seed bug: prefix, delta and
//                                             output rows taken as H apart
//   attnres_test::attn_res_full               the whole contract (Tensor? delta and output norm,
//                                             a block write), returning a fresh output
// Registered for CompositeExplicitAutograd, so they run on CPU and CUDA tensors alike.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace {

// The contract in float32 on any strided views; writes p into prefix (and the written block).
at::Tensor contract(at::Tensor prefix, const c10::optional<at::Tensor>& delta, at::Tensor blocks,
                    const at::Tensor& norm_weight, const at::Tensor& qk_weight,
                    const c10::optional<at::Tensor>& output_norm_weight, int64_t num_blocks, int64_t block_write_idx,
                    double eps, double output_norm_eps) {
  const at::Tensor p = delta ? (prefix.to(at::kFloat) + delta->to(at::kFloat)).to(at::kBFloat16) : prefix.clone();
  prefix.copy_(p);
  if (block_write_idx >= 0) blocks.select(1, block_write_idx).copy_(p);
  const at::Tensor sources =
      at::cat({blocks.narrow(1, 0, num_blocks).to(at::kFloat), p.to(at::kFloat).unsqueeze(1)}, 1);
  const at::Tensor gate = norm_weight.to(at::kFloat) * qk_weight.to(at::kFloat);
  const at::Tensor logits = (sources * gate).sum(-1) * at::rsqrt(sources.pow(2).mean(-1) + eps);
  at::Tensor mixed = (at::softmax(logits, 1).unsqueeze(-1) * sources).sum(1);
  if (output_norm_weight)
    mixed = mixed * at::rsqrt(mixed.pow(2).mean(-1, true) + output_norm_eps) * output_norm_weight->to(at::kFloat);
  return mixed.to(at::kBFloat16);
}

void kimi_k3_attn_res(at::Tensor& prefix, const at::Tensor& delta, const at::Tensor& blocks,
                      const at::Tensor& norm_weight, const at::Tensor& qk_weight, const at::Tensor& output_norm_weight,
                      at::Tensor& output, int64_t num_blocks, double eps, double output_norm_eps) {
  const int64_t hidden = prefix.size(1);
  TORCH_CHECK(prefix.stride(0) == hidden && delta.stride(0) == hidden && output.stride(0) == hidden,
              "Kimi K3 AttnRes requires densely packed rows; got strides ", prefix.stride(0), ", ", delta.stride(0),
              ", ", output.stride(0), " for hidden_size ", hidden);
  output.copy_(contract(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, -1, eps,
                        output_norm_eps));
}

// Rows H apart whatever the strides say: the same storage, read as if it were dense.
at::Tensor dense_view(const at::Tensor& t) { return t.as_strided({t.size(0), t.size(1)}, {t.size(1), 1}); }

void kimi_k3_attn_res_hardcoded(at::Tensor& prefix, const at::Tensor& delta, const at::Tensor& blocks,
                                const at::Tensor& norm_weight, const at::Tensor& qk_weight,
                                const at::Tensor& output_norm_weight, at::Tensor& output, int64_t num_blocks,
                                double eps, double output_norm_eps) {
  dense_view(output).copy_(contract(dense_view(prefix), dense_view(delta), blocks, norm_weight, qk_weight,
                                    output_norm_weight, num_blocks, -1, eps, output_norm_eps));
}

at::Tensor attn_res_full(at::Tensor& prefix, const c10::optional<at::Tensor>& delta, at::Tensor& blocks,
                         const at::Tensor& norm_weight, const at::Tensor& qk_weight,
                         const c10::optional<at::Tensor>& output_norm_weight, int64_t num_blocks,
                         int64_t block_write_idx, double eps, double output_norm_eps) {
  return contract(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                  output_norm_eps);
}

}  // namespace

#define VLLM_ARGUMENTS                                                                                              \
  "(Tensor! prefix, Tensor delta, Tensor blocks, Tensor norm_weight, Tensor qk_weight, Tensor output_norm_weight, " \
  "Tensor! output, int num_blocks, float eps, float output_norm_eps) -> ()"

TORCH_LIBRARY(attnres_test, m) {
  m.def("kimi_k3_attn_res" VLLM_ARGUMENTS);
  m.def("kimi_k3_attn_res_hardcoded" VLLM_ARGUMENTS);
  m.def(
      "attn_res_full(Tensor! prefix, Tensor? delta, Tensor! blocks, Tensor norm_weight, Tensor qk_weight, "
      "Tensor? output_norm_weight, int num_blocks, int block_write_idx, float eps, float output_norm_eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(attnres_test, CompositeExplicitAutograd, m) {
  m.impl("kimi_k3_attn_res", &kimi_k3_attn_res);
  m.impl("kimi_k3_attn_res_hardcoded", &kimi_k3_attn_res_hardcoded);
  m.impl("attn_res_full", &attn_res_full);
}
