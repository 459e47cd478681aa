// route_toward: the local end of the kernel's route toward a host; and
// pick_network: what a process group binds, by that route where it spans
// machines.
#include "distributed/route.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "ampkit/distributed/env.h"
#include "ampkit/error.h"
#include "utils/components.h"

namespace ampkit::dist::detail {

namespace {

std::string address_text(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(
        AF_INET,
        &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr,
        text,
        sizeof(text));
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(
        AF_INET6,
        &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr,
        text,
        sizeof(text));
  }
  return text;
}

// The interface holding `address`, "" when none does.
std::string interface_of(const std::string& address) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    return "";
  }
  std::string name;
  for (ifaddrs* a = list; a != nullptr && name.empty(); a = a->ifa_next) {
    if (a->ifa_addr != nullptr &&
        (a->ifa_addr->sa_family == AF_INET ||
         a->ifa_addr->sa_family == AF_INET6) &&
        address_text(a->ifa_addr) == address) {
      name = a->ifa_name;
    }
  }
  ::freeifaddrs(list);
  return name;
}

}  // namespace

std::optional<Route> route_toward(const std::string& host, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found);
      rc != 0) {
    why = "cannot resolve " + host + ": " + ::gai_strerror(rc);
    return std::nullopt;
  }
  std::optional<Route> route;
  why = "no route to " + host;
  for (addrinfo* a = found; a != nullptr && !route; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) {
      continue;
    }
    // A UDP connect only picks the route and the local address.
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      sockaddr_storage local{};
      socklen_t len = sizeof(local);
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
        Route r;
        r.address = address_text(reinterpret_cast<sockaddr*>(&local));
        r.interface = interface_of(r.address);
        r.loopback = is_loopback(r.address);
        route = r;
      }
    } else {
      why = "no route to " + host + " (" + std::strerror(errno) + ")";
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return route;
}

std::string pick_network(
    const DistEnv& env, const std::string& backend, std::string& network) {
  if (env.single_node()) {
    network = "127.0.0.1 (one machine: loopback only)";
    return "127.0.0.1";
  }
  const char* named_env =
      backend == "nccl" ? "NCCL_SOCKET_IFNAME" : "GLOO_SOCKET_IFNAME";
  const char* named = std::getenv(named_env);
  if (named != nullptr && *named != '\0') {
    network = std::string("interface ") + named + " (" + named_env + ")";
    return "";
  }
  std::string why;
  const auto route = detail::route_toward(env.master_addr, why);
  const std::string fix =
      " Set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME on GPUs) to the "
      "interface that reaches the other machines (`ip -brief address`).";
  if (is_loopback(env.master_addr)) {
    throw InvalidArgument(
        component::kDistributed,
        "MASTER_ADDR " + env.master_addr +
            " is a loopback address, but the group spans machines (" +
            std::to_string(env.world_size) + " processes, " +
            std::to_string(env.local_world_size) +
            " here): pass --main_process_ip with an address of the main "
            "machine that the others reach.");
  }
  if (!route) {
    throw DistributedError(
        component::kDistributed,
        "no local address reaches MASTER_ADDR " + env.master_addr + ": " + why +
            "." + fix);
  }
  if (route->loopback) {
    throw DistributedError(
        component::kDistributed,
        "the route toward MASTER_ADDR " + env.master_addr +
            " leaves through loopback (" + route->address +
            "), which the other machines cannot reach." + fix);
  }
  const std::string iface =
      route->interface.empty() ? "" : " on " + route->interface;
  network = route->address + iface + " (the route toward MASTER_ADDR " +
            env.master_addr + ")";
  if (backend == "nccl" && !route->interface.empty()) {
    // "=" asks NCCL for exactly this interface.
    ::setenv("NCCL_SOCKET_IFNAME", ("=" + route->interface).c_str(), 0);
  }
  return route->address;
}

}  // namespace ampkit::dist::detail
