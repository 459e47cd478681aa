// The one place where diag/ meets the LibTorch version: which exception
// types the hints can recognise.
#pragma once

#include <torch/version.h>

// LibTorch 1.x's c10d errors (C10dError, TimeoutError) derive from
// std::runtime_error only; 2.x's derive from c10::Error, which add_context
// handles, and C10dError is gone. Gloo's derive from std::runtime_error in
// both.
#if TORCH_VERSION_MAJOR < 2 && \
    __has_include(<torch/csrc/distributed/c10d/exception.h>)
#include <torch/csrc/distributed/c10d/exception.h>
#define AMPKIT_HAVE_C10D_EXCEPTIONS 1
#endif
#if defined(USE_C10D_GLOO) && __has_include(<gloo/common/error.h>)
#include <gloo/common/error.h>
#define AMPKIT_HAVE_GLOO_EXCEPTIONS 1
#endif
