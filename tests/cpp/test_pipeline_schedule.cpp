// The pipeline schedules against torch.distributed.pipelining's own orders (torch 2.15, schedules.py), and the
// simulator: every valid schedule runs without deadlock, each (stage, microbatch) once per direction, and GPipe's
// ticks match the bubble formula. Actions are written in torch's notation: "<stage>F<mb>", "<stage>B<mb>", and the
// zero-bubble schedule's input and weight gradients "<stage>I<mb>", "<stage>W<mb>".
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "parallel/pipeline_schedule.hpp"

namespace acc::core::pp {
namespace {

std::string join(const std::vector<Action>& v) {
  std::string out;
  for (const Action& a : v) out += (out.empty() ? "" : " ") + to_string(a);
  return out;
}

// Every rank's order, ranks separated by " | ".
std::string orders(Schedule s, int pp, int v, int m) {
  std::string out;
  for (const auto& r : all_actions(s, pp, v, m)) out += (out.empty() ? "" : " | ") + join(r);
  return out;
}

// Runs f, which must throw E with a message containing every one of `parts`.
template <class E>
void expect_throw(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception; wanted one mentioning " << parts.front();
  } catch (const E& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(PipelineSchedule, NamesAsGetScheduleClassTakesThem) {
  EXPECT_EQ(parse_schedule("GPipe"), Schedule::GPipe);
  EXPECT_EQ(parse_schedule("gpipe"), Schedule::GPipe);
  EXPECT_EQ(parse_schedule("1f1b"), Schedule::OneFOneB);
  EXPECT_EQ(parse_schedule("INTERLEAVED1F1B"), Schedule::Interleaved1F1B);
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved1F1B})
    EXPECT_EQ(parse_schedule(schedule_name(s)), s);
  expect_throw<std::invalid_argument>([] { parse_schedule("LoopedBFS"); },
                                      {"'LoopedBFS'", "GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble"});
}

// ScheduleGPipe._step_microbatches: `for i in range(self._n_microbatches): ... forward_one_chunk(i, ...)`, then
// `for i in range(self._n_microbatches): ... backward_one_chunk(i, ...)`.
TEST(PipelineSchedule, GPipeTwoRanksFourMicrobatches) {
  EXPECT_EQ(orders(Schedule::GPipe, 2, 1, 4), "0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3 | 1F0 1F1 1F2 1F3 1B0 1B1 1B2 1B3");
}

// Schedule1F1B._step_microbatches: `warmup_chunks = min(self._n_microbatches, self._num_stages -
// self._stage.stage_index)` forwards; then `while True:` backward_one_chunk(bwd_mb_index), `if fwd_mb_index ==
// self._n_microbatches: break`, forward_one_chunk(fwd_mb_index); then `while bwd_mb_index < self._n_microbatches:`
// backward_one_chunk. Rank 0: 2 warmup forwards; rank 1: 1.
TEST(PipelineSchedule, OneFOneBTwoRanksFourMicrobatches) {
  EXPECT_EQ(orders(Schedule::OneFOneB, 2, 1, 4), "0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3 | 1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3");
}

// ScheduleInterleaved1F1B: number_of_rounds = max(1, 4 // 2) = 2, microbatches_per_round = 2. _get_warmup_ops:
// (n_local_stages - 1) * 2 + 2 * ((pp_group_size - 1) - rank), capped at 4 * 2: rank 0 4, rank 1 2.
// forward_stage_index(op) = ((op // 2) % 2) * 2 + rank; backward_stage_index(op) = (2 - 1 - ((op - warmup_ops)
// // 2) % 2) * 2 + rank. _get_1f1b_rank_ops: warmup ops append F; 1F1B ops append F then FULL_BACKWARD; cooldown
// ops append B; each stage counts its own microbatches (fwd_stage_mb_index, bwd_stage_mb_index).
TEST(PipelineSchedule, InterleavedTwoRanksTwoStagesEachFourMicrobatches) {
  EXPECT_EQ(orders(Schedule::Interleaved1F1B, 2, 2, 4),
            "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3 | "
            "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3");
}

// The same rules at pp 4, m 8 (printed by torch's own code with communication stubbed out: identical).
TEST(PipelineSchedule, FourRanksEightMicrobatches) {
  EXPECT_EQ(orders(Schedule::GPipe, 4, 1, 8), "0F0 0F1 0F2 0F3 0F4 0F5 0F6 0F7 0B0 0B1 0B2 0B3 0B4 0B5 0B6 0B7 | "
                                              "1F0 1F1 1F2 1F3 1F4 1F5 1F6 1F7 1B0 1B1 1B2 1B3 1B4 1B5 1B6 1B7 | "
                                              "2F0 2F1 2F2 2F3 2F4 2F5 2F6 2F7 2B0 2B1 2B2 2B3 2B4 2B5 2B6 2B7 | "
                                              "3F0 3F1 3F2 3F3 3F4 3F5 3F6 3F7 3B0 3B1 3B2 3B3 3B4 3B5 3B6 3B7");
  EXPECT_EQ(orders(Schedule::OneFOneB, 4, 1, 8), "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7 | "
                                                 "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7 | "
                                                 "2F0 2F1 2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2F6 2B5 2F7 2B6 2B7 | "
                                                 "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7");
  // Rounds of 4 microbatches; warmup 4 + 2 * (3 - rank): 10, 8, 6, 4.
  EXPECT_EQ(orders(Schedule::Interleaved1F1B, 4, 2, 8),
            "0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5 0F6 4B0 0F7 4B1 4F4 4B2 "
            "4F5 4B3 4F6 0B0 4F7 0B1 0B2 0B3 4B4 4B5 4B6 4B7 0B4 0B5 0B6 0B7 | "
            "1F0 1F1 1F2 1F3 5F0 5F1 5F2 5F3 1F4 5B0 1F5 5B1 1F6 5B2 1F7 5B3 "
            "5F4 1B0 5F5 1B1 5F6 1B2 5F7 1B3 5B4 5B5 5B6 5B7 1B4 1B5 1B6 1B7 | "
            "2F0 2F1 2F2 2F3 6F0 6F1 6F2 6B0 6F3 6B1 2F4 6B2 2F5 6B3 2F6 2B0 "
            "2F7 2B1 6F4 2B2 6F5 2B3 6F6 6B4 6F7 6B5 6B6 6B7 2B4 2B5 2B6 2B7 | "
            "3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3F4 3B0 3F5 3B1 "
            "3F6 3B2 3F7 3B3 7F4 7B4 7F5 7B5 7F6 7B6 7F7 7B7 3B4 3B5 3B6 3B7");
}

// ScheduleInterleavedZeroBubble._calculate_single_rank_operations (tests/cpp/zero_bubble_orders.py prints them from
// torch 2.15), the idle slots left out: _get_warmup_ops with multiply_factor 1, each backward split into its input
// gradient (I) and its weight gradient (W), held back `rank` steady-state steps.
TEST(PipelineSchedule, ZeroBubbleEqualsTorch) {
  EXPECT_EQ(orders(Schedule::InterleavedZeroBubble, 2, 2, 4),
            "0F0 0F1 2F0 2F1 2I0 2W0 0F2 2I1 2W1 0F3 0I0 0W0 2F2 0I1 0W1 2F3 2I2 2W2 2I3 2W3 0I2 0W2 0I3 0W3 | "
            "1F0 1F1 3F0 3I0 3F1 3I1 3W0 1F2 1I0 3W1 1F3 1I1 1W0 3F2 3I2 1W1 3F3 3I3 3W2 1I2 3W3 1I3 1W2 1W3");
  EXPECT_EQ(orders(Schedule::InterleavedZeroBubble, 4, 2, 8),
            "0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 4I0 4W0 0F4 4I1 4W1 0F5 4I2 4W2 0F6 4I3 4W3 0F7 0I0 0W0 4F4 0I1 0W1 4F5 "
            "0I2 0W2 4F6 0I3 0W3 4F7 4I4 4W4 4I5 4W5 4I6 4W6 4I7 4W7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7 | "
            "1F0 1F1 1F2 1F3 5F0 5F1 5F2 5I0 5F3 5I1 5W0 1F4 5I2 5W1 1F5 5I3 5W2 1F6 1I0 5W3 1F7 1I1 1W0 5F4 1I2 1W1 "
            "5F5 1I3 1W2 5F6 5I4 1W3 5F7 5I5 5W4 5I6 5W5 5I7 5W6 1I4 5W7 1I5 1W4 1I6 1W5 1I7 1W6 1W7 | "
            "2F0 2F1 2F2 2F3 6F0 6F1 6I0 6F2 6I1 6F3 6I2 6W0 2F4 6I3 6W1 2F5 2I0 6W2 2F6 2I1 6W3 2F7 2I2 2W0 6F4 2I3 "
            "2W1 6F5 6I4 2W2 6F6 6I5 2W3 6F7 6I6 6W4 6I7 6W5 2I4 6W6 2I5 6W7 2I6 2W4 2I7 2W5 2W6 2W7 | "
            "3F0 3F1 3F2 3F3 7F0 7I0 7F1 7I1 7F2 7I2 7F3 7I3 7W0 3F4 3I0 7W1 3F5 3I1 7W2 3F6 3I2 7W3 3F7 3I3 3W0 7F4 "
            "7I4 3W1 7F5 7I5 3W2 7F6 7I6 3W3 7F7 7I7 7W4 3I4 7W5 3I5 7W6 3I6 7W7 3I7 3W4 3W5 3W6 3W7");
  EXPECT_EQ(orders(Schedule::InterleavedZeroBubble, 2, 1, 4),
            "0F0 0F1 0I0 0W0 0F2 0I1 0W1 0F3 0I2 0W2 0I3 0W3 | 1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1F3 1I3 1W2 1W3");
  // The weight gradients fill the bubble: fewer ticks than interleaved 1F1B with its backward as two ticks.
  const int zb = simulate_steps(all_actions(Schedule::InterleavedZeroBubble, 4, 2, 8), 8, 8);
  EXPECT_NEAR(bubble_fraction(Schedule::InterleavedZeroBubble, 4, 2, 8), 1.0 - 3.0 * 2 * 8 / zb, 1e-12);
  EXPECT_LT(bubble_fraction(Schedule::InterleavedZeroBubble, 4, 2, 8),
            bubble_fraction(Schedule::Interleaved1F1B, 4, 2, 8));
  EXPECT_EQ(parse_schedule("interleavedzerobubble"), Schedule::InterleavedZeroBubble);
  expect_throw<std::invalid_argument>([] { actions(Schedule::InterleavedZeroBubble, 0, 4, 2, 9); }, {"(9)", "= 2"});
}

// Every valid configuration: each (stage, microbatch) once forward and once backward, on the rank torch's loop
// style gives it, and the whole schedule simulates without deadlock.
TEST(PipelineSchedule, EveryValidScheduleCompletesWithoutDeadlock) {
  int valid = 0;
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved1F1B, Schedule::InterleavedZeroBubble})
    for (int pp : {1, 2, 4})
      for (int v : {1, 2, 3})
        for (int m = 1; m <= 16; ++m) {
          try {
            check_schedule(s, 0, pp, v, m);
          } catch (const std::invalid_argument&) {
            continue;
          }
          ++valid;
          const auto ranks = all_actions(s, pp, v, m);
          const bool zb = s == Schedule::InterleavedZeroBubble;
          std::vector<int> count(static_cast<size_t>(4 * pp * v * m), 0);
          for (int r = 0; r < pp; ++r)
            for (const Action& a : ranks[static_cast<size_t>(r)]) {
              ASSERT_EQ(a.stage % pp, r) << to_string(a);
              ++count[static_cast<size_t>((a.kind * pp * v + a.stage) * m + a.microbatch)];
            }
          // Forward, then backward (zero bubble: input and weight gradients) once each.
          for (int k = 0; k < 4; ++k)
            for (int c = 0; c < pp * v * m; ++c)
              EXPECT_EQ(count[static_cast<size_t>(k * pp * v * m + c)], k == 0 || (k == 1) != zb ? 1 : 0)
                  << schedule_name(s) << " pp " << pp << " v " << v << " m " << m << " kind " << k;
          EXPECT_NO_THROW(simulate_steps(ranks, pp * v, m))
              << schedule_name(s) << " pp " << pp << " v " << v << " m " << m;
        }
  // GPipe: v 1; 1F1B: v 1, m >= pp; interleaved (both): pp 2 refuses odd m > 4, pp 4 refuses m 9, 11, 13, 14.
  EXPECT_EQ(valid, 16 * 3 + (16 + 15 + 13) + (16 + 10 + 12) * 3 * 2);
}

