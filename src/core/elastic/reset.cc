// The elastic parts of a context: a lost peer as a membership change, the
// reset into the next epoch, and the membership query.
#include "core/context_impl.h"

#include "core/elastic/reset.h"

namespace hvd {

Status ContextImpl::Membership(const Status& s) const {
  if (!cfg_.elastic) return s;
  switch (s.code()) {
    case HVD_ERR_TRANSPORT:
    case HVD_ERR_TIMEOUT:
    case HVD_ERR_RENDEZVOUS:
      return Error(HVD_ERR_MEMBERSHIP_CHANGED,
                   "the elastic job lost a peer (epoch " + std::to_string(cfg_.epoch) +
                       "): " + s.message() + "; reset the context (hvd.elastic.run does)");
    default:
      return s;
  }
}

// An epoch's rank and size; the rest of the topology comes from every
// rank's host name at its rendezvous.
void ApplyAssignment(const ElasticMember::Assignment& a, Config* cfg) {
  cfg->rank = a.rank;
  cfg->size = a.size;
  cfg->epoch = a.epoch;
  const int known = a.size == 1 ? 0 : -1;
  cfg->local_rank = cfg->cross_rank = known;
  cfg->local_size = cfg->cross_size = a.size == 1 ? 1 : -1;
  cfg->kv_prefix = "hvd/e" + std::to_string(a.epoch) + "/";
}

Status Context::Reset() {
  if (is_process_set() || !elastic_) {
    return Error(HVD_ERR_UNSUPPORTED,
                 is_process_set()
                     ? "a process set cannot be reset: reset its parent context, then make the set "
                       "again"
                     : "this context is not in an elastic job (launch with hvdrun --min-np / "
                       "--max-np / --host-discovery-script)");
  }
  if (shut_) return Error(HVD_ERR_NOT_INITIALIZED, "the context has been shut down");
  Config cfg = impl_->cfg();
  // Leave the epoch: pending operations (and the sets') fail; the
  // connections close now, so peers still inside a collective with this
  // rank learn at once that it left.
  impl_->Shutdown(Error(HVD_ERR_MEMBERSHIP_CHANGED,
                        "the context is being reset (leaving elastic epoch " +
                            std::to_string(cfg.epoch) + ")"));
  impl_->ReleaseTransport();
  HVD_ASSIGN_OR_RETURN(ElasticMember::Assignment a, elastic_->Join());
  ApplyAssignment(a, &cfg);
  auto impl = std::make_shared<ContextImpl>(std::move(cfg));
  Status st = impl->Start();
  if (!st.ok()) {
    // Peers lost again while forming: the caller resets again. The stopped
    // context stays (its calls fail with the old reason).
    return st.code() == HVD_ERR_MEMBERSHIP_CHANGED || st.code() == HVD_ERR_INVALID_ARGUMENT
               ? st
               : Error(HVD_ERR_MEMBERSHIP_CHANGED,
                       "forming elastic epoch " + std::to_string(a.epoch) + " failed: " +
                           st.message() + "; reset again");
  }
  scope_ = impl->root();
  impl_ = std::move(impl);
  return Status::Ok();
}

Result<Context::Membership> Context::membership() {
  Membership m;
  if (!elastic_ && !impl_->cfg().elastic) return m;
  m.elastic = true;
  m.epoch = impl_->cfg().epoch;
  if (elastic_) {
    HVD_ASSIGN_OR_RETURN(m.hosts_updated, elastic_->HostsUpdated());
  }
  return m;
}

}  // namespace hvd
