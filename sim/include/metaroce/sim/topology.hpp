// Topology builders. Node ids: hosts (NICs) first, then switches. Edge ids
// are the order edges are listed; the helpers below name the interesting ones.
#pragma once

#include <cstdint>

#include "metaroce/sim/network.hpp"

namespace metaroce::sim {

// Three-tier k-ary fat-tree (k even): k pods of k/2 ToR + k/2 agg switches,
// (k/2)^2 core switches, k^3/4 hosts (k=16: 1024 hosts, 128 ToR, 128 agg,
// 64 core). Edges: host h is edge h; then ToR-agg, then agg-core.
TopoGraph fat_tree(uint32_t k, const LinkSpec& host_link, const LinkSpec& fabric_link);
// Edge between ToR `tor` (global index) and the j-th agg switch of its pod.
uint32_t fat_tree_tor_agg_edge(uint32_t k, uint32_t tor, uint32_t j);
// Edge between agg `agg` (global index) and its m-th core switch.
uint32_t fat_tree_agg_core_edge(uint32_t k, uint32_t agg, uint32_t m);

// Two-tier leaf-spine: `leaves` leaves with `hosts_per_leaf` hosts each, every
// leaf joined to every spine by `links_per_spine` links. Oversubscription is
// hosts_per_leaf * host rate / (spines * links_per_spine * fabric rate).
// Edges: host h is edge h; then leaf-spine links, leaf-major.
TopoGraph leaf_spine(uint32_t leaves, uint32_t hosts_per_leaf, uint32_t spines,
                     const LinkSpec& host_link, const LinkSpec& fabric_link,
                     uint32_t links_per_spine = 1);

// Rail-optimized: `servers` servers with `rails` NICs each (the hosts; NIC r of
// server s is host s * rails + r). Servers form groups of `servers_per_group`;
// group g's rail r NICs share leaf (g, r). Every leaf is joined to every spine.
TopoGraph rail_optimized(uint32_t servers, uint32_t rails, uint32_t servers_per_group,
                         uint32_t spines, const LinkSpec& host_link, const LinkSpec& fabric_link);

}  // namespace metaroce::sim
