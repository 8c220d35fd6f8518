// Process sets: the collective request that makes them, their agreed
// destruction, their device transport, and their release.
#include "core/context_impl.h"

#include <algorithm>

#include "algorithms/shm/shm.h"
#include "core/sets/spec.h"

namespace hvd {


// The sets' communicators go before the transport they run over (the loop
// has stopped: nothing runs over them).
void ContextImpl::ReleaseSets() {
  std::vector<std::unique_ptr<Comm>> comms;
  std::vector<std::unique_ptr<Transport>> devices;  // before their keys (below)
  std::vector<std::unique_ptr<PluginKv>> kvs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& w : all_sets_) {
      if (auto s = w.lock()) {
        comms.push_back(std::move(s->own_comm));
        kvs.push_back(std::move(s->device_kv));
        devices.push_back(std::move(s->device));
      }
    }
  }
  devices.clear();
  sets_.clear();
}

// A set's device transport, opened the first time its responses hold CUDA
// tensors (the same responses on every member, so every member opens it in
// the same cycle; a set that only ever moves host tensors costs nothing).
// Null where the set has none, or opening failed (device_error says why).
Comm* ContextImpl::SetDevice(Scope& sc) {
  if (sc.device) return sc.device.get();
  if (sc.device_tried) return nullptr;
  bool cuda = false;
  for (const Response& r : sc.responses) {
    if (!r.error.ok() || !r.all) continue;
    for (const RequestDesc& d : *r.all) cuda = cuda || d.device != HVD_DEVICE_CPU;
  }
  if (!cuda) return nullptr;
  sc.device_tried = true;
  Bootstrap::DeviceSet spec;
  spec.members = sc.members;
  spec.set_rank = sc.rank;
  spec.cross_rank = sc.cross_rank;
  spec.cross_size = sc.cross_size;
  spec.generation = sc.generation;
  auto kv = std::make_unique<PluginKv>();
  auto t = boot_->OpenDeviceSet(spec, *transport_, kv.get());
  if (!t.ok()) {
    sc.device_error = t.status().Wrap(
        "opening the " + std::string(device_transport_->name()) + " transport for process " +
        sc.label + " (its CUDA tensors) on rank " + std::to_string(cfg_.rank) + " (set rank " +
        std::to_string(sc.rank) + ")");
    HVD_LOG(log_, HVD_LOG_ERROR, "rank " << cfg_.rank << ": " << sc.device_error.message());
    return nullptr;
  }
  HVD_LOG(log_, HVD_LOG_INFO, "rank " << cfg_.rank << ": process " << sc.label << ": CUDA tensors over "
                                      << t.value()->name() << " (set rank " << sc.rank << " of "
                                      << sc.size << ")");
  std::lock_guard<std::mutex> lock(mu_);
  sc.device_kv = std::move(kv);
  sc.device = std::move(t).value();
  return sc.device.get();
}

Result<std::shared_ptr<Scope>> ContextImpl::MakeSet(std::vector<int32_t> spec) {
  spec.insert(spec.begin() + 1, HostHash(shm::HostIdentity() + "|" + cfg_.hostname));
  OpRequest req;
  req.type = OpType::kProcessSet;
  TensorSpec t;
  t.dtype = HVD_INT32;
  t.shape = {static_cast<int64_t>(spec.size())};
  t.input = spec.data();
  req.tensors.push_back(std::move(t));
  req.handle = MakeHandle("process set creation");
  const HandleRef h = req.handle;
  HVD_CHECK(Enqueue(root_.get(), std::move(req)));
  // Bounded: every rank of the context takes part, or the stall inspector
  // (or the context stopping) ends it.
  const Status st = h->Wait(-1);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = made_.find(h.get());
  std::shared_ptr<Scope> set;
  if (it != made_.end()) {
    set = std::move(it->second);
    made_.erase(it);
  }
  if (!st.ok()) return st;
  return set;
}

Status ContextImpl::CloseSet(Scope* set) {
  OpRequest req;
  req.type = OpType::kCloseSet;
  TensorSpec t;
  t.dtype = HVD_UINT8;
  t.shape = {0};
  req.tensors.push_back(std::move(t));
  req.handle = MakeHandle("process set destruction");
  const HandleRef h = req.handle;
  if (!Enqueue(set, std::move(req)).ok()) {
    // Already closed, or the context stopped: nothing left to agree on.
    return Status::Ok();
  }
  Status st = h->Wait(-1);
  // The parent stopped (here or on another rank) before the members agreed:
  // the set is gone with it, which is what destroying it asked for.
  if (st.code() == HVD_ERR_ABORTED) return Status::Ok();
  if (!st.ok()) {
    // The members did not agree (a member never destroyed it: the stall
    // inspector ended the wait): this rank leaves the set alone (the loop
    // drops it); its pending requests fail.
    std::lock_guard<std::mutex> lock(mu_);
    if (!set->closed) {
      set->closed = true;
      set->closed_reason = Error(HVD_ERR_ABORTED, "the process set was destroyed on this rank");
    }
    cv_.notify_all();
  }
  return st;
}



