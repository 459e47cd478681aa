// Which local address and interface reach another machine: what Gloo and
// NCCL must bind when a group spans machines and the user named no
// interface (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME).
#pragma once

#include <optional>
#include <string>

#include "ampkit/distributed/env.h"

namespace ampkit::dist::detail {

struct Route {
  std::string address;    // the local address, e.g. "10.77.0.2"
  std::string interface;  // its interface, e.g. "veth1"; "" when unknown
  bool loopback = false;  // the address is a loopback address
};

/// The local address the kernel routes toward `host` (a name or an IPv4/6
/// address), found with a UDP connect() and getsockname(): no packet is
/// sent. Empty with `why` set when `host` does not resolve or no route
/// leads there.
std::optional<Route> route_toward(const std::string& host, std::string& why);

/// The host Gloo binds ("" for GLOO_SOCKET_IFNAME's interface), with the
/// start-up table's description in `network`. A group across machines binds
/// the local address the kernel routes toward MASTER_ADDR (never loopback),
/// and NCCL gets that interface unless NCCL_SOCKET_IFNAME says otherwise.
std::string pick_network(
    const DistEnv& env, const std::string& backend, std::string& network);

}  // namespace ampkit::dist::detail
