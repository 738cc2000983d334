// Pipeline-parallel schedules as pure data: each rank's compute actions in the order
// torch.distributed.pipelining runs them (schedules.py: ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B,
// ScheduleInterleavedZeroBubble),
// and a simulator that checks a whole schedule is dependency-correct and deadlock-free. Torch-free, so the orders
// are cheap to test exhaustively; the caller pairs sends and receives from the compute order.
#pragma once
#include <string>
#include <vector>

namespace acc::core::pp {

enum class Schedule { GPipe, OneFOneB, Interleaved1F1B, InterleavedZeroBubble };

// "GPipe", "1F1B", "Interleaved1F1B" or "InterleavedZeroBubble", case-insensitively, as torch's get_schedule_class
// takes them. Throws std::invalid_argument naming the accepted names.
Schedule parse_schedule(const std::string& name);
// The name parse_schedule takes back.
std::string schedule_name(Schedule s);
// Whether `s` runs several stages per rank (torch's PipelineScheduleMulti): the interleaved ones.
inline bool multi_stage(Schedule s) { return s == Schedule::Interleaved1F1B || s == Schedule::InterleavedZeroBubble; }

// One compute action. `stage` is the global stage index: with v stages per rank, rank r holds stages
// r, r + pp, r + 2 pp, ... (torch's "loop" style, generate_stage_to_rank_mapping).
// The zero-bubble schedule splits a backward in two (torch's BACKWARD_INPUT and BACKWARD_WEIGHT): the gradient of the
// stage's input, which the previous stage waits for, and later its weights' gradient, which nothing waits for.
struct Action {
  enum Kind { Forward, Backward, BackwardInput, BackwardWeight } kind;
  int stage;
  int microbatch;
  bool operator==(const Action& o) const { return kind == o.kind && stage == o.stage && microbatch == o.microbatch; }
};

// torch's notation for an action: "<stage>F<microbatch>", "<stage>B<microbatch>" (e.g. "2B0"), "...I..." or "...W...".
std::string to_string(const Action& a);

// Throws std::invalid_argument, naming the values, where torch refuses the configuration: pp_size,
// stages_per_rank, microbatches < 1; rank outside [0, pp_size); GPipe or 1F1B with stages_per_rank != 1;
// 1F1B with fewer microbatches than stages (Schedule1F1B.__init__); the interleaved schedules with microbatches not
// a multiple of their rounds, max(1, microbatches / pp_size) (their __init__).
void check_schedule(Schedule s, int rank, int pp_size, int stages_per_rank, int microbatches);

// This rank's compute actions, in the order torch's schedule runs them (validated by check_schedule).
std::vector<Action> actions(Schedule s, int rank, int pp_size, int stages_per_rank, int microbatches);

// actions() for every rank, indexed by rank.
std::vector<std::vector<Action>> all_actions(Schedule s, int pp_size, int stages_per_rank, int microbatches);

// The theoretical bubble: the fraction of a step a rank idles, with a forward and a backward of a whole
// rank's layers costing the same for every microbatch. GPipe (Huang et al. 2019): (p-1)/(m+p-1) for p stages
// and m microbatches, and 1F1B's is the same. Megatron-LM (Narayanan et al. 2021, arXiv:2104.04473, sec. 2.2)
// gives bubble over ideal time, (p-1)/m, and (p-1)/(v*m) with v stages per rank interleaved; of the whole step
// that is (p-1)/(v*m+p-1). InterleavedZeroBubble's is simulate_steps' idle fraction with a forward, an input
// gradient and a weight gradient each one tick (the zero-bubble paper's T_F = T_B = T_W, arXiv:2401.10241).
double bubble_fraction(Schedule s, int pp_size, int stages_per_rank, int microbatches);

// Runs `per_rank` (each rank's actions, in order, one per tick, each costing one tick) over `num_stages`
// stages and `microbatches` microbatches, and returns the number of ticks. Forward (s, i) needs forward
// (s-1, i) done; backward or input gradient (s, i) needs forward (s, i) and the backward or input gradient (s+1, i)
// done (in an earlier tick); weight gradient (s, i) needs input gradient (s, i). Throws std::invalid_argument unless
// every (stage, microbatch) is run exactly once forward and once backward or input gradient (then once weight
// gradient), each stage on one rank; std::runtime_error naming the blocked actions when it deadlocks.
int simulate_steps(const std::vector<std::vector<Action>>& per_rank, int num_stages, int microbatches);

}  // namespace acc::core::pp
