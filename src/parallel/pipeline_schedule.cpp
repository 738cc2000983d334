// Pipeline schedules as data (pipeline_schedule.hpp). Each order is a port of torch 2.15's
// torch/distributed/pipelining/schedules.py; the comments name the function it follows.
#include "parallel/pipeline_schedule.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace acc::core::pp {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string str(int v) { return std::to_string(v); }

// ScheduleGPipe._step_microbatches: every forward, then every backward, in microbatch order.
std::vector<Action> gpipe(int rank, int m) {
  std::vector<Action> out;
  for (int i = 0; i < m; ++i) out.push_back({Action::Forward, rank, i});
  for (int i = 0; i < m; ++i) out.push_back({Action::Backward, rank, i});
  return out;
}

// Schedule1F1B._step_microbatches: min(m, pp - stage) warmup forwards, then backward and forward alternate
// (1B1F) until the forwards run out, then the remaining backwards (cooldown).
std::vector<Action> one_f_one_b(int rank, int pp_size, int m) {
  std::vector<Action> out;
  const int warmup = std::min(m, pp_size - rank);
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({Action::Forward, rank, f});
  while (true) {
    out.push_back({Action::Backward, rank, b++});
    if (f == m) break;
    out.push_back({Action::Forward, rank, f++});
  }
  while (b < m) out.push_back({Action::Backward, rank, b++});
  return out;
}

// _get_1f1b_rank_ops, the idle slots (None) left out, for ScheduleInterleaved1F1B._calculate_single_rank_operations
// (_get_warmup_ops' multiply_factor 2) and ScheduleInterleavedZeroBubble's (multiply_factor 1, enable_zero_bubble).
// Local stages take turns in rounds of microbatches_per_round microbatches: forwards go up the rank's stages,
// backwards down. Zero bubble runs each backward as its input gradient, and the weight gradients in the same order,
// each after an input gradient once `rank` of them have run (num_1f1b_microbatches), the rest at the end.
std::vector<Action> interleaved(int rank, int pp_size, int v, int m, bool zero_bubble) {
  const int rounds = std::max(1, m / pp_size);
  const int per_round = m / rounds;
  const int warmup = std::min((v - 1) * per_round + (zero_bubble ? 1 : 2) * (pp_size - 1 - rank), m * v);
  const int microbatch_ops = v * m;
  const int fwd_bwd = microbatch_ops - warmup;
  const int total = warmup + fwd_bwd + (microbatch_ops - fwd_bwd);
  auto fwd_stage = [&](int op) { return (op / per_round) % v * pp_size + rank; };
  auto bwd_stage = [&](int op) { return (v - 1 - (op - warmup) / per_round % v) * pp_size + rank; };
  // Each stage's next microbatch, per kind of action (torch's fwd_ / bwd_ / weight_stage_mb_index).
  std::vector<int> next_f(static_cast<size_t>(v * pp_size), 0), next_b(next_f), next_w(next_f);
  std::vector<int> backward_ops;  // the ops whose backward has run, in order
  size_t weights = 0;             // of them, those whose weight gradient has run
  std::vector<Action> out;
  auto forward = [&](int op) {
    int s = fwd_stage(op);
    out.push_back({Action::Forward, s, next_f[static_cast<size_t>(s)]++});
  };
  auto weight = [&] {
    int s = bwd_stage(backward_ops[weights++]);
    out.push_back({Action::BackwardWeight, s, next_w[static_cast<size_t>(s)]++});
  };
  auto backward = [&](int op) {
    int s = bwd_stage(op);
    out.push_back({zero_bubble ? Action::BackwardInput : Action::Backward, s, next_b[static_cast<size_t>(s)]++});
    backward_ops.push_back(op);
    if (zero_bubble && op - warmup >= rank) weight();
  };
  for (int op = 0; op < total; ++op) {
    if (op < warmup) {
      forward(op);
    } else if (op < warmup + fwd_bwd) {
      forward(op);
      backward(op);
    } else {
      backward(op);
    }
  }
  while (zero_bubble && weights < backward_ops.size()) weight();
  return out;
}

}  // namespace

Schedule parse_schedule(const std::string& name) {
  const std::string l = lower(name);
  if (l == "gpipe") return Schedule::GPipe;
  if (l == "1f1b") return Schedule::OneFOneB;
  if (l == "interleaved1f1b") return Schedule::Interleaved1F1B;
  if (l == "interleavedzerobubble") return Schedule::InterleavedZeroBubble;
  throw std::invalid_argument("unknown pipeline schedule '" + name +
                              "'; the accepted names are GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble "
                              "(case-insensitive)");
}

