// FSDP's settings by PyTorch's and accelerate's names: the sharding
// strategy, backward prefetch and state-dict type (FSDP2's _fsdp_api).
#include <optional>
#include <string>

#include "ampkit/distributed/fsdp.h"
#include "ampkit/error.h"
#include "utils/components.h"

namespace ampkit::dist {

namespace {

/// One of PyTorch's enum members: its name, its number, ampkit's value.
/// Where a value has several names the first is the one ampkit writes.
template <typename E>
struct FsdpEnumMember {
  const char* name;
  const char* number;
  E value;
};

constexpr FsdpEnumMember<ShardingStrategy> kFsdpStrategies[] = {
    {"FULL_SHARD", "1", ShardingStrategy::full_shard},
    {"SHARD_GRAD_OP", "2", ShardingStrategy::shard_grad_op},
    {"NO_SHARD", "3", ShardingStrategy::no_shard},
    {"HYBRID_SHARD", "4", ShardingStrategy::hybrid_shard},
    {"HYBRID_SHARD_ZERO2", "5", ShardingStrategy::hybrid_shard_zero2},
    {"_HYBRID_SHARD_ZERO2", "5", ShardingStrategy::hybrid_shard_zero2}};
constexpr FsdpEnumMember<BackwardPrefetch> kFsdpPrefetches[] = {
    {"BACKWARD_PRE", "1", BackwardPrefetch::backward_pre},
    {"BACKWARD_POST", "2", BackwardPrefetch::backward_post},
    {"NO_PREFETCH", "3", BackwardPrefetch::none}};
constexpr FsdpEnumMember<StateDictType> kFsdpStateDictTypes[] = {
    {"FULL_STATE_DICT", "1", StateDictType::full_state_dict},
    {"SHARDED_STATE_DICT", "3", StateDictType::sharded_state_dict}};

/// `value` as one of `members`, by name or by number.
template <typename E, size_t N>
std::optional<E> fsdp_by_name_or_number(
    const std::string& value, const FsdpEnumMember<E> (&members)[N]) {
  for (const auto& m : members) {
    if (value == m.name || value == m.number) {
      return m.value;
    }
  }
  return std::nullopt;
}

template <typename E, size_t N>
std::string fsdp_name_of(E value, const FsdpEnumMember<E> (&members)[N]) {
  for (const auto& m : members) {
    if (m.value == value) {
      return m.name;
    }
  }
  return "?";
}

}  // namespace

ShardingStrategy parse_sharding_strategy(const std::string& value) {
  if (const auto s = fsdp_by_name_or_number(value, kFsdpStrategies)) {
    return *s;
  }
  throw InvalidArgument(
      component::kDistributed,
      "fsdp_sharding_strategy: expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
      "HYBRID_SHARD or HYBRID_SHARD_ZERO2 (or accelerate's 1 to 5), got '" +
          value + "'.");
}

std::string to_string(ShardingStrategy strategy) {
  return fsdp_name_of(strategy, kFsdpStrategies);
}

BackwardPrefetch parse_backward_prefetch(const std::string& value) {
  if (const auto b = fsdp_by_name_or_number(value, kFsdpPrefetches)) {
    return *b;
  }
  throw InvalidArgument(
      component::kDistributed,
      "fsdp_backward_prefetch: expected BACKWARD_PRE, BACKWARD_POST or "
      "NO_PREFETCH (or accelerate's 1, 2, 3), got '" +
          value + "'.");
}

std::string to_string(BackwardPrefetch prefetch) {
  return fsdp_name_of(prefetch, kFsdpPrefetches);
}

StateDictType parse_state_dict_type(const std::string& value) {
  if (const auto t = fsdp_by_name_or_number(value, kFsdpStateDictTypes)) {
    return *t;
  }
  if (value == "LOCAL_STATE_DICT" || value == "2") {
    throw Unsupported(
        component::kDistributed,
        "fsdp_state_dict_type LOCAL_STATE_DICT (deprecated in PyTorch) is not "
        "built in ampkit. Use SHARDED_STATE_DICT (each process saves its own "
        "shards) or FULL_STATE_DICT (the whole model in one file).");
  }
  throw InvalidArgument(
      component::kDistributed,
      "fsdp_state_dict_type: expected FULL_STATE_DICT or SHARDED_STATE_DICT "
      "(or PyTorch's 1, 3), got '" +
          value + "'.");
}

std::string to_string(StateDictType type) {
  return fsdp_name_of(type, kFsdpStateDictTypes);
}

}  // namespace ampkit::dist
