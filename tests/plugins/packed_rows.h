// The fixed production kernel's precondition, shared by the test plugins: prefix, delta and
// output rows densely packed, else a refusal with the exact message of the Kimi K3 op.
#pragma once
#include <attnres/kernel_abi.h>

#include <cstdio>

// True (and the message written) when the call must be refused.
inline bool refuse_unless_packed(const AttnResKernelCall* c) {
  const long long hidden = c->prefix->shape[1];
  const bool dense = c->prefix->strides[0] == hidden && (!c->delta || c->delta->strides[0] == hidden) &&
                     c->output->strides[0] == hidden;
  if (dense) return false;
  char delta[32] = "none";
  if (c->delta) std::snprintf(delta, sizeof delta, "%lld", static_cast<long long>(c->delta->strides[0]));
  std::snprintf(c->error, c->error_capacity,
                "Kimi K3 AttnRes requires densely packed rows; got strides %lld, %s, %lld for hidden_size %lld",
                static_cast<long long>(c->prefix->strides[0]), delta, static_cast<long long>(c->output->strides[0]),
                hidden);
  return true;
}
