// The reduction order of one output element, as data (docs/contract.md, "What is proved"):
// which inputs are summed, in which groups, in which order. Ranges are ABSOLUTE positions of
// the reduced axis (K of a GEMM, KV positions of an attention row, the vocabulary), so two
// orders are equal exactly when the same floating-point operations meet the same inputs in the
// same sequence — whatever batch, chunk, page layout or split placement produced them.
//
//   atom      a fixed primitive over inputs [lo, hi), e.g. one mma.m16n8k16 k-step, one 64-position
//             attention tile, an 8-lane fma step; its inside is the same instruction sequence
//             wherever it runs. `valid_hi` < hi: inputs [valid_hi, hi) are masked to exact zeros
//             (causal mask, zero-padded tails).
//   chain     a left fold ((c0 ⊕ c1) ⊕ c2) ⊕ … of its children with the operation `op`.
//   tree      tp_tree_sum's pairwise tree over its children's index (stride 1, 2, 4, …).
//   exact     an integer sum over [lo, hi): every grouping gives the same value (no rounding),
//             so it carries no order.
//   opaque    a reduction whose order cannot be read from the code (a cuBLASLt kernel); equal
//             only to the same opaque name — what stands in for a proof is named in `op`.
// Identity steps (a tile every input of which is masked: max unchanged, scale 2^0 = 1, + 0) are
// not part of an order: the describers drop them and count them as an assumption.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace detllm::reduction_order {

struct Order {
  enum class Kind : int8_t { kAtom, kChain, kTree, kExact, kOpaque };
  Kind kind = Kind::kAtom;
  std::string op;  // what combines (chain/tree) or what the atom is
  int64_t lo = 0, hi = 0,
          valid_hi = 0;         // atom, exact, opaque: inputs [lo, hi), unmasked below valid_hi
  std::vector<Order> children;  // chain, tree

  static Order atom(std::string op, int64_t lo, int64_t hi, int64_t valid_hi);
  static Order atom(std::string op, int64_t lo, int64_t hi) {
    return atom(std::move(op), lo, hi, hi);
  }
  static Order chain(std::string op, std::vector<Order> children);
  static Order tree(std::string op, std::vector<Order> children);
  static Order exact(std::string op, int64_t lo, int64_t hi);
  static Order opaque(std::string op, int64_t lo, int64_t hi);

  bool operator==(const Order& o) const;
  // Nodes of the expression (its size).
  int64_t nodes() const;
  // The inputs it reads, in order of first appearance: [lo, hi) ranges of its leaves, merged
  // where contiguous (a summary for printing).
  std::string span() const;
};

// A canonical one-line form; runs of equal-width adjacent atoms are written as one
// "op[lo:hi:step]" so a 16k-position row stays readable. Equal orders give equal strings.
std::string to_string(const Order& o);

// Where two orders first differ (depth first, left to right): the path of child indices and the
// two subexpressions, e.g. "chain 'merge' child 1: atom tc-tile [256,320) valid 301 vs atom
// tc-tile [256,320) valid 300". Empty when equal.
std::string first_difference(const Order& a, const Order& b);

}  // namespace detllm::reduction_order