std::string schedule_name(Schedule s) {
  switch (s) {
    case Schedule::GPipe: return "GPipe";
    case Schedule::OneFOneB: return "1F1B";
    case Schedule::Interleaved1F1B: return "Interleaved1F1B";
    case Schedule::InterleavedZeroBubble: return "InterleavedZeroBubble";
  }
  throw std::invalid_argument("unknown pipeline schedule value " + str(static_cast<int>(s)));
}

std::string to_string(const Action& a) { return str(a.stage) + "FBIW"[a.kind] + str(a.microbatch); }

void check_schedule(Schedule s, int rank, int pp_size, int stages_per_rank, int microbatches) {
  const std::string what = schedule_name(s) + ": ";
  if (pp_size < 1) throw std::invalid_argument(what + "pp_size must be >= 1; got " + str(pp_size));
  if (stages_per_rank < 1)
    throw std::invalid_argument(what + "stages_per_rank must be >= 1; got " + str(stages_per_rank));
  if (microbatches < 1) throw std::invalid_argument(what + "microbatches must be >= 1; got " + str(microbatches));
  if (rank < 0 || rank >= pp_size)
    throw std::invalid_argument(what + "rank " + str(rank) + " is outside [0, " + str(pp_size) + ")");
  if (!multi_stage(s) && stages_per_rank != 1)
    throw std::invalid_argument(what + "runs one stage per rank; got stages_per_rank " + str(stages_per_rank) +
                                " (use Interleaved1F1B or InterleavedZeroBubble for virtual stages)");
  // Schedule1F1B.__init__ refuses n_microbatches < num_stages (its warmup would otherwise be cut short).
  if (s == Schedule::OneFOneB && microbatches < pp_size)
    throw std::invalid_argument(what + "the number of microbatches (" + str(microbatches) +
                                ") must be greater than or equal to the number of stages (" + str(pp_size) + ")");
  // The interleaved schedules' __init__: rounds = max(1, m // pp) must divide m (not m % pp == 0: e.g. pp 4, m 10).
  if (multi_stage(s)) {
    const int rounds = std::max(1, microbatches / pp_size);
    if (microbatches % rounds != 0)
      throw std::invalid_argument(what + "the number of microbatches (" + str(microbatches) +
                                  ") must be a multiple of the number of rounds, max(1, microbatches / pp_size) = " +
                                  str(rounds) + " with pp_size " + str(pp_size));
  }
}

std::vector<Action> actions(Schedule s, int rank, int pp_size, int stages_per_rank, int microbatches) {
  check_schedule(s, rank, pp_size, stages_per_rank, microbatches);
  switch (s) {
    case Schedule::GPipe: return gpipe(rank, microbatches);
    case Schedule::OneFOneB: return one_f_one_b(rank, pp_size, microbatches);
    case Schedule::Interleaved1F1B: return interleaved(rank, pp_size, stages_per_rank, microbatches, false);
    case Schedule::InterleavedZeroBubble: return interleaved(rank, pp_size, stages_per_rank, microbatches, true);
  }
  throw std::invalid_argument("unknown pipeline schedule value " + str(static_cast<int>(s)));
}

std::vector<std::vector<Action>> all_actions(Schedule s, int pp_size, int stages_per_rank, int microbatches) {
  check_schedule(s, 0, pp_size, stages_per_rank, microbatches);
  std::vector<std::vector<Action>> out;
  for (int r = 0; r < pp_size; ++r) out.push_back(actions(s, r, pp_size, stages_per_rank, microbatches));
  return out;
}

double bubble_fraction(Schedule s, int pp_size, int stages_per_rank, int microbatches) {
  check_schedule(s, 0, pp_size, stages_per_rank, microbatches);
  const double p = pp_size, m = microbatches;
  if (s == Schedule::InterleavedZeroBubble) {
    const int stages = pp_size * stages_per_rank;
    const int ticks = simulate_steps(all_actions(s, pp_size, stages_per_rank, microbatches), stages, microbatches);
    return 1.0 - 3.0 * stages_per_rank * m / ticks;
  }
  // See the header: GPipe (Huang et al. 2019) and Megatron-LM (arXiv:2104.04473, sec. 2.2).
  const double v = s == Schedule::Interleaved1F1B ? stages_per_rank : 1;
  return (p - 1) / (v * m + p - 1);
}

