// A GPT-2-architecture decoder (Radford et al. 2019; the layout of
// Hugging Face's GPT2LMHeadModel and nanoGPT): token and position
// embeddings, pre-LayerNorm blocks of causal self-attention and a GELU MLP,
// a final LayerNorm, and an output head tied to the token embedding.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <string>

#include "ampkit/distributed/fsdp.h"

namespace gpt {

struct Config {
  int64_t vocab_size = 0;
  int64_t block_size = 0;  // the longest context, in tokens
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_embd = 0;
  double dropout = 0;
};

// Causal multi-head self-attention with one fused q/k/v projection.
struct CausalSelfAttentionImpl : torch::nn::Module {
  explicit CausalSelfAttentionImpl(const Config& c)
      : n_head(c.n_head),
        dropout(c.dropout),
        c_attn(register_module(
            "c_attn", torch::nn::Linear(c.n_embd, 3 * c.n_embd))),
        c_proj(
            register_module("c_proj", torch::nn::Linear(c.n_embd, c.n_embd))),
        resid_dropout(
            register_module("resid_dropout", torch::nn::Dropout(c.dropout))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    auto qkv = c_attn(x).split(C, 2);
    // [B, T, C] -> [B, heads, T, C / heads]
    auto heads = [&](const torch::Tensor& t) {
      return t.view({B, T, n_head, C / n_head}).transpose(1, 2);
    };
    auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    const double p = is_training() ? dropout : 0.0;
#if TORCH_VERSION_MAJOR >= 2
    // Flash or memory-efficient attention where the device has them.
    auto y =
        at::scaled_dot_product_attention(q, k, v, {}, p, /*is_causal=*/true);
#else
    // LibTorch 1.13 has no scaled_dot_product_attention: the explicit form.
    auto att = torch::matmul(q, k.transpose(-2, -1)) /
               std::sqrt(static_cast<double>(q.size(-1)));
    auto future = torch::ones({T, T}, x.options().dtype(torch::kBool)).triu(1);
    att = att.masked_fill(future, -std::numeric_limits<double>::infinity());
    att = torch::dropout(
        torch::softmax(att, -1, torch::kFloat), p, is_training());
    auto y = torch::matmul(att.to(v.scalar_type()), v);
#endif
    y = y.transpose(1, 2).contiguous().view({B, T, C});
    return resid_dropout(c_proj(y));
  }

  int64_t n_head;
  double dropout;
  torch::nn::Linear c_attn;
  torch::nn::Linear c_proj;
  torch::nn::Dropout resid_dropout;
};
TORCH_MODULE(CausalSelfAttention);

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(const Config& c)
      : c_fc(
            register_module("c_fc", torch::nn::Linear(c.n_embd, 4 * c.n_embd))),
        c_proj(register_module(
            "c_proj", torch::nn::Linear(4 * c.n_embd, c.n_embd))),
        drop(register_module("dropout", torch::nn::Dropout(c.dropout))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    // GPT-2's GELU is the tanh approximation.
    return drop(c_proj(torch::gelu(c_fc(x), "tanh")));
  }

  torch::nn::Linear c_fc;
  torch::nn::Linear c_proj;
  torch::nn::Dropout drop;
};
TORCH_MODULE(Mlp);

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const Config& c)
      : ln_1(register_module(
            "ln_1",
            torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})))),
        attn(register_module("attn", CausalSelfAttention(c))),
        ln_2(register_module(
            "ln_2",
            torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})))),
        mlp(register_module("mlp", Mlp(c))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(ln_1(x));  // pre-LayerNorm residual blocks
    return x + mlp(ln_2(x));
  }

  torch::nn::LayerNorm ln_1;
  CausalSelfAttention attn;
  torch::nn::LayerNorm ln_2;
  Mlp mlp;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const Config& c)
      : config(c),
        wte(register_module(
            "wte", torch::nn::Embedding(c.vocab_size, c.n_embd))),
        wpe(register_module(
            "wpe", torch::nn::Embedding(c.block_size, c.n_embd))),
        drop(register_module("drop", torch::nn::Dropout(c.dropout))),
        h(register_module("h", torch::nn::ModuleList())),
        ln_f(register_module(
            "ln_f",
            torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})))) {
    for (int64_t i = 0; i < c.n_layer; ++i) {
      h->push_back(Block(c));
    }
    // GPT-2's initialisation: N(0, 0.02), zero biases, and the projections
    // into the residual stream scaled by 1/sqrt(2 * n_layer).
    torch::NoGradGuard no_grad;
    for (auto& item : named_parameters()) {
      const auto& name = item.key();
      auto& p = item.value();
      if (name.find("ln_") != std::string::npos) {
        continue;  // LayerNorm: weight 1, bias 0 already
      }
      if (p.dim() == 1) {
        p.zero_();
      } else {
        const bool residual =
            name.size() >= 13 &&
            name.compare(name.size() - 13, 13, "c_proj.weight") == 0;
        p.normal_(0.0, residual ? 0.02 / std::sqrt(2.0 * c.n_layer) : 0.02);
      }
    }
  }

  // idx [B, T] token ids -> logits [B, T, vocab_size].
  torch::Tensor logits(const torch::Tensor& idx) {
    const int64_t T = idx.size(1);
    TORCH_CHECK(
        T <= config.block_size,
        "a context of ",
        T,
        " tokens is longer than block_size ",
        config.block_size);
    auto pos = torch::arange(T, idx.options());
    auto x = drop(wte(idx) + wpe(pos));
    for (const auto& block : *h) {
      // One line per unit type: a plain forward, or under FSDP (or
      // activation checkpointing) the block as a unit
      // (ampkit/distributed/fsdp.h).
      x = ampkit::dist::fsdp_forward(*block->as<Block>(), x);
    }
    // The output head shares the token embedding's weight (tied).
    return torch::linear(ln_f(x), wte->weight);
  }

  // The next-token cross-entropy, the mean over the targets (summed with
  // `summed`, for accumulate(model, num_items)); computing it inside forward
  // keeps the [B, T, vocab] logits in the autocast dtype (the prepared model
  // converts only what forward returns to fp32).
  torch::Tensor forward(
      const torch::Tensor& idx,
      const torch::Tensor& targets,
      bool summed = false) {
    auto out = logits(idx);
    return torch::cross_entropy_loss(
        out.view({-1, out.size(-1)}),
        targets.reshape({-1}),
        /*weight=*/{},
        summed ? at::Reduction::Sum : at::Reduction::Mean);
  }

  Config config;
  torch::nn::Embedding wte;
  torch::nn::Embedding wpe;
  torch::nn::Dropout drop;
  torch::nn::ModuleList h;
  torch::nn::LayerNorm ln_f;
};
TORCH_MODULE(Gpt);

// Parameters, counting the tied embedding once (named_parameters does).
inline int64_t parameter_count(Gpt& model) {
  int64_t n = 0;
  for (const auto& p : model->parameters()) {
    n += p.numel();
  }
  return n;
}

// Training FLOPs per token (forward and backward), as in the PaLM paper's
// appendix and nanoGPT's estimate_mfu: 6 N + 12 L T C.
inline double flops_per_token(Gpt& model, int64_t seq_len) {
  const auto& c = model->config;
  // nanoGPT's N leaves out the position embedding (a lookup, no matmul);
  // the token embedding counts once, as the tied output layer.
  return 6.0 * double(parameter_count(model) - model->wpe->weight.numel()) +
         12.0 * double(c.n_layer) * double(seq_len) * double(c.n_embd);
}

}  // namespace gpt