TEST(PipelineSchedule, RefusesWhatTorchRefuses) {
  using IA = std::invalid_argument;
  expect_throw<IA>([] { actions(Schedule::GPipe, 0, 0, 1, 4); }, {"pp_size", "0"});
  expect_throw<IA>([] { actions(Schedule::GPipe, 0, 2, 0, 4); }, {"stages_per_rank", "0"});
  expect_throw<IA>([] { actions(Schedule::GPipe, 0, 2, 1, 0); }, {"microbatches", "0"});
  expect_throw<IA>([] { actions(Schedule::GPipe, 2, 2, 1, 4); }, {"rank 2", "[0, 2)"});
  expect_throw<IA>([] { actions(Schedule::GPipe, -1, 2, 1, 4); }, {"rank -1"});
  expect_throw<IA>([] { actions(Schedule::GPipe, 0, 2, 2, 4); }, {"GPipe", "stages_per_rank 2"});
  expect_throw<IA>([] { actions(Schedule::OneFOneB, 0, 2, 2, 4); }, {"1F1B", "stages_per_rank 2"});
  // Schedule1F1B.__init__: n_microbatches < num_stages.
  expect_throw<IA>([] { actions(Schedule::OneFOneB, 0, 4, 1, 3); }, {"(3)", "number of stages (4)"});
  EXPECT_NO_THROW(actions(Schedule::GPipe, 0, 4, 1, 3));
  // ScheduleInterleaved1F1B.__init__: rounds = max(1, m // pp) must divide m; pp 4, m 9: 2 rounds.
  expect_throw<IA>([] { actions(Schedule::Interleaved1F1B, 0, 4, 2, 9); }, {"(9)", "= 2", "pp_size 4"});
  EXPECT_NO_THROW(actions(Schedule::Interleaved1F1B, 0, 4, 2, 10));  // 2 rounds of 5: not a multiple of pp
  EXPECT_NO_THROW(actions(Schedule::Interleaved1F1B, 0, 4, 2, 3));   // fewer microbatches than ranks: 1 round
  expect_throw<IA>([] { bubble_fraction(Schedule::OneFOneB, 4, 1, 2); }, {"(2)"});
}