namespace {

struct Sim {
  int stages, mbs;
  std::vector<int> f_done, b_done;  // the tick each (stage, microbatch) finished; -1 while not done
  int& at(std::vector<int>& v, int s, int i) { return v[static_cast<size_t>(s * mbs + i)]; }
  bool ready(const Action& a, int tick) {
    auto done = [&](std::vector<int>& v, int s) {
      return at(v, s, a.microbatch) >= 0 && at(v, s, a.microbatch) < tick;
    };
    if (a.kind == Action::Forward) return a.stage == 0 || done(f_done, a.stage - 1);
    if (a.kind == Action::BackwardWeight) return done(b_done, a.stage);
    return done(f_done, a.stage) && (a.stage == stages - 1 || done(b_done, a.stage + 1));
  }
};

// Every (stage, microbatch) exactly once forward and once backward (whole, or its input gradient and then its weight
// gradient), each stage on one rank.
void check_complete(const std::vector<std::vector<Action>>& per_rank, int num_stages, int microbatches) {
  if (num_stages < 1 || microbatches < 1)
    throw std::invalid_argument("simulate_steps: num_stages (" + str(num_stages) + ") and microbatches (" +
                                str(microbatches) + ") must be >= 1");
  std::vector<int> owner(static_cast<size_t>(num_stages), -1), seen(static_cast<size_t>(4 * num_stages * microbatches));
  for (size_t r = 0; r < per_rank.size(); ++r) {
    for (const Action& a : per_rank[r]) {
      if (a.stage < 0 || a.stage >= num_stages || a.microbatch < 0 || a.microbatch >= microbatches)
        throw std::invalid_argument("simulate_steps: rank " + str(static_cast<int>(r)) + " runs " + to_string(a) +
                                    ", outside " + str(num_stages) + " stages x " + str(microbatches) +
                                    " microbatches");
      int& o = owner[static_cast<size_t>(a.stage)];
      if (o >= 0 && o != static_cast<int>(r))
        throw std::invalid_argument("simulate_steps: stage " + str(a.stage) + " runs on ranks " + str(o) + " and " +
                                    str(static_cast<int>(r)));
      o = static_cast<int>(r);
      int& n = seen[static_cast<size_t>((a.kind * num_stages + a.stage) * microbatches + a.microbatch)];
      if (++n > 1) throw std::invalid_argument("simulate_steps: " + to_string(a) + " is run twice");
    }
  }
  auto count = [&](Action::Kind k, int s, int i) {
    return seen[static_cast<size_t>((k * num_stages + s) * microbatches + i)];
  };
  for (int s = 0; s < num_stages; ++s)
    for (int i = 0; i < microbatches; ++i) {
      const int input = count(Action::BackwardInput, s, i);
      if (count(Action::Forward, s, i) == 0)
        throw std::invalid_argument("simulate_steps: " + to_string({Action::Forward, s, i}) + " is never run");
      if (count(Action::Backward, s, i) + input != 1)
        throw std::invalid_argument("simulate_steps: " + to_string({Action::Backward, s, i}) +
                                    (input ? " and its input gradient are both run" : " is never run"));
      if (count(Action::BackwardWeight, s, i) != input)
        throw std::invalid_argument("simulate_steps: " + to_string({Action::BackwardWeight, s, i}) +
                                    (input ? " is never run" : " is run without its input gradient"));
    }
}

}  // namespace

int simulate_steps(const std::vector<std::vector<Action>>& per_rank, int num_stages, int microbatches) {
  check_complete(per_rank, num_stages, microbatches);
  const size_t cells = static_cast<size_t>(num_stages * microbatches);
  Sim sim{num_stages, microbatches, std::vector<int>(cells, -1), std::vector<int>(cells, -1)};
  std::vector<size_t> next(per_rank.size(), 0);
  size_t left = 0;
  for (const auto& r : per_rank) left += r.size();
  int tick = 0;
  for (; left > 0; ++tick) {
    bool progressed = false;
    for (size_t r = 0; r < per_rank.size(); ++r) {
      if (next[r] == per_rank[r].size() || !sim.ready(per_rank[r][next[r]], tick)) continue;
      const Action& a = per_rank[r][next[r]++];
      if (a.kind != Action::BackwardWeight)
        sim.at(a.kind == Action::Forward ? sim.f_done : sim.b_done, a.stage, a.microbatch) = tick;
      progressed = true;
      --left;
    }
    if (progressed) continue;
    std::string blocked;
    for (size_t r = 0; r < per_rank.size(); ++r)
      if (next[r] < per_rank[r].size())
        blocked += " rank " + str(static_cast<int>(r)) + " at " + to_string(per_rank[r][next[r]]) + ";";
    throw std::runtime_error("simulate_steps: the schedule deadlocks at tick " + str(tick) + ":" + blocked);
  }
  return tick;
}

}  // namespace acc::core::pp
