// route_toward: the local end of the kernel's route toward a host.
#include "distributed/route.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ampkit/distributed/env.h"

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

}  // namespace ampkit::dist::detail