// GPipe with unit forward and backward: 2(m+p-1) ticks, of which each rank works 2m, so the idle fraction is the
// formula's (p-1)/(m+p-1). 1F1B has the same bubble.
TEST(PipelineSchedule, BubbleMatchesSimulatedTicks) {
  for (int p : {1, 2, 4, 8})
    for (int m = 1; m <= 16; ++m) {
      const int ticks = simulate_steps(all_actions(Schedule::GPipe, p, 1, m), p, m);
      EXPECT_EQ(ticks, 2 * (m + p - 1)) << "p " << p << " m " << m;
      EXPECT_DOUBLE_EQ(bubble_fraction(Schedule::GPipe, p, 1, m), 1.0 - 2.0 * m / ticks);
      if (m < p) continue;
      EXPECT_EQ(simulate_steps(all_actions(Schedule::OneFOneB, p, 1, m), p, m), ticks) << "p " << p << " m " << m;
      EXPECT_DOUBLE_EQ(bubble_fraction(Schedule::OneFOneB, p, 1, m), bubble_fraction(Schedule::GPipe, p, 1, m));
    }
  EXPECT_DOUBLE_EQ(bubble_fraction(Schedule::Interleaved1F1B, 4, 2, 8), 3.0 / 19.0);
  // Interleaved, each of a rank's v stages a unit: 2(vm+p-1) ticks when m is a multiple of p.
  for (int p : {2, 4})
    for (int v : {2, 4})
      for (int m : {p, 2 * p, 4 * p}) {
        const int ticks = simulate_steps(all_actions(Schedule::Interleaved1F1B, p, v, m), p * v, m);
        EXPECT_EQ(ticks, 2 * (v * m + p - 1)) << "p " << p << " v " << v << " m " << m;
        EXPECT_NEAR(bubble_fraction(Schedule::Interleaved1F1B, p, v, m), 1.0 - 2.0 * v * m / ticks, 1e-12);
      }
}

