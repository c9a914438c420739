// The unbounded reduction-order claims, proved with z3 (smt.h).
#include "verify/reduction_order/smt.h"

#include <fmt/format.h>

#include <chrono>

#include "kernels/gemm_splits.h"

#if DETLLM_HAVE_Z3
#include <z3++.h>
#endif

namespace detllm::reduction_order {

bool have_z3() {
  return DETLLM_HAVE_Z3 != 0;
}

#if DETLLM_HAVE_Z3
namespace {

// Checks that `claim` holds for every assignment satisfying `given`: unsat of given ∧ ¬claim.
// On sat, the counterexample names the values of `vars`.
SmtClaim prove(z3::context& ctx, const z3::expr& given, const z3::expr& claim, const char* what,
               const std::vector<z3::expr>& vars) {
  z3::solver s(ctx);
  z3::params prm(ctx);
  prm.set("timeout", 20000u);
  s.set(prm);
  s.add(given);
  s.add(!claim);
  SmtClaim r;
  switch (s.check()) {
    case z3::unsat:
      r.ok = true;
      break;
    case z3::sat: {
      const z3::model m = s.get_model();
      r.counterexample = fmt::format("{} fails at", what);
      for (const z3::expr& v : vars)
        r.counterexample += fmt::format(" {} = {}", v.to_string(), m.eval(v, true).to_string());
      break;
    }
    case z3::unknown:
      r.counterexample = fmt::format("{}: z3 answered unknown ({})", what, s.reason_unknown());
      break;
  }
  return r;
}

}  // namespace

SmtClaim prove_attention_grid(int split, int tile, GridVariant variant) {
  z3::context ctx;
  const z3::expr p = ctx.int_const("row_position");   // the row's absolute position
  const z3::expr mx = ctx.int_const("segment_last");  // the CTA segment's largest position
  const z3::expr c = ctx.int_const("chunk_start");    // the first query position of its chunk
  const z3::expr b = ctx.int_const("sequences");      // sequences in the step
  const z3::expr x = ctx.int_const("kv_position");    // a KV position the row reads
  const z3::expr S = ctx.int_val(split), T = ctx.int_val(tile);
  const z3::expr given = p >= 0 && mx >= p && c >= 0 && c <= p && b >= 1 && x >= 0 && x <= p;

  // The kernels' grid (attention_tc_kernel.cuh, attention_tc_common.cuh): splits of Sv counted
  // from `o`; the CTA's range [o, min(n_splits · Sv + o, mx + 1)); a split's tiles from its
  // edge in steps of T (tile f of a CTA starts at (f / steps) · Sv + (f % steps) · T).
  const z3::expr o = variant == GridVariant::kSplitsFromChunkStart ? c : ctx.int_val(0);
  const z3::expr Sv = variant == GridVariant::kSplitSizeFromBatch ? z3::ite(b <= 4, 2 * S, S) : S;
  const z3::expr cta_splits = (mx - o) / Sv + 1;
  const z3::expr range_end = z3::min(cta_splits * Sv + o, mx + 1);
  const z3::expr z_x = (x - o) / Sv;  // the split holding x
  const z3::expr split_begin = o + z_x * Sv;
  const z3::expr tile_begin = split_begin + ((x - split_begin) / T) * T;  // the tile holding x
  const z3::expr row_splits = (p - o) / Sv + 1;  // merged by merge_row (its own position)

  const std::vector<z3::expr> vars = {p, mx, c, b, x};
  struct Claim {
    const char* what;
    z3::expr e;
  };
  const Claim claims[] = {
      {"every position of the row lies in its CTA's range", x >= o && x < range_end},
      {"the tile holding a position starts at a multiple of the tile size (absolute)",
       tile_begin == x - z3::mod(x, T)},
      {"a tile ends at or before its split's end", tile_begin + T <= split_begin + Sv},
      {"the split holding a position is position / split (absolute)", z_x == x / S},
      {"the split holding a position starts at a multiple of the split size (absolute)",
       split_begin == (x / S) * S},
      {"the row merges position / split + 1 splits, whatever the step", row_splits == p / S + 1},
  };
  for (const Claim& cl : claims) {
    SmtClaim r = prove(ctx, given, cl.e, cl.what, vars);
    if (!r.ok) return r;
  }
  return {true, false, ""};
}

std::vector<FamilyResult> run_smt_claims(const Schedules& schedules) {
  std::vector<FamilyResult> out;
  using Clock = std::chrono::steady_clock;
  {
    FamilyResult r;
    r.family = "attention grid, every context length (z3)";
    // The grid of the schedules at a one-row decode step (the enumerated checks compare every
    // other step's grid with it).
    kernels::AttentionStepShape shape;
    shape.n_tokens = shape.n_seqs = 1;
    shape.n_heads = shape.n_kv_heads = 1;
    shape.head_dim = 128;
    shape.block_size = 16;
    shape.max_blocks = 1;
    const kernels::AttentionPlan plan = schedules.attention_plan(shape, {});
    const int split = schedules.attention_split(shape, plan);
    const int tile = schedules.attention_tile(shape, plan);
    r.scope = fmt::format(
        "for every row position p ≥ 0, every CTA segment ending at or past it, every chunk "
        "start and step: its tiles of {} and splits of {} start at multiples of their size in "
        "absolute positions, cover 0..p, and it merges p / {} + 1 splits",
        tile, split, split);
    const auto t0 = Clock::now();
    const SmtClaim c = prove_attention_grid(split, tile);
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r.elements = 1;
    r.contexts = 6;
    r.ok = c.ok;
    r.counterexample = c.counterexample;
    out.push_back(r);
  }
  {
    FamilyResult r;
    r.family = "GEMM split boundaries, every K (z3)";
    r.scope = fmt::format(
        "for every k the split rule accepts with S = 2..{} splits (k a multiple of S · {}): "
        "split z starts at a multiple of {} (a k-tile edge of every BK, so each k16 step is in "
        "one split)",
        kernels::kGemmMaxSplits, kernels::kGemmSplitAlign, kernels::kGemmSplitAlign);
    const auto t0 = Clock::now();
    z3::context ctx;
    const z3::expr k = ctx.int_const("k"), u = ctx.int_const("u");
    for (int S = 2; S <= kernels::kGemmMaxSplits && r.ok; ++S)
      for (int z = 0; z < S && r.ok; ++z) {
        ++r.contexts;
        // k a positive multiple of S · 256 (gemm_effective_splits' condition), as k = S·256·u.
        const z3::expr given = u >= 1 && k == S * kernels::kGemmSplitAlign * u;
        const SmtClaim c = prove(ctx, given, z3::mod(z * (k / S), kernels::kGemmSplitAlign) == 0,
                                 "split boundary on a k-tile edge", {k, u});
        if (!c.ok) {
          r.ok = false;
          r.counterexample = fmt::format("S {} split {}: {}", S, z, c.counterexample);
        }
      }
    r.elements = 1;
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    out.push_back(r);
  }
  return out;
}

#else  // no z3

SmtClaim prove_attention_grid(int, int, GridVariant) {
  return {false, true, "built without z3"};
}

std::vector<FamilyResult> run_smt_claims(const Schedules&) {
  FamilyResult r;
  r.family = "unbounded claims (z3)";
  r.scope =
      "built without z3 (install libz3-dev and reconfigure): the context-length and K "
      "claims are checked only at the enumerated bound";
  r.skipped = true;
  return {r};
}

#endif

}  // namespace detllm::reduction_order
