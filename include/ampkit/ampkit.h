// Umbrella header: everything ampkit offers, for `#include <ampkit/ampkit.h>`.
#pragma once

#include "ampkit/amp/autocast.h"
#include "ampkit/amp/capability.h"
#include "ampkit/amp/grad_scaler.h"
#include "ampkit/amp/precision.h"
#include "ampkit/data/idx.h"
#include "ampkit/error.h"
#include "ampkit/version.h"