Action f(int s, int i) { return {Action::Forward, s, i}; }
Action b(int s, int i) { return {Action::Backward, s, i}; }

TEST(PipelineSchedule, SimulatorFindsDeadlocksAndMalformedSchedules) {
  // Rank 1 waits for 0F1 on rank 0, which waits for 1B0 behind it.
  expect_throw<std::runtime_error>(
      [] { simulate_steps({{f(0, 0), b(0, 0), f(0, 1), b(0, 1)}, {f(1, 1), b(1, 1), f(1, 0), b(1, 0)}}, 2, 2); },
      {"deadlocks", "rank 0 at 0B0", "rank 1 at 1F1"});
  expect_throw<std::invalid_argument>([] { simulate_steps({{f(0, 0), b(0, 0)}, {f(1, 0)}}, 2, 1); },
                                      {"1B0", "never run"});
  expect_throw<std::invalid_argument>([] { simulate_steps({{f(0, 0), f(0, 0), b(0, 0)}}, 1, 1); }, {"0F0", "twice"});
  expect_throw<std::invalid_argument>([] { simulate_steps({{f(0, 0)}, {b(0, 0)}}, 1, 1); },
                                      {"stage 0", "ranks 0 and 1"});
  expect_throw<std::invalid_argument>([] { simulate_steps({{f(0, 0), b(0, 0), f(1, 0)}}, 1, 1); }, {"1F0", "outside"});
  EXPECT_EQ(simulate_steps({{f(0, 0), b(0, 0)}}, 1, 1), 2);
  // A weight gradient waits for its input gradient, and comes with it.
  const Action i00{Action::BackwardInput, 0, 0}, w00{Action::BackwardWeight, 0, 0};
  expect_throw<std::runtime_error>([&] { simulate_steps({{f(0, 0), w00, i00}}, 1, 1); }, {"rank 0 at 0W0"});
  expect_throw<std::invalid_argument>([&] { simulate_steps({{f(0, 0), i00}}, 1, 1); }, {"0W0", "never run"});
  expect_throw<std::invalid_argument>([&] { simulate_steps({{f(0, 0), b(0, 0), w00}}, 1, 1); }, {"0W0", "without"});
  expect_throw<std::invalid_argument>([&] { simulate_steps({{f(0, 0), b(0, 0), i00, w00}}, 1, 1); }, {"both run"});
  EXPECT_EQ(simulate_steps({{f(0, 0), i00, w00}}, 1, 1), 3);
}

}  // namespace
}  // namespace acc::core::pp