// A process-set request's response, on every rank of the context in the
// same cycle: every rank's spec has been allgathered into the handle's
// output; every rank reaches the same verdict and, if it makes sets, the
// same slots.
Status ContextImpl::FinishProcessSet(OpRequest& req, const Response& resp) {
  const int n = root_->size;
  const int32_t* all = reinterpret_cast<const int32_t*>(req.handle->output.data());
  SetSpecs specs;
  specs.spec.resize(static_cast<size_t>(n));
  specs.len.resize(static_cast<size_t>(n));
  size_t off = 0;
  for (int r = 0; r < n; ++r) {
    specs.spec[r] = all + off;
    specs.len[r] = static_cast<size_t>(resp.desc(r).shapes[0][0]);
    off += specs.len[r];
  }
  HVD_ASSIGN_OR_RETURN(std::vector<std::vector<int>> groups,
                       GroupsOf(specs, "process set call '" + resp.key() + "'"));
  HVD_ASSIGN_OR_RETURN(std::vector<size_t> slots, SlotsFor(groups));
  std::vector<int32_t> hosts(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) hosts[r] = specs.spec[r][1];
  std::shared_ptr<Scope> mine;
  for (size_t i = 0; i < groups.size(); ++i) {
    const size_t k = slots[i];
    if (k >= slot_live_.size()) slot_live_.resize(k + 1, false);
    slot_live_[k] = true;
    slot_extent_.resize(slot_live_.size(), 0);
    slot_extent_[k] = 0;  // a new set's cache is empty
    if (sets_.size() < slot_live_.size()) sets_.resize(slot_live_.size());
    const auto& g = groups[i];
    const uint64_t generation = ++set_generation_;  // every rank counts every group
    auto at = std::find(g.begin(), g.end(), root_->rank);
    if (at == g.end()) continue;
    HVD_ASSIGN_OR_RETURN(mine, MakeSetScope(g, k, static_cast<int>(at - g.begin()), hosts,
                                            generation));
    sets_[k] = mine;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (mine) all_sets_.push_back(mine);
  // Forget sets already gone, so 1,000 create/destroy cycles keep this short.
  all_sets_.erase(std::remove_if(all_sets_.begin(), all_sets_.end(),
                                 [](const std::weak_ptr<Scope>& w) { return w.expired(); }),
                  all_sets_.end());
  made_[req.handle.get()] = mine;
  return Status::Ok();
}

// Slots: the lowest free ones, in group order; a set of more than one rank
// needs a tag band (slot + Transport::kFirstSetBand) within the transport's
// range.
Result<std::vector<size_t>> ContextImpl::SlotsFor(const std::vector<std::vector<int>>& groups) {
  std::vector<size_t> slots;
  std::vector<bool> taken = slot_live_;
  for (const auto& g : groups) {
    size_t k = 0;
    while (k < taken.size() && taken[k]) ++k;
    if (k == taken.size()) taken.push_back(false);
    taken[k] = true;
    slots.push_back(k);
    if (g.size() > 1 && k + Transport::kFirstSetBand >= transport_->tag_bands()) {
      return Error(HVD_ERR_UNSUPPORTED,
                   transport_->tag_bands() == 0
                       ? std::string("process sets of more than one rank need a transport with "
                                     "point-to-point; the ") + transport_->name() + " transport has none"
                       : "too many process sets at once for the " + std::string(transport_->name()) +
                             " transport's tag range (" +
                             std::to_string(transport_->tag_bands() - Transport::kFirstSetBand) +
                             " sets of more than one rank); destroy some first");
    }
  }
  return slots;
}

// This rank's scope of group g (its rank `me` in it) in slot k: its place,
// its communicator over the transport's subset, its negotiation.
Result<std::shared_ptr<Scope>> ContextImpl::MakeSetScope(const std::vector<int>& g, size_t k,
                                                         int me, const std::vector<int32_t>& hosts,
                                                         uint64_t generation) {
  auto set = std::make_shared<Scope>();
  set->slot = static_cast<int>(k);
  set->members = g;
  set->label = SetLabel(g);
  set->size = static_cast<int>(g.size());
  set->rank = me;
  const SetPlace place = PlaceInGroup(g, hosts, me);
  set->local_rank = place.local_rank;
  set->local_size = place.local_size;
  set->cross_rank = place.cross_rank;
  set->cross_size = place.cross_size;
  set->generation = generation;
  set_stragglers_.Prepare(*set);
  auto comm = transport_->OpenSubset(g, static_cast<uint32_t>(k + Transport::kFirstSetBand));
  if (!comm.ok()) return comm.status().Wrap("making a process set");
  set->own_comm = std::move(comm).value();
  set->comm = set->own_comm.get();
  set->plane = std::make_unique<CommPlane>(set->comm);
  set->controller = std::make_unique<Controller>(
      set->rank, set->size, cfg_.cache_capacity,
      StallConfig{cfg_.stall_warning_s, cfg_.stall_shutdown_s}, &log_);
  HVD_LOG(log_, HVD_LOG_DEBUG,
          "process set in slot " << k << ": " << set->size << " ranks, this rank is its rank "
                                 << set->rank);
  return set;
}

// Every member agreed to destroy the set (its kCloseSet response ran this
// cycle): what is still pending in it fails, and its slot is released (the
// next negotiation shows every rank that it is free).
void ContextImpl::CloseAgreed(Scope& set) {
  const Status why = Error(HVD_ERR_ABORTED, "the process set was destroyed");
  std::vector<OpRequest> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    set.closed = true;
    set.closed_reason = why;
    queued.swap(set.queue);
    queued_ -= std::min(queued_, queued.size());
  }
  for (OpRequest& r : set.controller->TakeAll()) Finish(set, r, why);
  for (OpRequest& r : queued) Finish(set, r, why);
  set.close_agreed = false;
  set.own_comm.reset();
  set.comm = nullptr;
  const int slot = set.slot;
  sets_[static_cast<size_t>(slot)].reset();  // may release the set: last use of `set`
}

}  // namespace hvd
