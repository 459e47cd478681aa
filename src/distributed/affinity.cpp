// enable_cpu_affinity's plan: cores split per worker, near its GPU if any.
#include "distributed/affinity.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

namespace ampkit::dist::detail {

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    part.erase(
        std::remove_if(
            part.begin(),
            part.end(),
            [](char c) { return c == ' ' || c == '\n' || c == '\t'; }),
        part.end());
    if (part.empty()) {
      continue;
    }
    try {
      const auto dash = part.find('-');
      size_t used = 0;
      const int first = std::stoi(part.substr(0, dash), &used);
      if (used != (dash == std::string::npos ? part.size() : dash)) {
        return {};
      }
      int last = first;
      if (dash != std::string::npos) {
        last = std::stoi(part.substr(dash + 1), &used);
        if (used != part.size() - dash - 1) {
          return {};
        }
      }
      if (first < 0 || last < first || last - first > 65536) {
        return {};
      }
      for (int c = first; c <= last; ++c) {
        cpus.push_back(c);
      }
    } catch (const std::exception&) {
      return {};
    }
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) {
      ++j;
    }
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) {
      out += "-" + std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return out;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) {
        cpus.push_back(c);
      }
    }
  }
  return cpus;
}

std::vector<int> pci_device_cpus(const std::string& pci_bus_id) {
  if (pci_bus_id.empty()) {
    return {};
  }
  std::string id = pci_bus_id;
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) {
    return static_cast<char>(std::tolower(c));
  });
  // CUDA says 00000000:17:00.0, sysfs 0000:17:00.0.
  if (id.size() > 12 && id.find(':') == 8) {
    id = id.substr(4);
  }
  std::ifstream in("/sys/bus/pci/devices/" + id + "/local_cpulist");
  std::string text;
  std::getline(in, text);
  return parse_cpu_list(text);
}

namespace {

// `cpus` split into `n` contiguous shares, the first ones one larger.
std::vector<std::vector<int>> split(const std::vector<int>& cpus, size_t n) {
  std::vector<std::vector<int>> shares(n);
  if (n == 0) {
    return shares;
  }
  const size_t per = cpus.size() / n, extra = cpus.size() % n;
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t take = per + (i < extra ? 1 : 0);
    shares[i].assign(cpus.begin() + at, cpus.begin() + at + take);
    at += take;
  }
  return shares;
}

}  // namespace

std::vector<std::vector<int>> plan_affinity(
    const std::vector<int>& allowed,
    int64_t local,
    const std::vector<std::vector<int>>& gpu_cpus) {
  const size_t n = static_cast<size_t>(std::max<int64_t>(0, local));
  std::vector<std::vector<int>> plan(n);
  // Workers whose GPUs are near the same allowed cores share those.
  std::map<std::vector<int>, std::vector<size_t>> by_node;
  std::vector<size_t> elsewhere;
  for (size_t l = 0; l < n; ++l) {
    std::vector<int> near;
    if (l < gpu_cpus.size()) {
      std::set_intersection(
          gpu_cpus[l].begin(),
          gpu_cpus[l].end(),
          allowed.begin(),
          allowed.end(),
          std::back_inserter(near));
    }
    if (near.empty()) {
      elsewhere.push_back(l);
    } else {
      by_node[near].push_back(l);
    }
  }
  // Groups whose cores overlap (one GPU says every core is near it), or no
  // core left for the workers without a known GPU node: the plain plan,
  // which never overlaps while there are enough cores.
  std::vector<int> near_any;
  size_t near_total = 0;
  for (const auto& [near, workers] : by_node) {
    near_total += near.size();
    near_any.insert(near_any.end(), near.begin(), near.end());
  }
  std::sort(near_any.begin(), near_any.end());
  near_any.erase(std::unique(near_any.begin(), near_any.end()), near_any.end());
  if (near_any.size() != near_total ||
      allowed.size() - near_any.size() < elsewhere.size()) {
    by_node.clear();
    elsewhere.clear();
    for (size_t l = 0; l < n; ++l) {
      elsewhere.push_back(l);
    }
  }
  std::vector<int> taken;
  for (const auto& [near, workers] : by_node) {
    const auto shares = split(near, workers.size());
    for (size_t i = 0; i < workers.size(); ++i) {
      plan[workers[i]] = shares[i];
    }
    taken.insert(taken.end(), near.begin(), near.end());
  }
  std::sort(taken.begin(), taken.end());
  // The others share what no GPU's workers took (all of it without GPUs).
  std::vector<int> rest;
  std::set_difference(
      allowed.begin(),
      allowed.end(),
      taken.begin(),
      taken.end(),
      std::back_inserter(rest));
  const auto shares = split(rest, elsewhere.size());
  for (size_t i = 0; i < elsewhere.size(); ++i) {
    plan[elsewhere[i]] = shares[i];
  }
  // More workers than cores: those left without one still get one.
  for (size_t l = 0; l < n; ++l) {
    if (plan[l].empty() && !allowed.empty()) {
      plan[l] = {allowed[l % allowed.size()]};
    }
  }
  return plan;
}

}  // namespace ampkit::dist::detail
