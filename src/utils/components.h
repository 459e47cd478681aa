// The component each error names (AMPKIT_ERROR's first field), one list
// for the library, so that files compiled together in one unity
// translation unit (cmake/AmpkitTargets.cmake) share the names, never
// redefine them.
#pragma once

namespace ampkit::component {

inline constexpr const char* kAccelerator = "Accelerator";
inline constexpr const char* kAtenFusedStep = "aten_fused_step";
inline constexpr const char* kCheckpoint = "Checkpoint";
inline constexpr const char* kConfigCommand = "ampkit config";
inline constexpr const char* kDistributed = "Distributed";
inline constexpr const char* kFindExecutableBatchSize =
    "find_executable_batch_size";
inline constexpr const char* kGradScaler = "GradScaler";
inline constexpr const char* kIdxReader = "IDX reader";
inline constexpr const char* kLaunch = "Launch";
inline constexpr const char* kLocalSgd = "LocalSGD";
inline constexpr const char* kMemory = "memory";
inline constexpr const char* kMemoryEstimate = "MemoryEstimate";
inline constexpr const char* kProfiler = "Profiler";
inline constexpr const char* kReport = "Report";
inline constexpr const char* kScheduleFreeAdamW = "ScheduleFreeAdamW";
inline constexpr const char* kSetRngState = "set_rng_state";
inline constexpr const char* kShardedSampler = "ShardedSampler";
inline constexpr const char* kStreamLoader = "StreamLoader";
inline constexpr const char* kTensorBoardWriter = "TensorBoardWriter";
inline constexpr const char* kTracker = "Tracker";
inline constexpr const char* kZero = "ZeRO";

}  // namespace ampkit::component
