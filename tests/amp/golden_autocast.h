// The autocast golden table of the LibTorch this test is built against.
// CPU autocast's op lists changed between versions (conv_transpose2d runs in
// the reduced dtype from 2.x; fp16 exists from 2.2), so generate_golden.py
// writes one table per PyTorch version, each from that version's Python.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR == 13
#include "golden_autocast_1_13.h"
#define AMPKIT_GOLDEN_AUTOCAST 1
#elif TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR == 11
#include "golden_autocast_2_11.h"
#define AMPKIT_GOLDEN_AUTOCAST 1
#endif
