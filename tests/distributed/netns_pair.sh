# Two machines on one host, for tests run as root: network namespaces $na
# and $nb joined by a veth pair ($va in $na, $vb in $nb) with the addresses
# SUBNET.1 and SUBNET.2, loopback up in each, and no loopback shared. Both
# are removed when the shell exits (then on_exit, when the test defines
# it). Source it, with skip() (exit 77) and fail() defined, then call
# netns_pair NS_A NS_B VETH_A VETH_B SUBNET (SUBNET: a /24's first three
# numbers, e.g. 10.77.0).
netns_pair() {
  na="$1" nb="$2" va="$3" vb="$4"
  [ "$(id -u)" = 0 ] || skip "not root"
  command -v ip > /dev/null || skip "no ip command"
  trap 'ip netns del "$na" 2>/dev/null; ip netns del "$nb" 2>/dev/null;
        if declare -F on_exit > /dev/null; then on_exit; fi' EXIT
  ip netns add "$na" 2>/dev/null || skip "cannot create a network namespace"
  ip netns add "$nb" || fail "a second network namespace"
  ip link add "$va" type veth peer name "$vb" || skip "cannot create a veth pair"
  ip link set "$va" netns "$na" && ip link set "$vb" netns "$nb" || fail "moving the veth ends"
  ip -n "$na" addr add "$5.1/24" dev "$va" && ip -n "$nb" addr add "$5.2/24" dev "$vb" ||
    fail "addresses"
  for ns in "$na" "$nb"; do ip -n "$ns" link set lo up; done
  ip -n "$na" link set "$va" up && ip -n "$nb" link set "$vb" up || fail "links up"
}
