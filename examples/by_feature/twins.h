// Every twin, by the name of its Python original (streaming is ampkit's
// own, in the same style): each is a namespace with
// its own main, and the by_feature program (one binary, linked under each
// name) runs the one it is called as.
#pragma once

#define BY_FEATURE_TWINS(_)                          \
  _(gradient_accumulation)                           \
  _(automatic_gradient_accumulation)                 \
  _(checkpointing)                                   \
  _(tracking)                                        \
  _(early_stopping)                                  \
  _(memory)                                          \
  _(multi_process_metrics)                           \
  _(cross_validation)                                \
  _(local_sgd)                                       \
  _(ddp_comm_hook)                                   \
  _(gradient_accumulation_for_autoregressive_models) \
  _(profiler)                                        \
  _(schedule_free)                                   \
  _(cv_example)                                      \
  _(complete_cv_example)                             \
  _(streaming)

#define BY_FEATURE_DECLARE(name)   \
  namespace by_feature::name {     \
  int main(int argc, char** argv); \
  }
BY_FEATURE_TWINS(BY_FEATURE_DECLARE)
#undef BY_FEATURE_DECLARE
