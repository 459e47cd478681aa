// Umbrella header: everything ampkit offers, for `#include <ampkit/ampkit.h>`.
#pragma once

#include "ampkit/accelerator/accelerator.h"
#include "ampkit/accelerator/options.h"
#include "ampkit/accelerator/prepared.h"
#include "ampkit/amp/autocast.h"
#include "ampkit/amp/capability.h"
#include "ampkit/amp/grad_scaler.h"
#include "ampkit/amp/precision.h"
#include "ampkit/data/fashion_mnist.h"
#include "ampkit/data/idx.h"
#include "ampkit/error.h"
#include "ampkit/optim/scheduler.h"
#include "ampkit/state_dict.h"
#include "ampkit/utils/memory.h"
#include "ampkit/utils/random.h"
#include "ampkit/version.h"
