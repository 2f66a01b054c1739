// Crash-safe training checkpoints (train_gpt --checkpoint-dir, --resume). A checkpoint is a
// directory ROOT/step_NNNNNNNN holding:
//   optimizer-rankR.bin  rank R's optimizer state: every partition's fp32 master, m and v, read
//                        through the OffloadedOptimizer (its NVMe partitions through the swap
//                        store, not by copying the swap files); one record per partition
//                        (index, elements, [master | m | v]), in the order they were captured
//   state-rankR.json     Adam's step count and the loss scaler's counters (StepScaling::State)
//   what the caller writes on rank 0 (train_gpt: the 16-bit parameters, an llm.c model file)
//   manifest.json        step, ranks, stage, model, the caller's JSON (data position, settings),
//                        and every file's size and xxh3 checksum
//   DONE                 written last; holds the manifest's xxh3
// Saving is collective: every rank writes and fsyncs its files under step_N.tmp; rank 0 writes
// the manifest, renames the directory to step_N, fsyncs ROOT and writes DONE. Only then are
// complete checkpoints beyond `keep` removed (oldest first), so a crash at any point leaves the
// previous checkpoint loadable; a directory without DONE is never loaded, and leftovers of an
// interrupted save are removed by the next one. Loading verifies the manifest (ranks, stage and
// model as the caller expects, naming both), every file's size and checksum, and each
// partition's size; any mismatch is an error naming the file.
//
// Overlap (start_checkpoint): the optimizer file is written by a background thread (the nvme
// lane's work, off the training thread) while training goes on. The state must not change
// before it is captured: the save holds the optimizer (PartitionHold), so an update of partition
// p waits until the writer has written p (RAM partitions) or read it from NVMe into its own
// buffer; an update that waits becomes the writer's next pick. What stays exposed: the flush of
// a pending update before the save, the caller's shared files (the 16-bit parameters), an
// update's waits for partitions not yet captured, and finish()'s manifest, renames and fsyncs.
// Thread safety: start_checkpoint, finish and the destructor on the training loop's thread,
// between steps (no update running).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "engine/offload_step.h"
#include "engine/offloaded_optimizer.h"
#include "engine/partition_hold.h"

namespace strata::engine {

struct CheckpointInfo {
  int64_t step = 0;  // steps done
  int ranks = 1;
  int stage = 0;
  std::string model;       // the model's shape, as model::Model::describe()
  std::string extra_json;  // the caller's (a JSON object)
};

using WriteShared = std::function<Status(const std::string& dir)>;

// A save whose optimizer file is being written in the background (start_checkpoint).
class CheckpointSave {
 public:
  CheckpointSave(const CheckpointSave&) = delete;
  CheckpointSave& operator=(const CheckpointSave&) = delete;
  // Without finish(): stops the writer at its next partition and waits for it; the temporary
  // directory stays (the next save removes it) and the previous checkpoint is untouched.
  ~CheckpointSave();

  int64_t step() const { return info_.step; }
  // The background write is over (finish() will not wait for it).
  bool written() const { return written_.load(); }
  // Collective: waits for this rank's writer, agrees with the other ranks that every part is
  // written, then rank 0 writes the manifest, renames the directory, writes DONE and removes the
  // complete checkpoints beyond `keep`. kIo naming the file on a failed write (the previous
  // checkpoint untouched, the temporary directory removed). Call once.
  Status finish();
  // Seconds the optimizer's updates have spent waiting for the writer so far.
  double update_wait_seconds() const { return hold_.waited_seconds(); }
  // Seconds from start to the end of this rank's background write (after finish()).
  double write_seconds() const { return write_s_; }

 private:
  friend Result<std::unique_ptr<CheckpointSave>> start_checkpoint(
      const std::string&, int, comm::Communicator&, const CheckpointInfo&, OffloadedOptimizer&,
      const StepScaling::State&, const WriteShared&);
  CheckpointSave(std::string root, int keep, comm::Communicator& comm, CheckpointInfo info,
                 OffloadedOptimizer& opt);
  void write_optimizer(const nlohmann::json& scaling);  // the writer thread

  std::string root_, tmp_, final_;
  int keep_;
  comm::Communicator& comm_;
  CheckpointInfo info_;
  OffloadedOptimizer& opt_;
  PartitionHold hold_;
  std::thread writer_;
  std::atomic<bool> written_{false}, cancel_{false};
  std::mutex mu_;  // shared_done_
  std::condition_variable shared_cv_;
  bool shared_done_ = false;
  Status setup_, written_status_, shared_;
  nlohmann::json entries_ = nlohmann::json::object();  // this rank's files: bytes, xxh3
  double write_s_ = 0.0;
  bool finished_ = false;
};

// Collective. Starts a save of the state after step info.step: the temporary directory, this
// rank's small files, then the optimizer file on a background thread; `write_shared(dir)` runs on
// every rank meanwhile (it may take part in collectives), and what it writes into dir on rank 0
// is checksummed with the rest; it need not sync its files (rank 0's writer syncs the files in
// dir that are no rank's own once write_shared returned). The optimizer (and comm) must outlive the
// returned save; call its finish() before the next save, the end of training, or changing the
// optimizer wholesale.
Result<std::unique_ptr<CheckpointSave>> start_checkpoint(
    const std::string& root, int keep, comm::Communicator& comm, const CheckpointInfo& info,
    OffloadedOptimizer& opt, const StepScaling::State& scaling, const WriteShared& write_shared);

// start_checkpoint and finish() at once (nothing overlapped).
Status save_checkpoint(const std::string& root, int keep, comm::Communicator& comm,
                       const CheckpointInfo& info, OffloadedOptimizer& opt,
                       const StepScaling::State& scaling, const WriteShared& write_shared);

// Removes what saves that did not complete left under `root` (a crash or a second signal during
// a save): step_N.tmp directories, and step_N directories without DONE or manifest. Call only
// while this run owns the directory (it holds its lock). Returns the paths removed.
std::vector<std::string> remove_incomplete_checkpoints(const std::string& root);

// The checkpoint to resume from: `path` itself when it holds a DONE marker, else the newest
// step_N under it that does. kConfig naming path when there is none.
Result<std::string> find_checkpoint(const std::string& path);

// dir/manifest.json, checked against the DONE marker's checksum and for its format (kCorrupt
// naming the file otherwise).
Result<nlohmann::json> read_manifest(const std::string& dir);

// That dir/`name` holds the bytes the checkpoint's manifest (read_manifest) records for it
// (kCorrupt naming the file otherwise): what a reader checks before it trusts what the file says
// of itself (a parameters file's stored shape).
Status verify_checkpoint_file(const std::string& dir, const std::string& name);

// Reads and checks dir/manifest.json against `expect` (ranks, stage, model; step and extra are
// filled in from the manifest) and the checksums of this rank's files and the shared ones (but
// the optimizer file, which load_checkpoint checks as it reads it).
Result<CheckpointInfo> verify_checkpoint(const std::string& dir, int rank,
                                         const CheckpointInfo& expect);

// Loads this rank's optimizer state (every partition, sizes checked, the file's checksum checked
// as it is read: on a mismatch the optimizer holds damaged values and the error names the file)
// and returns its scaling state. Call after verify_checkpoint.
Result<StepScaling::State> load_checkpoint(const std::string& dir, int rank,
                                           OffloadedOptimizer& opt);

}  // namespace strata::engine
