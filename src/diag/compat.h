// The one place where diag/ meets the LibTorch version: which exception
// types the hints can recognise, and which profiler there is.
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

// Kineto's C++ entry points (profiler_kineto.h: prepareProfiler,
// enableProfiler, disableProfiler with KinetoEvents and a Chrome trace) as
// the profiler from LibTorch 2.x on; 1.13 has the legacy profiler.
#if TORCH_VERSION_MAJOR >= 2
#define AMPKIT_HAVE_KINETO 1
#else
#define AMPKIT_HAVE_KINETO 0
#endif
